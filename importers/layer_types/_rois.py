"""The checks the ROI layers share: (N, C, H, W) features and (R, 5) rois."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import fmt, need_bottoms


def features_and_rois(layer, bottoms):
    """The features' and rois' Caffe shapes, checked."""
    need_bottoms(layer, bottoms, 2)
    features, rois = tuple(bottoms[0]), tuple(bottoms[1])
    if len(features) != 4:
        raise LayerError(layer.name, f"({layer.type}) bottom 0 must be (N, C, H, W), got "
                                     f"{fmt(features)}")
    if len(rois) < 2 or rois[1] != 5 or any(d != 1 for d in rois[2:]):
        raise LayerError(layer.name, f"({layer.type}) bottom 1 must be the rois (R, 5), got "
                                     f"{fmt(rois)}")
    return features, rois

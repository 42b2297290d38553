"""ROIAlign of the Mask R-CNN Caffe ports, as ncnn computes it (Tencent/ncnn:
src/layer/roialign.cpp; tools/caffe/caffe2ncnn.cpp converts Caffe's
``roi_align_param``). ``roi_align_param`` is at 2300 (keras-caffe's number:
ncnn's caffe.proto puts it at 148, BVLC's clip_param); its fields 1-3 are
ncnn's, sampling_ratio, aligned and version the other parameters ncnn's
layer reads (caffe2ncnn writes them as 0, false, 0: the defaults here)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._rois import features_and_rois
from keras_caffe.importers.layer_types.base import (
    MASK_RCNN,
    Example,
    LayerType,
    Shapes,
    layer_type,
)
from keras_caffe.layers.two_stage import ROIAlign as KerasROIAlign


def _check(layer):
    p = layer.roi_align_param
    if p.pooled_h <= 0 or p.pooled_w <= 0:
        raise LayerError(layer.name, f"(ROIAlign) roi_align_param.pooled_h and pooled_w must be "
                                     f"positive, got {p.pooled_h} and {p.pooled_w}")
    if p.sampling_ratio < 0:
        raise LayerError(layer.name, f"(ROIAlign) roi_align_param.sampling_ratio must be 0 "
                                     f"(adaptive) or positive, got {p.sampling_ratio}")
    if p.version not in (0, 1):
        raise LayerError(layer.name, f"(ROIAlign) roi_align_param.version must be 0 (ncnn) or "
                                     f"1 (detectron2), got {p.version}")
    return p


@layer_type("ROIAlign")
class ROIAlign(LayerType):
    """Average of bilinear samples in each of pooled_h x pooled_w bins of
    each region (rois (R, 5): batch index, x1, y1, x2, y2) of a (N, C, H,
    W) map (spatial_scale, sampling_ratio, aligned, version)."""

    origin = MASK_RCNN
    examples = (
        Example("roi_align_param { pooled_h: 2 pooled_w: 3 spatial_scale: 0.5 }",
                [(2, 3, 6, 8), (4, 5)], integer_bottoms=(1,), integer_high=2),
        Example("roi_align_param { pooled_h: 2 pooled_w: 2 sampling_ratio: 2 aligned: true "
                "version: 1 }", [(1, 2, 5, 5), (3, 5)], integer_bottoms=(1,), integer_high=1),
    )

    def shapes(self, layer, bottoms, state):
        p = _check(layer)
        features, rois = features_and_rois(layer, bottoms)
        return Shapes([(rois[0], features[1], p.pooled_h, p.pooled_w)])

    def build(self, layer, bottoms, ctx):
        p = _check(layer)
        features = ctx.as_image(bottoms[0], layer)
        rois = ctx.caffe_order(bottoms[1], layer).tensor
        align = KerasROIAlign(p.pooled_h, p.pooled_w, p.spatial_scale, p.sampling_ratio,
                              p.aligned, p.version, data_format=ctx.data_format,
                              name=ctx.keras_name(layer.name))
        return [ctx.image_output(align([features, rois]))]

"""R-FCN's position-sensitive ROI pooling (daijifeng001/caffe-rfcn:
src/caffe/layers/psroi_pooling_layer.cpp, .cu; ``psroi_pooling_param`` at
the fork's field number 10002)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._rois import features_and_rois
from keras_caffe.importers.layer_types.base import (
    RFCN,
    Example,
    LayerType,
    Shapes,
    layer_type,
)
from keras_caffe.layers.two_stage import PSROIPooling as KerasPSROIPooling


def _check(layer, channels=None):
    p = layer.psroi_pooling_param
    for field in ("spatial_scale", "output_dim", "group_size"):
        if not p.HasField(field):
            raise LayerError(layer.name, f"(PSROIPooling) psroi_pooling_param.{field} is "
                                         "required")
    if p.output_dim <= 0 or p.group_size <= 0:
        raise LayerError(layer.name, f"(PSROIPooling) psroi_pooling_param.output_dim and "
                                     f"group_size must be positive, got {p.output_dim} and "
                                     f"{p.group_size}")
    wanted = p.output_dim * p.group_size ** 2
    if channels is not None and channels != wanted:
        raise LayerError(layer.name, f"(PSROIPooling) bottom 0 has {channels} channels; "
                                     f"output_dim * group_size^2 is {wanted}")
    return p


@layer_type("PSROIPooling")
class PSROIPooling(LayerType):
    """Position-sensitive average pooling of each region (rois (R, 5)) into
    group_size x group_size bins, bin (i, j) of output channel c reading
    input channel (c * group_size + i) * group_size + j (spatial_scale,
    output_dim, group_size)."""

    origin = RFCN
    examples = (
        Example("psroi_pooling_param { spatial_scale: 0.5 output_dim: 2 group_size: 3 }",
                [(2, 18, 6, 8), (4, 5)], integer_bottoms=(1,), integer_high=2),
    )

    def shapes(self, layer, bottoms, state):
        features, rois = features_and_rois(layer, bottoms)
        p = _check(layer, features[1])
        return Shapes([(rois[0], p.output_dim, p.group_size, p.group_size)])

    def build(self, layer, bottoms, ctx):
        p = _check(layer)
        features = ctx.as_image(bottoms[0], layer)
        rois = ctx.caffe_order(bottoms[1], layer).tensor
        pool = KerasPSROIPooling(p.output_dim, p.group_size, p.spatial_scale,
                                 data_format=ctx.data_format, name=ctx.keras_name(layer.name))
        return [ctx.image_output(pool([features, rois]))]

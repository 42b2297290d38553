"""LRN (BVLC: lrn_layer.cpp), ACROSS_CHANNELS or WITHIN_CHANNEL."""

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    fmt,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.proto import caffe_pb2


@layer_type("LRN")
class LRN(LayerType):
    """LRN, ACROSS_CHANNELS or WITHIN_CHANNEL (local_size odd)."""

    examples = (
        Example("lrn_param { local_size: 3 alpha: 0.1 beta: 0.75 }", [(2, 5, 4, 4)]),
        Example("lrn_param { local_size: 3 norm_region: WITHIN_CHANNEL }", [(1, 2, 5, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        p = layer.lrn_param
        if p.local_size % 2 != 1:
            raise LayerError(layer.name, f"local_size must be odd, got {p.local_size}")
        if len(bottoms[0]) != 4:
            raise LayerError(layer.name, f"(LRN) needs a 4-D input (N, C, H, W), got "
                                         f"{fmt(bottoms[0])}")
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        p = layer.lrn_param
        region = caffe_pb2.LRNParameter.NormRegion.Name(p.norm_region)
        norm = layers.LRN(p.local_size, alpha=p.alpha, beta=p.beta, k=p.k, norm_region=region,
                          data_format=ctx.data_format, name=ctx.keras_name(layer.name))
        return [ctx.image_output(norm(ctx.as_image(bottoms[0], layer)))]

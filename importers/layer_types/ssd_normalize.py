"""SSD's Normalize (weiliu89/caffe: src/caffe/layers/normalize_layer.cpp)."""

import keras

from keras_caffe.importers.layer_types._blob_axes import (
    channel_axis,
    initializer,
    need_channels,
)
from keras_caffe.importers.layer_types.base import (
    SSD,
    Example,
    LayerType,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.layers.fork import Normalize as KerasNormalize


@layer_type("Normalize")
class Normalize(LayerType):
    """SSD's Normalize: L2 normalization, then a learned scale.

    The norm is over each sample (across_spatial) or over the channels at
    each position, with eps; the scale is one per channel or one for all
    (channel_shared), started at scale_filler (default 1)."""

    origin = SSD
    examples = (
        Example("norm_param { across_spatial: false channel_shared: false "
                "scale_filler { type: 'constant' value: 20 } }", [(2, 3, 4, 4)]),
        Example("norm_param { eps: 0.001 }", [(2, 3, 4, 5)]),
        Example("norm_param { across_spatial: false channel_shared: false }", [(3, 6)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        need_channels(layer, bottoms[0])
        p = layer.norm_param
        return same_shape(layer, bottoms, [()] if p.channel_shared else [(bottoms[0][1],)])

    def build(self, layer, bottoms, ctx):
        p = layer.norm_param
        bottom, axis = channel_axis(ctx, layer, bottoms[0])
        filler_shape = (1,) if p.channel_shared else (ctx.bottom_shapes[0][1],)
        norm = KerasNormalize(
            axis=axis, across_spatial=p.across_spatial, channel_shared=p.channel_shared,
            eps=p.eps, name=ctx.keras_name(layer.name), caffe_name=layer.name,
            scale_initializer=initializer(p, "scale_filler", keras.initializers.Constant(1.0),
                                          filler_shape))
        return [ctx.elementwise(norm, bottom)]

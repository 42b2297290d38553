"""Layer types of well-known Caffe forks with one simple rule each:
Normalize (SSD) and ShuffleChannel (ShuffleNet)."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.converters.activations import _initializer
from keras_caffe.importers.layer_types._legacy import converter
from keras_caffe.layers.fork import Normalize, ShuffleChannel


def _image_axis(layer, bottom, ctx):
    """The tensor axis of Caffe's channel axis 1 of a 2-D or larger bottom."""
    shape = ctx.caffe_shape(bottom)
    if len(shape) < 2:
        raise LayerError(layer.name, f"({layer.type}) needs a bottom with a channel axis, got "
                                     f"shape {shape}")
    if bottom.layout == "flat":
        bottom = ctx.caffe_order(bottom, layer)
    return bottom, ctx.axis(bottom, 1)


@converter("Normalize")
def normalize(layer, bottoms, ctx):
    """SSD's Normalize: across_spatial, channel_shared, eps, scale_filler."""
    p = layer.norm_param
    bottom, axis = _image_axis(layer, bottoms[0], ctx)
    channels = ctx.caffe_shape(bottom)[1]
    shape = (1,) if p.channel_shared else (channels,)
    norm = Normalize(axis=axis, across_spatial=p.across_spatial, channel_shared=p.channel_shared,
                     eps=p.eps, name=ctx.keras_name(layer.name), caffe_name=layer.name,
                     scale_initializer=_initializer(
                         p.scale_filler if p.HasField("scale_filler") else None,
                         keras.initializers.Constant(1.0), shape))
    return [ctx.elementwise(norm, bottom)]


@converter("ShuffleChannel")
def shuffle_channel(layer, bottoms, ctx):
    """ShuffleNet's ShuffleChannel (group)."""
    group = layer.shuffle_channel_param.group
    bottom, axis = _image_axis(layer, bottoms[0], ctx)
    channels = ctx.caffe_shape(bottom)[1]
    if group < 1 or channels % group:
        raise LayerError(layer.name, f"group {group} does not divide the {channels} channels")
    shuffle = ShuffleChannel(group, axis=axis, name=ctx.keras_name(layer.name))
    return [ctx.elementwise(shuffle, bottom)]

"""ShuffleNet's ShuffleChannel (farmingyard/ShuffleNet:
src/caffe/layers/shuffle_channel_layer.cpp)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._blob_axes import channel_axis, need_channels
from keras_caffe.importers.layer_types.base import (
    SHUFFLENET,
    Example,
    LayerType,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.layers.fork import ShuffleChannel as KerasShuffleChannel


@layer_type("ShuffleChannel")
class ShuffleChannel(LayerType):
    """ShuffleNet's ShuffleChannel (group): channels interleaved across groups.

    The channels, seen as group rows of C / group, are read column by
    column."""

    origin = SHUFFLENET
    examples = (
        Example("shuffle_channel_param { group: 3 }", [(2, 6, 3, 4)]),
        Example("shuffle_channel_param { group: 2 }", [(3, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        need_channels(layer, bottoms[0])
        group, channels = layer.shuffle_channel_param.group, bottoms[0][1]
        if group < 1 or channels % group:
            raise LayerError(layer.name, f"(ShuffleChannel) group {group} does not divide the "
                                         f"{channels} channels")
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        bottom, axis = channel_axis(ctx, layer, bottoms[0])
        shuffle = KerasShuffleChannel(layer.shuffle_channel_param.group, axis=axis,
                                      name=ctx.keras_name(layer.name))
        return [ctx.elementwise(shuffle, bottom)]

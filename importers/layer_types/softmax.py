"""Softmax (BVLC: softmax_layer.cpp)."""

import keras

from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    canonical_axis,
    layer_type,
    need_bottoms,
    same_shape,
)


@layer_type("Softmax")
class Softmax(LayerType):
    """Softmax over ``axis`` (default 1, the channels), on the tensor axis of
    the Caffe axis; over a whole flattened vector in any element order."""

    examples = (
        Example("", [(2, 5, 3, 4)]),
        Example("softmax_param { axis: -1 }", [(2, 5, 3, 4)]),
        Example("", [(3, 10)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        canonical_axis(layer.softmax_param.axis, len(bottoms[0]))
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        bottom = bottoms[0]
        caffe_axis = layer.softmax_param.axis
        if bottom.layout == "flat" and caffe_axis in (1, -1):
            axis = 1  # over the whole flattened vector: order does not matter
        else:
            if bottom.layout == "flat":
                bottom = ctx.caffe_order(bottom, layer)
            axis = ctx.axis(bottom, caffe_axis)
        softmax = keras.layers.Softmax(axis=axis, name=ctx.keras_name(layer.name))
        return [ctx.elementwise(softmax, bottom)]

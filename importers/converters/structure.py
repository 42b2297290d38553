"""Layers that route or combine blobs: Split, Concat, Softmax."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._legacy import converter


@converter("Split")
def split(layer, bottoms, ctx):
    """Split: every top is the bottom (Keras tensors can be reused)."""
    return [bottoms[0]] * len(layer.top)


@converter("Concat")
def concat(layer, bottoms, ctx):
    """Concat along ``axis`` (or the legacy ``concat_dim``)."""
    p = layer.concat_param
    if p.HasField("concat_dim") and p.HasField("axis"):
        raise LayerError(layer.name, "give either axis or concat_dim, not both")
    caffe_axis = p.concat_dim if p.HasField("concat_dim") else p.axis
    layouts = {b.layout for b in bottoms}
    if layouts - {"nhwc", "caffe"} or len(layouts) > 1:
        bottoms = [ctx.caffe_order(b, layer) for b in bottoms]
    axis = ctx.axis(bottoms[0], caffe_axis)
    tensor = keras.layers.Concatenate(axis=axis, name=ctx.keras_name(layer.name))(
        [b.tensor for b in bottoms])
    return [ctx.same_layout(tensor, bottoms[0])]


@converter("Softmax")
def softmax(layer, bottoms, ctx):
    """Softmax over ``axis`` (default 1, the channels)."""
    bottom = bottoms[0]
    caffe_axis = layer.softmax_param.axis
    if bottom.layout == "flat" and caffe_axis in (1, -1):
        axis = 1  # over the whole flattened vector: order does not matter
    else:
        if bottom.layout == "flat":
            bottom = ctx.caffe_order(bottom, layer)
        axis = ctx.axis(bottom, caffe_axis)
    return [ctx.elementwise(keras.layers.Softmax(axis=axis, name=ctx.keras_name(layer.name)), bottom)]

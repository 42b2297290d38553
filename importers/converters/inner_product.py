"""InnerProduct."""

import numpy as np

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.converters._params import fillers
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.registry import converter


@converter("InnerProduct")
def inner_product(layer, bottoms, ctx):
    """InnerProduct (axis, transpose, bias_term).

    On a channels-last image (or its flattening) with axis 1 the weight rows
    are permuted at import instead of transposing the data.
    """
    p = layer.inner_product_param
    if p.num_output <= 0:
        raise LayerError(layer.name, "num_output must be positive")
    bottom = bottoms[0]
    shape = ctx.caffe_shape(bottom)
    caffe_axis = p.axis + len(shape) if p.axis < 0 else p.axis
    chw = None
    if bottom.layout == "nhwc" and caffe_axis == 1:
        # (C, H, W) with H folding every spatial axis but the last: the
        # channels-last flattening order is then H, W, C for any rank.
        spatial = shape[2:]
        chw = (shape[1], int(np.prod(spatial[:-1], dtype=np.int64)), spatial[-1])
    elif bottom.layout == "flat" and caffe_axis == 1:
        chw = bottom.chw
    elif bottom.layout != "caffe":
        bottom = ctx.caffe_order(bottom, layer)
    k = 1
    for d in shape[caffe_axis:]:
        k *= d
    ctx.check_size(layer, k * p.num_output)
    weight_shape = (k, p.num_output) if p.transpose else (p.num_output, k)
    dense = layers.InnerProduct(
        p.num_output, bias_term=p.bias_term, axis=caffe_axis if chw is None else 1,
        transpose=p.transpose, chw=chw, name=ctx.keras_name(layer.name), caffe_name=layer.name,
        **fillers(p, weight_shape, (p.num_output,)),
    )
    return [Blob(ctx.apply(dense, bottom.tensor))]

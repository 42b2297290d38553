"""InnerProduct (BVLC: inner_product_layer.cpp) and Embed (embed_layer.cpp)."""

import math

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types._params import fillers
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    canonical_axis,
    count,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.deconv import Embed as KerasEmbed


@layer_type("InnerProduct")
class InnerProduct(LayerType):
    """InnerProduct (axis, transpose, bias_term). On a channels-last image (or
    its flattening) with axis 1 the weight rows are permuted at import
    instead of transposing the data."""

    examples = (
        Example("inner_product_param { num_output: 5 }", [(2, 3, 4, 4)]),
        Example("inner_product_param { num_output: 3 transpose: true bias_term: false }",
                [(2, 7)]),
        Example("inner_product_param { num_output: 2 axis: 2 }", [(2, 3, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        p = layer.inner_product_param
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        axis = canonical_axis(p.axis, len(shape))
        if p.num_output <= 0:
            raise LayerError(layer.name, "(InnerProduct) num_output must be positive")
        k = count(shape[axis:])
        weights = [(k, p.num_output) if p.transpose else (p.num_output, k)]
        if p.bias_term:
            weights.append((p.num_output,))
        return Shapes([(*shape[:axis], p.num_output)], weights,
                      count(shape[:axis]) * k * p.num_output)

    def build(self, layer, bottoms, ctx):
        p = layer.inner_product_param
        bottom = bottoms[0]
        shape = ctx.bottom_shapes[0]
        caffe_axis = canonical_axis(p.axis, len(shape))
        chw = None
        if bottom.layout == "nhwc" and caffe_axis == 1:
            # (C, H, W) with H folding every spatial axis but the last: the
            # channels-last flattening order is then H, W, C for any rank.
            spatial = shape[2:]
            chw = (shape[1], math.prod(spatial[:-1]), spatial[-1])
        elif bottom.layout == "flat" and caffe_axis == 1:
            chw = bottom.chw
        elif bottom.layout != "caffe":
            bottom = ctx.caffe_order(bottom, layer)
        weight_shape = ctx.shapes.weights[0]
        dense = layers.InnerProduct(
            p.num_output, bias_term=p.bias_term, axis=caffe_axis if chw is None else 1,
            transpose=p.transpose, chw=chw, name=ctx.keras_name(layer.name),
            caffe_name=layer.name, **fillers(p, weight_shape, (p.num_output,)),
        )
        return [Blob(ctx.apply(dense, bottom.tensor))]


@layer_type("Embed")
class Embed(LayerType):
    """Embed (num_output, input_dim, bias_term): a lookup of integer-valued
    inputs. The top is the bottom's Caffe shape plus a last axis of
    num_output (looked up in Caffe's order)."""

    examples = (
        Example("embed_param { num_output: 3 input_dim: 5 }", [(2, 4)], integer_bottoms=(0,),
                integer_high=5),
        Example("embed_param { num_output: 2 input_dim: 4 bias_term: false }", [(2, 3)],
                integer_bottoms=(0,)),
    )

    def shapes(self, layer, bottoms, state):
        p = layer.embed_param
        need_bottoms(layer, bottoms, 1)
        if p.num_output <= 0:
            raise LayerError(layer.name, "(Embed) num_output must be positive")
        if p.input_dim <= 0:
            raise LayerError(layer.name, "(Embed) input_dim must be positive")
        weights = [(p.input_dim, p.num_output)] + ([(p.num_output,)] if p.bias_term else [])
        return Shapes([(*bottoms[0], p.num_output)], weights, 0)

    def build(self, layer, bottoms, ctx):
        p = layer.embed_param
        bottom = ctx.caffe_order(bottoms[0], layer)
        lookup = KerasEmbed(p.num_output, p.input_dim, bias_term=p.bias_term,
                            name=ctx.keras_name(layer.name), caffe_name=layer.name,
                            **fillers(p, (p.input_dim, p.num_output), (p.num_output,)))
        return [Blob(ctx.apply(lookup, bottom.tensor))]

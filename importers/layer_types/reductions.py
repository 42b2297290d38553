"""ArgMax, Reduction and MVN (BVLC: argmax_layer.cpp, reduction_layer.cpp,
mvn_layer.cpp).

Results computed in Caffe's order that are 3-D or larger come back
channels-last under ``channels_last``, like every image blob.
"""

import math

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types._axes import axis_index, show
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.layers.reductions import MVN as KerasMVN
from keras_caffe.layers.reductions import ArgMax as KerasArgMax
from keras_caffe.layers.reductions import Reduction as KerasReduction
from keras_caffe.proto import caffe_pb2


def _argmax_top(layer, shape):
    """``ArgMaxLayer::Reshape``'s top shape."""
    p = layer.argmax_param
    if p.top_k < 1:
        raise LayerError(layer.name, "(ArgMax) top_k must be at least 1")
    if p.HasField("axis"):
        axis = axis_index(layer, p.axis, len(shape), noun="blob")
        if p.top_k > shape[axis]:
            raise LayerError(layer.name, f"(ArgMax) top_k {p.top_k} exceeds axis {axis}'s size "
                                         f"{shape[axis]} (shape {show(shape)})")
        return (*shape[:axis], p.top_k, *shape[axis + 1:])
    count = math.prod(shape[1:])
    if p.top_k > count:
        raise LayerError(layer.name, f"(ArgMax) top_k {p.top_k} exceeds the {count} values per "
                                     f"sample (shape {show(shape)})")
    top = [shape[0]] + [1] * (max(len(shape), 3) - 1)
    top[1], top[2] = (2 if p.out_max_val else 1), p.top_k
    return tuple(top)


@layer_type("ArgMax")
class ArgMax(LayerType):
    """ArgMax (top_k, out_max_val, axis); without axis each sample is flattened
    in Caffe's order and the top is (N, 1 or 2, top_k, 1, ...)."""

    examples = (
        Example("argmax_param { top_k: 3 out_max_val: true }", [(2, 3, 4, 5)]),
        Example("argmax_param { axis: 1 }", [(2, 5, 3, 4)]),
        Example("argmax_param { axis: -1 top_k: 2 }", [(3, 7)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        return Shapes([_argmax_top(layer, tuple(bottoms[0]))])

    def build(self, layer, bottoms, ctx):
        p = layer.argmax_param
        bottom = bottoms[0]
        if p.HasField("axis"):
            axis = axis_index(layer, p.axis, len(ctx.bottom_shapes[0]), noun="blob")
            if bottom.layout == "flat" and axis != 0:
                bottom = ctx.caffe_order(bottom, layer)
            op = KerasArgMax(p.top_k, out_max_val=p.out_max_val, axis=ctx.axis(bottom, axis),
                             name=ctx.keras_name(layer.name))
            return [ctx.elementwise(op, bottom)]  # the layout stays; one axis changes length
        bottom = ctx.caffe_order(bottom, layer)
        op = KerasArgMax(p.top_k, out_max_val=p.out_max_val, axis=None,
                         name=ctx.keras_name(layer.name))
        return [Blob(op(bottom.tensor))]


@layer_type("Reduction")
class Reduction(LayerType):
    """Reduction (SUM, ASUM, SUMSQ, MEAN; coeff) of every axis from ``axis`` on.

    ``axis: 0`` (the default) reduces the whole blob, batch included, to a
    scalar. On a channels-last image the axes are reduced where they are.
    """

    examples = (
        Example("reduction_param { operation: MEAN axis: 2 coeff: 2 }", [(2, 3, 4, 5)]),
        Example("reduction_param { operation: SUMSQ axis: 1 }", [(2, 3, 4, 5)]),
        Example("reduction_param { operation: ASUM axis: -1 }", [(2, 3, 7)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        axis = axis_index(layer, layer.reduction_param.axis, len(shape), noun="blob")
        return Shapes([shape[:axis]])

    def build(self, layer, bottoms, ctx):
        p = layer.reduction_param
        bottom = bottoms[0]
        rank = len(ctx.bottom_shapes[0])
        axis = axis_index(layer, p.axis, rank, noun="blob")
        operation = caffe_pb2.ReductionParameter.ReductionOp.Name(p.operation)
        name = ctx.keras_name(layer.name)
        if axis <= 1:  # everything but (maybe) the batch: the element order does not matter
            op = KerasReduction(operation, axes=tuple(range(axis, rank)), coeff=p.coeff,
                                name=name)
            return [Blob(op(bottom.tensor))]
        if bottom.layout == "nhwc":
            # Caffe's axes axis..rank-1 are spatial axes axis-1..rank-2 here; channels stay last.
            op = KerasReduction(operation, axes=tuple(range(axis - 1, rank - 1)), coeff=p.coeff,
                                name=name)
            return [Blob(op(bottom.tensor), "nhwc" if axis >= 3 else "caffe")]
        bottom = ctx.caffe_order(bottom, layer)
        op = KerasReduction(operation, axes=tuple(range(axis, rank)), coeff=p.coeff, name=name)
        return [Blob(op(bottom.tensor))]


@layer_type("MVN")
class MVN(LayerType):
    """MVN (normalize_variance, across_channels, eps): eps is added to the
    standard deviation.

    Statistics per sample and channel over the spatial axes, or per sample
    over everything with ``across_channels``. Caffe's MVN reads its blob
    through the legacy (num, channels, height, width) accessors, so at most
    4 axes.
    """

    examples = (
        Example("mvn_param { eps: 0.001 }", [(2, 3, 4, 5)]),
        Example("mvn_param { across_channels: true normalize_variance: false }", [(2, 3, 4, 4)]),
        Example("", [(2, 3, 7)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        if len(bottoms[0]) > 4:
            raise LayerError(layer.name, f"(MVN) needs at most 4 axes (Caffe's MVN reads num, "
                                         f"channels, height, width), got shape "
                                         f"{show(bottoms[0])}")
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        p = layer.mvn_param
        bottom = bottoms[0]
        rank = len(bottom.tensor.shape)
        if p.across_channels:
            axes = tuple(range(1, rank))
        elif bottom.layout == "nhwc":
            axes = tuple(range(1, rank - 1))
        elif bottom.layout == "flat":
            axes = ()  # Caffe sees (N, C*H*W): one value per channel
        else:
            axes = tuple(range(2, rank))
        op = KerasMVN(normalize_variance=p.normalize_variance, eps=p.eps, axes=axes,
                      name=ctx.keras_name(layer.name))
        return [ctx.elementwise(op, bottom)]

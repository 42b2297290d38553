"""PReLU, Bias and Eltwise (BVLC: prelu_layer.cpp, bias_layer.cpp,
eltwise_layer.cpp).

PReLU and Bias find the channel (or covered) axes in the tensor, so
channels-last blobs need no transposes. Eltwise brings its bottoms to one
layout (transposing only the bottoms that differ).
"""

import math

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types._blob_axes import (
    caffe_axes,
    initializer,
    tensor_axes,
)
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    fmt,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.layers import elementwise as layers
from keras_caffe.proto import caffe_pb2


@layer_type("PReLU")
class PReLU(LayerType):
    """PReLU: a learned negative slope per channel, or one (channel_shared).

    The channel is axis 1; the filler defaults to constant 0.25 (Caffe's)."""

    examples = (
        Example("", [(2, 3, 4, 4)]),
        Example("prelu_param { channel_shared: true }", [(2, 3, 4, 4)]),
        Example("prelu_param { filler { type: 'constant' value: 0.1 } }", [(3, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = bottoms[0]
        if len(shape) < 2:
            raise LayerError(layer.name, f"(PReLU) needs a bottom with at least 2 axes, got "
                                         f"shape {fmt(shape)}")
        return same_shape(layer, bottoms, [()] if layer.prelu_param.channel_shared
                          else [(shape[1],)])

    def build(self, layer, bottoms, ctx):
        p = layer.prelu_param
        x = bottoms[0]
        axis = -1
        if not p.channel_shared:
            axes = tensor_axes(ctx, x, [1])
            if axes is None:
                x = ctx.caffe_order(x, layer)
                axes = [1]
            axis = axes[0]
        prelu = layers.PReLU(
            axis=axis, channel_shared=p.channel_shared,
            slope_initializer=initializer(p, "filler", keras.initializers.Constant(0.25)),
            name=ctx.keras_name(layer.name), caffe_name=layer.name,
        )
        return [ctx.elementwise(prelu, x)]


@layer_type("Bias")
class Bias(LayerType):
    """Bias (axis, num_axes, filler): a learned blob, or the second bottom.

    The learned bias cannot cover the batch axis 0 (the batch is free here).
    The two-bottom form needs ``axis: 0``: every blob carries the batch axis
    first, and Caffe lines the second bottom's axes up with the first's from
    ``axis`` on (e.g. bottoms (N, C, H, W) and (N, C)).
    """

    examples = (
        Example("", [(2, 3, 4, 4)]),
        Example("bias_param { axis: 2 num_axes: -1 filler { type: 'constant' value: 1 } }",
                [(2, 3, 4, 5)]),
        Example("bias_param { axis: 0 }", [(2, 3, 4, 4), (2, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1, 2)
        shape = bottoms[0]
        axis = _bias_axis(layer, shape)
        if len(bottoms) == 2:
            _check_second_bottom(layer, shape, axis, bottoms[1])
            return same_shape(layer, bottoms)
        return same_shape(layer, bottoms, [tuple(shape[a] for a in _learned_axes(layer, shape))])

    def build(self, layer, bottoms, ctx):
        if len(bottoms) == 2:
            return [_two_bottom_bias(layer, bottoms, ctx)]
        x = bottoms[0]
        covered = _learned_axes(layer, ctx.bottom_shapes[0])
        axes = tensor_axes(ctx, x, covered)
        if axes is None:
            x = ctx.caffe_order(x, layer)
            axes = covered
        bias = layers.Bias(axes=axes, bias_initializer=initializer(layer.bias_param, "filler",
                                                                   "zeros"),
                           name=ctx.keras_name(layer.name), caffe_name=layer.name)
        return [ctx.elementwise(bias, x)]


def _bias_axis(layer, shape):
    axis, rank = layer.bias_param.axis, len(shape)
    if not -rank <= axis < rank:
        raise LayerError(layer.name, f"(Bias) axis {axis} is out of range for a {rank}-axis "
                                     f"bottom {fmt(shape)}")
    return axis % rank


def _learned_axes(layer, shape):
    """The Caffe axes the learned bias blob covers (none for a scalar)."""
    p, rank = layer.bias_param, len(shape)
    axis = p.axis % rank
    if p.num_axes < -1:
        raise LayerError(layer.name, f"(Bias) num_axes must be non-negative, or -1 to extend to "
                                     f"the end of the bottom, got {p.num_axes}")
    num_axes = rank - axis if p.num_axes == -1 else p.num_axes
    if axis + num_axes > rank:
        raise LayerError(layer.name, f"(Bias) the bias blob (axis {axis}, num_axes {num_axes}) "
                                     f"extends past the bottom's shape {fmt(shape)}")
    if num_axes == 0:  # a scalar: Caffe ignores the axis
        return []
    if axis == 0:
        raise LayerError(layer.name, "(Bias) a learned bias over the batch axis (axis 0) is not "
                                     "supported: the batch size is not fixed")
    return list(range(axis, axis + num_axes))


def _check_second_bottom(layer, shape, axis, b_shape):
    if axis != 0:
        raise LayerError(layer.name, f"(Bias) two-bottom Bias needs axis: 0 (the bias blob "
                                     f"{fmt(b_shape)} starts with the batch axis)")
    k = len(b_shape)
    if k > len(shape) or tuple(b_shape) != tuple(shape[:k]):
        raise LayerError(layer.name, f"(Bias) bias blob shape {fmt(b_shape)} does not match the "
                                     f"bottom's leading axes {fmt(shape[:k])}")


def _two_bottom_bias(layer, bottoms, ctx):
    """The second bottom added over the first's leading axes."""
    x, b = bottoms
    k = len(ctx.bottom_shapes[1])
    if x.layout == b.layout == "flat" and x.chw == b.chw:
        axes = [0, 1]
    else:
        axes = tensor_axes(ctx, x, range(k)) if b.layout != "flat" else None
        # b's tensor axes, as axes of x: they must increase for a plain reshape.
        b_axes = None if axes is None else [axes[a] for a in caffe_axes(ctx, b)]
        if b_axes is None or b_axes != sorted(b_axes):
            x = ctx.caffe_order(x, f"{layer.name}/bottom0")
            b = ctx.caffe_order(b, f"{layer.name}/bottom1")
            b_axes = list(range(k))
        axes = b_axes
    bias = layers.Bias(axes=axes, name=ctx.keras_name(layer.name), caffe_name=layer.name)
    return ctx.same_layout(ctx.apply(bias, [x.tensor, b.tensor]), x)


@layer_type("Eltwise")
class Eltwise(LayerType):
    """Eltwise SUM (coeff per bottom), PROD or MAX over same-shaped bottoms.

    Caffe's rules: coeff is empty or one per bottom, and PROD takes none;
    MAX accepts coefficients and ignores them (as Caffe does).
    """

    examples = (
        Example("eltwise_param { coeff: 1 coeff: -0.5 }", [(2, 3, 4, 4)] * 2),
        Example("eltwise_param { operation: PROD }", [(2, 3, 4, 4)] * 3),
        Example("eltwise_param { operation: MAX }", [(3, 5)] * 2),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 2, math.inf)
        p = layer.eltwise_param
        coeffs = list(p.coeff)
        if coeffs and len(coeffs) != len(bottoms):
            raise LayerError(layer.name, f"(Eltwise) takes one coefficient per bottom: "
                                         f"{len(coeffs)} coeff for {len(bottoms)} bottoms")
        if coeffs and p.operation == caffe_pb2.EltwiseParameter.PROD:
            raise LayerError(layer.name, "(Eltwise) takes coefficients only for SUM, not PROD")
        for i, shape in enumerate(bottoms[1:], 1):
            if tuple(shape) != tuple(bottoms[0]):
                raise LayerError(layer.name, f"(Eltwise) bottoms must have one shape: bottom 0 "
                                             f"is {fmt(bottoms[0])}, bottom {i} is {fmt(shape)}")
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        p = layer.eltwise_param
        op = caffe_pb2.EltwiseParameter.EltwiseOp.Name(p.operation)
        bottoms = _one_layout(ctx, layer, bottoms)
        merge = layers.Eltwise(op, list(p.coeff) if op == "SUM" else None,
                               name=ctx.keras_name(layer.name))
        return [ctx.same_layout(merge([b.tensor for b in bottoms]), bottoms[0])]


def _one_layout(ctx, layer, bottoms):
    """The bottoms in one layout, converting as few as possible."""
    if len({(b.layout, b.chw) for b in bottoms}) == 1:
        return bottoms
    images = len(bottoms[0].tensor.shape) >= 3 and ctx.data_format == "channels_last"
    if images and any(b.layout == "nhwc" for b in bottoms) \
            and all(b.layout != "flat" for b in bottoms):
        # Channels-last images and Caffe-order ones: bring the latter to channels-last.
        return [b if b.layout == "nhwc" else
                Blob(ctx.as_image(b, f"{layer.name}/bottom{i}"), "nhwc")
                for i, b in enumerate(bottoms)]
    return [ctx.caffe_order(b, f"{layer.name}/bottom{i}") for i, b in enumerate(bottoms)]

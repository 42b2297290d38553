"""Activations and elementwise layers.

Neuron layers (PReLU, ELU, Sigmoid, TanH, AbsVal, Power, Exp, Log, BNLL,
Threshold, Clip) keep their blob's layout; PReLU and Bias find the channel
(or covered) axes in the tensor, so channels-last blobs need no transposes.
Eltwise brings its bottoms to one layout (transposing only the bottoms that
differ). Each converter follows Caffe's ``LayerSetUp`` checks.
"""

import math

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.layer_types._legacy import converter
from keras_caffe.initializers import from_filler
from keras_caffe.layers import elementwise as layers
from keras_caffe.proto import caffe_pb2


def _bottoms(layer, bottoms, low, high=None):
    high = low if high is None else high
    if not low <= len(bottoms) <= high:
        wanted = str(low) if low == high else f"{low} to {high}" if high < math.inf else f"{low} or more"
        raise LayerError(layer.name, f"({layer.type}) takes {wanted} bottom(s), got {len(bottoms)}")


def _neuron(layer, bottoms, ctx, keras_layer):
    """A one-bottom elementwise layer: same shape, same layout."""
    _bottoms(layer, bottoms, 1)
    return [ctx.elementwise(keras_layer, bottoms[0])]


def _initializer(filler, default, shape=(1,)):
    """The initializer for a Caffe ``FillerParameter`` of a blob of ``shape``
    (``default`` when the prototxt gives none)."""
    if filler is None:
        return default
    return from_filler(filler, shape)


def _tensor_axes(ctx, blob, caffe_axes):
    """Tensor axes of ``caffe_axes`` if they keep Caffe's order there, else None."""
    if blob.layout == "flat" and any(a != 0 for a in caffe_axes):
        return None
    axes = [ctx.axis(blob, a) for a in caffe_axes]
    return axes if axes == sorted(axes) else None


# -- neurons -------------------------------------------------------------------


@converter("PReLU")
def prelu(layer, bottoms, ctx):
    """PReLU: a learned negative slope per channel (axis 1) or shared."""
    _bottoms(layer, bottoms, 1)
    p = layer.prelu_param
    x = bottoms[0]
    shape = ctx.caffe_shape(x)
    if len(shape) < 2:
        raise LayerError(layer.name, f"PReLU needs a bottom with at least 2 axes, got shape {shape}")
    axis = -1
    if not p.channel_shared:
        axes = _tensor_axes(ctx, x, [1])
        if axes is None:
            x = ctx.caffe_order(x, layer)
            axes = [1]
        axis = axes[0]
        ctx.check_size(layer, shape[1])
    default = keras.initializers.Constant(0.25)
    prelu_layer = layers.PReLU(
        axis=axis, channel_shared=p.channel_shared,
        slope_initializer=_initializer(p.filler if p.HasField("filler") else None, default),
        name=ctx.keras_name(layer.name), caffe_name=layer.name,
    )
    return [ctx.elementwise(prelu_layer, x)]


@converter("ELU")
def elu(layer, bottoms, ctx):
    """ELU with alpha."""
    return _neuron(layer, bottoms, ctx,
                   layers.ELU(alpha=layer.elu_param.alpha, name=ctx.keras_name(layer.name)))


@converter("Sigmoid")
def sigmoid(layer, bottoms, ctx):
    """Sigmoid."""
    return _neuron(layer, bottoms, ctx,
                   keras.layers.Activation("sigmoid", name=ctx.keras_name(layer.name)))


@converter("TanH")
def tanh(layer, bottoms, ctx):
    """TanH."""
    return _neuron(layer, bottoms, ctx,
                   keras.layers.Activation("tanh", name=ctx.keras_name(layer.name)))


@converter("AbsVal")
def absval(layer, bottoms, ctx):
    """AbsVal; like Caffe, refuses to run in place."""
    if layer.top and layer.bottom and layer.top[0] == layer.bottom[0]:
        raise LayerError(layer.name, "AbsVal does not allow in-place computation "
                                     f"(top {layer.top[0]!r} is its bottom)")
    return _neuron(layer, bottoms, ctx, layers.AbsVal(name=ctx.keras_name(layer.name)))


@converter("BNLL")
def bnll(layer, bottoms, ctx):
    """BNLL: log(1 + exp(x)), without overflow."""
    return _neuron(layer, bottoms, ctx, layers.BNLL(name=ctx.keras_name(layer.name)))


@converter("Power")
def power(layer, bottoms, ctx):
    """Power: (shift + scale * x) ** power (every float value is valid)."""
    p = layer.power_param
    return _neuron(layer, bottoms, ctx, layers.Power(power=p.power, scale=p.scale, shift=p.shift,
                                                     name=ctx.keras_name(layer.name)))


def _check_base(layer, base, log):
    """Caffe's checks on ``base`` (-1 means e); ``log`` adds Log's 1/log(base)."""
    if base == -1:
        return
    if not base > 0:
        raise LayerError(layer.name, f"base must be strictly positive (or -1 for e), got {base:g}")
    log_base = math.log(base)
    if math.isinf(log_base):
        raise LayerError(layer.name, f"log(base) = log({base:g}) is infinite")
    if log and log_base == 0:
        raise LayerError(layer.name, f"1 / log(base) = 1 / log({base:g}) is infinite; "
                                     "base 1 has no logarithm")


@converter("Exp")
def exp(layer, bottoms, ctx):
    """Exp: base ** (shift + scale * x), base -1 meaning e."""
    p = layer.exp_param
    _check_base(layer, p.base, log=False)
    return _neuron(layer, bottoms, ctx, layers.ExpLayer(base=p.base, scale=p.scale, shift=p.shift,
                                                   name=ctx.keras_name(layer.name)))


@converter("Log")
def log(layer, bottoms, ctx):
    """Log: log_base(shift + scale * x), base -1 meaning e."""
    p = layer.log_param
    _check_base(layer, p.base, log=True)
    return _neuron(layer, bottoms, ctx, layers.Log(base=p.base, scale=p.scale, shift=p.shift,
                                                   name=ctx.keras_name(layer.name)))


@converter("Threshold")
def threshold(layer, bottoms, ctx):
    """Threshold: 1 where x > threshold, else 0."""
    return _neuron(layer, bottoms, ctx, layers.Threshold(layer.threshold_param.threshold,
                                                         name=ctx.keras_name(layer.name)))


@converter("Clip")
def clip(layer, bottoms, ctx):
    """Clip to [min, max].

    Both fields are required in a clip_param, as Caffe's parser requires; with
    no clip_param at all Caffe clips to [0, 0], and so does this.
    """
    p = layer.clip_param
    if layer.HasField("clip_param"):
        missing = [f for f in ("min", "max") if not p.HasField(f)]
        if missing:
            raise LayerError(layer.name, f"clip_param lacks the required field(s) {', '.join(missing)}")
    return _neuron(layer, bottoms, ctx, layers.Clip(p.min, p.max, name=ctx.keras_name(layer.name)))


# -- Bias and Eltwise ----------------------------------------------------------------


@converter("Bias")
def bias(layer, bottoms, ctx):
    """Bias (axis, num_axes, filler): a learned blob, or the second bottom.

    The learned bias cannot cover the batch axis 0 (the batch is free here).
    The two-bottom form needs ``axis: 0``: every blob carries the batch axis
    first, and Caffe lines the second bottom's axes up with the first's from
    ``axis`` on (e.g. bottoms (N, C, H, W) and (N, C)).
    """
    _bottoms(layer, bottoms, 1, 2)
    p = layer.bias_param
    x = bottoms[0]
    shape = ctx.caffe_shape(x)
    rank = len(shape)
    if not -rank <= p.axis < rank:
        raise LayerError(layer.name, f"axis {p.axis} is out of range for a {rank}-axis bottom "
                                     f"{shape}")
    axis = p.axis % rank
    name = ctx.keras_name(layer.name)
    if len(bottoms) == 1:
        if p.num_axes < -1:
            raise LayerError(layer.name, f"num_axes must be non-negative, or -1 to extend to the "
                                         f"end of the bottom, got {p.num_axes}")
        num_axes = rank - axis if p.num_axes == -1 else p.num_axes
        if axis + num_axes > rank:
            raise LayerError(layer.name, f"the bias blob (axis {axis}, num_axes {num_axes}) extends "
                                         f"past the bottom's shape {shape}")
        if num_axes == 0:  # a scalar: Caffe ignores the axis
            caffe_axes = []
        elif axis == 0:
            raise LayerError(layer.name, "a learned bias over the batch axis (axis 0) is not "
                                         "supported: the batch size is not fixed")
        else:
            caffe_axes = list(range(axis, axis + num_axes))
        count = 1
        for a in caffe_axes:
            count *= shape[a]
        ctx.check_size(layer, count)
        axes = _tensor_axes(ctx, x, caffe_axes)
        if axes is None:
            x = ctx.caffe_order(x, layer)
            axes = caffe_axes
        bias_layer = layers.Bias(axes=axes, bias_initializer=_initializer(
            p.filler if p.HasField("filler") else None, "zeros"), name=name, caffe_name=layer.name)
        return [ctx.elementwise(bias_layer, x)]

    b = bottoms[1]
    b_shape = ctx.caffe_shape(b)
    if axis != 0:
        raise LayerError(layer.name, f"two-bottom Bias needs axis: 0 (the bias blob {b_shape} "
                                     "starts with the batch axis)")
    k = len(b_shape)
    if k > rank or tuple(b_shape[1:]) != tuple(shape[1:k]):
        raise LayerError(layer.name, f"bias blob shape {b_shape} does not match the bottom's "
                                     f"leading axes {shape[:k]}")
    if x.layout == b.layout == "flat" and x.chw == b.chw:
        axes = [0, 1]
    else:
        axes = _tensor_axes(ctx, x, range(k)) if b.layout != "flat" else None
        # b's tensor axes, as axes of x: they must increase for a plain reshape.
        b_axes = None if axes is None else [axes[ctx_axis] for ctx_axis in _caffe_axes(ctx, b)]
        if b_axes is None or b_axes != sorted(b_axes):
            x = ctx.caffe_order(x, f"{layer.name}/bottom0")
            b = ctx.caffe_order(b, f"{layer.name}/bottom1")
            b_axes = list(range(k))
        axes = b_axes
    bias_layer = layers.Bias(axes=axes, name=name, caffe_name=layer.name)
    return [ctx.same_layout(ctx.apply(bias_layer, [x.tensor, b.tensor]), x)]


def _caffe_axes(ctx, blob):
    """For each tensor axis of ``blob``, the Caffe axis it holds."""
    rank = len(blob.tensor.shape)
    inverse = [0] * rank
    for caffe_axis in range(rank):
        inverse[ctx.axis(blob, caffe_axis)] = caffe_axis
    return inverse


@converter("Eltwise")
def eltwise(layer, bottoms, ctx):
    """Eltwise SUM (coeff per bottom), PROD or MAX over same-shaped bottoms.

    Caffe's rules: coeff is empty or one per bottom, and PROD takes none;
    MAX accepts coefficients and ignores them (as Caffe does).
    """
    _bottoms(layer, bottoms, 2, math.inf)
    p = layer.eltwise_param
    op = caffe_pb2.EltwiseParameter.EltwiseOp.Name(p.operation)
    coeffs = list(p.coeff)
    if coeffs and len(coeffs) != len(bottoms):
        raise LayerError(layer.name, f"Eltwise takes one coefficient per bottom: {len(coeffs)} "
                                     f"coeff for {len(bottoms)} bottoms")
    if coeffs and op == "PROD":
        raise LayerError(layer.name, "Eltwise takes coefficients only for SUM, not PROD")
    shapes = [ctx.caffe_shape(b) for b in bottoms]
    for i, s in enumerate(shapes[1:], 1):
        if tuple(s[1:]) != tuple(shapes[0][1:]):
            raise LayerError(layer.name, f"Eltwise bottoms must have one shape: bottom 0 is "
                                         f"{shapes[0]}, bottom {i} is {s}")
    bottoms = _one_layout(ctx, layer, bottoms)
    merge = layers.Eltwise(op, coeffs if op == "SUM" else None, name=ctx.keras_name(layer.name))
    return [ctx.same_layout(merge([b.tensor for b in bottoms]), bottoms[0])]


def _one_layout(ctx, layer, bottoms):
    """The bottoms in one layout, converting as few as possible."""
    if len({(b.layout, b.chw) for b in bottoms}) == 1:
        return bottoms
    images = len(bottoms[0].tensor.shape) >= 3 and ctx.data_format == "channels_last"
    if images and any(b.layout == "nhwc" for b in bottoms) and all(b.layout != "flat" for b in bottoms):
        # Channels-last images and Caffe-order ones: bring the latter to channels-last.
        return [b if b.layout == "nhwc" else
                Blob(ctx.as_image(b, f"{layer.name}/bottom{i}"), "nhwc")
                for i, b in enumerate(bottoms)]
    return [ctx.caffe_order(b, f"{layer.name}/bottom{i}") for i, b in enumerate(bottoms)]

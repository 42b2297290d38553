"""Caffe's activation and elementwise layers, computed as Caffe computes them.

Each layer follows the ``Forward_cpu`` of its Caffe layer, including the
corner cases that Keras's built-in layers treat differently: which branch
``x == 0`` takes (and so which gradient it gets), NaN inputs, signed zeros,
the constant output of ``Power`` when ``power * scale == 0``, and the float32
constants ``Exp`` and ``Log`` derive from their parameters.

``PReLU`` and ``Bias`` hold Caffe blobs (``CaffeBlobs``); their ``axis`` /
``axes`` are axes of the Keras tensor, so channels-last tensors need no
transposes.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import CaffeBlobs, register

_f32 = np.float32


def _c_pow(base, exponent):
    """C's ``powf`` on float32 values (numpy's ``power`` differs for infinite bases)."""
    base, exponent = float(_f32(base)), float(_f32(exponent))
    odd = exponent.is_integer() and exponent % 2 == 1
    try:
        value = math.pow(base, exponent)
    except OverflowError:
        value = math.copysign(math.inf, base) if odd else math.inf
    except ValueError:  # 0 to a negative power, or a negative base to a fraction
        if base != 0:
            return math.nan
        value = math.copysign(math.inf, base) if odd else math.inf
    with np.errstate(over="ignore"):
        return float(_f32(value))


def _broadcast_shape(ndim, axes, dims):
    """A reshape target placing ``dims`` at tensor ``axes`` (batch as -1)."""
    shape = [1] * ndim
    for axis, dim in zip(axes, dims):
        shape[axis] = -1 if axis == 0 else int(dim)
    return shape


class _Elementwise(keras.layers.Layer):
    """A layer whose output has its input's shape."""

    per_sample = True  # no sample reads another (keras_caffe.lms.plan.Node.per_sample)

    def compute_output_shape(self, input_shape):
        return input_shape


@register
class ReLU(_Elementwise):
    """Caffe's ReLU: ``y = x if x > 0 else negative_slope * x``, any slope.

    ``keras.layers.ReLU`` refuses a negative ``negative_slope``, which Caffe
    accepts. The gradient is ``(x > 0) + negative_slope * (x <= 0)``, as in
    Caffe's ``Backward_cpu``.
    """

    def __init__(self, negative_slope=0.0, **kwargs):
        super().__init__(**kwargs)
        self.negative_slope = float(_f32(negative_slope))

    def call(self, x):
        if self.negative_slope == 0:
            return ops.relu(x)
        return ops.where(x > 0, x, x * self.negative_slope)

    def get_config(self):
        config = super().get_config()
        config.update(negative_slope=self.negative_slope)
        return config


@register
class PReLU(CaffeBlobs, _Elementwise):
    """Caffe's PReLU: ``y = x if x > 0 else slope * x``.

    ``slope`` is one value per channel (tensor axis ``axis``; Caffe's blob
    shape ``(C,)``) or, with ``channel_shared``, one value for all (Caffe's
    blob shape ``()``). Caffe's default initial slope is 0.25. The gradient
    at ``x == 0`` is ``slope``, as in Caffe's ``Backward_cpu``.
    """

    caffe_type = "PReLU"

    def __init__(self, axis=-1, channel_shared=False, slope_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.channel_shared = bool(channel_shared)
        self.slope_initializer = keras.initializers.get(
            slope_initializer if slope_initializer is not None else keras.initializers.Constant(0.25))

    def build(self, input_shape):
        self.ndim = len(input_shape)
        shape = () if self.channel_shared else (int(input_shape[self.axis]),)
        self.slope = self.add_weight(name="slope", shape=shape, initializer=self.slope_initializer)

    def call(self, x):
        slope = ops.cast(self.blob(self.slope), x.dtype)
        if not self.channel_shared:
            axis = self.axis % self.ndim
            slope = ops.reshape(slope, _broadcast_shape(self.ndim, [axis], slope.shape))
        return ops.where(x > 0, x, x * slope)

    def caffe_blob_shapes(self):
        return [tuple(self.slope.shape)]


    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis, channel_shared=self.channel_shared,
                      slope_initializer=keras.initializers.serialize(self.slope_initializer))
        return config


@register
class Bias(CaffeBlobs, _Elementwise):
    """Caffe's Bias: ``y = x + b``, ``b`` broadcast along tensor ``axes``.

    ``b``'s i-th axis lies along the input's ``axes[i]`` (increasing; ``[]``
    for a scalar bias). With one input ``b`` is learned (Caffe's blob has
    exactly those axes' sizes); with two, the second input is ``b`` and
    ``axes`` starts with the batch axis 0.
    """

    caffe_type = "Bias"
    #: a second input's values may span the batch axis: never run over parts of it
    per_sample = False

    def __init__(self, axes=(1,), bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.axes = [int(a) for a in axes]
        if sorted(set(self.axes)) != self.axes:
            raise ValueError(f"axes must be increasing, got {self.axes}")
        self.bias_initializer = keras.initializers.get(bias_initializer)

    @staticmethod
    def _two_inputs(input_shape):
        return isinstance(input_shape, (list, tuple)) and isinstance(input_shape[0], (list, tuple))

    def build(self, input_shape):
        two = self._two_inputs(input_shape)
        x_shape = input_shape[0] if two else input_shape
        self.ndim = len(x_shape)
        self.dims = [x_shape[a] for a in self.axes]
        if two:
            self.bias = None
        else:
            if 0 in self.axes:
                raise ValueError("a learned bias cannot cover the batch axis 0")
            self.bias = self.add_weight(name="bias", shape=tuple(int(d) for d in self.dims),
                                        initializer=self.bias_initializer)

    def call(self, inputs):
        if isinstance(inputs, (list, tuple)):
            x, b = inputs
        else:
            x, b = inputs, self.blob(self.bias)
        b = ops.reshape(ops.cast(b, x.dtype), _broadcast_shape(self.ndim, self.axes, self.dims))
        return x + b

    def compute_output_shape(self, input_shape):
        return input_shape[0] if self._two_inputs(input_shape) else input_shape

    def caffe_blob_shapes(self):
        return [tuple(w.shape) for w in self.weights]


    def get_config(self):
        config = super().get_config()
        config.update(axes=list(self.axes),
                      bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config


@register
class ELU(_Elementwise):
    """Caffe's ELU: ``y = x if x > 0 else alpha * (exp(x) - 1)``.

    ``exp(x) - 1`` as Caffe writes it (not ``expm1``); the gradient at
    ``x == 0`` is ``alpha``, as in Caffe. The exponent is ``x`` where
    ``x <= 0`` (0 elsewhere, so ``exp`` never overflows in the branch not
    taken) by ``where``, not ``minimum``: at the tie ``x == 0`` JAX and
    PyTorch give half of ``minimum``'s gradient to each argument.
    """

    def __init__(self, alpha=1.0, **kwargs):
        super().__init__(**kwargs)
        self.alpha = float(alpha)

    def call(self, x):
        negative = self.alpha * (ops.exp(ops.where(x > 0, 0.0, x)) - 1.0)
        return ops.where(x > 0, x, negative)

    def get_config(self):
        config = super().get_config()
        config.update(alpha=self.alpha)
        return config


@register
class AbsVal(_Elementwise):
    """Caffe's AbsVal: ``y = |x|``."""

    def call(self, x):
        return ops.abs(x)


@register
class BNLL(_Elementwise):
    """Caffe's BNLL: ``y = log(1 + exp(x))``, computed without overflow.

    Caffe's two branches (``x + log(1 + exp(-x))`` for ``x > 0``) are the
    stable softplus; its gradient is ``sigmoid(x)``, as in Caffe.
    """

    def call(self, x):
        return ops.softplus(x)


@register
class Power(_Elementwise):
    """Caffe's Power: ``y = (shift + scale * x) ** power``.

    As in Caffe: when ``power * scale == 0`` (in float32) the output is the
    constant ``1`` (``power == 0``) or ``shift ** power``, whatever the
    input (inf and NaN included); otherwise each step that is not an identity
    (``scale != 1``, ``shift != 0``, ``power != 1``) is applied in turn, so
    e.g. ``-0.0`` keeps its sign when ``shift == 0``.
    """

    def __init__(self, power=1.0, scale=1.0, shift=0.0, **kwargs):
        super().__init__(**kwargs)
        self.power = float(_f32(power))
        self.scale = float(_f32(scale))
        self.shift = float(_f32(shift))

    def call(self, x):
        if _f32(self.power) * _f32(self.scale) == 0:
            value = 1.0 if self.power == 0 else _c_pow(self.shift, self.power)
            return ops.full_like(x, value)
        y = x
        if self.scale != 1:
            y = y * self.scale
        if self.shift != 0:
            y = y + self.shift
        if self.power != 1:
            y = ops.power(y, ops.cast(self.power, y.dtype))
        return y

    def get_config(self):
        config = super().get_config()
        config.update(power=self.power, scale=self.scale, shift=self.shift)
        return config


def _log_base(base):
    """Caffe's float32 ``log(base)`` (1 for the base -1 meaning e)."""
    with np.errstate(all="ignore"):
        return _f32(1) if _f32(base) == _f32(-1) else np.log(_f32(base))


class _BaseScaleShift(_Elementwise):
    """Exp's and Log's parameters (base, scale, shift), stored as Caffe's float32."""

    def __init__(self, base=-1.0, scale=1.0, shift=0.0, **kwargs):
        super().__init__(**kwargs)
        self.base = float(_f32(base))
        self.scale = float(_f32(scale))
        self.shift = float(_f32(shift))

    def get_config(self):
        config = super().get_config()
        config.update(base=self.base, scale=self.scale, shift=self.shift)
        return config


# Not "Exp": the learning-rate schedule keras_caffe.schedules.Exp holds that name.
@register
class ExpLayer(_BaseScaleShift):
    """Caffe's Exp: ``y = base ** (shift + scale * x)`` (``base == -1``: e).

    Computed as Caffe does: ``exp(inner * x) * outer`` with the float32
    constants ``inner = log(base) * scale`` and ``outer = base ** shift``
    (1 when ``shift == 0``), skipping the multiplications by exactly 1.
    """

    def __init__(self, base=-1.0, scale=1.0, shift=0.0, **kwargs):
        super().__init__(base=base, scale=scale, shift=shift, **kwargs)
        with np.errstate(all="ignore"):
            self._inner = float(_log_base(base) * _f32(scale))
            if _f32(shift) == 0:
                self._outer = 1.0
            elif _f32(base) == _f32(-1):
                self._outer = float(np.exp(_f32(shift)))
            else:
                self._outer = _c_pow(base, shift)

    def call(self, x):
        y = ops.exp(x if self._inner == 1 else x * self._inner)
        return y if self._outer == 1 else y * self._outer


@register
class Log(_BaseScaleShift):
    """Caffe's Log: ``y = log_base(shift + scale * x)`` (``base == -1``: e).

    Computed as Caffe does: ``scale`` and ``shift`` applied when they are not
    identities, the natural log, then a multiplication by the float32
    constant ``1 / log(base)`` unless it is exactly 1.
    """

    def __init__(self, base=-1.0, scale=1.0, shift=0.0, **kwargs):
        super().__init__(base=base, scale=scale, shift=shift, **kwargs)
        with np.errstate(all="ignore"):
            self._base_scale = float(_f32(1) / _log_base(base))

    def call(self, x):
        y = x
        if self.scale != 1:
            y = y * self.scale
        if self.shift != 0:
            y = y + self.shift
        y = ops.log(y)
        return y if self._base_scale == 1 else y * self._base_scale


@register
class Threshold(_Elementwise):
    """Caffe's Threshold: ``y = 1 if x > threshold else 0`` (NaN gives 0)."""

    def __init__(self, threshold=0.0, **kwargs):
        super().__init__(**kwargs)
        self.threshold = float(_f32(threshold))

    def call(self, x):
        return ops.cast(ops.greater(x, self.threshold), x.dtype)

    def get_config(self):
        config = super().get_config()
        config.update(threshold=self.threshold)
        return config


@register
class Clip(_Elementwise):
    """Caffe's Clip: ``y = max(min, min(x, max))`` with ``std::min``/``std::max``.

    So NaN inputs give ``min``, and ``min > max`` gives ``min`` everywhere.
    The gradient passes where ``min <= x <= max``, as in Caffe.
    """

    def __init__(self, min=0.0, max=0.0, **kwargs):  # noqa: A002 (Caffe's names)
        super().__init__(**kwargs)
        self.min = float(_f32(min))
        self.max = float(_f32(max))

    def call(self, x):
        lo, hi = ops.cast(self.min, x.dtype), ops.cast(self.max, x.dtype)
        inside = ops.logical_and(ops.greater_equal(x, lo), ops.less_equal(x, hi))
        outside = ops.where(ops.greater(x, hi), hi, lo) if self.min <= self.max else lo
        return ops.where(inside, x, outside)

    def get_config(self):
        config = super().get_config()
        config.update(min=self.min, max=self.max)
        return config


@register
class Eltwise(keras.layers.Layer):
    """Caffe's Eltwise over same-shaped inputs: SUM (with coefficients), PROD, MAX.

    In Caffe's order: SUM accumulates ``coeff[i] * x[i]`` from the first
    input on (skipping zero coefficients, as BLAS's axpy does); PROD
    multiplies left to right; MAX keeps the earlier value unless a later one
    is strictly greater, except that the first pair takes the second input on
    ties (so NaN and gradients follow Caffe's mask).
    """

    per_sample = True  # no sample reads another (keras_caffe.lms.plan.Node.per_sample)

    def __init__(self, operation="SUM", coeffs=None, **kwargs):
        super().__init__(**kwargs)
        if operation not in ("SUM", "PROD", "MAX"):
            raise ValueError(f"operation must be 'SUM', 'PROD' or 'MAX', got {operation!r}")
        self.operation = operation
        self.coeffs = None if not coeffs else [float(_f32(c)) for c in coeffs]

    def call(self, inputs):
        inputs = list(inputs)
        if self.operation == "PROD":
            y = inputs[0] * inputs[1]
            for x in inputs[2:]:
                y = y * x
            return y
        if self.operation == "MAX":
            y = ops.where(inputs[0] > inputs[1], inputs[0], inputs[1])
            for x in inputs[2:]:
                y = ops.where(x > y, x, y)
            return y
        coeffs = self.coeffs or [1.0] * len(inputs)
        # BLAS's axpy returns at once for a zero coefficient: that input
        # (even inf or NaN) does not reach the sum.
        terms = [x if c == 1 else x * c for x, c in zip(inputs, coeffs) if c != 0]
        if not terms:
            return ops.zeros_like(inputs[0])
        y = terms[0]
        for term in terms[1:]:
            y = y + term
        return y

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        config = super().get_config()
        config.update(operation=self.operation, coeffs=self.coeffs)
        return config

"""The elementwise functions of OpenCV 4's dnn module, as its CPU functors
compute them (opencv/opencv: modules/dnn/src/layers/elementwise_layers.cpp,
each functor's ``calculate``; Not: OpenCV 4.x's ``NotFunctor``, the
``NotForward`` kernel of modules/dnn/src/opencl/activations.cl).

``OpenCVElementwise(function, params)`` computes one of them; ``FUNCTIONS``
maps each name to ``(formula, default parameters)``. The comparisons are
written as OpenCV's ``std::min``/``std::max``/``?:`` take them (so a NaN goes
the branch C++ sends it), and a branch that could overflow is fed a masked
input, so the gradient of the branch not taken stays finite.
"""

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import register

_f32 = np.float32
#: GeluApproximationConstants of elementwise_layers.cpp (float32 values).
_SQRT_2_PI = float(_f32(0.7978845834732056))
_COEF_SQRT_2_PI = float(_f32(_f32(0.044714998453855515) * _f32(_SQRT_2_PI)))
#: MISH_THRESHOLD: below it OpenCV's Mish is 0.
_MISH_THRESHOLD = float(_f32(-36.73))


def _min_c(a, b):
    """C++'s ``std::min(a, b)``: ``b < a ? b : a`` (``a`` if ``b`` is NaN)."""
    return ops.where(b < a, b, a)


def _max_c(a, b):
    """C++'s ``std::max(a, b)``: ``a < b ? b : a`` (``a`` if ``b`` is NaN)."""
    return ops.where(a < b, b, a)


def _mish(x):
    keep = x > _MISH_THRESHOLD
    x = ops.where(keep, x, 0.0)
    y = ops.exp(-x)  # 1 where masked, as OpenCV's
    return x * (1 + 2 * y) / (1 + 2 * y + 2 * y * y)


def _hard_swish(x):
    return x * _max_c(0.0, _min_c(1.0, x / 6.0 + 0.5))


def _hard_sigmoid(x, alpha, beta):
    return _max_c(0.0, _min_c(1.0, alpha * x + beta))


def _selu(x, alpha, gamma):
    negative = ops.where(x > 0, 0.0, x)
    return gamma * ops.where(x > 0, x, alpha * ops.expm1(negative))


def _celu(x, alpha):
    # max(0, x) + min(0, alpha * expm1(x / alpha)): the second term is
    # nonzero only for x < 0 (either sign of alpha), so it is fed x < 0 only.
    negative = ops.where(x < 0, x, 0.0)
    return _max_c(0.0, x) + _min_c(0.0, alpha * ops.expm1(negative / alpha))


def _gelu(x):
    return 0.5 * x * (1.0 + ops.erf(x * float(_f32(np.sqrt(0.5)))))


def _gelu_approximation(x):
    return 0.5 * x * (1.0 + ops.tanh(x * (_SQRT_2_PI + _COEF_SQRT_2_PI * x * x)))


def _sign(x):
    return ops.where(x > 0, 1.0, ops.where(x < 0, -1.0, 0.0))


def _thresholded_relu(x, alpha):
    return ops.where(x > alpha, x, 0.0)


def _shrink(x, bias, lambd):
    return ops.where(x > lambd, x - bias, ops.where(x < -lambd, x + bias, 0.0))


#: name -> (formula of x and the parameters, {parameter: OpenCV's default}).
FUNCTIONS = {
    "Mish": (_mish, {}),
    "HardSwish": (_hard_swish, {}),
    "HardSigmoid": (_hard_sigmoid, {"alpha": 0.2, "beta": 0.5}),
    "Softplus": (lambda x: ops.log1p(ops.exp(x)), {}),
    "Softsign": (lambda x: x / (1.0 + ops.abs(x)), {}),
    "Selu": (_selu, {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": (_celu, {"alpha": 1.0}),
    "Gelu": (_gelu, {}),
    "GeluApproximation": (_gelu_approximation, {}),
    "Erf": (ops.erf, {}),
    "Sqrt": (ops.sqrt, {}),
    "Ceil": (ops.ceil, {}),
    "Floor": (ops.floor, {}),
    # nearbyint under FE_TONEAREST: halves to even (tf.round does the same).
    "Round": (ops.round, {}),
    "Sign": (_sign, {}),
    "Reciprocal": (lambda x: 1.0 / x, {}),
    "Not": (lambda x: ops.floor(1.0 - x), {}),
    "Acos": (ops.arccos, {}),
    "Acosh": (ops.arccosh, {}),
    "Asin": (ops.arcsin, {}),
    "Asinh": (ops.arcsinh, {}),
    "Atan": (ops.arctan, {}),
    "Atanh": (ops.arctanh, {}),
    "Cos": (ops.cos, {}),
    "Cosh": (ops.cosh, {}),
    "Sin": (ops.sin, {}),
    "Sinh": (ops.sinh, {}),
    "Tan": (ops.tan, {}),
    "ThresholdedRelu": (_thresholded_relu, {"alpha": 1.0}),
    "Shrink": (_shrink, {"bias": 0.0, "lambd": 0.5}),
}


@register
class OpenCVElementwise(keras.layers.Layer):
    """One of OpenCV dnn's elementwise functions (``FUNCTIONS``), with its
    parameters (float32, as OpenCV holds them; defaults OpenCV's)."""

    def __init__(self, function, params=None, **kwargs):
        super().__init__(**kwargs)
        if function not in FUNCTIONS:
            raise ValueError(f"unknown OpenCV elementwise function {function!r}")
        self.function = function
        defaults = FUNCTIONS[function][1]
        given = dict(params or {})
        unknown = sorted(set(given) - set(defaults))
        if unknown:
            raise ValueError(f"{function} takes no parameter(s) {', '.join(unknown)}")
        self.params = {name: float(_f32(given.get(name, default)))
                       for name, default in defaults.items()}

    def call(self, x):
        return FUNCTIONS[self.function][0](x, **self.params)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(function=self.function, params=dict(self.params))
        return config

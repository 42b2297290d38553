"""OpenCV 4's elementwise layer names against numpy ports of its functors.

The references port the ``calculate`` of each functor in opencv/opencv
modules/dnn/src/layers/elementwise_layers.cpp (the CPU path; ``std::min`` /
``std::max`` taken as C++ defines them, so a NaN takes C++'s branch), Gelu's
``erf_approx`` included; Not is OpenCV 4.x's ``NotFunctor`` (``floor(1 - x)``,
the ``NotForward`` kernel of modules/dnn/src/opencl/activations.cl); Mish also
matches troyliu0105/caffe's ``caffe_fn_mish`` (include/caffe/util/
math_functions.hpp: ``x * tanh(softplus(x))``, softplus cut at +-20).
"""

import math

import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError, ProtoParseError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def c_min(a, b):
    """``std::min(a, b)``: ``b < a ? b : a``."""
    return np.where(np.less(b, a), b, a)


def c_max(a, b):
    """``std::max(a, b)``: ``a < b ? b : a``."""
    return np.where(np.less(a, b), b, a)


def erf_approx(v):
    """elementwise_layers.cpp ``erf_approx`` (Abramowitz-Stegun 7.1.26)."""
    t = 1 / (np.abs(v) * 0.3275911 + 1)
    r = ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t
         + 0.254829592)
    return np.copysign(1 - r * t * np.exp(-v * v), v)


def exact_erf(v):
    return np.vectorize(math.erf, otypes=[np.float64])(v).astype(v.dtype)


def mish(x):
    """MishFunctor::calculate (the masked input as its SIMD path: 0 below -36.73)."""
    x = np.where(x > F(-36.73), x, 0)
    y = np.exp(-x)
    return x * (1 + 2 * y) / (1 + 2 * y + 2 * y * y)


def mish_caffe_fork(x):
    """troyliu0105/caffe caffe_fn_mish: x * tanh(softplus(x))."""
    softplus = np.where(x > 20, x, np.where(x < -20, np.exp(x), np.log1p(np.exp(x))))
    return x * np.tanh(softplus)


def selu(x, alpha=F(1.67326319217681884765625), gamma=F(1.05070102214813232421875)):
    return gamma * np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0)))


def celu(x, alpha=F(1)):
    return c_max(0, x) + c_min(0, alpha * np.expm1(np.minimum(x, 0) / alpha))


def hard_sigmoid(x, alpha=F(0.2), beta=F(0.5)):
    return c_max(0, c_min(1, alpha * x + beta))


def shrink(x, bias=0.0, lambd=0.5):
    return np.where(x > lambd, x - bias, np.where(x < -lambd, x + bias, 0))


SQRT_2_PI = F(0.7978845834732056)
COEF_SQRT_2_PI = F(0.044714998453855515) * SQRT_2_PI

REFERENCES = {
    "Mish": mish,
    "HardSwish": lambda x: x * c_max(0, c_min(1, x / 6 + 0.5)),
    "HardSigmoid": hard_sigmoid,
    "Softplus": lambda x: np.log1p(np.exp(x)),
    "Softsign": lambda x: x / (1 + np.abs(x)),
    "Selu": selu,
    "Celu": celu,
    "Gelu": lambda x: 0.5 * x * (1 + erf_approx(x * np.sqrt(0.5).astype(x.dtype))),
    "GeluApproximation": lambda x: 0.5 * x * (1 + np.tanh(x * (SQRT_2_PI + COEF_SQRT_2_PI * x * x))),
    "Erf": exact_erf,
    "Sqrt": np.sqrt,
    "Ceil": np.ceil,
    "Floor": np.floor,
    "Round": np.rint,  # nearbyint under FE_TONEAREST
    "Sign": lambda x: np.where(x > 0, 1, np.where(x < 0, -1, 0)).astype(x.dtype),
    "Reciprocal": lambda x: 1 / x,
    "Not": lambda x: np.floor(1 - x),
    "Acos": np.arccos,
    "Acosh": np.arccosh,
    "Asin": np.arcsin,
    "Asinh": np.arcsinh,
    "Atan": np.arctan,
    "Atanh": np.arctanh,
    "Cos": np.cos,
    "Cosh": np.cosh,
    "Sin": np.sin,
    "Sinh": np.sinh,
    "Tan": np.tan,
    "ThresholdedRelu": lambda x: np.where(x > 1, x, 0).astype(x.dtype),
    "Shrink": shrink,
}
TYPES = sorted(REFERENCES)
#: One case per type, marked with it.
CASES = [pytest.param(t, marks=pytest.mark.layer_type(t), id=t) for t in TYPES]
#: Types whose derivative is 0 wherever it exists.
STEPS = {"Ceil", "Floor", "Round", "Sign", "Not"}

EDGES = [0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -2.5, 3.0, -3.0, 6.0, -6.0,
         20.0, -20.0, 50.0, -50.0, 100.0, -100.0]


def values(layer_type, rng):
    """120 values (2, 3, 4, 5) over the function's domain, edges included."""
    if layer_type in ("Acos", "Asin", "Atanh"):
        x = np.concatenate([[0, -0.0, 1, -1, 0.5, -0.5, 1.5, -2], rng.uniform(-1, 1, 112)])
    elif layer_type == "Acosh":
        x = np.concatenate([[1, 1.5, 2, 10, 100, 1e4, 0.5, -1], 1 + rng.exponential(2, 112)])
    else:
        x = np.concatenate([EDGES, 3 * rng.standard_normal(100)])
    return x.astype(F).reshape(2, 3, 4, 5)


def layer_text(layer_type, params="", top="y"):
    return (f'layer {{ name: "f" type: "{layer_type}" bottom: "data" top: "{top}" '
            f"{params} }}\n")


@pytest.fixture(autouse=True)
def _quiet_overflow():
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        yield


@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("layer_type", CASES)
def test_matches_opencv(layer_type, data_format):
    x = values(layer_type, np.random.default_rng(0))
    got = run_layers(layer_text(layer_type), {"data": x}, data_format=data_format)["y"]
    want = REFERENCES[layer_type](x)
    assert got.shape == x.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, equal_nan=True)


# One marked test per type (the registry looks for the marks in the source).
@pytest.mark.layer_type("Mish", "HardSwish", "HardSigmoid", "Softplus", "Softsign", "Selu", "Celu",
                       "Gelu", "GeluApproximation", "Erf", "Sqrt", "Ceil", "Floor", "Round",
                       "Sign", "Reciprocal", "Not", "Acos", "Acosh", "Asin", "Asinh", "Atan",
                       "Atanh", "Cos", "Cosh", "Sin", "Sinh", "Tan", "ThresholdedRelu", "Shrink")
def test_every_function_in_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 '
            'dim: 4 dim: 5 } } }\n')
    for layer_type in TYPES:
        row = analyze(text + layer_text(layer_type), batch=None).layers[-1]
        assert row.tops == (("y", (2, 3, 4, 5)),), layer_type
        assert row.weight_shapes == ()


@pytest.mark.layer_type("Mish")
def test_mish_is_the_caffe_forks_mish():
    x = values("Mish", np.random.default_rng(1))
    got = run_layers(layer_text("Mish"), {"data": x})["y"]
    np.testing.assert_allclose(got, mish_caffe_fork(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Gelu")
def test_gelu_is_the_exact_gelu_within_float32():
    """Older OpenCV 4 computes Gelu with std::erf, newer with erf_approx: both agree."""
    x = values("Gelu", np.random.default_rng(2)).astype(np.float64)
    got = run_layers(layer_text("Gelu"), {"data": x})["y"]
    np.testing.assert_allclose(got, 0.5 * x * (1 + exact_erf(x / np.sqrt(2))), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("layer_type, x, want", [
    ("Sqrt", [-1.0, -0.0, 0.0, np.inf, -np.inf, np.nan, 4.0], [np.nan, -0.0, 0.0, np.inf, np.nan,
                                                                 np.nan, 2.0]),
    ("Reciprocal", [0.0, -0.0, np.inf, -np.inf, np.nan, 4.0], [np.inf, -np.inf, 0.0, -0.0,
                                                                np.nan, 0.25]),
    ("Round", [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998], [0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 2.0]),
    ("Sign", [np.nan, -0.0, 0.0, -3.0, 1e-30], [0.0, 0.0, 0.0, -1.0, 1.0]),
    ("Not", [0.0, 1.0, 0.5, 2.0, -1.0], [1.0, 0.0, 0.0, -1.0, 2.0]),
    ("ThresholdedRelu", [np.nan, 1.0, 1.0000001, -5.0], [0.0, 0.0, 1.0000001, 0.0]),
    ("Shrink", [np.nan, 0.5, -0.5, 0.50000006, -2.0], [0.0, 0.0, 0.0, 0.50000006, -2.0]),
    # HardSigmoid has no SIMD path: std::min(1, NaN) is 1.
    ("HardSigmoid", [np.nan, -2.5, 2.5, -3.0, 0.0], [1.0, 0.0, 1.0, 0.0, 0.5]),
    ("Softplus", [100.0, -100.0, 0.0], [np.inf, 0.0, math.log(2)]),
    ("Mish", [-36.0, -37.0, 0.0, 100.0], [mish(np.array([-36.0], F))[0], 0.0, 0.0, 100.0]),
    ("Atanh", [1.0, -1.0, 2.0], [np.inf, -np.inf, np.nan]),
    ("Acosh", [1.0, 0.5], [0.0, np.nan]),
])
def test_ieee_edges(layer_type, x, want, request):
    request.node.add_marker(pytest.mark.layer_type(layer_type))
    x = np.array([x], F)
    got = run_layers(layer_text(layer_type), {"data": x})["y"][0]
    want = np.array(want, F)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-30, equal_nan=True)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


def gradient_values(layer_type, rng):
    """Points where the function is differentiable, away from its kinks."""
    if layer_type in ("Acos", "Asin", "Atanh"):
        x = rng.uniform(-0.9, 0.9, 60)
    elif layer_type == "Acosh":
        x = 1.1 + rng.exponential(2, 60)
    elif layer_type in ("Sqrt",):
        x = rng.uniform(0.1, 4, 60)
    elif layer_type == "Reciprocal":
        x = rng.choice([-1, 1], 60) * rng.uniform(0.2, 3, 60)
    elif layer_type == "Tan":
        x = rng.uniform(-1.2, 1.2, 60)
    else:
        x = 2.5 * rng.standard_normal(60)
        kinks = {"HardSwish": (-3, 3), "HardSigmoid": (-2.5, 2.5), "ThresholdedRelu": (1,),
                 "Shrink": (-0.5, 0.5), "Selu": (0,), "Celu": (0,), "Ceil": (), "Floor": ()}
        for kink in kinks.get(layer_type, ()):
            x = np.where(np.abs(x - kink) < 0.05, kink + 0.1, x)
        if layer_type in STEPS:  # away from the jumps (integers, halves, 0)
            x = np.floor(x) + 0.25
    return x.reshape(2, 3, 2, 5)


@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("layer_type", CASES)
def test_gradient(layer_type, data_format):
    """Keras's gradient against central differences of the numpy port (float64),
    0 for the step functions."""
    x = gradient_values(layer_type, np.random.default_rng(3))
    model = import_model('layer { name: "in" type: "Input" top: "data" input_param { shape { '
                         'dim: 2 dim: 3 dim: 2 dim: 5 } } }\n' + layer_text(layer_type),
                         data_format=data_format)
    (grad,), _ = gradients(lambda feed: ops.sum(model(feed)),
                           [to_keras_layout(x.astype(F), data_format)])
    if layer_type in STEPS:
        assert grad is None or not np.any(grad)
        return
    grad = from_keras_layout(grad, data_format)
    assert np.all(np.isfinite(grad))
    ref, h = REFERENCES[layer_type], 1e-5
    numeric = (ref(x + h) - ref(x - h)) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=2e-3, atol=2e-4)


@pytest.mark.layer_type("Mish")
def test_mish_gradient_is_finite_far_out():
    x = np.array([[-1e4, -100.0, -36.8, -36.7, 30.0, 100.0, 1e4]], F)
    model = import_model('layer { name: "in" type: "Input" top: "data" input_param { shape { '
                         'dim: 1 dim: 7 } } }\n' + layer_text("Mish"))
    (grad,), _ = gradients(lambda feed: ops.sum(model(feed)), [x])
    assert np.all(np.isfinite(grad))
    np.testing.assert_allclose(grad[0, [0, 1, 2, 5, 6]], [0, 0, 0, 1, 1], atol=1e-6)


@pytest.mark.parametrize("layer_type, params, reference", [
    ("HardSigmoid", "elu_param { alpha: 0.5 } lrn_param { beta: 0.25 }",
     lambda x: hard_sigmoid(x, F(0.5), F(0.25))),
    ("HardSigmoid", "swish_param { beta: 0.75 }", lambda x: hard_sigmoid(x, F(0.2), F(0.75))),
    ("Celu", "elu_param { alpha: 0.5 }", lambda x: celu(x, F(0.5))),
    ("Celu", "elu_param { alpha: -2 }", lambda x: celu(x, F(-2))),
    ("Selu", "elu_param { alpha: 2 }", lambda x: selu(x, alpha=F(2))),
    ("ThresholdedRelu", "elu_param { alpha: -0.5 }", lambda x: np.where(x > -0.5, x, 0)),
    # Fields OpenCV reads for no parameter of the function are ignored, as OpenCV does.
    ("Softplus", "elu_param { alpha: 3 }", lambda x: np.log1p(np.exp(x))),
])
def test_parameters_from_param_fields(layer_type, params, reference, request):
    """OpenCV's importer flattens every *_param field into the layer's
    parameters: elu_param's alpha is Celu's alpha."""
    request.node.add_marker(pytest.mark.layer_type(layer_type))
    x = values(layer_type, np.random.default_rng(4))
    got = run_layers(layer_text(layer_type, params), {"data": x})["y"]
    np.testing.assert_allclose(got, reference(x), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("HardSigmoid", "Celu")
@pytest.mark.parametrize("layer_type, params, message", [
    ("HardSigmoid", "elu_param { alpha: 0.5 } lrn_param { alpha: 0.25 }",
     r"layer 'f': \(HardSigmoid\) parameter 'alpha' is given several values \(0.25, 0.5\) in "
     r"its \*_param fields"),
    ("Celu", "elu_param { alpha: inf }", r"layer 'f': \(Celu\) parameter 'alpha' must be "
                                          r"finite, got inf"),
])
def test_conflicting_parameters_are_refused(layer_type, params, message):
    with pytest.raises(LayerError, match=message):
        run_layers(layer_text(layer_type, params), {"data": np.zeros((1, 2), F)})


@pytest.mark.layer_type("Celu", "Shrink")
@pytest.mark.parametrize("layer_type, field", [("Celu", "alpha: 2"), ("Shrink", "lambd: 1")])
def test_a_parameter_outside_the_schema_is_refused(layer_type, field):
    """A parameter written as a field of the layer (OpenCV's custom fields) is not
    in Caffe's schema: the reader refuses it, naming the layer and field."""
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 '
            '} } }\n' + layer_text(layer_type, field))
    with pytest.raises(ProtoParseError, match=rf"layer 'f' \({layer_type}\): field "
                                              rf"'{field.split(':')[0]}' is not in keras-caffe's "
                                              "schema"):
        import_model(text)


@pytest.mark.layer_type("Sqrt")
def test_one_bottom_only():
    text = ('layer { name: "in" type: "Input" top: "a" top: "b" input_param { shape { dim: 1 '
            'dim: 2 } shape { dim: 1 dim: 2 } } }\n'
            'layer { name: "f" type: "Sqrt" bottom: "a" bottom: "b" top: "y" }\n')
    with pytest.raises(LayerError, match=r"layer 'f': \(Sqrt\) takes 1 bottom\(s\), got 2"):
        import_model(text)


@pytest.mark.layer_type("Identity")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_identity_passes_its_bottoms_through(data_format):
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 4, 5)).astype(F)
    b = rng.standard_normal((2, 6)).astype(F)
    text = 'layer { name: "f" type: "Identity" bottom: "a" bottom: "b" top: "p" top: "q" }\n'
    got = run_layers(text, {"a": a, "b": b}, data_format=data_format)
    np.testing.assert_array_equal(got["p"], a)
    np.testing.assert_array_equal(got["q"], b)


@pytest.mark.layer_type("Identity")
def test_identity_needs_a_top_per_bottom():
    text = 'layer { name: "f" type: "Identity" bottom: "data" top: "p" top: "q" }\n'
    with pytest.raises(LayerError, match=r"layer 'f': \(Identity\) needs one top per bottom, got "
                                         r"1 bottom\(s\) and 2 top\(s\)"):
        run_layers(text, {"data": np.zeros((1, 2), F)})


@pytest.mark.layer_type("SoftMax")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, axis", [("", 1), ("softmax_param { axis: 2 }", 2)])
def test_softmax_alias_is_softmax(data_format, params, axis):
    x = np.random.default_rng(6).standard_normal((2, 3, 4, 5)).astype(F)
    text = layer_text("SoftMax", params)
    got = run_layers(text, {"data": x}, data_format=data_format)["y"]
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(axis=axis, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("ChannelsPReLU")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shared", [False, True])
def test_channels_prelu_is_prelu(data_format, shared):
    """ChannelsPReLUFunctor: ``x >= 0 ? x : slope[c] * x`` (one slope: ReLU's slope)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 4, 5)).astype(F)
    slope = rng.standard_normal(() if shared else (3,)).astype(F)
    params = "prelu_param { channel_shared: true }" if shared else ""
    text = layer_text("ChannelsPReLU", params).replace('name: "f"', 'name: "p"')
    got = run_layers(text, {"data": x}, {"p": [slope]}, data_format=data_format)["y"]
    s = slope if shared else slope[None, :, None, None]
    np.testing.assert_allclose(got, np.where(x >= 0, x, s * x), rtol=1e-6, atol=1e-6)
    row = analyze('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 '
                  'dim: 3 dim: 4 dim: 5 } } }\n' + text).layers[-1]
    assert row.weight_shapes == (((),) if shared else ((3,),))

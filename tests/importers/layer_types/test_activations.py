"""Activations and elementwise layers against numpy ports of Caffe's Forward_cpu.

Each reference follows the Caffe layer's loop (and its float32 constants);
special values (0, -0, inf, NaN, ties) check the branches Caffe takes.
Helper layer types (registered only while a test runs) give blobs the other
layouts: Caffe order on channels-last data, and flattened channels-last.
"""

import ctypes
import ctypes.util
import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError, WeightsError
from keras_caffe.importers import import_model, load_into, register_layer_type, unregister_layer_type
from keras_caffe.importers.net.graph import Blob
from keras_caffe.layers import elementwise
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients as backend_gradients, weighted_sum

RNG = np.random.RandomState(0)

#: Values where Caffe's branches matter.
SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 1e-8, -1e-8, 30.0, -30.0, 100.0, -100.0, 0.5, -0.5],
                   np.float32)


def layer_text(layer_type, name="y", bottoms=("data",), top=None, params=""):
    bottoms = "".join(f'bottom: "{b}" ' for b in bottoms)
    return (f'layer {{ name: "{name}" type: "{layer_type}" {bottoms}top: "{top or name}" '
            f'{params} }}\n')


def images(shape=(2, 3, 5, 4), special=True):
    """Random data with the special values mixed in."""
    x = RNG.randn(*shape).astype(np.float32) * 3
    if special:
        flat = x.reshape(-1)
        flat[:SPECIAL.size] = SPECIAL
    return x


def run_one(layer_type, x, data_format, params="", weights=None, name="y", **kwargs):
    text = layer_text(layer_type, name=name, params=params)
    return run_layers(text, {"data": x}, weights, data_format, **kwargs)[name]


def permutes(model):
    return [layer.name for layer in model.layers if isinstance(layer, keras.layers.Permute)]


@pytest.fixture
def layouts():
    """Helper layer types: ToCaffe (Caffe order), FlatNHWC (flattened channels-last), Out."""

    @register_layer_type("ToCaffe")
    def to_caffe(layer, bottoms, ctx):
        return [ctx.caffe_order(bottoms[0], layer)]

    @register_layer_type("FlatNHWC")
    def flat_nhwc(layer, bottoms, ctx):
        blob = bottoms[0]
        tensor = keras.layers.Flatten(name=ctx.keras_name(layer.name))(blob.tensor)
        if blob.layout == "nhwc":
            return [Blob(tensor, "flat", tuple(ctx.caffe_shape(blob)[1:]))]
        return [Blob(tensor)]

    @register_layer_type("Out")
    def out(layer, bottoms, ctx):
        # Model outputs in the model's image layout, whatever the blob's.
        blob = bottoms[0]
        if len(blob.tensor.shape) >= 3 and blob.layout != "flat":
            return [ctx.image_output(ctx.as_image(blob, layer))]
        return [ctx.caffe_order(blob, layer)]

    yield
    for layer_type in ("ToCaffe", "FlatNHWC", "Out"):
        unregister_layer_type(layer_type)


def through(layer_type, source, target, name=None):
    return layer_text(layer_type, name=name or target, bottoms=(source,), top=target)


# -- ReLU and Dropout ------------------------------------------------------------------


@pytest.mark.layer_type("ReLU")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("slope", [0.0, 0.1, 2.0, -0.5])
def test_relu(slope, data_format):
    x = images()
    params = f"relu_param {{ negative_slope: {slope} }}"
    y = run_one("ReLU", x, data_format, params)
    expected = np.maximum(x, 0) + np.float32(slope) * np.minimum(x, 0)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("slope", [0.0, 0.1, -0.5, 3.0])
def test_caffe_relu_layer_takes_any_slope(slope):
    """keras_caffe.layers.elementwise.ReLU, for a layer type that needs negative slopes."""
    x = images()
    layer = elementwise.ReLU(negative_slope=slope)
    (dx,), _ = backend_gradients(lambda t: ops.sum(layer(t)), [x])
    y = ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(y, np.maximum(x, 0) + np.float32(slope) * np.minimum(x, 0),
                               rtol=1e-6)
    np.testing.assert_array_equal(dx, (x > 0) + np.float32(slope) * (x <= 0))


@pytest.mark.layer_type("ReLU")
def test_relu_on_vectors_and_in_place():
    x = RNG.randn(4, 7).astype(np.float32)
    text = layer_text("ReLU", name="relu", top="data")
    y = run_layers(text, {"data": x}, outputs=["data"])["data"]
    np.testing.assert_array_equal(y, np.maximum(x, 0))


@pytest.mark.layer_type("Dropout")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_dropout_test_phase_is_identity(data_format):
    x = images()
    y = run_one("Dropout", x, data_format, "dropout_param { dropout_ratio: 0.7 }")
    np.testing.assert_array_equal(y, x)
    # Caffe's TEST phase never drops, even when Keras trains the model.
    y = run_one("Dropout", x, data_format, "dropout_param { dropout_ratio: 0.7 }", training=True)
    np.testing.assert_array_equal(y, x)


@pytest.mark.layer_type("Dropout")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("ratio", [0.3, 0.5])
def test_dropout_train_scales_kept_units(ratio, data_format):
    keras.utils.set_random_seed(1)
    x = np.ones((4, 3, 32, 32), np.float32)
    y = run_one("Dropout", x, data_format, f"dropout_param {{ dropout_ratio: {ratio} }}",
                phase="TRAIN", training=True)
    kept = y != 0
    np.testing.assert_allclose(y[kept], 1 / (1 - np.float32(ratio)), rtol=1e-6)
    assert abs((~kept).mean() - ratio) < 0.03
    # Inference with the TRAIN net passes the data through.
    y = run_one("Dropout", x, data_format, f"dropout_param {{ dropout_ratio: {ratio} }}",
                phase="TRAIN", training=False)
    np.testing.assert_array_equal(y, x)


@pytest.mark.layer_type("Dropout")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_dropout_scale_train_false_is_py_faster_rcnns(data_format):
    """caffe-fast-rcnn's dropout_layer.cpp with scale_train false: TRAIN keeps
    units unscaled (x * mask); TEST (and a TRAIN net not dropping) gives
    x * (1 - p)."""
    keras.utils.set_random_seed(2)
    x = np.full((4, 3, 16, 16), 2.0, np.float32)
    param = "dropout_param { dropout_ratio: 0.25 scale_train: false }"
    np.testing.assert_allclose(run_one("Dropout", x, data_format, param), x * 0.75, rtol=1e-6)
    np.testing.assert_allclose(run_one("Dropout", x, data_format, param, training=True), x * 0.75,
                               rtol=1e-6)
    y = run_one("Dropout", x, data_format, param, phase="TRAIN", training=True)
    kept = y != 0
    np.testing.assert_allclose(y[kept], 2.0, rtol=1e-6)
    assert abs((~kept).mean() - 0.25) < 0.03
    np.testing.assert_allclose(run_one("Dropout", x, data_format, param, phase="TRAIN"),
                               x * 0.75, rtol=1e-6)


@pytest.mark.layer_type("Dropout")
def test_dropout_ratio_zero_keeps_everything():
    x = images()
    y = run_one("Dropout", x, "channels_last", "dropout_param { dropout_ratio: 0 }",
                phase="TRAIN", training=True)
    np.testing.assert_array_equal(y, x)


@pytest.mark.layer_type("Dropout")
@pytest.mark.parametrize("ratio", [1.0, -0.1, 1.5])
def test_dropout_bad_ratio(ratio):
    with pytest.raises(LayerError, match="layer 'y'.*dropout_ratio must be in \\[0, 1\\)"):
        run_one("Dropout", images(), "channels_last", f"dropout_param {{ dropout_ratio: {ratio} }}")


# -- PReLU --------------------------------------------------------------------------


def prelu_reference(x, slope):
    """PReLULayer::Forward_cpu: max(x, 0) + slope[c] * min(x, 0), c = axis 1."""
    s = np.asarray(slope, np.float32)
    if s.ndim:
        s = s.reshape((1, -1) + (1,) * (x.ndim - 2))
    return np.maximum(x, 0) + s * np.minimum(x, 0)


PRELU_SHAPES = {"4d": (2, 3, 5, 4), "3d": (2, 4, 6), "2d": (3, 5), "5d": (2, 3, 2, 3, 2)}


@pytest.mark.layer_type("PReLU")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("shape", list(PRELU_SHAPES))
def test_prelu(shape, shared, data_format):
    x = images(PRELU_SHAPES[shape])
    c = x.shape[1]
    slope = (np.float32(-0.3) if shared else RNG.randn(c).astype(np.float32)).reshape(
        () if shared else (c,))
    params = f"prelu_param {{ channel_shared: {str(shared).lower()} }}"
    y = run_one("PReLU", x, data_format, params, {"y": [slope]})
    np.testing.assert_allclose(y, prelu_reference(x, slope), rtol=1e-6, atol=0)


@pytest.mark.layer_type("PReLU")
def test_prelu_channels_last_needs_no_transpose_and_keeps_blobs():
    text = ('layer { name: "input" type: "Input" top: "data" input_param { shape { dim: 1 '
            'dim: 3 dim: 4 dim: 4 } } }\n' + layer_text("PReLU", name="prelu/1"))
    model = import_model(text)
    assert permutes(model) == []
    slope = np.array([0.1, -0.2, 0.3], np.float32)
    load_into(model, {"prelu/1": [slope]})
    layer = model.get_layer("prelu_1")
    assert layer.caffe_type == "PReLU" and layer.caffe_name == "prelu/1"
    np.testing.assert_array_equal(layer.caffe_blobs()[0], slope)
    # Legacy 4-D (1, 1, 1, C) blobs load too.
    load_into(model, {"prelu/1": [slope.reshape(1, 1, 1, 3) * 2]})
    np.testing.assert_array_equal(layer.caffe_blobs()[0], slope * 2)


@pytest.mark.layer_type("PReLU")
def test_prelu_shared_blob_is_a_scalar():
    text = ('layer { name: "input" type: "Input" top: "data" input_param { shape { dim: 1 '
            'dim: 3 dim: 4 dim: 4 } } }\n'
            + layer_text("PReLU", name="p", params="prelu_param { channel_shared: true }"))
    model = import_model(text)
    layer = model.get_layer("p")
    assert layer.caffe_blob_shapes() == [()]
    load_into(model, {"p": [np.array([0.5], np.float32)]})  # (1,) as older files hold it
    assert layer.caffe_blobs()[0].shape == () and layer.caffe_blobs()[0] == 0.5


@pytest.mark.layer_type("PReLU")
@pytest.mark.parametrize("filler,expected", [("", 0.25),
                                             ("filler { type: 'constant' value: 0.7 }", 0.7)])
def test_prelu_initial_slope(filler, expected):
    x = images()
    y = run_one("PReLU", x, "channels_last", f"prelu_param {{ {filler} }}")
    np.testing.assert_allclose(y, prelu_reference(x, np.full(3, expected, np.float32)), rtol=1e-6)


@pytest.mark.layer_type("PReLU")
@pytest.mark.parametrize("shared", [False, True])
def test_prelu_on_flattened_and_caffe_order_blobs(layouts, shared):
    x = images((2, 3, 2, 2))
    c = 12
    slope = RNG.randn(1 if shared else c).astype(np.float32).reshape(() if shared else (c,))
    params = f"prelu_param {{ channel_shared: {str(shared).lower()} }}"
    text = (through("FlatNHWC", "data", "flat")
            + layer_text("PReLU", name="p", bottoms=("flat",), params=params)
            + through("Out", "p", "out"))
    y = run_layers(text, {"data": x}, {"p": [slope]})["out"]
    np.testing.assert_allclose(y, prelu_reference(x.reshape(2, -1), slope), rtol=1e-6)
    text = (through("ToCaffe", "data", "nchw")
            + layer_text("PReLU", name="p", bottoms=("nchw",))
            + through("Out", "p", "out"))
    slope = RNG.randn(3).astype(np.float32)
    y = run_layers(text, {"data": x}, {"p": [slope]})["out"]
    np.testing.assert_allclose(y, prelu_reference(x, slope), rtol=1e-6)


@pytest.mark.layer_type("PReLU")
def test_prelu_bad_bottom_and_blob():
    with pytest.raises(LayerError,
                       match="layer 'y'.*\\(PReLU\\) needs a bottom with at least 2 axes"):
        run_one("PReLU", np.zeros(4, np.float32), "channels_last")
    with pytest.raises(WeightsError, match="blob 0 has shape \\(4,\\).*needs \\(3,\\)"):
        run_one("PReLU", images(), "channels_last", weights={"y": [np.zeros(4, np.float32)]})
    with pytest.raises(WeightsError, match="needs \\(\\)"):
        run_one("PReLU", images(), "channels_last", "prelu_param { channel_shared: true }",
                weights={"y": [np.zeros(3, np.float32)]})


# -- ELU, Sigmoid, TanH, AbsVal, BNLL ----------------------------------------------------


@pytest.mark.layer_type("ELU")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("alpha", [1.0, 0.5, 2.5, 0.0])
def test_elu(alpha, data_format):
    x = images()
    y = run_one("ELU", x, data_format, f"elu_param {{ alpha: {alpha} }}")
    a = np.float32(alpha)
    expected = np.maximum(x, 0) + a * (np.exp(np.minimum(x, 0)) - np.float32(1))
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6)
    # Caffe writes exp(x) - 1, not expm1: tiny negatives give exactly 0.
    assert y.reshape(-1)[5] == 0


def sigmoid_reference(x):
    """Caffe's sigmoid(): 0.5 * tanh(0.5 * x) + 0.5 (in double)."""
    return (0.5 * np.tanh(0.5 * x.astype(np.float64)) + 0.5).astype(np.float32)


def bnll_reference(x):
    """BNLLLayer::Forward_cpu, in double."""
    x = x.astype(np.float64)
    with np.errstate(over="ignore"):
        return np.where(x > 0, x + np.log(1 + np.exp(-x)), np.log(1 + np.exp(x))).astype(np.float32)


NEURONS = {
    "Sigmoid": sigmoid_reference,
    "TanH": lambda x: np.tanh(x.astype(np.float64)).astype(np.float32),
    "AbsVal": np.abs,
    "BNLL": bnll_reference,
}


@pytest.mark.layer_type("Sigmoid")
@pytest.mark.layer_type("TanH")
@pytest.mark.layer_type("AbsVal")
@pytest.mark.layer_type("BNLL")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("layer_type", list(NEURONS))
def test_parameterless_neurons(layer_type, data_format):
    for shape in [(2, 3, 5, 4), (3, 7)]:
        x = images(shape)
        y = run_one(layer_type, x, data_format)
        np.testing.assert_allclose(y, NEURONS[layer_type](x), rtol=2e-6, atol=1e-7)
    # Extremes: no overflow, NaN stays NaN.
    x = np.array([[-1e4, -88.0, -20.0, 20.0, 88.0, 1e4, np.inf, -np.inf, np.nan]], np.float32)
    y = run_one(layer_type, x, data_format)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(y, NEURONS[layer_type](x), rtol=2e-6, atol=1e-7)


@pytest.mark.layer_type("AbsVal")
def test_absval_refuses_in_place():
    text = layer_text("AbsVal", name="abs", top="data")
    with pytest.raises(LayerError, match="layer 'abs'.*does not allow in-place computation"):
        run_layers(text, {"data": images()})


@pytest.mark.layer_type("Sigmoid")
def test_neurons_take_one_bottom():
    text = layer_text("Sigmoid", bottoms=("a", "b"))
    with pytest.raises(LayerError, match="layer 'y'.*takes 1 bottom\\(s\\), got 2"):
        run_layers(text, {"a": images(), "b": images()})


# -- Power, Exp, Log --------------------------------------------------------------------


_LIBM = ctypes.CDLL(ctypes.util.find_library("m"))
_LIBM.powf.restype = ctypes.c_float
_LIBM.powf.argtypes = [ctypes.c_float, ctypes.c_float]


def powf(x, power):
    """C's powf, which Caffe's caffe_powx calls (numpy differs: (-inf) ** 0.5 is NaN there)."""
    return np.vectorize(lambda v: _LIBM.powf(v, power), otypes=[np.float32])(x)


def power_reference(x, power, scale, shift):
    """PowerLayer::Forward_cpu in float32, step by step."""
    power, scale, shift = np.float32(power), np.float32(scale), np.float32(shift)
    with np.errstate(all="ignore"):
        if power * scale == 0:
            return np.full_like(x, 1 if power == 0 else powf(shift, power))
        y = x.copy()
        if scale != 1:
            y = y * scale
        if shift != 0:
            y = y + shift
        if power != 1:
            y = powf(y, power)
    return y


POWER_CASES = {
    "identity": (1, 1, 0),
    "square": (2, 1, 0),
    "affine_cube": (3, -0.5, 2),
    "sqrt_of_shifted": (0.5, 1, 1),         # NaN below -1, as in Caffe
    "reciprocal": (-1, 1, 0),               # 1 / -0 is -inf: shift 0 is not added
    "affine_only": (1, 2, -3),
    "power_zero": (0, 3, 1),                # ones, even for inf and NaN
    "scale_zero": (2, 0, -3),               # the constant shift ** power
    "scale_zero_nan": (0.5, 0, -4),         # (-4) ** 0.5 is NaN
    "fractional": (1.5, 0.3, 0.2),
}


@pytest.mark.layer_type("Power")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(POWER_CASES))
def test_power(case, data_format):
    power, scale, shift = POWER_CASES[case]
    x = images()
    x.reshape(-1)[-3:] = [np.inf, -np.inf, np.nan]
    params = f"power_param {{ power: {power} scale: {scale} shift: {shift} }}"
    y = run_one("Power", x, data_format, params)
    expected = power_reference(x, power, scale, shift)
    np.testing.assert_allclose(y, expected, rtol=1e-6, atol=0)
    numbers = ~np.isnan(expected)
    np.testing.assert_array_equal(np.signbit(y[numbers]), np.signbit(expected[numbers]))


def exp_reference(x, base, scale, shift):
    base = math.e if base == -1 else base
    with np.errstate(over="ignore"):
        return (float(base) ** (shift + scale * x.astype(np.float64))).astype(np.float32)


EXP_CASES = {"default": (-1, 1, 0), "e_affine": (-1, 0.5, -1), "base_2": (2, 1, 0),
             "base_10_affine": (10, -0.25, 1.5), "base_half": (0.5, 2, 0.5),
             "base_1": (1, 3, 2)}


@pytest.mark.layer_type("Exp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(EXP_CASES))
def test_exp(case, data_format):
    base, scale, shift = EXP_CASES[case]
    x = images()
    y = run_one("Exp", x, data_format, f"exp_param {{ base: {base} scale: {scale} shift: {shift} }}")
    # TensorFlow flushes float32 subnormals (below 1.2e-38) to zero; Caffe keeps them.
    np.testing.assert_allclose(y, exp_reference(x, base, scale, shift), rtol=2e-5, atol=1.2e-38)


@pytest.mark.layer_type("Exp")
@pytest.mark.parametrize("base", [0, -2, -0.5, "inf", "nan"])
def test_exp_bad_base(base):
    with pytest.raises(LayerError, match="layer 'y'.*(base must be strictly positive|is infinite)"):
        run_one("Exp", images(), "channels_last", f"exp_param {{ base: {base} }}")


def log_reference(x, base, scale, shift):
    base = math.e if base == -1 else base
    with np.errstate(all="ignore"):
        return (np.log(shift + scale * x.astype(np.float64)) / np.log(base)).astype(np.float32)


LOG_CASES = {"default": (-1, 1, 0), "e_affine": (-1, 2, 0.5), "base_2": (2, 1, 0),
             "base_10_affine": (10, 0.5, 3), "base_half": (0.5, -1, 1)}


@pytest.mark.layer_type("Log")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(LOG_CASES))
def test_log(case, data_format):
    base, scale, shift = LOG_CASES[case]
    x = images()
    y = run_one("Log", x, data_format, f"log_param {{ base: {base} scale: {scale} shift: {shift} }}")
    expected = log_reference(x, base, scale, shift)
    assert np.isnan(expected).any() and np.isinf(expected).any() or case != "default"
    np.testing.assert_allclose(y, expected, rtol=2e-6, atol=1e-6)


@pytest.mark.layer_type("Log")
@pytest.mark.parametrize("base,message", [(0, "strictly positive"), (-3, "strictly positive"),
                                          (1, "base 1 has no logarithm"), ("inf", "is infinite")])
def test_log_bad_base(base, message):
    with pytest.raises(LayerError, match=f"layer 'y'.*{message}"):
        run_one("Log", images(), "channels_last", f"log_param {{ base: {base} }}")


# -- Threshold, Clip ----------------------------------------------------------------------


@pytest.mark.layer_type("Threshold")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("threshold", [0.0, 0.5, -1.0])
def test_threshold(threshold, data_format):
    x = images()
    x.reshape(-1)[-2:] = [threshold, np.nan]
    y = run_one("Threshold", x, data_format, f"threshold_param {{ threshold: {threshold} }}")
    with np.errstate(invalid="ignore"):
        expected = (x > np.float32(threshold)).astype(np.float32)
    np.testing.assert_array_equal(y, expected)
    assert y.reshape(-1)[-2] == 0 and y.reshape(-1)[-1] == 0


def clip_reference(x, lo, hi):
    """std::max(min, std::min(x, max)): NaN gives min, min > max gives min."""
    lo, hi = np.float32(lo), np.float32(hi)
    with np.errstate(invalid="ignore"):
        inner = np.where(hi < x, hi, x)          # std::min(x, max)
        return np.where(lo < inner, inner, lo)   # std::max(min, inner)


@pytest.mark.layer_type("Clip")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("bounds", [(-1, 1), (0, 6), (-0.5, -0.5), (2, -2)])
def test_clip(bounds, data_format):
    x = images()
    x.reshape(-1)[-4:] = [np.nan, np.inf, -np.inf, bounds[0]]
    y = run_one("Clip", x, data_format, f"clip_param {{ min: {bounds[0]} max: {bounds[1]} }}")
    np.testing.assert_array_equal(y, clip_reference(x, *bounds))


@pytest.mark.layer_type("Clip")
def test_clip_without_param_is_caffes_zero_clip():
    y = run_one("Clip", images(), "channels_last")
    np.testing.assert_array_equal(y, 0)


@pytest.mark.layer_type("Clip")
@pytest.mark.parametrize("params,missing", [("clip_param { min: 0 }", "max"),
                                            ("clip_param { max: 1 }", "min"),
                                            ("clip_param { }", "min, max")])
def test_clip_needs_min_and_max(params, missing):
    with pytest.raises(LayerError, match=f"layer 'y'.*lacks the required field\\(s\\) {missing}"):
        run_one("Clip", images(), "channels_last", params)


# -- Bias -----------------------------------------------------------------------------


def bias_reference(x, b, axis):
    """BiasLayer::Forward_cpu: b covers x's axes axis .. axis + b.ndim - 1."""
    b = np.asarray(b, np.float32)
    if b.ndim == 0:
        return x + b
    return x + b.reshape((1,) * axis + b.shape + (1,) * (x.ndim - axis - b.ndim))


BIAS_CASES = {  # (axis, num_axes) on (N, C, H, W) = (2, 3, 5, 4)
    "channel": (1, 1),
    "channel_height": (1, 2),
    "to_the_end": (1, -1),
    "spatial": (2, 2),
    "spatial_to_the_end": (2, -1),
    "height": (2, 1),
    "last_negative_axis": (-1, 1),
    "width": (3, 1),
    "scalar": (1, 0),
    "scalar_ignores_axis": (3, 0),
}


@pytest.mark.layer_type("Bias")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(BIAS_CASES))
def test_bias_learned(layouts, case, data_format):
    axis, num_axes = BIAS_CASES[case]
    x = images()
    start = axis % 4
    shape = x.shape[start:] if num_axes == -1 else x.shape[start:start + num_axes]
    b = np.asarray(RNG.randn(*shape), np.float32)
    text = (layer_text("Bias", name="bias", params=f"bias_param {{ axis: {axis} num_axes: {num_axes} }}")
            + through("Out", "bias", "out"))
    y = run_layers(text, {"data": x}, {"bias": [b]}, data_format)["out"]
    np.testing.assert_allclose(y, bias_reference(x, b, start), rtol=1e-6)


@pytest.mark.layer_type("Bias")
@pytest.mark.parametrize("case,transposes", [("channel", 0), ("spatial", 0), ("width", 0),
                                             ("scalar", 0), ("channel_height", 1)])
def test_bias_channels_last_transposes_only_when_axes_reorder(case, transposes):
    axis, num_axes = BIAS_CASES[case]
    text = ('layer { name: "input" type: "Input" top: "data" input_param { shape { dim: 1 '
            'dim: 3 dim: 5 dim: 4 } } }\n'
            + layer_text("Bias", name="bias",
                         params=f"bias_param {{ axis: {axis} num_axes: {num_axes} }}")
            + layer_text("ReLU", name="relu", bottoms=("bias",)))  # Caffe order reaches the output
    model = import_model(text)
    assert len([p for p in permutes(model) if p.startswith("bias")]) == transposes
    layer = model.get_layer("bias")
    assert layer.caffe_type == "Bias"
    shape = (3, 5, 4)[axis - 1:axis - 1 + num_axes]
    assert layer.caffe_blob_shapes() == [tuple(shape)]
    b = np.asarray(RNG.randn(*shape), np.float32)
    load_into(model, {"bias": [b]})
    np.testing.assert_array_equal(layer.caffe_blobs()[0], b)


@pytest.mark.layer_type("Bias")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_bias_on_vectors_and_flattened_blobs(layouts, data_format):
    x = RNG.randn(3, 6).astype(np.float32)
    b = RNG.randn(6).astype(np.float32)
    y = run_layers(layer_text("Bias", name="bias"), {"data": x}, {"bias": [b]}, data_format)["bias"]
    np.testing.assert_allclose(y, x + b, rtol=1e-6)
    x = images((2, 3, 2, 2))
    b = RNG.randn(12).astype(np.float32)
    text = (through("FlatNHWC", "data", "flat")
            + layer_text("Bias", name="bias", bottoms=("flat",)) + through("Out", "bias", "out"))
    y = run_layers(text, {"data": x}, {"bias": [b]}, data_format)["out"]
    np.testing.assert_allclose(y, x.reshape(2, -1) + b, rtol=1e-6)


@pytest.mark.layer_type("Bias")
def test_bias_filler_gives_the_initial_value():
    x = images()
    y = run_one("Bias", x, "channels_last", "bias_param { filler { type: 'constant' value: 1.5 } }")
    np.testing.assert_allclose(y, x + np.float32(1.5), rtol=1e-6)
    y = run_one("Bias", x, "channels_last")
    np.testing.assert_array_equal(y, x)


TWO_BOTTOM_BIAS = {  # Caffe shape of the second bottom, for x (2, 3, 5, 4)
    "per_sample": (2,),
    "per_sample_channel": (2, 3),
    "per_sample_channel_height": (2, 3, 5),
    "full": (2, 3, 5, 4),
}


@pytest.mark.layer_type("Bias")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(TWO_BOTTOM_BIAS))
def test_bias_two_bottoms(layouts, case, data_format):
    x = images()
    b = RNG.randn(*TWO_BOTTOM_BIAS[case]).astype(np.float32)
    text = (layer_text("Bias", name="bias", bottoms=("data", "b"), params="bias_param { axis: 0 }")
            + through("Out", "bias", "out"))
    y = run_layers(text, {"data": x, "b": b}, data_format=data_format)["out"]
    np.testing.assert_allclose(y, bias_reference(x, b, 0), rtol=1e-6)


@pytest.mark.layer_type("Bias")
def test_bias_two_bottoms_in_other_layouts(layouts):
    x = images()
    b = RNG.randn(2, 3, 5, 4).astype(np.float32)
    # A Caffe-order bias on a channels-last blob, and a flattened pair.
    text = (through("ToCaffe", "b", "b_nchw")
            + layer_text("Bias", name="bias", bottoms=("data", "b_nchw"),
                         params="bias_param { axis: 0 }")
            + through("Out", "bias", "out")
            + through("FlatNHWC", "data", "xf") + through("FlatNHWC", "b", "bf")
            + layer_text("Bias", name="flat_bias", bottoms=("xf", "bf"), params="bias_param { axis: 0 }")
            + through("Out", "flat_bias", "flat_out"))
    out = run_layers(text, {"data": x, "b": b}, outputs=["out", "flat_out"])
    np.testing.assert_allclose(out["out"], x + b, rtol=1e-6)
    np.testing.assert_allclose(out["flat_out"], (x + b).reshape(2, -1), rtol=1e-6)


BAD_BIAS = {
    "axis_out_of_range": ("bias_param { axis: 4 }", None, "axis 4 is out of range for a 4-axis bottom"),
    "negative_axis_out_of_range": ("bias_param { axis: -5 }", None, "axis -5 is out of range"),
    "num_axes_below_minus_one": ("bias_param { num_axes: -2 }", None, "num_axes must be non-negative"),
    "past_the_end": ("bias_param { axis: 2 num_axes: 3 }", None, "extends past the bottom's shape"),
    "learned_batch_axis": ("bias_param { axis: 0 }", None, "over the batch axis"),
    "two_bottoms_axis_1": ("", (2, 3), "two-bottom Bias needs axis: 0"),
    "two_bottoms_mismatch": ("bias_param { axis: 0 }", (2, 4), "does not match the bottom's leading"),
    "two_bottoms_too_long": ("bias_param { axis: 0 }", (2, 3, 5, 4, 1), "does not match"),
}


@pytest.mark.layer_type("Bias")
@pytest.mark.parametrize("case", list(BAD_BIAS))
def test_bias_bad_parameters(case):
    params, b_shape, message = BAD_BIAS[case]
    inputs = {"data": images()}
    bottoms = ("data",)
    if b_shape:
        inputs["b"] = np.zeros(b_shape, np.float32)
        bottoms = ("data", "b")
    text = layer_text("Bias", name="bias", bottoms=bottoms, params=params)
    with pytest.raises(LayerError, match=f"layer 'bias'.*{message}"):
        run_layers(text, inputs)


# -- Eltwise ------------------------------------------------------------------------------


def eltwise_reference(xs, op, coeffs=()):
    """EltwiseLayer::Forward_cpu."""
    if op == "PROD":
        y = xs[0] * xs[1]
        for x in xs[2:]:
            y = y * x
        return y
    if op == "MAX":
        with np.errstate(invalid="ignore"):
            y = np.where(xs[0] > xs[1], xs[0], xs[1])
            for x in xs[2:]:
                y = np.where(x > y, x, y)
        return y
    y = np.zeros_like(xs[0])
    for x, c in zip(xs, coeffs or [1] * len(xs)):
        if c != 0:  # axpy returns at once for a zero coefficient
            y = y + np.float32(c) * x
    return y


ELTWISE_CASES = {
    "sum": ("SUM", 2, ()),
    "sum_3": ("SUM", 3, ()),
    "difference": ("SUM", 2, (1, -1)),
    "weighted_3": ("SUM", 3, (0.5, 2, -1.25)),
    "prod": ("PROD", 2, ()),
    "prod_3": ("PROD", 3, ()),
    "max": ("MAX", 2, ()),
    "max_4": ("MAX", 4, ()),
    "max_ignores_coeff": ("MAX", 2, (3, 4)),  # Caffe accepts and ignores them
}


@pytest.mark.layer_type("Eltwise")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(ELTWISE_CASES))
def test_eltwise(case, data_format):
    op, n, coeffs = ELTWISE_CASES[case]
    xs = [images() for _ in range(n)]
    xs[1].reshape(-1)[:4] = xs[0].reshape(-1)[:4]  # ties
    names = [f"x{i}" for i in range(n)]
    params = f"eltwise_param {{ operation: {op} {' '.join(f'coeff: {c}' for c in coeffs)} }}"
    text = layer_text("Eltwise", name="e", bottoms=names, params=params)
    y = run_layers(text, dict(zip(names, xs)), data_format=data_format)["e"]
    np.testing.assert_allclose(y, eltwise_reference(xs, op, coeffs), rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Eltwise")
def test_eltwise_special_values():
    a = np.array([[np.nan, 1.0, np.nan, 2.0, np.inf, -np.inf]], np.float32)
    b = np.array([[1.0, np.nan, np.nan, 2.0, 5.0, np.nan]], np.float32)
    c = np.array([[0.0, 0.0, 3.0, np.nan, 9.0, 1.0]], np.float32)
    text = (layer_text("Eltwise", name="m", bottoms=("a", "b", "c"),
                       params="eltwise_param { operation: MAX }")
            + layer_text("Eltwise", name="s", bottoms=("a", "c"),
                         params="eltwise_param { coeff: 0 coeff: 2 }"))
    out = run_layers(text, {"a": a, "b": b, "c": c})
    np.testing.assert_array_equal(out["m"], eltwise_reference([a, b, c], "MAX"))
    np.testing.assert_array_equal(out["m"], [[1.0, np.nan, np.nan, 2.0, np.inf, np.nan]])
    np.testing.assert_array_equal(out["s"], 2 * c)  # a's NaN and inf never reach the sum


@pytest.mark.layer_type("Eltwise")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_eltwise_mixed_layouts(layouts, data_format):
    x, z = images(), images()
    text = (through("ToCaffe", "z", "z_nchw") + through("ToCaffe", "x", "x_nchw")
            + layer_text("Eltwise", name="e", bottoms=("x", "z_nchw", "x_nchw"))
            + through("Out", "e", "out")
            + through("FlatNHWC", "x", "xf") + through("FlatNHWC", "z_nchw", "zf")
            + layer_text("Eltwise", name="f", bottoms=("xf", "zf"),
                         params="eltwise_param { operation: PROD }")
            + through("Out", "f", "flat_out"))
    out = run_layers(text, {"x": x, "z": z}, data_format=data_format, outputs=["out", "flat_out"])
    np.testing.assert_allclose(out["out"], 2 * x + z, rtol=1e-6)
    np.testing.assert_allclose(out["flat_out"], (x * z).reshape(2, -1), rtol=1e-6)


@pytest.mark.layer_type("Eltwise")
def test_eltwise_same_layout_needs_no_transpose():
    text = ('layer { name: "input" type: "Input" top: "a" top: "b" input_param { shape { dim: 1 '
            'dim: 3 dim: 4 dim: 4 } } }\n' + layer_text("Eltwise", name="e", bottoms=("a", "b")))
    assert permutes(import_model(text)) == []


BAD_ELTWISE = {
    "coeff_count": ("eltwise_param { coeff: 1 }", 2, "one coefficient per bottom: 1 coeff for 2"),
    "coeff_count_3": ("eltwise_param { coeff: 1 coeff: 2 }", 3, "2 coeff for 3 bottoms"),
    "prod_coeff": ("eltwise_param { operation: PROD coeff: 1 coeff: 2 }", 2,
                   "coefficients only for SUM"),
    "one_bottom": ("", 1, "takes 2 or more bottom\\(s\\), got 1"),
}


@pytest.mark.layer_type("Eltwise")
@pytest.mark.parametrize("case", list(BAD_ELTWISE))
def test_eltwise_bad_parameters(case):
    params, n, message = BAD_ELTWISE[case]
    names = [f"x{i}" for i in range(n)]
    text = layer_text("Eltwise", name="e", bottoms=names, params=params)
    with pytest.raises(LayerError, match=f"layer 'e'.*{message}"):
        run_layers(text, {name: images() for name in names})


@pytest.mark.layer_type("Eltwise")
def test_eltwise_shape_mismatch():
    text = layer_text("Eltwise", name="e", bottoms=("a", "b"))
    with pytest.raises(LayerError, match="layer 'e'.*one shape: bottom 0 is \\(2, 3, 5, 4\\), "
                                         "bottom 1 is \\(2, 3, 4, 5\\)"):
        run_layers(text, {"a": images(), "b": images((2, 3, 4, 5))})


# -- gradients and saving ------------------------------------------------------------------


def gradients(text, inputs, weights=None, data_format="channels_last"):
    """d(sum(top * g))/d(bottoms and weights), in Caffe layout; g is fixed noise."""
    header = "".join(
        f'layer {{ name: "in_{n}" type: "Input" top: "{n}" input_param {{ shape {{ '
        f'{" ".join(f"dim: {d}" for d in a.shape)} }} }} }}\n' for n, a in inputs.items())
    model = import_model(header + text, data_format=data_format)
    if weights:
        load_into(model, weights)
    feed = [to_keras_layout(a, data_format) for a in inputs.values()]

    def run(*tensors):
        return model(list(tensors) if len(tensors) > 1 else tensors[0])

    g = np.random.RandomState(5).randn(*run(*feed).shape).astype(np.float32)
    inputs_grads, weights_grads = backend_gradients(lambda *t: weighted_sum(run(*t), g),
                                                    feed, model.trainable_weights)
    weights_grads = [np.zeros(v.shape, np.float32) if d is None else d
                     for v, d in zip(model.trainable_weights, weights_grads)]
    g = from_keras_layout(g, data_format)
    return g, [from_keras_layout(d, data_format) for d in inputs_grads], weights_grads


@pytest.mark.layer_type("PReLU")
@pytest.mark.layer_type("ELU")
@pytest.mark.layer_type("Clip")
@pytest.mark.layer_type("BNLL")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_gradients_follow_caffe_backward(data_format):
    x = images()
    x.reshape(-1)[-3:] = [-1.0, 1.0, 0.0]  # Clip's bounds, and 0
    slope = np.array([0.1, -0.2, 0.3], np.float32)
    c = slope.reshape(1, 3, 1, 1)
    g, (dx,), (dslope,) = gradients(layer_text("PReLU", name="p"), {"data": x}, {"p": [slope]},
                                    data_format)
    np.testing.assert_allclose(dx, g * ((x > 0) + c * (x <= 0)), rtol=1e-6)
    np.testing.assert_allclose(dslope, (g * x * (x <= 0)).sum(axis=(0, 2, 3)), rtol=1e-5)
    g, (dx,), _ = gradients(layer_text("ELU", params="elu_param { alpha: 0.5 }"), {"data": x},
                            data_format=data_format)
    y = np.maximum(x, 0) + 0.5 * (np.exp(np.minimum(x, 0)) - 1)
    np.testing.assert_allclose(dx, g * ((x > 0) + (0.5 + y) * (x <= 0)), rtol=1e-5, atol=1e-7)
    g, (dx,), _ = gradients(layer_text("Clip", params="clip_param { min: -1 max: 1 }"),
                            {"data": x}, data_format=data_format)
    np.testing.assert_array_equal(dx, g * ((x >= -1) & (x <= 1)))
    g, (dx,), _ = gradients(layer_text("BNLL"), {"data": x}, data_format=data_format)
    e = np.exp(np.minimum(x.astype(np.float64), 50))
    np.testing.assert_allclose(dx, g * e / (e + 1), rtol=1e-5, atol=1e-7)


@pytest.mark.layer_type("Eltwise")
def test_eltwise_max_gradient_follows_caffes_mask():
    a = np.array([[1.0, 2.0, 3.0, 0.0]], np.float32)
    b = np.array([[1.0, 5.0, 3.0, -1.0]], np.float32)
    c = np.array([[1.0, 5.0, 0.0, 7.0]], np.float32)
    text = layer_text("Eltwise", name="e", bottoms=("a", "b", "c"),
                      params="eltwise_param { operation: MAX }")
    g, (da, db, dc), _ = gradients(text, {"a": a, "b": b, "c": c})
    # Ties: the first pair picks b, later bottoms must be strictly greater.
    np.testing.assert_array_equal(da, g * [[0, 0, 0, 0]])
    np.testing.assert_array_equal(db, g * [[1, 1, 1, 0]])
    np.testing.assert_array_equal(dc, g * [[0, 0, 0, 1]])


@pytest.mark.layer_type("PReLU")
@pytest.mark.layer_type("Bias")
@pytest.mark.layer_type("Eltwise")
@pytest.mark.layer_type("Power")
@pytest.mark.layer_type("Exp")
@pytest.mark.layer_type("Log")
@pytest.mark.layer_type("Clip")
@pytest.mark.layer_type("Threshold")
def test_saved_model_reloads(tmp_path):
    text = (
        'layer { name: "input" type: "Input" top: "data" top: "b" input_param { '
        'shape { dim: 2 dim: 3 dim: 4 dim: 4 } shape { dim: 2 dim: 3 } } }\n'
        + layer_text("PReLU", name="prelu")
        + layer_text("Bias", name="bias", bottoms=("prelu",), params="bias_param { num_axes: -1 }")
        + layer_text("Bias", name="bias2", bottoms=("bias", "b"), params="bias_param { axis: 0 }")
        + layer_text("ELU", name="elu", bottoms=("bias2",), params="elu_param { alpha: 0.3 }")
        + layer_text("Power", name="pow", bottoms=("elu",), params="power_param { power: 2 shift: 1 }")
        + layer_text("Exp", name="exp", bottoms=("pow",), params="exp_param { base: 2 scale: -0.1 }")
        + layer_text("Log", name="log", bottoms=("exp",), params="log_param { base: 10 shift: 1 }")
        + layer_text("Clip", name="clip", bottoms=("log",), params="clip_param { min: -1 max: 0.5 }")
        + layer_text("Threshold", name="th", bottoms=("data",),
                     params="threshold_param { threshold: 0.2 }")
        + layer_text("AbsVal", name="abs", bottoms=("data",))
        + layer_text("BNLL", name="bnll", bottoms=("data",))
        + layer_text("Eltwise", name="sum", bottoms=("clip", "th", "abs", "bnll"),
                     params="eltwise_param { coeff: 1 coeff: 2 coeff: -1 coeff: 0.5 }")
    )
    model = import_model(text)
    load_into(model, {"prelu": [RNG.randn(3).astype(np.float32)],
                      "bias": [RNG.randn(3, 4, 4).astype(np.float32)], "bias2": []})
    feed = [to_keras_layout(images((2, 3, 4, 4)), "channels_last"), RNG.randn(2, 3).astype(np.float32)]
    expected = keras.ops.convert_to_numpy(model(feed))
    model.save(tmp_path / "m.keras")
    reloaded = keras.models.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(reloaded(feed)), expected)
    assert reloaded.get_layer("prelu").caffe_name == "prelu"

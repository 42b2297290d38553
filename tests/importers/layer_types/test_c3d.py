"""C3D's (facebook/C3D) Convolution3D, Deconvolution3D and Pooling3D against
numpy ports of the fork's C++ (C3D-v1.1/src/caffe/layers/):

- convolution3d_layer.cpp ``Convolution3DLayer::LayerSetUp`` (output size,
  blob shapes) and ``Forward_cpu`` (util/vol2col.cpp ``vol2col_cpu``, then a
  GEMM per filter_group, then the bias);
- deconvolution3d_layer.cpp ``Deconvolution3DLayer::Forward_cpu`` (the
  transposed GEMM, then util/vol2col.cpp ``col2vol_cpu``, then the bias);
- pool3d_layer.cpp ``Pooling3DLayer::LayerSetUp`` (ceil output size) and
  ``Forward_cpu`` (MAX from -FLT_MAX; AVE over the window clipped to
  ``size + pad``, divided by that window's size);

C3D-v1.0's caffemodel blobs (its BlobProto numbering, C3D-v1.0/src/caffe/
proto/caffe.proto) and an end-to-end C3D net.
"""

import math
import struct

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from keras_caffe.importers.net.weights import load_weights
from keras_caffe.proto import caffe_pb2
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import backward

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32
FLT_MAX = float(np.finfo(np.float32).max)


# -- numpy ports of the fork ---------------------------------------------------


def c_div(a, b):
    """C++ int division (truncation toward zero)."""
    return int(a / b)


def _taps(size, kernel, stride, pad, out):
    """For each kernel tap (kl, kh, kw): the slices of a zero-padded volume
    (``pad`` before, enough after) holding input cell ``o * stride - pad +
    tap`` of every output cell ``o``: vol2col's index, 0 where it falls
    outside the input."""
    for kl in range(kernel[0]):
        for kh in range(kernel[1]):
            for kw in range(kernel[2]):
                yield (kl, kh, kw), tuple(slice(t, t + s * (o - 1) + 1, s)
                                          for t, s, o in zip((kl, kh, kw), stride, out))


def _padded(volume, size, kernel, stride, pad, out):
    far = [max(0, (o - 1) * s + k - n - p) for n, k, s, p, o in zip(size, kernel, stride, pad, out)]
    padded = np.zeros((volume.shape[0], *(n + p + f for n, p, f in zip(size, pad, far))))
    padded[(slice(None), *(slice(p, p + n) for p, n in zip(pad, size)))] = volume
    return padded


def vol2col(x, kernel, stride, pad):
    """vol2col_cpu on one (C, L, H, W) volume: rows (c, kl, kh, kw), columns
    the output cells (C++ int division for their count); a tap outside the
    input reads 0."""
    c, size = x.shape[0], x.shape[1:]
    out = [c_div(n + 2 * p - k, s) + 1 for n, k, s, p in zip(size, kernel, stride, pad)]
    padded = _padded(x, size, kernel, stride, pad, out)
    col = np.zeros((c, *kernel, *out))
    for tap, cells in _taps(size, kernel, stride, pad, out):
        col[(slice(None), *tap)] = padded[(slice(None), *cells)]
    return col.reshape(c * math.prod(kernel), -1), out


def c3d_conv_forward(x, w, b, kernel, stride, pad, filter_group=1):
    """Convolution3DLayer::Forward_cpu: per sample, vol2col, then one GEMM
    of num_output / filter_group filters at a time, then the bias (a
    (1, 1, 1, 1, num_output) blob)."""
    num_output = w.shape[0]
    m = num_output // filter_group
    tops = []
    for volume in x.astype(np.float64):
        col, out = vol2col(volume, kernel, stride, pad)
        flat = w.reshape(num_output, -1).astype(np.float64)
        top = np.concatenate([flat[g * m:(g + 1) * m] @ col for g in range(filter_group)])
        if b is not None:
            top += b.reshape(num_output, 1)
        tops.append(top.reshape(num_output, *out))
    return np.stack(tops)


def col2vol(col, channels, size, kernel, stride, pad):
    """col2vol_cpu: scatter-add the columns back onto a (C, L, H, W) volume
    (taps outside it dropped)."""
    cols = [c_div(n + 2 * p - k, s) + 1 for n, k, s, p in zip(size, kernel, stride, pad)]
    col = col.reshape(channels, *kernel, *cols)
    padded = _padded(np.zeros((channels, *size)), size, kernel, stride, pad, cols)
    for tap, cells in _taps(size, kernel, stride, pad, cols):
        padded[(slice(None), *cells)] += col[(slice(None), *tap)]
    return padded[(slice(None), *(slice(p, p + n) for p, n in zip(pad, size)))]


def c3d_deconv_forward(x, w, b, kernel, stride, pad):
    """Deconvolution3DLayer::Forward_cpu: col = W^T x (W as (C, num_output
    k_l k_h k_w)), col2vol onto the (in - 1) stride - 2 pad + k output,
    then the bias."""
    channels, num_output = w.shape[:2]
    size = [(n - 1) * s - 2 * p + k for n, k, s, p in zip(x.shape[2:], kernel, stride, pad)]
    tops = []
    for volume in x.astype(np.float64):
        col = w.reshape(channels, -1).astype(np.float64).T @ volume.reshape(channels, -1)
        top = col2vol(col, num_output, size, kernel, stride, pad)
        if b is not None:
            top += b.reshape(num_output, 1, 1, 1)
        tops.append(top)
    return np.stack(tops)


def c3d_pool_forward(x, pool, kernel_size, kernel_depth, stride, temporal_stride, pad=0):
    """Pooling3DLayer::LayerSetUp's sizes and Forward_cpu's loops."""
    n, c, length, height, width = x.shape
    ph = int(math.ceil(float(height + 2 * pad - kernel_size) / stride)) + 1
    pw = int(math.ceil(float(width + 2 * pad - kernel_size) / stride)) + 1
    pl = int(math.ceil(float(length - kernel_depth) / temporal_stride)) + 1
    top = np.zeros((n, c, pl, ph, pw), np.float64)
    x = x.astype(np.float64)
    for l in range(pl):
        for h in range(ph):
            for w in range(pw):
                if pool == "MAX":
                    hs, ws, ls = h * stride, w * stride, l * temporal_stride
                    he, we = min(hs + kernel_size, height), min(ws + kernel_size, width)
                    le = min(ls + kernel_depth, length)
                    value = np.full((n, c), -FLT_MAX)
                    if hs < he and ws < we and ls < le:
                        window = x[:, :, ls:le, hs:he, ws:we].reshape(n, c, -1)
                        value = np.maximum(value, window.max(axis=2))
                    top[:, :, l, h, w] = value
                else:
                    hs, ws, ls = h * stride - pad, w * stride - pad, l * temporal_stride
                    he, we = min(hs + kernel_size, height + pad), min(ws + kernel_size, width + pad)
                    le = min(ls + kernel_depth, length)
                    pool_size = (he - hs) * (we - ws) * (le - ls)
                    hs, ws = max(hs, 0), max(ws, 0)
                    he, we, le = min(he, height), min(we, width), min(le, length)
                    total = np.zeros((n, c))
                    if hs < he and ws < we and ls < le:
                        total = x[:, :, ls:le, hs:he, ws:we].reshape(n, c, -1).sum(axis=2)
                    with np.errstate(divide="ignore", invalid="ignore"):
                        top[:, :, l, h, w] = total / pool_size
    return top


# -- helpers -------------------------------------------------------------------


def conv_text(params, layer_type="Convolution3D", name="conv", extra=""):
    return (f'layer {{ name: "{name}" type: "{layer_type}" bottom: "data" top: "{name}" '
            f"convolution3d_param {{ {params} }} {extra}}}\n")


def pool_text(params, name="pool"):
    return (f'layer {{ name: "{name}" type: "Pooling3D" bottom: "data" top: "{name}" '
            f"pooling3d_param {{ {params} }} }}\n")


def input_text(shape):
    dims = " ".join(f"dim: {d}" for d in shape)
    return f'layer {{ name: "in" type: "Input" top: "data" input_param {{ shape {{ {dims} }} }} }}\n'


def error_of(text, shape):
    with pytest.raises(LayerError) as err:
        import_model(input_text(shape) + text)
    return str(err.value)


# -- Convolution3D -----------------------------------------------------------------


CONV_CASES = [
    # C3D's conv1a .. conv5b: 3x3x3, pad 1 everywhere.
    ("num_output: 4 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1", (2, 3, 4, 5, 6),
     (3, 3, 3), (1, 1, 1), (1, 1, 1), True, 1),
    ("num_output: 6 kernel_size: 2 kernel_depth: 3 stride: 2 temporal_stride: 1 pad: 1 "
     "filter_group: 3 bias_term: false", (1, 2, 5, 6, 5), (3, 2, 2), (1, 2, 2), (0, 1, 1), False,
     3),
    # group is never read by the fork: the filters see all channels.
    ("num_output: 4 kernel_size: 1 kernel_depth: 2 temporal_stride: 2 group: 2",
     (2, 4, 5, 3, 3), (2, 1, 1), (2, 1, 1), (0, 0, 0), True, 1),
    # (2 + 0 - 3) / 2 truncates to 0: one window, its last tap past the input.
    ("num_output: 3 kernel_size: 3 kernel_depth: 2 stride: 2 temporal_stride: 3",
     (1, 2, 3, 2, 4), (2, 3, 3), (3, 2, 2), (0, 0, 0), True, 1),
]


@pytest.mark.layer_type("Convolution3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, shape, kernel, stride, pad, bias, filter_group", CONV_CASES)
def test_convolution3d_matches_the_fork(data_format, params, shape, kernel, stride, pad, bias,
                                        filter_group):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(F)
    num_output = int(params.split()[1])
    w = rng.standard_normal((num_output, shape[1], *kernel)).astype(F)
    b = rng.standard_normal((1, 1, 1, 1, num_output)).astype(F)
    got = run_layers(conv_text(params), {"data": x}, {"conv": [w, b] if bias else [w]},
                     data_format)["conv"]
    want = c3d_conv_forward(x, w, b if bias else None, kernel, stride, pad, filter_group)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Convolution3D")
def test_convolution3d_blobs_and_analyze():
    text = input_text((2, 3, 16, 12, 12)) + conv_text(
        "num_output: 8 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1")
    model = import_model(text)
    assert model.get_layer("conv").caffe_blob_shapes() == [(8, 3, 3, 3, 3), (1, 1, 1, 1, 8)]
    row = analyze(text, batch=None).layers[-1]
    assert row.weight_shapes == ((8, 3, 3, 3, 3), (1, 1, 1, 1, 8))
    assert row.tops == (("conv", (2, 8, 16, 12, 12)),)
    assert row.forward_flops == 2 * (2 * 8 * 16 * 12 * 12) * 3 * 27


@pytest.mark.layer_type("Convolution3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_convolution3d_gradients(data_format):
    """The input and weight gradients of sum(top * cotangent) against finite
    differences of the fork's forward (linear: exact up to rounding)."""
    rng = np.random.default_rng(3)
    kernel, stride, pad = (3, 2, 2), (1, 2, 2), (1, 0, 0)
    x = rng.standard_normal((1, 2, 4, 5, 5)).astype(F)
    w = rng.standard_normal((3, 2, *kernel)).astype(F)
    b = rng.standard_normal((1, 1, 1, 1, 3)).astype(F)
    text = input_text(x.shape) + conv_text(
        "num_output: 3 kernel_size: 2 kernel_depth: 3 stride: 2 temporal_pad: 1")
    model = import_model(text, data_format=data_format)
    layer = model.get_layer("conv")
    layer.set_caffe_blobs([w, b])
    top = c3d_conv_forward(x, w, b, kernel, stride, pad)
    cotangent = rng.standard_normal(top.shape).astype(F)
    grad_x, (grad_kernel,) = backward(model, x, cotangent, data_format, [layer.kernel])
    grad_w = layer.caffe_from_keras_weights([grad_kernel])[0]
    eps = 1e-2
    for probe_x, probe_w, grad in ((rng.standard_normal(x.shape), 0, grad_x),
                                   (0, rng.standard_normal(w.shape), grad_w)):
        plus = c3d_conv_forward(x + eps * probe_x, w + eps * probe_w, b, kernel, stride, pad)
        minus = c3d_conv_forward(x - eps * probe_x, w - eps * probe_w, b, kernel, stride, pad)
        numeric = np.sum((plus - minus) * cotangent) / (2 * eps)
        probe = probe_x if grad is grad_x else probe_w
        assert np.sum(grad * probe) == pytest.approx(numeric, rel=1e-4, abs=1e-3)


@pytest.mark.layer_type("Convolution3D")
@pytest.mark.parametrize("text, shape, message", [
    (conv_text("num_output: 4 kernel_size: 3 kernel_depth: 3"), (1, 3, 6, 6),
     "layer 'conv': (Convolution3D) needs a 5-D input (N, C, L, H, W), got (1, 3, 6, 6)"),
    (conv_text("num_output: 4 kernel_size: 3"), (1, 3, 4, 6, 6),
     "layer 'conv': (Convolution3D) kernel_size and kernel_depth must be positive, got "
     "kernel_size 3, kernel_depth 0"),
    (conv_text("num_output: 4 kernel_size: 3 kernel_depth: 1 temporal_stride: 0"),
     (1, 3, 4, 6, 6),
     "layer 'conv': (Convolution3D) stride and temporal_stride must be positive, got stride 1, "
     "temporal_stride 0"),
    (conv_text("kernel_size: 3 kernel_depth: 1"), (1, 3, 4, 6, 6),
     "layer 'conv': (Convolution3D) num_output must be positive"),
    (conv_text("num_output: 4 kernel_size: 1 kernel_depth: 1 filter_group: 3"), (1, 3, 4, 6, 6),
     "layer 'conv': (Convolution3D) filter_group 3 must divide num_output 4"),
    (conv_text("num_output: 4 kernel_size: 5 kernel_depth: 1"), (1, 3, 4, 2, 2),
     "layer 'conv': (Convolution3D) top 'conv' would have shape (1, 4, 4, -2, -2) "
     "(input shape(s) (1, 3, 4, 2, 2))"),
])
def test_convolution3d_bad_parameters(text, shape, message):
    assert error_of(text, shape) == message


@pytest.mark.layer_type("Convolution3D")
def test_convolution3d_takes_one_bottom_and_one_top():
    two = ('layer { name: "conv" type: "Convolution3D" bottom: "data" bottom: "data" '
           'top: "a" top: "b" convolution3d_param { num_output: 2 kernel_size: 1 '
           'kernel_depth: 1 } }\n')
    assert error_of(two, (1, 2, 2, 2, 2)) == "layer 'conv': (Convolution3D) takes 1 bottom(s), got 2"


# -- Deconvolution3D ---------------------------------------------------------------


DECONV_CASES = [
    ("num_output: 3 kernel_size: 4 kernel_depth: 2 stride: 2 temporal_stride: 2 pad: 1",
     "", (2, 2, 3, 4, 3), (2, 4, 4), (2, 2, 2), (0, 1, 1), True),
    ("num_output: 2 kernel_size: 3 kernel_depth: 3 temporal_pad: 1 stride: 3",
     "convolution_param { bias_term: false }", (1, 3, 3, 2, 2), (3, 3, 3), (1, 3, 3),
     (1, 0, 0), False),
    # The fork reads bias_term from convolution_param: this one keeps its bias.
    ("num_output: 2 kernel_size: 2 kernel_depth: 1 bias_term: false", "", (1, 2, 2, 3, 3),
     (1, 2, 2), (1, 1, 1), (0, 0, 0), True),
]


@pytest.mark.layer_type("Deconvolution3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, extra, shape, kernel, stride, pad, bias", DECONV_CASES)
def test_deconvolution3d_matches_the_fork(data_format, params, extra, shape, kernel, stride, pad,
                                          bias):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(F)
    num_output = int(params.split()[1])
    w = rng.standard_normal((shape[1], num_output, *kernel)).astype(F)
    b = rng.standard_normal((1, 1, 1, 1, num_output)).astype(F)
    got = run_layers(conv_text(params, "Deconvolution3D", "deconv", extra), {"data": x},
                     {"deconv": [w, b] if bias else [w]}, data_format)["deconv"]
    want = c3d_deconv_forward(x, w, b if bias else None, kernel, stride, pad)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Deconvolution3D")
def test_deconvolution3d_blobs_analyze_and_errors():
    text = input_text((1, 4, 2, 3, 3)) + conv_text(
        "num_output: 2 kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2",
        "Deconvolution3D", "deconv")
    assert import_model(text).get_layer("deconv").caffe_blob_shapes() == [
        (4, 2, 2, 2, 2), (1, 1, 1, 1, 2)]
    row = analyze(text).layers[-1]
    assert row.tops == (("deconv", (1, 2, 4, 6, 6)),)
    assert row.weight_shapes == ((4, 2, 2, 2, 2), (1, 1, 1, 1, 2))
    assert row.forward_flops == 2 * (4 * 2 * 3 * 3) * 2 * 8
    bad = conv_text("num_output: 2 kernel_size: 1 kernel_depth: 1 pad: 1", "Deconvolution3D",
                    "deconv")
    assert error_of(bad, (1, 2, 2, 1, 1)) == (
        "layer 'deconv': (Deconvolution3D) pad (temporal_pad 0, pad 1) leaves no output for "
        "input (2, 1, 1)")


@pytest.mark.layer_type("Deconvolution3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_deconvolution3d_gradients(data_format):
    rng = np.random.default_rng(4)
    kernel, stride, pad = (2, 3, 3), (2, 2, 2), (0, 1, 1)
    x = rng.standard_normal((1, 2, 2, 3, 2)).astype(F)
    w = rng.standard_normal((2, 3, *kernel)).astype(F)
    b = rng.standard_normal((1, 1, 1, 1, 3)).astype(F)
    text = input_text(x.shape) + conv_text(
        "num_output: 3 kernel_size: 3 kernel_depth: 2 stride: 2 temporal_stride: 2 pad: 1",
        "Deconvolution3D", "deconv")
    model = import_model(text, data_format=data_format)
    model.get_layer("deconv").set_caffe_blobs([w, b])
    top = c3d_deconv_forward(x, w, b, kernel, stride, pad)
    cotangent = rng.standard_normal(top.shape).astype(F)
    grad, _ = backward(model, x, cotangent, data_format)
    probe, eps = rng.standard_normal(x.shape), 1e-2
    numeric = np.sum((c3d_deconv_forward(x + eps * probe, w, b, kernel, stride, pad)
                      - c3d_deconv_forward(x - eps * probe, w, b, kernel, stride, pad))
                     * cotangent) / (2 * eps)
    assert np.sum(grad * probe) == pytest.approx(numeric, rel=1e-4, abs=1e-3)


# -- Pooling3D -------------------------------------------------------------------------


POOL_CASES = [
    # C3D's pool1 (kernel_depth 1) and pool2..pool5 (2x2x2, stride 2).
    ("MAX", 2, 1, 2, 1, 0, (2, 3, 4, 6, 6)),
    ("MAX", 2, 2, 2, 2, 0, (2, 3, 5, 5, 7)),
    # ceil: the last windows are clipped to the input.
    ("MAX", 3, 2, 2, 2, 0, (1, 2, 4, 6, 5)),
    # A kernel past the input: (1 - 2) / 2 rounds to 0, one clipped window.
    ("MAX", 2, 2, 2, 2, 0, (1, 2, 1, 1, 3)),
    # stride > kernel: the last window starts past the input: -FLT_MAX.
    ("MAX", 1, 1, 3, 3, 0, (1, 2, 5, 5, 5)),
    ("AVE", 2, 2, 2, 2, 0, (2, 2, 5, 5, 4)),
    ("AVE", 3, 2, 2, 1, 1, (1, 3, 3, 6, 5)),
    ("AVE", 3, 3, 3, 2, 1, (1, 2, 4, 7, 4)),
    # Windows starting past the input: 0 / -1 (-0.0) and 0 / 0 (NaN), as in C++.
    ("AVE", 1, 1, 3, 3, 0, (1, 1, 5, 6, 5)),
]


@pytest.mark.layer_type("Pooling3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("pool, k, kd, s, ts, pad, shape", POOL_CASES)
def test_pooling3d_matches_the_fork(data_format, pool, k, kd, s, ts, pad, shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(F)
    params = (f"pool: {pool} kernel_size: {k} kernel_depth: {kd} stride: {s} "
              f"temporal_stride: {ts} pad: {pad}")
    got = run_layers(pool_text(params), {"data": x}, None, data_format)["pool"]
    want = c3d_pool_forward(x, pool, k, kd, s, ts, pad)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Pooling3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("pool", ["MAX", "AVE"])
def test_pooling3d_gradients(data_format, pool):
    """MAX routes the cotangent to each window's maximum, AVE spreads it
    over the window divided by the fork's pool_size (Backward_cpu)."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2, 3, 5, 4)).astype(F)
    pad = 1 if pool == "AVE" else 0
    params = f"pool: {pool} kernel_size: 3 kernel_depth: 2 stride: 2 temporal_stride: 1 pad: {pad}"
    model = import_model(input_text(x.shape) + pool_text(params), data_format=data_format)
    top = c3d_pool_forward(x, pool, 3, 2, 2, 1, pad)
    cotangent = rng.standard_normal(top.shape).astype(F)
    grad, _ = backward(model, x, cotangent, data_format)
    probe, eps = rng.standard_normal(x.shape), 1e-3
    numeric = np.sum((c3d_pool_forward(x + eps * probe, pool, 3, 2, 2, 1, pad)
                      - c3d_pool_forward(x - eps * probe, pool, 3, 2, 2, 1, pad))
                     * cotangent) / (2 * eps)
    assert np.sum(grad * probe) == pytest.approx(numeric, rel=1e-3, abs=1e-3)


@pytest.mark.layer_type("Pooling3D")
def test_pooling3d_analyze():
    text = input_text((2, 64, 16, 56, 56)) + pool_text(
        "pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2")
    row = analyze(text, batch=None).layers[-1]
    assert row.tops == (("pool", (2, 64, 8, 28, 28)),)
    assert row.weight_shapes == ()


@pytest.mark.layer_type("Pooling3D")
@pytest.mark.parametrize("params, shape, message", [
    ("pool: MAX kernel_size: 2 kernel_depth: 2 pad: 1", (1, 2, 4, 4, 4),
     "layer 'pool': (Pooling3D) pad 1 is implemented only for pool: AVE (the fork refuses it "
     "for MAX)"),
    ("pool: STOCHASTIC kernel_size: 2 kernel_depth: 2", (1, 2, 4, 4, 4),
     "layer 'pool': (Pooling3D) pool: STOCHASTIC is not implemented by the fork (MAX and AVE "
     "are)"),
    ("pool: MAX kernel_size: 2", (1, 2, 4, 4, 4),
     "layer 'pool': (Pooling3D) kernel_size and kernel_depth must be positive, got "
     "kernel_size 2, kernel_depth 0"),
    ("pool: MAX kernel_size: 2 kernel_depth: 1 stride: 0", (1, 2, 4, 4, 4),
     "layer 'pool': (Pooling3D) stride and temporal_stride must be positive, got stride 0, "
     "temporal_stride 1"),
    ("pool: MAX kernel_size: 2 kernel_depth: 1", (1, 2, 4, 4),
     "layer 'pool': (Pooling3D) needs a 5-D input (N, C, L, H, W), got (1, 2, 4, 4)"),
    ("pool: MAX kernel_size: 2 kernel_depth: 5 temporal_stride: 1", (1, 2, 2, 4, 4),
     "layer 'pool': (Pooling3D) top 'pool' would have shape (1, 2, -2, 3, 3) "
     "(input shape(s) (1, 2, 2, 4, 4))"),
])
def test_pooling3d_bad_parameters(params, shape, message):
    assert error_of(pool_text(params), shape) == message


# -- C3D-v1.0 caffemodels --------------------------------------------------------------


def _varint(n):
    out = b""
    while True:
        low, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([low])
        out += bytes([low | 0x80])


def _field(number, wire, payload):
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def c3d_v1_blob(array):
    """A blob as C3D-v1.0 writes it: num 1, channels 2, length 3, height 4,
    width 5 (its 5-D shape), data 6 (packed floats)."""
    shape = (1,) * (5 - array.ndim) + array.shape
    dims = b"".join(_field(i + 1, 0, _varint(d)) for i, d in enumerate(shape))
    values = struct.pack(f"<{array.size}f", *array.astype(F).ravel())
    return dims + _field(6, 2, values)


def c3d_v1_layer(name, type_number, arrays):
    """A C3D-v1.0 V1 LayerParameter: name 4, type 5 (C3D's enum: 30
    CONVOLUTION3D, 14 INNER_PRODUCT), blobs 6; a convolution_param (10)
    with C3D's numbers: kernel_depth 6, stride 7 (BVLC: weight_filler,
    a message), weight_filler 9 (BVLC: pad_h, a varint)."""
    body = _field(4, 2, name.encode()) + _field(5, 0, _varint(type_number))
    body += b"".join(_field(6, 2, c3d_v1_blob(a)) for a in arrays)
    if type_number == 30:
        filler = _field(1, 2, b"gaussian")
        conv = (_field(1, 0, _varint(arrays[0].shape[0])) + _field(4, 0, _varint(3))
                + _field(6, 0, _varint(3)) + _field(7, 0, _varint(1)) + _field(9, 2, filler))
        body += _field(10, 2, conv)
    return _field(2, 2, body)


@pytest.mark.layer_type("Convolution3D")
@pytest.mark.parametrize("unparsable", [False, True])
def test_a_c3d_v1_caffemodel_loads(tmp_path, unparsable):
    """Read with BVLC's schema (its V1 types mean other layers there: not
    upgraded), or, where a field makes that schema fail (``unparsable``),
    with the weights-only one: the blobs are C3D's either way."""
    rng = np.random.default_rng(6)
    w = rng.standard_normal((4, 3, 3, 3, 3)).astype(F)
    b = rng.standard_normal(4).astype(F)
    fc = rng.standard_normal((5, 7)).astype(F)
    path = tmp_path / "c3d_v1.caffemodel"
    relu = c3d_v1_layer("relu1a", 18, [])
    if unparsable:  # a convolution_param (10) whose bytes are no message
        relu = _field(2, 2, relu[2:] + _field(10, 2, b"\xff" * 11))
        with pytest.raises(Exception):
            caffe_pb2.NetParameter.FromString(relu)
    path.write_bytes(_field(1, 2, b"c3d") + c3d_v1_layer("conv1a", 30, [w, b.reshape(1, 1, 1, 1, 4)])
                     + relu + c3d_v1_layer("fc8", 14, [fc, np.zeros(5)]))
    weights = load_weights(path)
    assert sorted(weights) == ["conv1a", "fc8"]
    np.testing.assert_array_equal(weights["conv1a"][0], w)
    np.testing.assert_array_equal(weights["conv1a"][1], b.reshape(1, 1, 1, 1, 4))
    np.testing.assert_array_equal(weights["fc8"][0], fc.reshape(1, 1, 1, 5, 7))
    # The blobs load into the C3D-v1.1 types (and BVLC's 3-D Convolution).
    x = rng.standard_normal((1, 3, 4, 5, 5)).astype(F)
    for layer_type, param in (("Convolution3D", "convolution3d_param { num_output: 4 "
                               "kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 }"),
                              ("Convolution", "convolution_param { num_output: 4 kernel_size: 3 "
                               "pad: 1 }")):
        text = input_text(x.shape) + (f'layer {{ name: "conv1a" type: "{layer_type}" '
                                      f'bottom: "data" top: "conv1a" {param} }}\n')
        model = import_model(text, weights=path, data_format="channels_first")
        got = keras.ops.convert_to_numpy(model(x))
        want = c3d_conv_forward(x, w, b, (3, 3, 3), (1, 1, 1), (1, 1, 1))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Convolution3D")
def test_a_c3d_v1_blob_with_a_wrong_count_is_refused(tmp_path):
    body = (b"".join(_field(i + 1, 0, _varint(2)) for i in range(5))
            + _field(6, 2, struct.pack("<3f", 1, 2, 3)))
    path = tmp_path / "bad.caffemodel"
    path.write_bytes(_field(2, 2, _field(4, 2, b"conv") + _field(6, 2, body)))
    with pytest.raises(Exception, match=r"C3D blob holds 3 values but its shape "
                                        r"\(2, 2, 2, 2, 2\) needs 32"):
        load_weights(path)


# -- a C3D net end to end ------------------------------------------------------------------

#: facebook/C3D, C3D-v1.1/examples/c3d_ucf101_training/train_simple.prototxt
#: (the C3D-v1.0 conv3d_ucf101 / c3d_sport1m nets in v1.1's format), shrunk:
#: its VideoData layer replaced by an Input of 2 x 3 x 8 x 48 x 48 (3 x 16 x
#: 112 x 112 crops there), the filters cut (64/128/256/256/256 there; fc6/fc7
#: 2048), the same kernels, pads, strides and pooling (pool5's windows are
#: clipped: 1 x 3 x 3 in, 1 x 2 x 2 out, as C3D's 2 x 7 x 7 -> 1 x 4 x 4);
#: Dropout (TEST: identity) kept.
C3D_NET = """
name: "C3D-UCF101Net"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 8 dim: 48 dim: 48 } } }
layer { name: "conv1a" type: "Convolution3D" bottom: "data" top: "conv1a"
  param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
  convolution3d_param { num_output: 4 kernel_size: 3 kernel_depth: 3 stride: 1 temporal_stride: 1
    pad: 1 temporal_pad: 1 weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0 } } }
layer { name: "relu1a" type: "ReLU" bottom: "conv1a" top: "conv1a" }
layer { name: "pool1" type: "Pooling3D" bottom: "conv1a" top: "pool1"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 1 stride: 2 temporal_stride: 1 } }
layer { name: "conv2a" type: "Convolution3D" bottom: "pool1" top: "conv2a"
  convolution3d_param { num_output: 6 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 } }
layer { name: "relu2a" type: "ReLU" bottom: "conv2a" top: "conv2a" }
layer { name: "pool2" type: "Pooling3D" bottom: "conv2a" top: "pool2"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "conv3a" type: "Convolution3D" bottom: "pool2" top: "conv3a"
  convolution3d_param { num_output: 8 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 } }
layer { name: "relu3a" type: "ReLU" bottom: "conv3a" top: "conv3a" }
layer { name: "pool3" type: "Pooling3D" bottom: "conv3a" top: "pool3"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "conv4a" type: "Convolution3D" bottom: "pool3" top: "conv4a"
  convolution3d_param { num_output: 8 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 } }
layer { name: "relu4a" type: "ReLU" bottom: "conv4a" top: "conv4a" }
layer { name: "pool4" type: "Pooling3D" bottom: "conv4a" top: "pool4"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "conv5a" type: "Convolution3D" bottom: "pool4" top: "conv5a"
  convolution3d_param { num_output: 8 kernel_size: 3 kernel_depth: 3 pad: 1 temporal_pad: 1 } }
layer { name: "relu5a" type: "ReLU" bottom: "conv5a" top: "conv5a" }
layer { name: "pool5" type: "Pooling3D" bottom: "conv5a" top: "pool5"
  pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 temporal_stride: 2 } }
layer { name: "fc6" type: "InnerProduct" bottom: "pool5" top: "fc6" inner_product_param { num_output: 10 } }
layer { name: "relu6" type: "ReLU" bottom: "fc6" top: "fc6" }
layer { name: "drop6" type: "Dropout" bottom: "fc6" top: "fc6" dropout_param { dropout_ratio: 0.5 } }
layer { name: "fc7" type: "InnerProduct" bottom: "fc6" top: "fc7" inner_product_param { num_output: 10 } }
layer { name: "relu7" type: "ReLU" bottom: "fc7" top: "fc7" }
layer { name: "fc8" type: "InnerProduct" bottom: "fc7" top: "fc8" inner_product_param { num_output: 5 } }
layer { name: "prob" type: "Softmax" bottom: "fc8" top: "prob" }
"""


def c3d_net_numpy(x, weights):
    """The same net with the ports above (InnerProduct: Caffe's row-major
    flattening of (C, L, H, W); Softmax over the classes)."""
    y = x.astype(np.float64)
    channels = [4, 6, 8, 8, 8]
    pools = [(2, 1, 2, 1)] + [(2, 2, 2, 2)] * 4
    for i, (c, pool) in enumerate(zip(channels, pools)):
        w, b = weights[f"conv{i + 1}a"]
        y = np.maximum(c3d_conv_forward(y, w, b, (3, 3, 3), (1, 1, 1), (1, 1, 1)), 0)
        y = c3d_pool_forward(y, "MAX", *pool)
    y = y.reshape(len(y), -1)
    for name, relu in (("fc6", True), ("fc7", True), ("fc8", False)):
        w, b = weights[name]
        y = y @ w.T.astype(np.float64) + b
        y = np.maximum(y, 0) if relu else y
    e = np.exp(y - y.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.mark.layer_type("Convolution3D")
@pytest.mark.layer_type("Pooling3D")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_a_c3d_net_imports_and_matches_numpy(data_format, tmp_path):
    rng = np.random.default_rng(7)
    row = {r.name: r for r in analyze(C3D_NET, batch=None).layers}
    assert row["pool5"].tops == (("pool5", (2, 8, 1, 2, 2)),)
    weights = {}
    for name, r in row.items():
        if r.weight_shapes:
            weights[name] = [rng.standard_normal(s).astype(F) * (0.5 if len(s) > 1 else 0.1)
                             for s in r.weight_shapes]
    assert weights["conv2a"][0].shape == (6, 4, 3, 3, 3)
    assert weights["conv2a"][1].shape == (1, 1, 1, 1, 6)
    assert weights["fc6"][0].shape == (10, 32)
    model = import_model(C3D_NET, data_format=data_format)
    from keras_caffe.importers import load_into

    load_into(model, weights)
    x = rng.standard_normal((2, 3, 8, 48, 48)).astype(F)
    got = keras.ops.convert_to_numpy(model(to_keras_layout(x, data_format)))
    np.testing.assert_allclose(got, c3d_net_numpy(x, weights), rtol=1e-4, atol=1e-5)
    # The Keras model's blobs are the fork's shapes; it saves and reloads.
    assert model.get_layer("conv1a").caffe_blob_shapes() == [(4, 3, 3, 3, 3), (1, 1, 1, 1, 4)]
    model.save(tmp_path / "c3d.keras")
    again = keras.models.load_model(tmp_path / "c3d.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(to_keras_layout(x, data_format))),
                               got, rtol=1e-6, atol=1e-7)

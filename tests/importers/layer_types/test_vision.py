"""Convolution, Pooling, LRN: one-layer nets against numpy ports of Caffe's loops."""

import math

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from support import DATA_FORMATS, run_layers
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

RNG = np.random.RandomState(0)


def conv_reference(x, w, b, stride, pad, dilation, group):
    """Caffe's convolution, directly: (N, C, H, W) * (O, C/g, kh, kw)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (wd + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    y = np.zeros((n, o, oh, ow))
    og = o // group
    for g in range(group):
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, g * cg:(g + 1) * cg,
                           i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                y[:, g * og:(g + 1) * og, i, j] = np.einsum("nchw,ochw->no", patch,
                                                            w[g * og:(g + 1) * og])
    return y + (b[None, :, None, None] if b is not None else 0)


def pool_reference(x, kernel, stride, pad, pool, ceil=True):
    """Caffe's PoolingLayer::Forward_cpu loops, MAX and AVE."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad

    def size(dim, k, s, p):
        out = (math.ceil((dim + 2 * p - k) / s) if ceil else (dim + 2 * p - k) // s) + 1
        return out - 1 if p and (out - 1) * s >= dim + p else out

    oh, ow = size(h, kh, sh, ph), size(w, kw, sw, pw)
    y = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * sh - ph, j * sw - pw
            he, we = min(hs + kh, h + ph), min(ws + kw, w + pw)
            pool_size = (he - hs) * (we - ws)
            hs, ws, he, we = max(hs, 0), max(ws, 0), min(he, h), min(we, w)
            window = x[:, :, hs:he, ws:we]
            y[:, :, i, j] = (window.max(axis=(2, 3)) if pool == "MAX"
                             else window.sum(axis=(2, 3)) / pool_size)
    return y


def lrn_reference(x, size, alpha, beta, k, region):
    n, c, h, w = x.shape
    if region == "ACROSS_CHANNELS":
        half = (size - 1) // 2
        padded = np.pad(x**2, ((0, 0), (half, half), (0, 0), (0, 0)))
        total = sum(padded[:, i:i + c] for i in range(size))
        return x * (k + alpha / size * total) ** -beta
    half = (size - 1) // 2
    average = pool_reference(x**2, (size, size), (1, 1), (half, half), "AVE")
    return x * (1 + alpha * average) ** -beta


def conv_text(name="conv", **p):
    fields = " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in p.items())
    return f'layer {{ name: "{name}" type: "Convolution" bottom: "data" top: "{name}" ' \
           f'convolution_param {{ {fields} }} }}'


CONV_CASES = {
    "plain": dict(num_output=4, kernel_size=3),
    "stride_pad": dict(num_output=5, kernel_size=3, stride=2, pad=1),
    "pad_hw_kernel_hw": dict(num_output=3, kernel_h=3, kernel_w=2, pad_h=2, pad_w=0, stride_h=1, stride_w=2),
    "grouped": dict(num_output=6, kernel_size=3, group=2, pad=1),
    "depthwise": dict(num_output=8, kernel_size=3, group=4, pad=1, stride=2),
    "dilation": dict(num_output=4, kernel_size=3, dilation=2, pad=2),
    "dilation_and_stride": dict(num_output=4, kernel_size=3, dilation=2, stride=2, pad=1),
    "no_bias": dict(num_output=4, kernel_size=1, bias_term=False),
}


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CONV_CASES))
def test_convolution(case, data_format):
    p = CONV_CASES[case]
    x = RNG.randn(2, 4, 9, 8).astype("float32")
    group = p.get("group", 1)
    kh, kw = p.get("kernel_h", p.get("kernel_size")), p.get("kernel_w", p.get("kernel_size"))
    w = RNG.randn(p["num_output"], 4 // group, kh, kw).astype("float32")
    b = RNG.randn(p["num_output"]).astype("float32")
    blobs = [w] if p.get("bias_term") is False else [w, b]
    y = run_layers(conv_text(**p), {"data": x}, {"conv": blobs}, data_format)["conv"]
    expected = conv_reference(
        x, w, blobs[1] if len(blobs) > 1 else None,
        (p.get("stride_h", p.get("stride", 1)), p.get("stride_w", p.get("stride", 1))),
        (p.get("pad_h", p.get("pad", 0)), p.get("pad_w", p.get("pad", 0))),
        (p.get("dilation", 1),) * 2, group,
    )
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Convolution")
def test_convolution_bad_group_names_the_layer():
    with pytest.raises(LayerError, match=r"layer 'conv': \(Convolution\) group 3 must divide the 4 input channels"):
        run_layers(conv_text(num_output=6, kernel_size=1, group=3), {"data": np.zeros((1, 4, 3, 3))})


POOL_CASES = {
    "max_ceil_pad": ("MAX", 3, 2, 1),          # GoogLeNet-style
    "max_ceil_no_pad": ("MAX", 3, 2, 0),
    "ave_ceil_pad": ("AVE", 3, 2, 1),          # divisor clipped to H + pad
    "ave_pad_2": ("AVE", 4, 3, 2),
    "max_exact": ("MAX", 2, 2, 0),
    "ave_kernel_1": ("AVE", 1, 1, 0),
}


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(POOL_CASES))
def test_pooling(case, data_format):
    pool, k, s, p = POOL_CASES[case]
    x = RNG.randn(2, 3, 12, 11).astype("float32")
    text = (f'layer {{ name: "pool" type: "Pooling" bottom: "data" top: "pool" '
            f'pooling_param {{ pool: {pool} kernel_size: {k} stride: {s} pad: {p} }} }}')
    y = run_layers(text, {"data": x}, data_format=data_format)["pool"]
    expected = pool_reference(x, (k, k), (s, s), (p, p), pool)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("pool", ["MAX", "AVE"])
def test_pooling_floor_mode_and_global(pool):
    x = RNG.randn(2, 3, 112, 112).astype("float32")
    text = (f'layer {{ name: "p" type: "Pooling" bottom: "data" top: "p" pooling_param {{ '
            f'pool: {pool} kernel_size: 3 stride: 2 pad: 1 round_mode: FLOOR }} }}'
            f'layer {{ name: "g" type: "Pooling" bottom: "data" top: "g" pooling_param {{ '
            f'pool: {pool} global_pooling: true }} }}')
    out = run_layers(text, {"data": x})
    assert out["p"].shape == (2, 3, 56, 56)  # DenseNet's pool1: CEIL would give 57
    np.testing.assert_allclose(out["p"], pool_reference(x, (3, 3), (2, 2), (1, 1), pool, ceil=False),
                               rtol=1e-5, atol=1e-6)
    reduce = np.max if pool == "MAX" else np.mean
    np.testing.assert_allclose(out["g"], reduce(x, axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Pooling")
def test_stochastic_pooling_is_refused():
    text = ('layer { name: "p" type: "Pooling" bottom: "data" top: "p" '
            'pooling_param { pool: STOCHASTIC kernel_size: 2 } }')
    with pytest.raises(LayerError, match="layer 'p': STOCHASTIC pooling is not supported"):
        run_layers(text, {"data": np.zeros((1, 1, 4, 4))})


@pytest.mark.layer_type("LRN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("region", ["ACROSS_CHANNELS", "WITHIN_CHANNEL"])
def test_lrn(region, data_format):
    x = RNG.randn(2, 7, 6, 5).astype("float32") * 3
    text = (f'layer {{ name: "norm" type: "LRN" bottom: "data" top: "norm" lrn_param {{ '
            f'local_size: 3 alpha: 0.5 beta: 0.75 k: 2 norm_region: {region} }} }}')
    y = run_layers(text, {"data": x}, data_format=data_format)["norm"]
    np.testing.assert_allclose(y, lrn_reference(x, 3, 0.5, 0.75, 2.0, region), rtol=1e-5, atol=1e-6)


def caffe_lrn_backward(x, top_diff, size, alpha, beta, k):
    """lrn_layer.cpp, CrossChannelBackward_cpu, in float64: bottom_diff =
    top_diff * scale^-beta - 2 alpha beta / n * bottom * sum_window(top_diff *
    top / scale), NCHW."""
    x, top_diff = x.astype(np.float64), top_diff.astype(np.float64)
    c = x.shape[1]
    half = (size - 1) // 2
    padded = np.pad(x**2, ((0, 0), (half, half), (0, 0), (0, 0)))
    scale = k + alpha / size * sum(padded[:, i:i + c] for i in range(size))
    top = x * scale**-beta
    ratio = np.pad(top_diff * top / scale, ((0, 0), (half, half), (0, 0), (0, 0)))
    window = sum(ratio[:, i:i + c] for i in range(size))
    return top_diff * scale**-beta - 2 * alpha * beta / size * x * window


@pytest.mark.layer_type("LRN")
@pytest.mark.parametrize("dtype", ["float32", "float64"])  # TensorFlow's LRN op; the slices
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_lrn_across_channels_gradient(data_format, dtype):
    if dtype == "float64" and keras.backend.backend() == "jax":
        pytest.skip("JAX computes float64 as float32 unless jax_enable_x64 is set")
    from keras_caffe.layers.lrn import LRN

    x = (RNG.randn(2, 7, 6, 5) * 3).astype(dtype)
    top_diff = RNG.randn(*x.shape).astype(dtype)
    layer = LRN(local_size=5, alpha=0.5, beta=0.75, k=2.0, data_format=data_format, dtype=dtype)
    to_layer = (lambda a: a) if data_format == "channels_first" else (
        lambda a: np.moveaxis(a, 1, -1))
    (grad,), _ = gradients(lambda xin: weighted_sum(layer(xin), to_layer(top_diff)),
                           [to_layer(x)])
    expected = to_layer(caffe_lrn_backward(x, top_diff, 5, 0.5, 0.75, 2.0))
    tolerance = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(grad, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.layer_type("LRN")
@pytest.mark.tensorflow_only  # the CPU choice between TensorFlow's LRN op and the compiled formulas
@pytest.mark.parametrize("beta", [0.75, 0.5, 1.0, 0.6])  # each power of tensorflow_kernels
@pytest.mark.parametrize("tuning", ["on", "off"])
def test_lrn_on_cpu_compiled_or_tensorflows_op(beta, tuning, monkeypatch):
    """On CPUs ACROSS_CHANNELS LRN runs Caffe's forward and backward formulas
    as XLA programs (``tensorflow_kernels.compiled_lrn``; no ``LRN`` op in
    the traced step); with ``KERAS_CAFFE_CPU_TUNING=0`` TensorFlow's LRN op.
    Both give lrn_layer.cpp's values (the float64 ports above), beta's
    special cases (0.75, 0.5, 1) and the general power alike."""
    import tensorflow as tf

    from keras_caffe.layers.lrn import LRN

    if tuning == "off":
        monkeypatch.setenv("KERAS_CAFFE_CPU_TUNING", "0")
    x = (RNG.randn(3, 9, 5, 4) * 4).astype("float32")
    top_diff = RNG.randn(*x.shape).astype("float32")
    layer = LRN(local_size=5, alpha=0.3, beta=beta, k=1.5, data_format="channels_first")

    @tf.function
    def step(xin):
        with tf.GradientTape() as tape:
            tape.watch(xin)
            y = layer(xin)
            loss = tf.reduce_sum(y * top_diff)
        return y, tape.gradient(loss, xin)

    y, grad = step(tf.constant(x))
    np.testing.assert_allclose(y, lrn_reference(x.astype(np.float64), 5, 0.3, beta, 1.5,
                                             "ACROSS_CHANNELS"),
                               rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(grad, caffe_lrn_backward(x, top_diff, 5, 0.3, beta, 1.5),
                               rtol=1e-5, atol=1e-6)
    graph = step.get_concrete_function(tf.TensorSpec(x.shape, tf.float32)).graph
    kinds = {op.type for op in graph.get_operations()}
    for function in graph.as_graph_def().library.function:
        kinds |= {node.op for node in function.node_def}
    assert ("LRN" in kinds) == (tuning == "off"), sorted(kinds)


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_convolution_bottoms_share_weights(data_format):
    a, b = RNG.randn(2, 3, 6, 6).astype("float32"), RNG.randn(2, 3, 6, 6).astype("float32")
    w, bias = RNG.randn(4, 3, 3, 3).astype("float32"), RNG.randn(4).astype("float32")
    text = ('layer { name: "conv" type: "Convolution" bottom: "a" bottom: "b" top: "ca" top: "cb" '
            'convolution_param { num_output: 4 kernel_size: 3 } }')
    out = run_layers(text, {"a": a, "b": b}, {"conv": [w, bias]}, data_format)
    for x, top in ((a, "ca"), (b, "cb")):
        np.testing.assert_allclose(out[top], conv_reference(x, w, bias, (1, 1), (0, 0), (1, 1), 1),
                                   rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("params", [dict(group=2, pad=1), dict(group=3, stride=2, dilation=2, pad=2)],
                         ids=["group2", "group3_stride_dilation"])
def test_grouped_convolution_gradients_equal_the_block_diagonal_convolution(params):
    """A grouped Convolution's gradients (to its input and kernel) are those
    of the ungrouped convolution whose kernel is zero outside each group's
    block, as Caffe's per-group loop (conv_layer.cpp) computes them; under
    both CPU kernel families (TensorFlow has no grouped-convolution gradient
    on CPU, so the layer runs one convolution per group)."""
    from keras_caffe.layers import Convolution

    group = params["group"]
    c_in, c_out = 2 * group, 4 * group
    x = RNG.randn(2, 11, 10, c_in).astype("float32")
    r = RNG.randn(2, 11, 10, c_out).astype("float32")  # cropped to the output below
    grouped = Convolution(c_out, 3, **params)
    dense = Convolution(c_out, 3, **{k: v for k, v in params.items() if k != "group"})
    grouped.build(x.shape)
    dense.build(x.shape)
    kernel = RNG.randn(3, 3, c_in // group, c_out).astype("float32")
    block = np.zeros((3, 3, c_in, c_out), np.float32)
    for g in range(group):
        cin, cout = c_in // group, c_out // group
        block[:, :, g * cin:(g + 1) * cin, g * cout:(g + 1) * cout] = kernel[..., g * cout:(g + 1) * cout]
    bias = RNG.randn(c_out).astype("float32")
    grouped.set_weights([kernel, bias])
    dense.set_weights([block, bias])

    def forward_and_gradients(layer):
        y = keras.ops.convert_to_numpy(layer(x))
        cotangent = r[:, :y.shape[1], :y.shape[2], :]
        (dx,), (dk,) = gradients(lambda t: weighted_sum(layer(t), cotangent), [x],
                                 [layer.kernel])
        return y, dx, dk

    y_g, dx_g, dk_g = forward_and_gradients(grouped)
    y_d, dx_d, dk_d = forward_and_gradients(dense)
    np.testing.assert_allclose(y_g, y_d, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(dx_g, dx_d, rtol=1e-5, atol=1e-4)
    dk_d = np.asarray(dk_d)
    for g in range(group):
        cin, cout = c_in // group, c_out // group
        np.testing.assert_allclose(dk_g[..., g * cout:(g + 1) * cout],
                                   dk_d[:, :, g * cin:(g + 1) * cin, g * cout:(g + 1) * cout],
                                   rtol=1e-5, atol=1e-4)

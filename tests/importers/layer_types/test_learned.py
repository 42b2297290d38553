"""Learned layers: Deconvolution, Embed, InnerProduct, BatchNorm, Scale.

One-layer nets against numpy ports of Caffe's forward passes, in both data
formats, plus the blob round trip (Caffe blobs -> Keras weights -> Caffe
blobs, bit for bit) of every layer with blobs.
"""

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, load_into
from keras_caffe.importers.net.blobs import caffe_layers
from keras_caffe.layers.deconv import Deconvolution, Embed
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

RNG = np.random.RandomState(0)


def randn(*shape, scale=1.0):
    return np.asarray(RNG.randn(*shape) * scale, np.float32)


def text_of(params):
    return " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in params.items())


def input_text(inputs):
    shapes = "".join(f"shape {{ {' '.join(f'dim: {d}' for d in a.shape)} }} "
                     for a in inputs.values())
    tops = "".join(f'top: "{name}" ' for name in inputs)
    return f'layer {{ name: "input" type: "Input" {tops} input_param {{ {shapes} }} }}\n'


def build(layers_text, inputs, weights=None, data_format="channels_last", phase="TEST"):
    """The imported model (run_layers without the call), weights loaded."""
    model = import_model(input_text(inputs) + layers_text, phase=phase, data_format=data_format)
    if weights:
        load_into(model, weights)
    return model


def call(model, inputs, data_format, training=False):
    feed = [to_keras_layout(np.asarray(a, np.float32), data_format) for a in inputs.values()]
    y = model(feed if len(feed) > 1 else feed[0], training=training)
    return from_keras_layout(keras.ops.convert_to_numpy(y), data_format)


def assert_round_trip(model, blobs_by_layer):
    """set_caffe_blobs then caffe_blobs() gives back identical arrays."""
    layers = caffe_layers(model)
    for name, blobs in blobs_by_layer.items():
        layers[name].set_caffe_blobs(blobs)
        back = layers[name].caffe_blobs()
        assert len(back) == len(blobs)
        for original, returned in zip(blobs, back):
            assert returned.shape == original.shape
            assert returned.dtype == np.float32
            np.testing.assert_array_equal(returned, original)
            assert returned.tobytes() == original.tobytes()


# -- Deconvolution -------------------------------------------------------------


def deconv_reference(x, w, b, stride, pad, dilation, group):
    """Caffe's Deconvolution (col2im of W^T x per group), as a scatter."""
    n, c, h, wd = x.shape
    cin, og, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    full_h, full_w = sh * (h - 1) + dh * (kh - 1) + 1, sw * (wd - 1) + dw * (kw - 1) + 1
    y = np.zeros((n, og * group, full_h, full_w))
    ig = c // group
    for g in range(group):
        xg = x[:, g * ig:(g + 1) * ig].astype(np.float64)
        for ky in range(kh):
            for kx in range(kw):
                contrib = np.einsum("nihw,ij->njhw", xg, w[g * ig:(g + 1) * ig, :, ky, kx])
                y[:, g * og:(g + 1) * og,
                  ky * dh:ky * dh + sh * (h - 1) + 1:sh,
                  kx * dw:kx * dw + sw * (wd - 1) + 1:sw] += contrib
    y = y[:, :, ph:full_h - ph, pw:full_w - pw]
    return y + (b[None, :, None, None] if b is not None else 0)


def bilinear_weights(channels, k):
    """Caffe's "bilinear" filler, one kernel per channel (FCN's upscore, group = channels)."""
    f = np.ceil(k / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    og = np.arange(k)
    kernel = (1 - np.abs(og / f - c))[:, None] * (1 - np.abs(og / f - c))[None, :]
    return np.tile(kernel, (channels, 1, 1, 1)).astype("float32")


def deconv_text(name="deconv", bottom="data", **p):
    return (f'layer {{ name: "{name}" type: "Deconvolution" bottom: "{bottom}" top: "{name}" '
            f'convolution_param {{ {text_of(p)} }} }}')


def hw(p, name, default):
    short = {"kernel_size": "kernel"}.get(name, name)
    value = p.get(name, default)
    return p.get(f"{short}_h", value), p.get(f"{short}_w", value)


DECONV_CASES = {
    "plain": dict(num_output=3, kernel_size=3),
    "stride2_pad1": dict(num_output=5, kernel_size=4, stride=2, pad=1),
    "hw_params": dict(num_output=3, kernel_h=3, kernel_w=2, stride_h=2, stride_w=3, pad_h=1,
                      pad_w=0),
    "grouped": dict(num_output=6, kernel_size=3, stride=2, group=2),
    "depthwise": dict(num_output=4, kernel_size=4, stride=2, pad=1, group=4),
    "depthwise_multiplier": dict(num_output=8, kernel_size=3, stride=2, group=4),
    "dilation": dict(num_output=3, kernel_size=3, dilation=2, pad=1),
    "dilation_and_stride": dict(num_output=3, kernel_size=3, dilation=2, stride=2, pad=2),
    "kernel_smaller_than_stride": dict(num_output=2, kernel_size=1, stride=3),
    "pad_beyond_kernel": dict(num_output=2, kernel_size=2, stride=3, pad=2),
    "no_bias": dict(num_output=3, kernel_size=2, stride=2, bias_term=False),
}


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(DECONV_CASES))
def test_deconvolution(case, data_format):
    p = DECONV_CASES[case]
    x = randn(2, 4, 5, 6)
    group = p.get("group", 1)
    kh, kw = hw(p, "kernel_size", None)
    w = randn(4, p["num_output"] // group, kh, kw)
    b = randn(p["num_output"])
    blobs = [w] if p.get("bias_term") is False else [w, b]
    y = run_layers(deconv_text(**p), {"data": x}, {"deconv": blobs}, data_format)["deconv"]
    expected = deconv_reference(x, w, blobs[1] if len(blobs) > 1 else None, hw(p, "stride", 1),
                                hw(p, "pad", 0), hw(p, "dilation", 1), group)
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("k, stride, pad", [(4, 2, 1), (16, 8, 4), (64, 32, 16)])
def test_deconvolution_fcn_bilinear_upsampling(k, stride, pad, data_format):
    """FCN's upscore: group = channels, bias_term false, bilinear weights."""
    channels = 3
    x = randn(2, channels, 4, 3)
    w = bilinear_weights(channels, k)
    text = deconv_text("upscore", num_output=channels, kernel_size=k, stride=stride, pad=pad,
                       group=channels, bias_term=False)
    y = run_layers(text, {"data": x}, {"upscore": [w]}, data_format)["upscore"]
    assert y.shape == (2, channels, 4 * stride, 3 * stride)
    np.testing.assert_allclose(y, deconv_reference(x, w, None, (stride,) * 2, (pad,) * 2, (1, 1),
                                                   channels), rtol=1e-4, atol=1e-5)
    # Bilinear upsampling keeps a constant image constant away from the border.
    const = run_layers(text, {"data": np.full((1, channels, 4, 3), 2.5)}, {"upscore": [w]},
                       data_format)["upscore"]
    np.testing.assert_allclose(const[:, :, stride:-stride, stride:-stride], 2.5, rtol=1e-5)


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_deconvolution_per_group_path_matches(monkeypatch, data_format):
    """Large grouped kernels run one transposed convolution per group: same numbers."""
    monkeypatch.setattr(Deconvolution, "dense_group_limit", 0)
    p = dict(num_output=6, kernel_size=3, stride=2, pad=1, group=3)
    x = randn(2, 6, 4, 5)
    w, b = randn(6, 2, 3, 3), randn(6)
    y = run_layers(deconv_text(**p), {"data": x}, {"deconv": [w, b]}, data_format)["deconv"]
    np.testing.assert_allclose(y, deconv_reference(x, w, b, (2, 2), (1, 1), (1, 1), 3),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_deconvolution_several_bottoms_share_weights(data_format):
    x1, x2 = randn(2, 3, 4, 4), randn(2, 3, 4, 4)
    w, b = randn(3, 2, 2, 2), randn(2)
    text = ('layer { name: "up" type: "Deconvolution" bottom: "a" bottom: "b" top: "up_a" '
            'top: "up_b" convolution_param { num_output: 2 kernel_size: 2 stride: 2 } }')
    out = run_layers(text, {"a": x1, "b": x2}, {"up": [w, b]}, data_format)
    np.testing.assert_allclose(out["up_a"], deconv_reference(x1, w, b, (2, 2), (0, 0), (1, 1), 1),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out["up_b"], deconv_reference(x2, w, b, (2, 2), (0, 0), (1, 1), 1),
                               rtol=1e-4, atol=1e-4)


DECONV_ERRORS = {
    "bad_group": (dict(num_output=6, kernel_size=2, group=3),
                  "group 3 must divide the 4 input channels and num_output 6"),
    "no_kernel": (dict(num_output=2), "kernel_size is required"),
    "no_output": (dict(num_output=0, kernel_size=2), "num_output must be positive"),
    "zero_stride": (dict(num_output=2, kernel_size=2, stride=0), "must be positive"),
    "pad_too_large": (dict(num_output=2, kernel_size=1, pad=3), "leaves no output"),
    "axis": (dict(num_output=2, kernel_size=2, axis=2), "over axis 2 is not supported"),
    "both_kernel_forms": (dict(num_output=2, kernel_size=2, kernel_h=2, kernel_w=2),
                          "either kernel_size or kernel_h/kernel_w"),
}


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("case", list(DECONV_ERRORS))
def test_deconvolution_bad_parameters(case):
    p, message = DECONV_ERRORS[case]
    with pytest.raises(LayerError, match=f"layer 'deconv'.*{message}"):
        run_layers(deconv_text(**p), {"data": np.zeros((1, 4, 3, 3))})


@pytest.mark.layer_type("Deconvolution")
def test_deconvolution_needs_a_4d_blob():
    with pytest.raises(LayerError, match=r"layer 'deconv': \(Deconvolution\) over axis 1 is not "
                                         r"supported for a 3-D blob \(1, 4, 3\)"):
        run_layers(deconv_text(num_output=2, kernel_size=2), {"data": np.zeros((1, 4, 3))})


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["plain", "grouped", "depthwise_multiplier", "no_bias"])
def test_deconvolution_blob_round_trip(case, data_format):
    p = DECONV_CASES[case]
    x = np.zeros((1, 4, 5, 6), np.float32)
    model = build(deconv_text(**p), {"data": x}, data_format=data_format)
    kh, kw = hw(p, "kernel_size", None)
    w = randn(4, p["num_output"] // p.get("group", 1), kh, kw)
    blobs = [w] if p.get("bias_term") is False else [w, randn(p["num_output"])]
    assert caffe_layers(model)["deconv"].caffe_blob_shapes() == [tuple(b.shape) for b in blobs]
    assert_round_trip(model, {"deconv": blobs})


@pytest.mark.layer_type("Deconvolution")
def test_deconvolution_serializes():
    layer = Deconvolution(6, (3, 2), stride=2, pad=(1, 0), dilation=1, group=3, bias_term=False,
                          data_format="channels_first", name="d", caffe_name="a/d")
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert isinstance(clone, Deconvolution)
    assert clone.get_config() == layer.get_config()


# -- Embed -----------------------------------------------------------------------


def embed_text(name="embed", **p):
    return (f'layer {{ name: "{name}" type: "Embed" bottom: "data" top: "{name}" '
            f'embed_param {{ {text_of(p)} }} }}')


@pytest.mark.layer_type("Embed")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape", [(3,), (3, 5), (2, 3, 4, 2)])
@pytest.mark.parametrize("bias_term", [True, False])
def test_embed(shape, bias_term, data_format):
    input_dim, num_output = 7, 4
    x = RNG.randint(0, input_dim, size=shape).astype("float32")
    w, b = randn(input_dim, num_output), randn(num_output)
    blobs = [w, b] if bias_term else [w]
    text = embed_text(num_output=num_output, input_dim=input_dim, bias_term=bias_term)
    y = run_layers(text, {"data": x}, {"embed": blobs}, data_format)["embed"]
    expected = w[x.astype(int)] + (b if bias_term else np.float32(0))
    assert y.shape == (*shape, num_output)
    np.testing.assert_array_equal(y, expected)  # a lookup and one add: exact


@pytest.mark.layer_type("Embed")
def test_embed_truncates_like_static_cast():
    """Caffe's static_cast<int> truncates a non-integer input (Caffe only DCHECKs it)."""
    w = randn(5, 2)
    x = np.array([[0.0, 1.9, 4.5, 3.0]], np.float32)
    text = embed_text(num_output=2, input_dim=5, bias_term=False)
    y = run_layers(text, {"data": x}, {"embed": [w]})["embed"]
    np.testing.assert_array_equal(y, w[[[0, 1, 4, 3]]])


@pytest.mark.layer_type("Embed")
@pytest.mark.parametrize("p, message", [
    (dict(num_output=0, input_dim=3), "num_output must be positive"),
    (dict(input_dim=3), "num_output must be positive"),
    (dict(num_output=2), "input_dim must be positive"),
])
def test_embed_bad_parameters(p, message):
    with pytest.raises(LayerError, match=rf"layer 'embed': \(Embed\) {message}"):
        run_layers(embed_text(**p), {"data": np.zeros((2, 3))})


@pytest.mark.layer_type("Embed")
def test_embed_absurd_size_is_refused_before_allocating():
    with pytest.raises(LayerError, match="layer 'embed': weight blob 0 of .* exceed the limit"):
        run_layers(embed_text(num_output=2**16, input_dim=2**16), {"data": np.zeros((2, 3))})


@pytest.mark.layer_type("Embed")
@pytest.mark.parametrize("bias_term", [True, False])
def test_embed_blob_round_trip(bias_term):
    model = build(embed_text(num_output=3, input_dim=6, bias_term=bias_term),
                  {"data": np.zeros((2, 4), np.float32)})
    blobs = [randn(6, 3), randn(3)] if bias_term else [randn(6, 3)]
    assert caffe_layers(model)["embed"].caffe_blob_shapes() == [tuple(b.shape) for b in blobs]
    assert_round_trip(model, {"embed": blobs})
    clone = keras.layers.deserialize(keras.layers.serialize(caffe_layers(model)["embed"]))
    assert isinstance(clone, Embed) and clone.get_config()["input_dim"] == 6


# -- InnerProduct ----------------------------------------------------------------


def ip_text(name="ip", bottom="data", **p):
    return (f'layer {{ name: "{name}" type: "InnerProduct" bottom: "{bottom}" top: "{name}" '
            f'inner_product_param {{ {text_of(p)} }} }}')


def ip_reference(x, w, b, axis=1, transpose=False):
    """Caffe's InnerProduct: flatten from axis, y = x W^T (+ b); W is (K, N) with transpose."""
    flat = x.reshape(*x.shape[:axis], -1).astype(np.float64)
    y = flat @ (w if transpose else w.T)
    return y + (b if b is not None else 0)


IP_CASES = {
    "2d_axis1": ((3, 10), dict(num_output=4)),
    "4d_axis1": ((2, 3, 4, 5), dict(num_output=6)),
    "4d_axis1_transpose": ((2, 3, 4, 5), dict(num_output=6, transpose=True)),
    "4d_axis2": ((2, 3, 4, 5), dict(num_output=6, axis=2)),
    "4d_axis_minus1": ((2, 3, 4, 5), dict(num_output=2, axis=-1)),
    "3d_axis2": ((2, 3, 7), dict(num_output=4, axis=2)),
    "3d_axis2_transpose_no_bias": ((2, 3, 7), dict(num_output=4, axis=2, transpose=True,
                                                   bias_term=False)),
    "no_bias": ((3, 2, 2, 2), dict(num_output=5, bias_term=False)),
}


@pytest.mark.layer_type("InnerProduct")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(IP_CASES))
def test_inner_product(case, data_format):
    shape, p = IP_CASES[case]
    x = randn(*shape)
    axis = p.get("axis", 1) % len(shape)
    k = int(np.prod(shape[axis:]))
    w = randn(k, p["num_output"]) if p.get("transpose") else randn(p["num_output"], k)
    b = randn(p["num_output"])
    blobs = [w] if p.get("bias_term") is False else [w, b]
    y = run_layers(ip_text(**p), {"data": x}, {"ip": blobs}, data_format)["ip"]
    expected = ip_reference(x, w, blobs[1] if len(blobs) > 1 else None, axis,
                            p.get("transpose", False))
    assert y.shape == expected.shape
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("InnerProduct")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("transpose, bias_term", [(False, True), (True, True), (False, False)])
def test_inner_product_after_convolution(transpose, bias_term, data_format):
    """A 4-D conv top read in Caffe's (C, H, W) order: the kernel rows are permuted at import."""
    x = randn(2, 3, 4, 5)
    cw, cb = randn(6, 3, 1, 1), randn(6)
    conv = np.einsum("nchw,oc->nohw", x, cw[:, :, 0, 0]) + cb[None, :, None, None]
    k = 6 * 4 * 5
    w = randn(k, 7) if transpose else randn(7, k)
    b = randn(7)
    text = ('layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
            'convolution_param { num_output: 6 kernel_size: 1 } }\n'
            + ip_text(bottom="conv", num_output=7, transpose=transpose, bias_term=bias_term))
    weights = {"conv": [cw, cb], "ip": [w, b] if bias_term else [w]}
    y = run_layers(text, {"data": x}, weights, data_format)["ip"]
    np.testing.assert_allclose(y, ip_reference(conv, w, b if bias_term else None, 1, transpose),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.layer_type("InnerProduct")
def test_inner_product_bad_num_output():
    with pytest.raises(LayerError, match=r"layer 'ip': \(InnerProduct\) num_output must be positive"):
        run_layers(ip_text(num_output=0), {"data": np.zeros((2, 3))})


@pytest.mark.layer_type("InnerProduct")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["4d_axis1", "4d_axis1_transpose", "4d_axis2", "no_bias"])
def test_inner_product_blob_round_trip(case, data_format):
    """Including the (C, H, W) row permutation of a channels-last image input."""
    shape, p = IP_CASES[case]
    text = ('layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
            f'convolution_param {{ num_output: {shape[1]} kernel_size: 1 }} }}\n'
            + ip_text(bottom="conv", **p))
    model = build(text, {"data": np.zeros(shape, np.float32)}, data_format=data_format)
    axis = p.get("axis", 1)
    k = int(np.prod(shape[axis:]))
    w = randn(k, p["num_output"]) if p.get("transpose") else randn(p["num_output"], k)
    blobs = [w] if p.get("bias_term") is False else [w, randn(p["num_output"])]
    assert_round_trip(model, {"ip": blobs, "conv": [randn(shape[1], shape[1], 1, 1),
                                                     randn(shape[1])]})


# -- BatchNorm ------------------------------------------------------------------


def bn_text(name="bn", **p):
    return (f'layer {{ name: "{name}" type: "BatchNorm" bottom: "data" top: "{name}" '
            f'batch_norm_param {{ {text_of(p)} }} }}')


def bn_global_reference(x, blobs, eps):
    s = blobs[2][0]
    factor = 0.0 if s == 0 else 1.0 / s
    shape = [1, -1] + [1] * (x.ndim - 2)
    mean = (blobs[0] * factor).reshape(shape)
    var = (blobs[1] * factor).reshape(shape)
    return (x - mean) / np.sqrt(var + eps)


def bn_blobs(c, scale_factor):
    return [randn(c), np.abs(randn(c)) + 0.5, np.array([scale_factor], np.float32)]


@pytest.mark.layer_type("BatchNorm")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3)])
@pytest.mark.parametrize("scale_factor", [0.0, 1.0, 7.5])
@pytest.mark.parametrize("phase, params", [("TEST", {}), ("TRAIN", dict(use_global_stats=True))])
def test_batch_norm_global_stats(phase, params, scale_factor, shape, data_format):
    """Blob 2 divides blobs 0 and 1; a zero scale factor means zero statistics."""
    x = randn(*shape)
    blobs = bn_blobs(shape[1], scale_factor)
    y = run_layers(bn_text(**params), {"data": x}, {"bn": blobs}, data_format, phase=phase,
                   training=phase == "TRAIN")["bn"]
    np.testing.assert_allclose(y, bn_global_reference(x, blobs, 1e-5), rtol=1e-4, atol=1e-5)


@pytest.mark.layer_type("BatchNorm")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("eps", [1e-3, 0.5])
def test_batch_norm_eps_is_added_to_the_variance(eps, data_format):
    x = randn(2, 3, 4, 4)
    blobs = [randn(3), np.array([1e-3, 0.2, 2.0], np.float32), np.array([1.0], np.float32)]
    y = run_layers(bn_text(eps=eps), {"data": x}, {"bn": blobs}, data_format)["bn"]
    np.testing.assert_allclose(y, bn_global_reference(x, blobs, eps), rtol=1e-5, atol=1e-5)


def bn_train_reference(x, blobs, eps, maf):
    """Caffe's TRAIN forward: batch statistics, then the running-sum updates."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=axes)
    shape = [1, -1] + [1] * (x.ndim - 2)
    var = ((x64 - mean.reshape(shape)) ** 2).mean(axis=axes)
    y = (x64 - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps)
    m = x.size // x.shape[1]
    correction = m / (m - 1) if m > 1 else 1.0
    updated = [maf * blobs[0] + mean, maf * blobs[1] + correction * var,
               maf * blobs[2] + 1.0]
    return y, updated


@pytest.mark.layer_type("BatchNorm")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape", [(3, 2, 4, 5), (5, 3)])
def test_batch_norm_train_phase_updates_the_three_blobs(shape, data_format):
    x = randn(*shape, scale=2.0) + 1.0
    blobs = bn_blobs(shape[1], 3.0)
    model = build(bn_text(moving_average_fraction=0.9, eps=1e-4), {"data": x}, {"bn": blobs},
                  data_format, phase="TRAIN")
    y = call(model, {"data": x}, data_format, training=True)
    expected, updated = bn_train_reference(x, blobs, 1e-4, 0.9)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    after = caffe_layers(model)["bn"].caffe_blobs()
    for got, want in zip(after, updated):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # A second call accumulates again.
    call(model, {"data": x}, data_format, training=True)
    _, twice = bn_train_reference(x, [u.astype(np.float32) for u in updated], 1e-4, 0.9)
    for got, want in zip(caffe_layers(model)["bn"].caffe_blobs(), twice):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("BatchNorm")
def test_batch_norm_batch_of_one_value_per_channel_skips_the_correction():
    """m == 1 value per channel: Caffe's bias correction factor is 1 (not m / (m - 1))."""
    x = randn(1, 3)
    blobs = bn_blobs(3, 1.0)
    model = build(bn_text(moving_average_fraction=0.5), {"data": x}, {"bn": blobs}, phase="TRAIN")
    call(model, {"data": x}, "channels_last", training=True)
    _, updated = bn_train_reference(x, blobs, 1e-5, 0.5)
    for got, want in zip(caffe_layers(model)["bn"].caffe_blobs(), updated):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("BatchNorm")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_batch_norm_use_global_stats_true_in_train_leaves_the_blobs(data_format):
    x = randn(2, 3, 4, 4)
    blobs = bn_blobs(3, 2.0)
    model = build(bn_text(use_global_stats=True), {"data": x}, {"bn": blobs}, data_format,
                  phase="TRAIN")
    y = call(model, {"data": x}, data_format, training=True)
    np.testing.assert_allclose(y, bn_global_reference(x, blobs, 1e-5), rtol=1e-4, atol=1e-5)
    for got, want in zip(caffe_layers(model)["bn"].caffe_blobs(), blobs):
        np.testing.assert_array_equal(got, want)


@pytest.mark.layer_type("BatchNorm")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_batch_norm_blob_round_trip(data_format):
    model = build(bn_text(), {"data": np.zeros((1, 3, 2, 2), np.float32)},
                  data_format=data_format)
    assert caffe_layers(model)["bn"].caffe_blob_shapes() == [(3,), (3,), (1,)]
    assert_round_trip(model, {"bn": bn_blobs(3, 999.0)})


# -- Scale ----------------------------------------------------------------------


def scale_text(name="scale", bottoms=("data",), **p):
    bottom = " ".join(f'bottom: "{b}"' for b in bottoms)
    return (f'layer {{ name: "{name}" type: "Scale" {bottom} top: "{name}" '
            f'scale_param {{ {text_of(p)} }} }}')


def scale_reference(x, gamma, beta, axis):
    """Caffe's Scale: gamma (and beta) line up with x's axes from ``axis`` on."""
    shape = [1] * axis + list(gamma.shape) + [1] * (x.ndim - axis - gamma.ndim)
    y = x * gamma.reshape(shape)
    return y + beta.reshape(shape) if beta is not None else y


SCALE_CASES = {
    # name: (input shape, params, caffe axis, blob shape)
    "per_channel": ((2, 3, 4, 5), dict(), 1, (3,)),
    "per_channel_bias": ((2, 3, 4, 5), dict(bias_term=True), 1, (3,)),
    "channel_and_height": ((2, 3, 4, 5), dict(axis=1, num_axes=2, bias_term=True), 1, (3, 4)),
    "spatial_to_end": ((2, 3, 4, 5), dict(axis=2, num_axes=-1), 2, (4, 5)),
    "last_axis": ((2, 3, 4, 5), dict(axis=-1, bias_term=True), 3, (5,)),
    "all_but_batch": ((2, 3, 4, 5), dict(axis=1, num_axes=-1), 1, (3, 4, 5)),
    "scalar": ((2, 3, 4, 5), dict(num_axes=0, bias_term=True), 1, ()),
    "2d_per_feature": ((4, 6), dict(bias_term=True), 1, (6,)),
}


@pytest.mark.layer_type("Scale")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(SCALE_CASES))
def test_scale_learned(case, data_format):
    shape, p, axis, blob_shape = SCALE_CASES[case]
    x = randn(*shape)
    gamma, beta = randn(*blob_shape), randn(*blob_shape)
    blobs = [gamma, beta] if p.get("bias_term") else [gamma]
    y = run_layers(scale_text(**p), {"data": x}, {"scale": blobs}, data_format)["scale"]
    expected = scale_reference(x, gamma, beta if p.get("bias_term") else None, axis)
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Scale")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_scale_two_bottoms_axis_0_se_block(data_format):
    """Squeeze-and-excitation: (N, C, H, W) scaled by a per-sample (N, C) blob."""
    x, s = randn(3, 4, 5, 2), randn(3, 4)
    y = run_layers(scale_text(bottoms=("data", "se"), axis=0), {"data": x, "se": s},
                   data_format=data_format)["scale"]
    np.testing.assert_allclose(y, x * s[:, :, None, None], rtol=1e-6)


@pytest.mark.layer_type("Scale")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_scale_se_block_from_pooling_and_inner_product(data_format):
    """The SE pattern end to end: global pooling, InnerProduct, Scale axis 0."""
    x = randn(2, 4, 3, 3)
    w, b = randn(4, 4), randn(4)
    text = ('layer { name: "squeeze" type: "Pooling" bottom: "data" top: "squeeze" '
            'pooling_param { pool: AVE global_pooling: true } }\n'
            + ip_text("excite", bottom="squeeze", num_output=4) + "\n"
            + scale_text(bottoms=("data", "excite"), axis=0))
    y = run_layers(text, {"data": x}, {"excite": [w, b]}, data_format, outputs=["scale"])["scale"]
    excite = x.mean(axis=(2, 3)) @ w.T + b
    np.testing.assert_allclose(y, x * excite[:, :, None, None], rtol=1e-4, atol=1e-5)


@pytest.mark.layer_type("Scale")
def test_scale_two_bottoms_needs_axis_0():
    with pytest.raises(LayerError, match="layer 'scale': two-bottom Scale needs axis: 0"):
        run_layers(scale_text(bottoms=("data", "se")),
                   {"data": np.zeros((2, 3, 4, 4)), "se": np.zeros((2, 3))})


@pytest.mark.layer_type("Scale")
def test_scale_num_axes_past_the_end_is_refused():
    with pytest.raises(LayerError, match="layer 'scale': axis 2 with num_axes 3 does not fit"):
        run_layers(scale_text(axis=2, num_axes=3), {"data": np.zeros((2, 3, 4, 4))})


@pytest.mark.layer_type("Scale")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["per_channel", "per_channel_bias", "channel_and_height",
                                  "scalar"])
def test_scale_blob_round_trip(case, data_format):
    shape, p, _, blob_shape = SCALE_CASES[case]
    model = build(scale_text(**p), {"data": np.zeros(shape, np.float32)},
                  data_format=data_format)
    blobs = [randn(*blob_shape), randn(*blob_shape)] if p.get("bias_term") else [randn(*blob_shape)]
    assert_round_trip(model, {"scale": blobs})


# -- Convolution (its blobs) ---------------------------------------------------------


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("p, w_shape", [
    (dict(num_output=6, kernel_h=3, kernel_w=2), (6, 4, 3, 2)),
    (dict(num_output=6, kernel_size=3, group=2), (6, 2, 3, 3)),
    (dict(num_output=8, kernel_size=3, group=4), (8, 1, 3, 3)),          # depthwise
    (dict(num_output=4, kernel_size=1, bias_term=False), (4, 4, 1, 1)),
])
def test_convolution_blob_round_trip(p, w_shape, data_format):
    text = (f'layer {{ name: "conv" type: "Convolution" bottom: "data" top: "conv" '
            f'convolution_param {{ {text_of(p)} }} }}')
    model = build(text, {"data": np.zeros((1, 4, 5, 5), np.float32)}, data_format=data_format)
    blobs = [randn(*w_shape)] + ([] if p.get("bias_term") is False else [randn(w_shape[0])])
    assert_round_trip(model, {"conv": blobs})


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.layer_type("Embed")
def test_saved_model_with_deconvolution_and_embed_reloads(tmp_path):
    """A .keras file of an imported net reloads with the same numbers (after import keras_caffe)."""
    text = (deconv_text(num_output=4, kernel_size=4, stride=2, pad=1, group=2) + "\n"
            'layer { name: "embed" type: "Embed" bottom: "ids" top: "embed" '
            'embed_param { num_output: 3 input_dim: 5 } }')
    inputs = {"data": randn(2, 4, 3, 3), "ids": np.array([[0, 4, 2], [1, 1, 3]], np.float32)}
    weights = {"deconv": [randn(4, 2, 4, 4), randn(4)], "embed": [randn(5, 3), randn(3)]}
    model = build(text, inputs, weights)
    feed = [to_keras_layout(a, "channels_last") for a in inputs.values()]
    before = model(feed)
    model.save(tmp_path / "net.keras")
    loaded = keras.models.load_model(tmp_path / "net.keras")
    after = loaded(feed)
    for name in ("deconv", "embed"):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(after[name]),
                                      keras.ops.convert_to_numpy(before[name]))

"""BN against numpy ports of the two forks' bn_layer.cpp.

- SegNet (alexgkendall/caffe-segnet, src/caffe/layers/bn_layer.cpp):
  ``Forward_cpu`` (LEARN: the batch's mean E[x] and variance E[x^2] - E[x]^2
  over N, H, W in every phase, eps 1e-9; INFERENCE: x * scale + shift; the
  optional tops 2 and 3 are the batch mean and variance) and
  ``Backward_cpu`` (both modes).
- PSPNet (hszhao/PSPNet, src/caffe/layers/bn_layer.cpp): ``Forward_cpu``
  (running statistics in TEST or when frozen; else the batch's, biased,
  with ``running = (1 - momentum) * batch + momentum * running``) and
  ``Backward_cpu`` (frozen: dy * slope / std only; else the full one).

The two differ in everything but the type name: blobs (2 vs 4, all
(1, C, 1, 1)), statistics (SegNet keeps none and uses the batch's even in
TEST unless INFERENCE; PSPNet keeps running ones), eps (1e-9 fixed vs
``eps``), the variance formula, the extra tops (SegNet only).
"""

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, load_into
from keras_caffe.analysis import analyze
from keras_caffe.importers.net.blobs import caffe_layers
from keras_caffe.proto import caffe_pb2
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients, no_gradient, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

SEGNET_EPS = 1e-9


def blob(v):
    return np.asarray(v, np.float32).reshape(1, -1, 1, 1)


def per_channel(v, ndim):
    return np.asarray(v, np.float64).reshape((1, -1) + (1,) * (ndim - 2))


def _axes(x):
    return (0,) + tuple(range(2, x.ndim))


def segnet_forward(x, scale, shift, mode="LEARN"):
    """SegNet's BNLayer::Forward_cpu: (top, batch mean, batch variance)."""
    x = x.astype(np.float64)
    scale, shift = per_channel(scale, x.ndim), per_channel(shift, x.ndim)
    if mode == "INFERENCE":
        return x * scale + shift, None, None
    spatial = tuple(range(2, x.ndim))
    mean = x.mean(axis=spatial, keepdims=True).mean(axis=0, keepdims=True)  # spatial, then batch
    ex2 = (x ** 2).mean(axis=spatial, keepdims=True).mean(axis=0, keepdims=True)
    variance = ex2 - mean ** 2
    top = (x - mean) / np.sqrt(variance + SEGNET_EPS) * scale + shift
    return top, mean.reshape(1, -1, 1, 1), variance.reshape(1, -1, 1, 1)


def segnet_backward(x, scale, top_diff, mode="LEARN"):
    """SegNet's BNLayer::Backward_cpu: (bottom diff, scale diff, shift diff)."""
    x, dy = x.astype(np.float64), top_diff.astype(np.float64)
    axes = _axes(x)
    s = per_channel(scale, x.ndim)
    if mode == "INFERENCE":
        return s * dy, (x * dy).sum(axes), dy.sum(axes)
    mean = x.mean(axis=axes, keepdims=True)
    std = np.sqrt((x ** 2).mean(axis=axes, keepdims=True) - mean ** 2 + SEGNET_EPS)
    x_norm = (x - mean) / std
    g = s * dy
    m = x.size / x.shape[1]
    bottom = (g - (x_norm * (x_norm * g).sum(axes, keepdims=True)
                   + g.sum(axes, keepdims=True)) / m) / std
    return bottom, (x_norm * dy).sum(axes), dy.sum(axes)


def pspnet_forward(x, slope, bias, mean, variance, eps=1e-5, momentum=0.9, use_running=True):
    """PSPNet's BNLayer::Forward_cpu: (top, new running mean, new running variance)."""
    x = x.astype(np.float64)
    axes = _axes(x)
    if use_running:
        m, v = per_channel(mean, x.ndim), per_channel(variance, x.ndim)
        new_mean, new_var = np.asarray(mean), np.asarray(variance)
    else:
        m = x.mean(axis=axes, keepdims=True)
        v = ((x - m) ** 2).mean(axis=axes, keepdims=True)
        new_mean = (1 - momentum) * m.reshape(-1) + momentum * np.asarray(mean)
        new_var = (1 - momentum) * v.reshape(-1) + momentum * np.asarray(variance)
    top = (x - m) * (v + eps) ** -0.5 * per_channel(slope, x.ndim) + per_channel(bias, x.ndim)
    return top, new_mean, new_var


def pspnet_backward(x, slope, variance, top_diff, eps=1e-5, frozen=False):
    """PSPNet's BNLayer::Backward_cpu: (bottom diff, slope diff, bias diff)."""
    x, dy = x.astype(np.float64), top_diff.astype(np.float64)
    axes = _axes(x)
    s = per_channel(slope, x.ndim)
    if frozen:
        return dy * s / np.sqrt(per_channel(variance, x.ndim) + eps), None, None
    mean = x.mean(axis=axes, keepdims=True)
    inv_std = (((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps) ** -0.5
    x_norm = (x - mean) * inv_std
    g = s * dy
    m = x.size / x.shape[1]
    bottom = (g - (x_norm * (x_norm * g).sum(axes, keepdims=True)
                   + g.sum(axes, keepdims=True)) / m) * inv_std
    return bottom, (x_norm * dy).sum(axes), dy.sum(axes)


def bn_text(bn_param, tops=("bn",), params=0, bottom="data"):
    return (f'layer {{ name: "bn" type: "BN" bottom: "{bottom}" '
            + "".join(f'top: "{t}" ' for t in tops)
            + "param { lr_mult: 1 decay_mult: 0 } " * params
            + f"bn_param {{ {bn_param} }} }}\n")


def net(text, shape):
    return ('layer { name: "in" type: "Input" top: "data" input_param { shape { '
            + " ".join(f"dim: {d}" for d in shape) + " } } }\n" + text)


RNG = np.random.default_rng(0)
X = (RNG.standard_normal((3, 4, 5, 6)) * 2 + 1).astype(np.float32)
SCALE = RNG.uniform(0.5, 2, 4).astype(np.float32)
SHIFT = RNG.standard_normal(4).astype(np.float32)
MEAN = RNG.standard_normal(4).astype(np.float32)
VAR = RNG.uniform(0.5, 3, 4).astype(np.float32)


# -- SegNet -----------------------------------------------------------------------


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_segnet_inference(data_format):
    text = bn_text("bn_mode: INFERENCE")
    got = run_layers(text, {"data": X}, {"bn": [blob(SCALE), blob(SHIFT)]}, data_format)["bn"]
    np.testing.assert_allclose(got, segnet_forward(X, SCALE, SHIFT, "INFERENCE")[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("training", [False, True])
def test_segnet_learn_uses_the_batch_statistics_in_every_phase(data_format, training):
    text = bn_text("bn_mode: LEARN")
    got = run_layers(text, {"data": X}, {"bn": [blob(SCALE), blob(SHIFT)]}, data_format,
                     phase="TEST", training=training)["bn"]
    np.testing.assert_allclose(got, segnet_forward(X, SCALE, SHIFT)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_segnet_batch_mean_and_variance_tops(data_format):
    """compute_bn_statistics.py's way: LEARN mode with two more tops."""
    text = bn_text("", tops=("bn", "bn_mean", "bn_var"))
    got = run_layers(text, {"data": X}, {"bn": [blob(SCALE), blob(SHIFT)]}, data_format)
    top, mean, variance = segnet_forward(X, SCALE, SHIFT)
    np.testing.assert_allclose(got["bn"], top, rtol=1e-4, atol=1e-4)
    assert got["bn_mean"].shape == got["bn_var"].shape == (1, 4, 1, 1)
    np.testing.assert_allclose(got["bn_mean"], mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["bn_var"], variance, rtol=1e-4, atol=1e-4)  # before eps
    two = run_layers(bn_text("", tops=("bn", "bn_mean")), {"data": X},
                     {"bn": [blob(SCALE), blob(SHIFT)]}, data_format)
    np.testing.assert_allclose(two["bn_mean"], mean, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("mode", ["LEARN", "INFERENCE"])
def test_segnet_on_a_2d_blob(mode):
    """Blob::height() and width() are 1 for an (N, C) blob."""
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    got = run_layers(bn_text(f"bn_mode: {mode}"), {"data": x},
                     {"bn": [blob(SCALE), blob(SHIFT)]})["bn"]
    np.testing.assert_allclose(got, segnet_forward(x, SCALE, SHIFT, mode)[0], rtol=1e-4,
                               atol=1e-4)


def _gradients(text, shape, weights, x, cotangent, data_format, training):
    model = import_model(net(text, shape), data_format=data_format, phase="TRAIN")
    load_into(model, weights)
    layer = caffe_layers(model)["bn"]
    top = to_keras_layout(cotangent, data_format)
    (dx,), grads = gradients(lambda feed: weighted_sum(model(feed, training=training), top),
                             [to_keras_layout(x, data_format)], layer.caffe_variables()[:2])
    return [from_keras_layout(dx, data_format)] + grads


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("mode", ["LEARN", "INFERENCE"])
def test_segnet_gradients_are_the_forks(mode, data_format):
    cotangent = RNG.standard_normal(X.shape).astype(np.float32)
    got = _gradients(bn_text(f"bn_mode: {mode}"), X.shape, {"bn": [blob(SCALE), blob(SHIFT)]},
                     X, cotangent, data_format, training=True)
    for g, e in zip(got, segnet_backward(X, SCALE, cotangent, mode)):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-3)


# -- PSPNet -----------------------------------------------------------------------

PSP_WEIGHTS = {"bn": [blob(SCALE), blob(SHIFT), blob(MEAN), blob(VAR)]}


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("bn_param", ["frozen: true momentum: 0.95", "eps: 0.001",
                                      "slope_filler { type: 'constant' value: 1 }",
                                      # PSPNet's engine is an enum: its names parse.
                                      "engine: CUDNN", "engine: 1"])
def test_pspnet_test_phase_uses_the_running_statistics(bn_param, data_format):
    eps = 1e-3 if "eps" in bn_param else 1e-5
    got = run_layers(bn_text(bn_param), {"data": X}, PSP_WEIGHTS, data_format)["bn"]
    expected = pspnet_forward(X, SCALE, SHIFT, MEAN, VAR, eps=eps)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_pspnet_training_uses_the_batch_and_updates_the_running_statistics(data_format):
    model = import_model(net(bn_text("momentum: 0.8 eps: 0.0001"), X.shape),
                         data_format=data_format, phase="TRAIN")
    load_into(model, PSP_WEIGHTS)
    layer = caffe_layers(model)["bn"]
    mean, variance = MEAN, VAR
    for step in range(2):
        x = (X + step).astype(np.float32)
        got = from_keras_layout(
            keras.ops.convert_to_numpy(model(to_keras_layout(x, data_format), training=True)),
            data_format)
        top, mean, variance = pspnet_forward(x, SCALE, SHIFT, mean, variance, eps=1e-4,
                                             momentum=0.8, use_running=False)
        np.testing.assert_allclose(got, top, rtol=1e-4, atol=1e-4)
        blobs = layer.caffe_blobs()
        np.testing.assert_allclose(blobs[2], blob(mean), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(blobs[3], blob(variance), rtol=1e-5, atol=1e-5)
    # Inference afterwards reads the updated running statistics.
    got = from_keras_layout(keras.ops.convert_to_numpy(
        model(to_keras_layout(X, data_format), training=False)), data_format)
    np.testing.assert_allclose(got, pspnet_forward(X, SCALE, SHIFT, mean, variance, eps=1e-4)[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_pspnet_frozen_keeps_the_running_statistics_when_training(data_format):
    text = bn_text("frozen: true")
    cotangent = RNG.standard_normal(X.shape).astype(np.float32)
    got = _gradients(text, X.shape, PSP_WEIGHTS, X, cotangent, data_format, training=True)
    expected = pspnet_backward(X, SCALE, VAR, cotangent, frozen=True)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)
    assert no_gradient(got[1]) and no_gradient(got[2])  # no slope or bias update
    model = import_model(net(text, X.shape), data_format=data_format, phase="TRAIN")
    load_into(model, PSP_WEIGHTS)
    out = model(to_keras_layout(X, data_format), training=True)
    np.testing.assert_allclose(from_keras_layout(keras.ops.convert_to_numpy(out), data_format),
                               pspnet_forward(X, SCALE, SHIFT, MEAN, VAR)[0], rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_array_equal(caffe_layers(model)["bn"].caffe_blobs()[2], blob(MEAN))


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_pspnet_training_gradients_are_the_forks(data_format):
    cotangent = RNG.standard_normal(X.shape).astype(np.float32)
    got = _gradients(bn_text("momentum: 0.9"), X.shape, PSP_WEIGHTS, X, cotangent, data_format,
                     training=True)
    for g, e in zip(got, pspnet_backward(X, SCALE, VAR, cotangent)):
        np.testing.assert_allclose(g, e, rtol=1e-3, atol=1e-3)


@pytest.mark.layer_type("BN")
def test_pspnet_forces_the_forks_multipliers():
    """BNLayer::LayerSetUp: lr_mult and decay_mult 0 for the statistics, and
    for slope and bias too when frozen, whatever the prototxt says."""
    text = ('param { lr_mult: 1 decay_mult: 0 } param { lr_mult: 2 decay_mult: 1 } '
            'param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 1 decay_mult: 1 } ')
    for frozen, expected in (("false", [[1, 0], [2, 1], [0, 0], [0, 0]]),
                             ("true", [[0, 0]] * 4)):
        layer = (f'layer {{ name: "bn" type: "BN" bottom: "data" top: "bn" {text} '
                 f"bn_param {{ frozen: {frozen} }} }}\n")
        model = import_model(net(layer, (1, 3, 2, 2)), phase="TRAIN")
        assert caffe_layers(model)["bn"].param_multipliers == expected


# -- blobs, fillers, the two forms ------------------------------------------------------


@pytest.mark.layer_type("BN")
def test_blobs_fillers_and_analyze():
    psp = ('bn_param { slope_filler { type: "constant" value: 1 } bias_filler { type: "constant" '
           'value: 0.5 } frozen: true }')
    seg = 'bn_param { shift_filler { type: "constant" value: 0.001 } }'
    text = net(f'layer {{ name: "bn" type: "BN" bottom: "data" top: "a" {psp} }}\n'
               f'layer {{ name: "bn2" type: "BN" bottom: "a" top: "b" {seg} }}\n'
               f'layer {{ name: "bn3" type: "BN" bottom: "b" top: "c" '
               'bn_param { momentum: 0.5 } }\n', (1, 3, 4, 4))
    layers = caffe_layers(import_model(text))
    psp_blobs = layers["bn"].caffe_blobs()
    assert [b.shape for b in psp_blobs] == [(1, 3, 1, 1)] * 4
    np.testing.assert_array_equal(np.concatenate(psp_blobs).ravel(),
                                  [1] * 3 + [0.5] * 3 + [0] * 3 + [1] * 3)  # frozen: var 1
    assert layers["bn3"].caffe_blobs()[3].ravel().tolist() == [0, 0, 0]  # not frozen: var 0
    seg_blobs = layers["bn2"].caffe_blobs()
    assert layers["bn2"].caffe_blob_shapes() == [(1, 3, 1, 1)] * 2
    np.testing.assert_allclose(np.concatenate(seg_blobs).ravel(), [0] * 3 + [0.001] * 3)
    rows = {r.name: r for r in analyze(text).layers}
    assert rows["bn"].weight_shapes == ((1, 3, 1, 1),) * 4
    assert rows["bn2"].weight_shapes == ((1, 3, 1, 1),) * 2
    assert rows["bn"].tops == (("a", (1, 3, 4, 4)),)


@pytest.mark.layer_type("BN")
def test_a_fork_caffemodel_loads(tmp_path):
    """The blobs as the forks save them, (1, C, 1, 1), from a .caffemodel."""
    weights = caffe_pb2.NetParameter()
    for name, arrays in (("psp", PSP_WEIGHTS["bn"]), ("seg", [blob(SCALE), blob(SHIFT)])):
        layer = weights.layer.add(name=name, type="BN")
        for array in arrays:
            proto = layer.blobs.add()
            proto.shape.dim.extend(array.shape)
            proto.data.extend(array.ravel().tolist())
    path = tmp_path / "bn.caffemodel"
    path.write_bytes(weights.SerializeToString())
    text = net('layer { name: "psp" type: "BN" bottom: "data" top: "a" '
               'bn_param { frozen: true } }\n'
               'layer { name: "seg" type: "BN" bottom: "a" top: "b" '
               'bn_param { bn_mode: INFERENCE } }\n', X.shape)
    model = import_model(text, weights=path, data_format="channels_first")
    got = keras.ops.convert_to_numpy(model(X))
    top = pspnet_forward(X, SCALE, SHIFT, MEAN, VAR)[0]
    np.testing.assert_allclose(got, segnet_forward(top, SCALE, SHIFT, "INFERENCE")[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("BN")
def test_saved_model_reloads(tmp_path):
    text = net(bn_text("frozen: true") + 'layer { name: "bn2" type: "BN" bottom: "bn" top: "b2" '
               'bn_param { } param { } param { } }\n', (2, 4, 3, 3))
    model = import_model(text)
    load_into(model, {**PSP_WEIGHTS, "bn2": [blob(SCALE), blob(SHIFT)]})
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    x = to_keras_layout(X[:2, :, :3, :3], "channels_last")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(x)),
                               keras.ops.convert_to_numpy(model(x)), rtol=1e-6)


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("layer, fork", [
    (bn_text("", params=2), "SegNet"),   # no bn_param field: 2 param { } is SegNet's
    (bn_text("", params=4), "PSPNet"),
])
def test_the_number_of_params_tells_the_forks_apart(layer, fork):
    row = analyze(net(layer, (1, 3, 2, 2))).layers[-1]
    assert len(row.weight_shapes) == (2 if fork == "SegNet" else 4)


def _refused(text, message, shape=(2, 3, 4, 4)):
    with pytest.raises(LayerError, match="^layer 'bn': " + message + "$"):
        run_layers(text, {"data": np.zeros(shape, np.float32)})


@pytest.mark.layer_type("BN")
@pytest.mark.parametrize("text, message", [
    (bn_text("bn_mode: LEARN frozen: true"),
     r"\(BN\) mixes SegNet's bn_param fields \(bn_mode\) with PSPNet's \(frozen\); one BN layer "
     r"is either fork's"),
    (bn_text("", params=3),
     r"\(BN\) cannot tell SegNet's BN \(bn_mode, scale_filler, shift_filler; 2 blobs\) from "
     r"PSPNet's \(slope_filler, bias_filler, momentum, eps, frozen; 4 blobs\): give one of those "
     r"bn_param fields, or 2 or 4 param \{ \}"),
    (bn_text("frozen: true", tops=("a", "b")), r"\(BN\) PSPNet's BN has one top, got 2"),
    (bn_text("bn_mode: INFERENCE", tops=("a", "b")),
     r"\(BN\) SegNet's BN has one top with bn_mode INFERENCE, got 2"),
    (bn_text("bn_mode: LEARN", tops=("a", "b", "c", "d")),
     r"\(BN\) SegNet's BN has 1 to 3 tops \(output, batch mean, batch variance\), got 4"),
])
def test_bad_parameters(text, message):
    _refused(text, message)


@pytest.mark.layer_type("BN")
def test_bn_needs_2_to_4_axes():
    _refused(bn_text("bn_mode: LEARN"), r"\(BN\) needs a 2- to 4-D input \(N, C, H, W\), got "
                                        r"\(1, 2, 3, 4, 5\)", shape=(1, 2, 3, 4, 5))

"""The fused BatchNorm -> Scale layer equals the two Caffe layers it replaces."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from keras_caffe.layers import BatchNorm, BatchNormScale, Scale

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

NET = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 dim: 5 dim: 5 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 6 kernel_size: 3 bias_term: false } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" batch_norm_param { moving_average_fraction: 0.9 } }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" param { lr_mult: 3 decay_mult: 0 }
        param { lr_mult: 4 decay_mult: 0 } scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
"""


def blobs(rng):
    return {"bn": [rng.rand(6).astype("float32"), rng.rand(6).astype("float32") + 1,
                   np.array([0.5], "float32")],
            "scale": [rng.randn(6).astype("float32"), rng.randn(6).astype("float32")]}


def test_idiom_is_fused_and_keeps_both_caffe_layers(tmp_path):
    model = keras_caffe.import_model(NET, phase="TRAIN")
    kinds = [type(layer).__name__ for layer in model.layers]
    assert "BatchNormScale" in kinds and "BatchNorm" not in kinds and "Scale" not in kinds
    weights = blobs(np.random.RandomState(0))
    with pytest.warns(UserWarning, match=r"no weights for layer\(s\) conv;"):
        keras_caffe.importers.load_into(model, weights)
    out = keras_caffe.export_caffemodel(model, tmp_path / "w.caffemodel")
    exported = keras_caffe.importers.load_weights(out)
    for name in ("bn", "scale"):
        for a, b in zip(exported[name], weights[name]):
            np.testing.assert_array_equal(a, b)
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    assert lr_mult["bn/gamma"] == 3.0 and lr_mult["bn/beta"] == 4.0 and decay_mult["bn/beta"] == 0.0
    assert lr_mult["bn/mean_sum"] == 0.0  # Caffe's BatchNorm default for its statistics


@pytest.mark.parametrize("training", [False, True])
def test_fused_equals_batchnorm_then_scale(training):
    rng = np.random.RandomState(1)
    x = tf.constant(rng.randn(4, 5, 5, 6).astype("float32"))
    weights = blobs(rng)
    fused = BatchNormScale(scale_name="scale", bias_term=True, moving_average_fraction=0.9)
    bn, scale = BatchNorm(moving_average_fraction=0.9), Scale(axis=-1, bias_term=True)
    fused.build(x.shape), bn.build(x.shape), scale.build(x.shape)
    fused.set_caffe_blobs(weights["bn"] + weights["scale"])
    bn.set_caffe_blobs(weights["bn"])
    scale.set_caffe_blobs(weights["scale"])
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        y_fused = fused(x, training=training)
        y_pair = scale(bn(x, training=training))
        loss_fused = tf.reduce_sum(y_fused * y_fused)
        loss_pair = tf.reduce_sum(y_pair * y_pair)
    np.testing.assert_allclose(y_fused, y_pair, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tape.gradient(loss_fused, x), tape.gradient(loss_pair, x),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(tape.gradient(loss_fused, fused.gamma),
                               tape.gradient(loss_pair, scale.gamma), rtol=1e-4, atol=1e-4)
    # Caffe's running sums moved the same way (or not at all).
    for a, b in zip(fused.caffe_blobs()[:3], bn.caffe_blobs()):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    if training:
        assert fused.caffe_blobs()[2][0] == pytest.approx(0.5 * 0.9 + 1)


def test_not_fused_when_the_batchnorm_output_is_read_elsewhere():
    net = NET.replace('layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }',
                      '').replace('bottom: "conv" top: "conv" batch_norm_param',
                                  'bottom: "conv" top: "bn_out" batch_norm_param').replace(
        'name: "scale" type: "Scale" bottom: "conv" top: "conv"',
        'name: "scale" type: "Scale" bottom: "bn_out" top: "scaled"')
    net += 'layer { name: "other" type: "ReLU" bottom: "bn_out" top: "other" }\n'
    model = keras_caffe.import_model(net)
    kinds = {type(layer).__name__ for layer in model.layers}
    assert {"BatchNorm", "Scale"} <= kinds and "BatchNormScale" not in kinds


def test_fused_layer_saves_and_loads(tmp_path):
    model = keras_caffe.import_model(NET)
    with pytest.warns(UserWarning, match=r"no weights for layer\(s\) conv;"):
        keras_caffe.importers.load_into(model, blobs(np.random.RandomState(2)))
    model.save(tmp_path / "m.keras")
    loaded = keras.models.load_model(tmp_path / "m.keras")
    x = np.random.RandomState(3).randn(2, 5, 5, 3).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))

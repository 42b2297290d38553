"""``propagate_down`` and ``loss_weight`` on any top, as Caffe defines them.

- ``propagate_down: false`` on a bottom (``Net::Init``, caffe/src/caffe/net.cpp):
  the layer computes no diff for that bottom, so nothing below learns through
  it; the layer's own parameters still do.
- ``loss_weight: w`` on a non-loss layer's top (``Layer::SetLossWeights``,
  caffe/include/caffe/layer.hpp): ``w * sum(top)`` over every element, batch
  included, joins the objective; the top's diff gets ``w`` at each element.

References are float64 numpy transcriptions of those rules.
"""

import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import training_args
from keras_caffe.training.step import NetOutputs

pytestmark = pytest.mark.kernels  # parity: run under oneDNN and Eigen

N, D, H, K = 8, 6, 5, 3
RNG = np.random.RandomState(7)
X = RNG.randn(N, D).astype("float32")
T = RNG.randn(N, K).astype("float32")

NET = """
layer {{ name: "in" type: "Input" top: "x" top: "t" input_param {{ shape {{ dim: 8 dim: 6 }} shape {{ dim: 8 dim: 3 }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "x" top: "ip1" {ip1_extra}
  inner_product_param {{ num_output: 5 weight_filler {{ type: "gaussian" std: 0.5 }} bias_filler {{ type: "constant" value: 0.2 }} }} }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" {ip2_extra}
  inner_product_param {{ num_output: 3 weight_filler {{ type: "gaussian" std: 0.5 }} }} }}
layer {{ name: "loss" type: "EuclideanLoss" bottom: "ip2" bottom: "t" top: "loss" {loss_extra} }}
"""


def net(ip1_extra="", ip2_extra="", loss_extra=""):
    return NET.format(ip1_extra=ip1_extra, ip2_extra=ip2_extra, loss_extra=loss_extra)


def caffe_diffs(model, weight_on_ip1=0.0, propagate_into_ip2=True):
    """float64 diffs of Caffe's objective: EuclideanLoss + weight * sum(ip1)."""
    w1, b1 = (np.asarray(b, np.float64) for b in model.get_layer("ip1").caffe_blobs())
    w2, b2 = (np.asarray(b, np.float64) for b in model.get_layer("ip2").caffe_blobs())
    x, t = X.astype(np.float64), T.astype(np.float64)
    ip1 = x @ w1.T + b1
    ip2 = ip1 @ w2.T + b2
    loss = np.sum((ip2 - t) ** 2) / (2 * N) + weight_on_ip1 * ip1.sum()
    d2 = (ip2 - t) / N
    d1 = (d2 @ w2 if propagate_into_ip2 else 0.0) + weight_on_ip1
    return loss, [d1.T @ x if np.ndim(d1) else np.zeros_like(w1),
                  d1.sum(0) if np.ndim(d1) else np.zeros_like(b1), d2.T @ ip1, d2.sum(0)]


def keras_diffs(model):
    """The gradient of the training loop's objective, in Caffe's blob layouts."""
    outputs = NetOutputs(model)
    with tf.GradientTape() as tape:
        total, _ = outputs({"x": X, "t": T}, training=True)
    grads = tape.gradient(total, model.trainable_variables)
    grads = [np.zeros(v.shape, np.float32) if g is None else g.numpy()
             for g, v in zip(grads, model.trainable_variables)]
    blobs = (model.get_layer("ip1").caffe_from_keras_weights(grads[:2])
             + model.get_layer("ip2").caffe_from_keras_weights(grads[2:]))
    return float(total), blobs


def test_propagate_down_false_stops_the_diff_into_that_bottom_only():
    model = keras_caffe.import_model(net(ip2_extra="propagate_down: false"), phase="TRAIN")
    loss, grads = keras_diffs(model)
    ref_loss, ref = caffe_diffs(model, propagate_into_ip2=False)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for ours, theirs in zip(grads, ref):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(grads[0], 0.0)  # ip1 learns nothing through ip2
    assert np.abs(grads[2]).max() > 1e-3  # ip2's own weights still learn
    # and TensorFlow computes no gradient at all for ip1
    with tf.GradientTape() as tape:
        out = model(X)
    assert [g is None for g in tape.gradient(out, model.trainable_variables)] == [
        True, True, False, False]


def test_propagate_down_picks_bottoms_one_by_one():
    text = """
layer { name: "in" type: "Input" top: "a" top: "b" input_param { shape { dim: 2 dim: 4 } shape { dim: 2 dim: 4 } } }
layer { name: "pa" type: "InnerProduct" bottom: "a" top: "pa" inner_product_param { num_output: 3 } }
layer { name: "pb" type: "InnerProduct" bottom: "b" top: "pb" inner_product_param { num_output: 3 } }
layer { name: "sum" type: "Eltwise" bottom: "pa" bottom: "pb" top: "s" propagate_down: true propagate_down: false }
"""
    model = keras_caffe.import_model(text)
    with tf.GradientTape() as tape:
        out = model([RNG.randn(2, 4), RNG.randn(2, 4)])
    grads = tape.gradient(out, model.trainable_variables)
    stopped = {v.path: g is None for v, g in zip(model.trainable_variables, grads)}
    assert stopped == {"pa/kernel": False, "pa/bias": False, "pb/kernel": True, "pb/bias": True}


def test_propagate_down_count_is_checked_as_caffe_does():
    with pytest.raises(LayerError) as err:
        keras_caffe.import_model(
            net(loss_extra="propagate_down: true propagate_down: false propagate_down: false"),
            phase="TRAIN")
    assert str(err.value) == ("layer 'loss': propagate_down must be given 0 or 2 times "
                              "(once per bottom), got 3")


def test_propagate_down_on_a_losss_label_is_what_caffe_files_say_and_changes_nothing():
    plain = keras_caffe.import_model(net(), phase="TRAIN")
    model = keras_caffe.import_model(net(loss_extra="propagate_down: true propagate_down: false"),
                                     phase="TRAIN")
    model.set_weights(plain.get_weights())
    assert keras_diffs(model)[0] == keras_diffs(plain)[0]


def test_propagate_down_false_on_a_losss_prediction_is_refused():
    with pytest.raises(LayerError, match=r"layer 'loss': propagate_down: false on the loss's "
                                         r"prediction 'ip2' .*loss_weight: 0"):
        keras_caffe.import_model(net(loss_extra="propagate_down: false propagate_down: false"),
                                 phase="TRAIN")


@pytest.mark.parametrize("weight", [0.1, -2.0])
def test_loss_weight_on_any_top_adds_its_weighted_sum(weight):
    model = keras_caffe.import_model(net(ip1_extra=f"loss_weight: {weight}"), phase="TRAIN")
    loss, grads = keras_diffs(model)
    ref_loss, ref = caffe_diffs(model, weight_on_ip1=weight)
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-5)
    for ours, theirs in zip(grads, ref):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)


def test_loss_weight_trains_the_same_under_fit():
    model = keras_caffe.import_model(net(ip1_extra="loss_weight: 0.1"), phase="TRAIN")
    before = [np.asarray(b, np.float64) for name in ("ip1", "ip2")
              for b in model.get_layer(name).caffe_blobs()]
    _, ref = caffe_diffs(model, weight_on_ip1=0.1)
    model.compile(optimizer=keras_caffe.SGD(learning_rate=0.05), **training_args(model))
    model.fit(X, T, batch_size=N, epochs=1, shuffle=False, verbose=0)
    after = [b for name in ("ip1", "ip2") for b in model.get_layer(name).caffe_blobs()]
    for ours, start, diff in zip(after, before, ref):
        np.testing.assert_allclose(ours, start - 0.05 * diff, rtol=1e-5, atol=1e-6)


def test_loss_weight_zero_and_count():
    plain = keras_caffe.import_model(net(), phase="TRAIN")
    zero = keras_caffe.import_model(net(ip1_extra="loss_weight: 0"), phase="TRAIN")
    assert len(zero.layers) == len(plain.layers)  # nothing added for a weight of 0
    with pytest.raises(LayerError) as err:
        keras_caffe.import_model(net(ip1_extra="loss_weight: 1 loss_weight: 2"), phase="TRAIN")
    assert str(err.value) == ("layer 'ip1': loss_weight must be given 0 or 1 times "
                              "(once per top), got 2")


def test_a_model_with_top_losses_saves_and_loads(tmp_path):
    import keras

    model = keras_caffe.import_model(net(ip1_extra="loss_weight: 0.1",
                                         ip2_extra="propagate_down: false"), phase="TRAIN")
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    model(X), again(X)
    np.testing.assert_allclose(float(again.losses[0]), float(model.losses[0]), rtol=1e-6)

"""With LMS on, a training step gives the same loss and gradients as without
(1e-6 relative; remat recomputes and staging copies, so in practice they are
bit-identical): on imported Caffe nets (with BVLC Caffe's golden numbers),
on hand-written Keras models, with the Caffe solvers and with YellowFin."""

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.lms.policy import LMS
from support.lms import batch_for, conv_stack, loss_and_grads, max_relative
from support import golden_dataset, golden_net, to_keras_layout

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

TOLERANCE = 1e-6
#: with batch_parts, weight gradients are summed part by part: float32
#: rounding in another order (measured: up to 9.2e-6 relative)
PARTS_TOLERANCE = 3e-5


def twin_models(build, lms):
    """The same model twice (same seed, same weights); LMS on the second."""
    keras.utils.set_random_seed(7)
    plain = build()
    keras.utils.set_random_seed(7)
    with_lms = build()
    with_lms.set_weights(plain.get_weights())
    lms.apply(with_lms)
    return plain, with_lms


def fit(model, optimizer, x, y, steps):
    model.compile(optimizer=optimizer, jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=len(x) // steps, epochs=1, shuffle=False, verbose=0)
    return history.history["loss"], model.get_weights()


@pytest.mark.parametrize("mechanism", ["remat", "stage"])
def test_loss_and_gradients_of_a_keras_model(mechanism):
    plain, with_lms = twin_models(lambda: conv_stack(depth=8, channels=8, size=16),
                                  LMS(0, batch=8, mechanism=mechanism))
    kinds = {b.kind for b in with_lms.caffe_lms.blocks[8]}
    assert mechanism in kinds
    x, y = batch_for(plain, 8)
    loss, grads = loss_and_grads(plain, x, y)
    lms_loss, lms_grads = loss_and_grads(with_lms, x, y)
    assert abs(lms_loss - loss) <= TOLERANCE * abs(loss)
    assert max_relative(grads, lms_grads) <= TOLERANCE


@pytest.mark.parametrize("batch", [8, 7])
def test_segments_run_in_parts_of_the_batch_give_the_same_step(monkeypatch, batch):
    """With ``batch_parts``, Eigen's plan (forced here, so both kernel
    families run it) runs the convolutions' segments over parts of the batch
    (5 for 3x3 convolutions of 8 channels; uneven parts of 7): the same
    outputs, and the same gradients up to float32 rounding (the parts'
    weight gradients are summed part by part)."""
    monkeypatch.setattr("keras_caffe.lms.policy.onednn_enabled", lambda: False)
    plain, with_lms = twin_models(lambda: conv_stack(depth=6, channels=8, size=16),
                                  LMS(0, batch=batch, batch_parts=True))
    assert {b.chunks for b in with_lms.caffe_lms.blocks[batch]} == {1, 5}
    x, y = batch_for(plain, batch)
    loss, grads = loss_and_grads(plain, x, y)
    lms_loss, lms_grads = loss_and_grads(with_lms, x, y)
    assert abs(lms_loss - loss) <= TOLERANCE * abs(loss)
    assert max_relative(grads, lms_grads) <= PARTS_TOLERANCE
    # the parts' outputs are the whole batch's, sample by sample, in order
    np.testing.assert_allclose(with_lms(x, training=False), plain(x, training=False),
                               rtol=TOLERANCE, atol=TOLERANCE)


def test_stateful_layers_give_the_same_step():
    """Dropout draws the same mask and BatchNorm updates its statistics once."""
    build = lambda: conv_stack(depth=5, channels=8, size=16, dropout=True, batchnorm=True)  # noqa: E731
    plain, with_lms = twin_models(build, LMS(0, batch=8))
    x, y = batch_for(plain, 8)
    loss, grads = loss_and_grads(plain, x, y)
    lms_loss, lms_grads = loss_and_grads(with_lms, x, y)
    assert abs(lms_loss - loss) <= TOLERANCE * abs(loss)
    assert max_relative(grads, lms_grads) <= TOLERANCE
    bn, lms_bn = plain.get_layer("bn1"), with_lms.get_layer("bn1")
    assert not np.allclose(bn.moving_mean.numpy(), 0.0)
    np.testing.assert_array_equal(lms_bn.moving_mean.numpy(), bn.moving_mean.numpy())


@pytest.mark.parametrize("make_optimizer", [
    lambda: keras_caffe.SGD(learning_rate=0.05, momentum=0.9, weight_decay=5e-4,
                            lr_mult={"*/bias": 2.0}, decay_mult={"*/bias": 0.0}),
    lambda: keras_caffe.Adam(learning_rate=0.01, weight_decay=1e-4),
    lambda: keras_caffe.YellowFin(),
], ids=["caffe-sgd", "caffe-adam", "yellowfin"])
def test_training_with_caffe_solvers_and_yellowfin(make_optimizer):
    plain, with_lms = twin_models(lambda: conv_stack(depth=6, channels=8, size=16),
                                  LMS(0, batch=8))
    x, y = batch_for(plain, 24)
    initial = plain.get_weights()
    losses, weights = fit(plain, make_optimizer(), x, y, steps=3)
    lms_losses, lms_weights = fit(with_lms, make_optimizer(), x, y, steps=3)
    np.testing.assert_allclose(lms_losses, losses, rtol=TOLERANCE)
    assert max_relative(weights, lms_weights) <= TOLERANCE
    assert max_relative(initial, weights) > 1e-3  # it trained


def test_imported_train_net_replays_caffe(golden):
    """The golden tiny MLP (HDF5Data train net, init.caffemodel) with LMS on
    every layer follows BVLC Caffe's recorded SGD trajectory, as the plain
    model does (tests/optimizers/test_golden_solvers.py's tolerances), and equals the
    plain model within 1e-6."""
    folder = golden / "solvers" / "sgd"
    trajectory = np.load(folder / "trajectory.npz")
    runs = []
    for lms in (None, LMS(0)):
        model = keras_caffe.import_model(folder / "train_net.prototxt", folder / "init.caffemodel",
                                         phase="TRAIN", lms=lms)
        if lms is not None:
            kinds = {n.name: b.kind for b in model.caffe_lms.blocks[16] for n in b.nodes}
            assert kinds["ip1"] == kinds["relu1"] == "remat"
        lr_mult, decay_mult = keras_caffe.param_multipliers(model)
        optimizer = keras_caffe.optimizer_from_solver(folder / "solver.prototxt",
                                                      lr_mult=lr_mult, decay_mult=decay_mult)
        model.compile(optimizer=optimizer, jit_compile=False,
                      **keras_caffe.importers.net.compile_args.training_args(model))
        model.fit(golden_dataset(folder), steps_per_epoch=1, epochs=10, verbose=0,
                  shuffle=False)
        kernel, bias = model.get_layer("ip1").get_weights()
        runs.append((kernel.T, bias))
        np.testing.assert_allclose(kernel.T, trajectory["ip1_w"][10], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bias, trajectory["ip1_b"][10], rtol=1e-5, atol=1e-6)
    assert max_relative(list(runs[0]), list(runs[1])) <= TOLERANCE


def test_imported_net_with_branches_matches_caffe_and_itself(golden):
    """SqueezeNet v1.1 (fire modules: branches and concats) with LMS: the
    forward pass still gives Caffe's golden probabilities, and the loss and
    gradients of a training step equal those without LMS."""
    folder = golden_net("squeezenet_v1.1")
    x = to_keras_layout(np.load(folder / "input.npy"), "channels_last")
    reference = np.load(folder / "outputs.npz")["prob"].reshape(2, -1)
    models = [keras_caffe.import_model(folder / "deploy_used.prototxt",
                                       folder / "weights.caffemodel", lms=lms)
              for lms in (None, LMS(threshold_kb=100))]
    blocks = models[1].caffe_lms.blocks[2]
    assert sum(b.kind == "remat" for b in blocks) >= 5
    assert any(len(b.inputs) == 1 and any(n.layer.__class__.__name__ == "Concatenate"
                                           for n in b.nodes) for b in blocks if b.kind == "remat")
    prob = keras.ops.convert_to_numpy(models[1](x)).reshape(2, -1)
    assert np.abs(prob - reference).max() <= 1e-4 * np.abs(reference).max()

    import tensorflow as tf

    def step(model):
        @tf.function
        def run(x):
            with tf.GradientTape() as tape:
                p = model(x, training=True)
                loss = -tf.reduce_mean(tf.math.log(tf.reshape(p, (2, -1))[:, :10] + 1e-6))
            return loss, tape.gradient(loss, model.trainable_variables)
        loss, grads = run(tf.constant(x))
        return float(loss), [g.numpy() for g in grads]

    loss, grads = step(models[0])
    lms_loss, lms_grads = step(models[1])
    assert abs(lms_loss - loss) <= TOLERANCE * abs(loss)
    assert max_relative(grads, lms_grads) <= TOLERANCE

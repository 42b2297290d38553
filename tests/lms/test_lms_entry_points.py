"""Every way of training with LMS gives the plain model's numbers (issue 33):
an eager ``tf.GradientTape`` step, a ``tf.function`` step, ``model.fit``
(traced and ``run_eagerly``) and ``keras_caffe.Solver``, each with LMS
applied the README's way (``with keras_caffe.LMS(...): model = build()``;
the Solver: ``lms=``), on the issue's net: six Conv2D(32, 3, "same", relu)
on 32x32x3, global pooling, Dense(10), batch 8, ``LMS(threshold_kb=16)``.

The eager step used to fail: ``tape.watch`` in a block's gradient was handed
the Keras variables themselves (``lms_exec.read_values``). Eagerly, the
caller's tape must also not keep a rematerialized block's activations.

Tolerances: remat recomputes the same ops on the same values with the same
kernels, and staging copies, so the numbers are the plain model's bit for
bit (measured: 0 difference in loss, gradients and trained weights for
every entry point, both kernel families, TensorFlow 2.21 and 2.16).
``TOLERANCE`` (1e-6 of the largest value, about 8 float32 ulps) leaves room
for a kernel that rounds a recomputed value differently, and no more: the
gradients with the weights one SGD step on (the race ``lms_exec``
describes) are 0.23 off. With ``batch_parts`` the weight gradients are
sums over parts of the batch, in another order, and a sum with much
cancellation moves far more: c5's bias gradient (8192 terms) by 4.5e-5 to
5.1e-5 of its largest value, where the plain model's own float32 result is
as far from the float64 one and LMS's is 1.1e-5 from it. So there both are
measured against the step in float64, and LMS may add ``TOLERANCE`` to the
plain model's own float32 error (measured: at most 8.4e-8 more, both
families, TensorFlow 2.21 and 2.16).
"""

import gc
import weakref

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from support.lms import batch_for, loss_and_grads, max_relative
from training.test_solver import final_losses

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

TOLERANCE = 1e-6
BATCH = 8


def readme_net(conv=keras.layers.Conv2D):
    """The issue's net: six ``conv(32, 3, padding="same", activation="relu")``
    on 32x32x3 inputs, global average pooling, ``Dense(10)`` logits."""
    x = inputs = keras.Input((32, 32, 3), name="data")
    for i in range(6):
        x = conv(32, 3, padding="same", activation="relu", name=f"c{i}")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(10, name="fc")(x), name="readme")


def readme_twins(lms, conv=keras.layers.Conv2D):
    """The net twice with the same weights: plain, and built inside
    ``with lms:`` (the README's way; planned at its first call)."""
    keras.utils.set_random_seed(7)
    plain = readme_net(conv)
    with lms:
        keras.utils.set_random_seed(7)
        with_lms = readme_net(conv)
    with_lms.set_weights(plain.get_weights())
    assert "caffe_lms" in vars(with_lms) and "caffe_lms" not in vars(plain)
    return plain, with_lms


def kinds(model):
    """``{layer name: block kind}`` of the model's plan for ``BATCH``."""
    return {n.name: b.kind for b in model.caffe_lms.blocks[BATCH] for n in b.nodes}


# -- a step by a tape -----------------------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True], ids=["eager-tape", "tf-function"])
@pytest.mark.parametrize("mechanism", ["remat", "stage", "parts"])
def test_a_tape_step_gives_the_plain_models_loss_and_gradients(monkeypatch, mechanism, compiled):
    """The issue's reproducer (an eager tape, remat) and its neighbours: loss
    and gradients of one step, eagerly and in a ``tf.function``, equal the
    plain model's stepped the same way. ``parts``: Eigen's plan (forced here,
    so both kernel families run it) with ``batch_parts``, 5 parts of 8."""
    if mechanism == "parts":
        monkeypatch.setattr("keras_caffe.lms.policy.onednn_enabled", lambda: False)
        lms = keras_caffe.LMS(threshold_kb=16, batch_parts=True)
    else:
        lms = keras_caffe.LMS(threshold_kb=16, mechanism=mechanism)
    plain, with_lms = readme_twins(lms)
    x, y = batch_for(plain, BATCH)
    loss, grads = loss_and_grads(plain, x, y, compiled=compiled)
    lms_loss, lms_grads = loss_and_grads(with_lms, x, y, compiled=compiled)
    kind = "remat" if mechanism == "parts" else mechanism
    assert kinds(with_lms) == {**{f"c{i}": kind for i in range(6)}, "pool": "plain",
                               "fc": "plain"}
    assert {b.chunks for b in with_lms.caffe_lms.blocks[BATCH]} == \
        ({1, 5} if mechanism == "parts" else {1})
    assert abs(lms_loss - loss) <= TOLERANCE * abs(loss)
    assert len(lms_grads) == 14 and min(float(np.abs(g).max()) for g in lms_grads) > 0
    if mechanism != "parts":
        assert max_relative(grads, lms_grads) <= TOLERANCE
        return
    exact = float64_grads(plain, x, y, compiled)
    for name, error, lms_error in zip([v.path for v in plain.trainable_variables],
                                      rounding(grads, exact), rounding(lms_grads, exact)):
        assert lms_error <= error + TOLERANCE, (name, lms_error, error)


def float64_grads(model, x, y, compiled):
    """The gradients of the same step in float64 (the net with ``model``'s
    weights): the value both float32 steps round."""
    keras.mixed_precision.set_dtype_policy("float64")
    try:
        exact = readme_net()
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    exact.set_weights([w.astype("float64") for w in model.get_weights()])
    return loss_and_grads(exact, x.astype("float64"), y, compiled=compiled)[1]


def rounding(grads, exact):
    """Each gradient's largest difference from ``exact``, over ``exact``'s
    largest value."""
    return [float(np.abs(g - e).max() / np.abs(e).max()) for g, e in zip(grads, exact)]


#: ``(layer name, weak reference)`` of every output a ``Probed`` computed
PROBED = []


class Probed(keras.layers.Conv2D):
    """A Conv2D that keeps a weak reference to each output it computes."""

    def call(self, inputs):
        outputs = super().call(inputs)
        PROBED.append((self.name, weakref.ref(outputs)))
        return outputs


def test_an_eager_tape_keeps_no_activation_inside_a_rematerialized_block():
    """Eagerly, a tape keeps what each op it recorded needs for its gradient:
    without LMS every layer's output (the control: the probe sees what the
    tape holds); with LMS none of the outputs inside a rematerialized block
    (they are recomputed from the block's inputs), as in a ``tf.function``."""
    plain, with_lms = readme_twins(keras_caffe.LMS(threshold_kb=16), conv=Probed)
    x, _ = batch_for(plain, BATCH)
    alive = []
    for model in (plain, with_lms):
        PROBED.clear()
        with tf.GradientTape():
            model(x, training=True)
            gc.collect()
            alive.append({name for name, ref in PROBED if ref() is not None})
    assert alive[0] == {f"c{i}" for i in range(6)}
    inside = {n.name for b in with_lms.caffe_lms.blocks[BATCH] if b.kind == "remat"
              for n in b.nodes if not {id(t) for t in n.outputs} & {id(t) for t in b.outputs}}
    assert inside == {"c0", "c2", "c4"}  # blocks c0..c1, c2..c3, c4..c5
    assert alive[1] <= {"c1", "c3", "c5"}


# -- model.fit -------------------------------------------------------------------------------


@pytest.mark.parametrize("run_eagerly", [False, True], ids=["traced", "run-eagerly"])
def test_fit_gives_the_plain_models_losses_and_weights(run_eagerly):
    """Three steps of Caffe's SGD (momentum, weight decay) by ``model.fit``:
    the losses and the updated weights are the plain model's."""
    plain, with_lms = readme_twins(keras_caffe.LMS(threshold_kb=16))
    x, y = batch_for(plain, 3 * BATCH)
    initial = plain.get_weights()
    runs = []
    for model in (plain, with_lms):
        model.compile(optimizer=keras_caffe.SGD(learning_rate=0.05, momentum=0.9,
                                                weight_decay=5e-4),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      jit_compile=False, run_eagerly=run_eagerly)
        history = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
        runs.append((history.history["loss"], model.get_weights()))
    assert set(kinds(with_lms).values()) == {"remat", "plain"}
    np.testing.assert_allclose(runs[1][0], runs[0][0], rtol=TOLERANCE)
    assert max_relative(runs[0][1], runs[1][1]) <= TOLERANCE
    assert max_relative(initial, runs[0][1]) > 1e-3  # it trained


# -- keras_caffe.Solver ----------------------------------------------------------------------

SOLVER = """net: "train_net.prototxt"
max_iter: 3
display: 1
base_lr: 0.05
momentum: 0.9
weight_decay: 0.0005
lr_policy: "fixed"
type: "SGD"
solver_mode: CPU
random_seed: 1701
snapshot_after_train: false
snapshot_prefix: "snap"
"""

DATA = """layer {
  name: "data" type: "HDF5Data" top: "data" top: "label"
  hdf5_data_param { source: "data_list.txt" batch_size: 8 shuffle: false }
}
"""

CONV = """layer {
  name: "c%(i)d" type: "Convolution" bottom: "%(bottom)s" top: "c%(i)d"
  convolution_param { num_output: 32 kernel_size: 3 pad: 1
                      weight_filler { type: "xavier" } bias_filler { type: "constant" value: 0.01 } }
}
layer { name: "relu%(i)d" type: "ReLU" bottom: "c%(i)d" top: "c%(i)d" }
"""

HEAD = """layer { name: "pool" type: "Pooling" bottom: "c5" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def write_readme_solver(folder):
    """The issue's net as a Caffe train net (six Convolution + ReLU, global
    AVE pooling, InnerProduct 10) over 24 samples in an HDF5 file, and a
    3-iteration SGD solver for it; returns the solver file."""
    layers = [CONV % {"i": i, "bottom": f"c{i - 1}" if i else "data"} for i in range(6)]
    (folder / "train_net.prototxt").write_text('name: "readme"\n' + DATA + "".join(layers) + HEAD)
    rng = np.random.default_rng(0)
    with h5py.File(folder / "data.h5", "w") as f:
        f["data"] = rng.standard_normal((3 * BATCH, 3, 32, 32)).astype("float32")
        f["label"] = rng.integers(0, 10, 3 * BATCH).astype("float32")
    (folder / "data_list.txt").write_text("data.h5\n")
    (folder / "solver.prototxt").write_text(SOLVER)
    return folder / "solver.prototxt"


def test_solver_gives_the_plain_nets_losses_and_weights(tmp_path, monkeypatch):
    """Three iterations of the Solver with ``lms=LMS(threshold_kb=16)``: the
    logged losses and the trained weights are those without LMS, from the
    same initial weights."""
    import io

    monkeypatch.chdir(tmp_path)
    solver_file = write_readme_solver(tmp_path)
    runs = []
    for lms in (None, keras_caffe.LMS(threshold_kb=16)):
        stream = io.StringIO()
        solver = keras_caffe.Solver(str(solver_file), log="caffe", stream=stream, lms=lms)
        initial = solver.net.get_weights()
        solver.solve()
        runs.append((initial, final_losses(stream.getvalue()), solver.net.get_weights()))
        if lms is not None:
            assert kinds(solver.net) == {**{f"c{i}": "remat" for i in range(6)},
                                         **{f"relu{i}": "remat" for i in range(6)},
                                         "pool": "plain", "fc": "plain"}
    (initial, losses, weights), (lms_initial, lms_losses, lms_weights) = runs
    assert max_relative(initial, lms_initial) == 0.0
    assert sorted(losses) == sorted(lms_losses) == [0, 1, 2, 3]
    np.testing.assert_allclose([lms_losses[i] for i in losses], list(losses.values()),
                               rtol=TOLERANCE)
    assert max_relative(weights, lms_weights) <= TOLERANCE
    assert max_relative(initial, weights) > 1e-3  # it trained

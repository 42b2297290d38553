"""Replay BVLC Caffe's recorded solver trajectories (tests/golden/solvers).

Each case trains the golden tiny MLP through ``model.fit`` with the optimizer
``optimizer_from_solver`` builds from the case's own solver.prototxt, on the
same batches in the same order, and compares every weight after every
iteration with Caffe's (rtol 1e-5, atol 1e-6), and the lr used at every
iteration with the lr Caffe printed (6 significant digits).
"""

import keras
import numpy as np
import pytest

import keras_caffe
from support import (GOLDEN, GOLDEN_SOLVER_CASES, golden_dataset, net_multipliers,
                     sparse_softmax_loss, tiny_mlp)

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

CASES = GOLDEN_SOLVER_CASES
BLOBS = ("ip1_w", "ip1_b", "ip2_w", "ip2_b")


def test_every_golden_case_is_replayed(golden):
    on_disk = sorted(p.name for p in (golden / "solvers").iterdir() if p.is_dir())
    assert on_disk == sorted(CASES)


class Recorder(keras.callbacks.Callback):
    """Caffe's lr before each iteration and the blobs after it."""

    def __init__(self):
        super().__init__()
        self.lr, self.blobs = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.lr.append(float(self.model.optimizer.learning_rate))

    def on_epoch_end(self, epoch, logs=None):
        weights = {}
        for layer in ("ip1", "ip2"):
            kernel, bias = self.model.get_layer(layer).get_weights()
            weights[f"{layer}_w"], weights[f"{layer}_b"] = kernel.T, bias
        self.blobs.append(weights)


def replay(folder, jit_compile):
    init = np.load(folder / "init.npz")
    model = tiny_mlp(init)
    lr_mult, decay_mult = net_multipliers(folder / "train_net.prototxt")
    optimizer = keras_caffe.optimizer_from_solver(
        folder / "solver.prototxt", lr_mult=lr_mult, decay_mult=decay_mult
    )
    model.compile(optimizer=optimizer, loss=sparse_softmax_loss(), jit_compile=jit_compile)
    recorder = Recorder()
    # One epoch = one Caffe iteration = iter_size batches.
    model.fit(
        golden_dataset(folder), steps_per_epoch=optimizer.iter_size, epochs=30,
        verbose=0, shuffle=False, callbacks=[recorder],
    )
    return optimizer, recorder


#: The training step as Keras runs it: not compiled ("eager-graph": a
#: tf.function on TensorFlow, op by op on JAX and PyTorch) and compiled with
#: XLA (TensorFlow, JAX). PyTorch's compiled step (torch.compile) is left
#: out: minutes of compiling per case, and not what Keras runs there by default.
JIT = {"tensorflow": [False, True], "jax": [False, True], "torch": [False]}[keras.backend.backend()]


@pytest.mark.parametrize("jit_compile", JIT, ids=["eager-graph", "xla"][:len(JIT)])
@pytest.mark.parametrize("case", CASES)
def test_trajectory_matches_caffe(golden, case, jit_compile):
    folder = golden / "solvers" / case
    trajectory = np.load(folder / "trajectory.npz")
    optimizer, recorder = replay(folder, jit_compile)

    assert int(optimizer.iterations) == 30
    for t, blobs in enumerate(recorder.blobs):
        for name in BLOBS:
            np.testing.assert_allclose(
                blobs[name], trajectory[name][t + 1], rtol=1e-5, atol=1e-6,
                err_msg=f"{case}: {name} after iteration {t}",
            )
    printed = [float(f"{lr:.6g}") for lr in recorder.lr]
    np.testing.assert_array_equal(printed, trajectory["lr_log"], err_msg=f"{case}: lr")


def test_replay_detects_a_wrong_solver(golden):
    """The comparison has teeth: SGD's trajectory is not Nesterov's."""
    folder = golden / "solvers" / "nesterov"
    trajectory = np.load(GOLDEN / "solvers" / "sgd" / "trajectory.npz")
    _, recorder = replay(folder, jit_compile=False)
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(
            recorder.blobs[-1]["ip1_w"], trajectory["ip1_w"][30], rtol=1e-5, atol=1e-6
        )

"""Caffe's own solver test (caffe/src/caffe/test/test_gradient_based_solver.cpp),
ported to keras-caffe.

- Least squares: an InnerProduct with one output under EuclideanLoss; after
  1 or 4 updates the weights equal an independent float64 numpy
  implementation of each solver's update (the test's CheckLeastSquaresUpdate),
  for the same variants: plain, lr 0.01, weight decay, momentum, everything.
- Accumulation: iter_size 2 on half batches equals iter_size 1 on the full
  batch (CheckAccumulation).
- Snapshot: N updates, a snapshot of the optimizer state, a fresh optimizer
  restored from it and N more updates equal 2N uninterrupted ones
  (TestSnapshot), for N = 1..4.
- Resume from Caffe's own snapshots: the .solverstate (binary and HDF5)
  Caffe wrote at iteration 10, loaded into our optimizer, continued for 10
  iterations, equals the weights Caffe wrote at iteration 20.
"""

import h5py
import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.importers import read_binary
from keras_caffe.proto import caffe_pb2
from support.autodiff import gradients as autodiff
from support.caffe_reference import apply_update
from support import golden_dataset, set_caffe_weights, sparse_softmax_loss, tiny_mlp

N, D = 8, 30  # batch and input size of the least-squares net
RNG = np.random.RandomState(1701)
X = RNG.randn(N, D).astype("float32")
Y = RNG.randn(N, 1).astype("float32")
W0 = (RNG.randn(D, 1) * 0.1).astype("float32")
B0 = np.array([0.1], "float32")


# -- the independent reference ----------------------------------------------------


def least_squares_grads(w, b, x, y):
    """EuclideanLoss = sum((xw + b - y)^2) / (2n): its gradients."""
    residual = x @ w + b - y
    return [x.T @ residual / len(x), residual.sum(0) / len(x)]


def reference_update(solver, hp, params, grads, state, it):
    """One Caffe update of every param, float64; returns the new params."""
    return apply_update(solver, hp, params, grads, state, it)


def reference_run(solver, hp, iterations):
    params, state = [W0.astype(float), B0.astype(float)], {}
    for it in range(iterations):
        grads = least_squares_grads(*params, X.astype(float), Y.astype(float))
        params = reference_update(solver, hp, params, grads, state, it)
    return params


# -- keras-caffe on the same problem --------------------------------------------


def least_squares_model():
    inputs = keras.Input((D,))
    outputs = keras.layers.Dense(1, name="ip")(inputs)
    model = keras.Model(inputs, outputs)
    model.get_layer("ip").set_weights([W0, B0])
    return model


def euclidean_loss(y_true, y_pred):
    return 0.5 * keras.ops.sum(keras.ops.square(keras.ops.subtract(y_pred, y_true)), axis=-1)


def gradients(model, x, y):
    return autodiff(lambda: keras.ops.mean(euclidean_loss(y, model(x))),
                    model.trainable_variables)


def make(solver, hp, **extra):
    kwargs = {"learning_rate": hp["lr"], "weight_decay": hp.get("weight_decay", 0.0), **extra}
    for name in getattr(keras_caffe, solver).solver_fields:
        if name in hp:
            kwargs[name] = hp[name]
    return getattr(keras_caffe, solver)(**kwargs)


def run(model, optimizer, iterations, micro_batches=1):
    for _ in range(iterations):
        for x, y in zip(np.split(X, micro_batches), np.split(Y, micro_batches)):
            optimizer.apply(gradients(model, x, y), model.trainable_variables)


BASE = {
    "SGD": {}, "Nesterov": {}, "AdaGrad": {}, "RMSProp": {"rms_decay": 0.95},
    "AdaDelta": {"delta": 1e-6, "momentum": 0.95}, "Adam": {"momentum": 0.9, "momentum2": 0.999},
}
HAS_MOMENTUM = ("SGD", "Nesterov", "AdaDelta", "Adam")
VARIANTS = {  # name: (hyperparameters, iterations), as in Caffe's test
    "plain": ({"lr": 1.0}, 1),
    "lr_one_hundredth": ({"lr": 0.01}, 1),
    "weight_decay": ({"lr": 0.01, "weight_decay": 0.5}, 1),
    "weight_decay_multi_iter": ({"lr": 0.01, "weight_decay": 0.5}, 4),
    "momentum": ({"lr": 0.01, "momentum": 0.5}, 1),
    "momentum_multi_iter": ({"lr": 0.01, "momentum": 0.5}, 4),
    "everything": ({"lr": 0.01, "weight_decay": 0.5, "momentum": 0.5}, 4),
}
CASES = [
    (solver, variant)
    for solver in BASE
    for variant, (hp, _) in VARIANTS.items()
    if "momentum" not in hp or solver in HAS_MOMENTUM
]


def hyperparameters(solver, variant):
    hp = dict(BASE[solver])
    hp.update(VARIANTS[variant][0])
    if solver in ("AdaDelta", "Adam") and variant == "plain":
        hp["lr"] = 0.1  # Caffe's test uses a smaller rate for these too
    if solver == "AdaDelta":
        hp["lr"] *= 10  # steps are ~sqrt(delta) * lr: keep them well above atol
    return hp


@pytest.mark.parametrize("solver, variant", CASES)
def test_least_squares_update(solver, variant):
    hp, iterations = hyperparameters(solver, variant), VARIANTS[variant][1]
    model = least_squares_model()
    run(model, make(solver, hp), iterations)
    expected = reference_run(solver, hp, iterations)
    for ours, theirs in zip(model.get_layer("ip").get_weights(), expected):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    moved = np.abs(model.get_layer("ip").get_weights()[0] - W0).max()
    assert moved > 1e-5  # 10x atol: the check compares updated weights, not the start


@pytest.mark.parametrize("solver", list(BASE))
def test_accumulation_equals_full_batch(solver):
    hp = hyperparameters(solver, "everything" if solver in HAS_MOMENTUM else "weight_decay")
    full, accumulated = least_squares_model(), least_squares_model()
    run(full, make(solver, hp), 4)
    optimizer = make(solver, hp, iter_size=2)
    run(accumulated, optimizer, 4, micro_batches=2)
    assert int(optimizer.iterations) == 4
    for a, b in zip(accumulated.get_weights(), full.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("iterations", [1, 2, 3, 4])
@pytest.mark.parametrize("solver", list(BASE))
def test_snapshot_restore_equals_uninterrupted(solver, iterations):
    hp = hyperparameters(solver, "everything" if solver in HAS_MOMENTUM else "weight_decay")
    straight = least_squares_model()
    run(straight, make(solver, hp), 2 * iterations)

    model = least_squares_model()
    optimizer = make(solver, hp)
    run(model, optimizer, iterations)
    snapshot = [keras.ops.convert_to_numpy(v) for v in optimizer.variables]

    restored = make(solver, hp)
    restored.build(model.trainable_variables)
    restored.set_weights(snapshot)
    run(model, restored, iterations)
    for a, b in zip(model.get_weights(), straight.get_weights()):
        np.testing.assert_array_equal(a, b)


# -- resume from Caffe's own snapshot files ---------------------------------------

SNAPSHOTS = ["sgd_binaryproto", "sgd_hdf5", "adam_binaryproto", "adam_hdf5",
             "sgd_binaryproto_fullbatch64", "adam_hdf5_fullbatch64"]
BLOBS = ("ip1_w", "ip1_b", "ip2_w", "ip2_b")


def read_caffe_snapshot(folder):
    """Caffe's iteration-10 weights and solver state, read with our schema."""
    prefix = folder / "snap" / "run_iter_10"
    if "hdf5" in folder.name:
        with h5py.File(f"{prefix}.caffemodel.h5", "r") as f:
            blobs = {f"{layer}_{k}": f[f"data/{layer}/{i}"][()]
                     for layer in ("ip1", "ip2") for i, k in enumerate("wb")}
        with h5py.File(f"{prefix}.solverstate.h5", "r") as f:
            iteration = int(f["iter"][()].item())
            history = [f[f"history/{i}"][()] for i in range(len(f["history"]))]
        return blobs, iteration, history
    net = read_binary(f"{prefix}.caffemodel", caffe_pb2.NetParameter)
    blobs = {}
    for layer in net.layer:
        for blob, k in zip(layer.blobs, "wb"):
            blobs[f"{layer.name}_{k}"] = np.array(blob.data, "float32").reshape(blob.shape.dim)
    state = read_binary(f"{prefix}.solverstate", caffe_pb2.SolverState)
    history = [np.array(h.data, "float32").reshape(h.shape.dim) for h in state.history]
    return blobs, state.iter, history


def test_snapshot_reader_agrees_with_caffes_arrays(golden):
    for name in SNAPSHOTS:
        folder = golden / "snapshot" / name
        blobs, iteration, history = read_caffe_snapshot(folder)
        weights = np.load(folder / "iter10_weights.npz")
        state = np.load(folder / "iter10_solverstate.npz")
        assert iteration == int(state["iter"].item()) == 10
        for k in BLOBS:
            np.testing.assert_array_equal(blobs[k], weights[k])
        for i, h in enumerate(history):
            np.testing.assert_array_equal(h, state[f"history_{i}"])


@pytest.mark.parametrize("name", SNAPSHOTS)
def test_resume_from_caffe_solverstate(golden, name):
    folder = golden / "snapshot" / name
    blobs, iteration, history = read_caffe_snapshot(folder)
    model = tiny_mlp()
    set_caffe_weights(model, blobs)
    optimizer = keras_caffe.optimizer_from_solver(
        folder / "solver_resume.prototxt",
        lr_mult={"ip1/bias": 2.0}, decay_mult={"ip1/bias": 0.0},
    )
    optimizer.build(model.trainable_variables)
    # Caffe's history order: one blob per param (Adam: all m, then all v),
    # params in net order, weights as (out, in): Keras kernels are transposed.
    slots = [optimizer.history] if isinstance(optimizer, keras_caffe.SGD) else [optimizer.m, optimizer.v]
    targets = [s for group in slots for s in group]
    assert len(targets) == len(history)
    for slot, blob in zip(targets, history):
        slot.assign(blob.T if blob.ndim == 2 else blob)
    optimizer.iterations.assign(iteration)

    # Caffe does not store the data position: the resumed run restarts at row 0.
    ds = golden_dataset(folder, batch_size=64 if "fullbatch" in name else 16)
    model.compile(optimizer=optimizer, loss=sparse_softmax_loss())
    model.fit(ds, steps_per_epoch=10, epochs=1, verbose=0, shuffle=False)

    assert int(optimizer.iterations) == 20
    expected = np.load(folder / "iter20_weights.npz")
    for layer in ("ip1", "ip2"):
        kernel, bias = model.get_layer(layer).get_weights()
        np.testing.assert_allclose(kernel.T, expected[f"{layer}_w"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bias, expected[f"{layer}_b"], rtol=1e-5, atol=1e-6)

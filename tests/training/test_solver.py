"""keras_caffe.Solver (``keras-caffe train``) against BVLC Caffe's own runs.

The golden solver cases (tests/golden/solvers, README there) were run
with ``caffe train -solver solver.prototxt -weights init.caffemodel``; the
Solver runs the same files, in a copy of each folder, and must print the
same smoothed loss and lr at every iteration, end with Caffe's weights, and
write a snapshot equal to Caffe's own ``bin_run`` snapshot.
"""

import io
import shutil

import numpy as np
import pytest

import keras_caffe
from support.caffe_log_parser import PREFIX, parse, rates
from support import GOLDEN, GOLDEN_SOLVER_CASES

CASES = GOLDEN_SOLVER_CASES
BLOBS = ("ip1_w", "ip1_b", "ip2_w", "ip2_b")


def final_losses(text):
    """``{iteration: smoothed loss}`` including Solve's last ``Iteration N, loss``."""
    import re

    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"\] Iteration (\d+)(?: \([^)]*\))?, loss = ([-+.\deEnaif]+)", text)}


def run_case(case, tmp_path, monkeypatch, **kwargs):
    work = tmp_path / case
    shutil.copytree(GOLDEN / "solvers" / case, work, ignore=shutil.ignore_patterns("bin_run"))
    monkeypatch.chdir(work)
    stream = io.StringIO()
    solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log="caffe",
                                stream=stream, **kwargs)
    solver.solve()
    return solver, stream.getvalue(), work


def blobs_of(solver):
    from keras_caffe.importers.net.blobs import caffe_layers

    layers = caffe_layers(solver.net)
    return {f"{name}_{kind}": blob for name in ("ip1", "ip2")
            for kind, blob in zip("wb", layers[name].caffe_blobs())}


@pytest.mark.parametrize("case", CASES)
def test_solver_reproduces_caffes_log_and_weights(golden, case, tmp_path, monkeypatch):
    solver, log, work = run_case(case, tmp_path, monkeypatch)
    caffe_log = (golden / "solvers" / case / "caffe_binary.log").read_text()
    ours, theirs = final_losses(log), final_losses(caffe_log)
    assert sorted(ours) == sorted(theirs) == list(range(31))
    np.testing.assert_allclose([ours[i] for i in range(31)], [theirs[i] for i in range(31)],
                               rtol=3e-5, atol=1e-6)
    assert rates(log).keys() == rates(caffe_log).keys()
    np.testing.assert_allclose(list(rates(log).values()), list(rates(caffe_log).values()),
                               rtol=1e-5)
    trajectory = np.load(golden / "solvers" / case / "trajectory.npz")
    for name, blob in blobs_of(solver).items():
        np.testing.assert_allclose(blob, trajectory[name][-1], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert solver.iter == 30
    # snapshot_after_train: the files Caffe's own run wrote, with its numbers.
    from keras_caffe.importers.net.weights import load_weights

    ours_w = load_weights(work / "bin_run" / "snap_iter_30.caffemodel")
    caffes = load_weights(golden / "solvers" / case / "bin_run" / "snap_iter_30.caffemodel")
    for layer in ("ip1", "ip2"):
        for a, b in zip(ours_w[layer], caffes[layer]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_log_is_readable_by_caffes_parsers(golden, tmp_path, monkeypatch):
    _, log, _ = run_case("sgd_lr_step", tmp_path, monkeypatch)
    lines = log.splitlines()
    assert lines and all(PREFIX.match(line) for line in lines), lines[:3]
    train, test, smoothed = parse(log)
    assert [row["NumIters"] for row in train] == list(range(30))
    assert all(set(row) == {"NumIters", "Seconds", "LearningRate", "loss"} for row in train)
    assert test == []
    caffe_train, _, _ = parse((golden / "solvers" / "sgd_lr_step" / "caffe_binary.log").read_text())
    np.testing.assert_allclose([r["loss"] for r in train], [r["loss"] for r in caffe_train],
                               rtol=3e-5)
    # parse_log.py's row lr is the last lr line before the row (NaN for the first).
    np.testing.assert_allclose([r["LearningRate"] for r in train[1:]],
                               [r["LearningRate"] for r in caffe_train[1:]], rtol=1e-5)


def test_pycaffe_style_step(golden, tmp_path, monkeypatch):
    work = tmp_path / "sgd"
    shutil.copytree(GOLDEN / "solvers" / "sgd", work, ignore=shutil.ignore_patterns("bin_run"))
    monkeypatch.chdir(work)
    solver = keras_caffe.get_solver("solver.prototxt", log=None)
    solver.copy_from("init.caffemodel")
    solver.step(10)
    assert solver.iter == 10
    solver.step(20)
    assert solver.iter == 30
    trajectory = np.load(work / "trajectory.npz")
    for name, blob in blobs_of(solver).items():
        np.testing.assert_allclose(blob, trajectory[name][-1], rtol=1e-5, atol=1e-6)


def _snapshot_lines(text):
    import re

    return re.findall(r"\] (Snapshotting .*)$", text, flags=re.M), \
        re.findall(r" (\w+\.cpp:\d+)\] Snapshotting", text)


@pytest.mark.parametrize("fmt, weights, state", [
    ("caffe", "binary proto file bin_run/snap_iter_30.caffemodel",
     "binary proto file bin_run/snap_iter_30.solverstate"),
    ("caffe_hdf5", "HDF5 file bin_run/snap_iter_30.caffemodel.h5",
     "HDF5 file bin_run/snap_iter_30.solverstate.h5"),
    ("keras", "Keras weights file bin_run/snap_iter_30.weights.h5",
     "HDF5 file bin_run/snap_iter_30.solverstate"),
])
def test_snapshot_lines_name_the_files_format(golden, fmt, weights, state, tmp_path, monkeypatch):
    """Caffe's lines for the format written (Solver::SnapshotToBinaryProto /
    SnapshotToHDF5 and SGDSolver's solver-state counterparts); for Caffe's
    own format, the very lines (and sources) of Caffe's log."""
    _, log, _ = run_case("sgd", tmp_path, monkeypatch, snapshot_format=fmt)
    messages, sources = _snapshot_lines(log)
    assert messages == [f"Snapshotting to {weights}", f"Snapshotting solver state to {state}"]
    if fmt == "caffe":
        caffe = (golden / "solvers" / "sgd" / "caffe_binary.log").read_text()
        assert (messages, sources) == _snapshot_lines(caffe)
    else:
        assert sources == ["solver.cpp:474" if fmt == "caffe_hdf5" else "solver.cpp:464",
                           "sgd_solver.cpp:296"]


def test_a_reduce_runs_once_per_iteration_on_the_summed_gradients(golden, tmp_path, monkeypatch):
    """Data-parallel training's all-reduce (``train_function``'s ``reduce``)
    runs once per Caffe iteration, on the sum of the ``iter_size`` passes'
    gradients, not once per pass; with an identity reduce the run is
    bit-identical to the solver's own accumulation, and still Caffe's.
    Bit for bit with the update not compiled (``KERAS_CAFFE_CPU_TUNING=0``):
    compiled, XLA fuses the accumulation into one of the two updates and
    not the other, which moves the last bits."""
    import tensorflow as tf

    from keras_caffe.kernels import CPU_TUNING
    from keras_caffe.training.step import train_function

    monkeypatch.setenv(CPU_TUNING, "0")

    case = "sgd_itersize2"
    plain, _, _ = run_case(case, tmp_path / "plain", monkeypatch)
    work = tmp_path / "reduced" / case
    shutil.copytree(GOLDEN / "solvers" / case, work, ignore=shutil.ignore_patterns("bin_run"))
    monkeypatch.chdir(work)
    solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    assert solver.param.iter_size == 2
    calls = tf.Variable(0, dtype=tf.int64)
    seen = []

    def reduce(grads):
        seen.append(len(grads))  # Python runs once per traced call site
        with tf.control_dependencies([calls.assign_add(1)]):
            return [None if g is None else tf.identity(g) for g in grads]

    solver._run = train_function(solver._train_outputs, solver.optimizer, 2, False, reduce=reduce)
    solver.solve()
    assert solver.iter == 30
    assert int(calls.numpy()) == 30  # one per iteration, not 60
    assert seen == [4]  # traced once: one call site per iteration
    assert int(solver.optimizer._micro_step.numpy()) == 60  # two passes per iteration
    ours, theirs = blobs_of(solver), blobs_of(plain)
    for name in BLOBS:
        np.testing.assert_array_equal(ours[name], theirs[name])
    want = np.load(golden / "solvers" / case / "trajectory.npz")
    for name in BLOBS:
        np.testing.assert_allclose(ours[name], want[name][-1], rtol=1e-5, atol=1e-6)

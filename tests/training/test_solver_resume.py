"""``keras-caffe train`` on the LeNet example: tests, snapshots, exact resume
after a real SIGKILL, and the errors a user meets before training starts.

The uninterrupted run and the resumed one are new interpreters (``python -m
keras_caffe.cli``), so the resume is checked across two fresh processes;
the other commands run forked (``forked.run``): each is a process of its
own, without TensorFlow's import to pay."""

import re
import runpy
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from support.caffe_log_parser import parse
from support.forked import run as run_forked
from support import REPO

EXAMPLE = REPO / "examples" / "lenet_solver"
N = 6  # snapshot interval; the full run is 2N iterations


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    """The example's LMDBs, small: 512 training images (8 batches of 64, so
    2N iterations wrap around), 200 test images."""
    out = tmp_path_factory.mktemp("digits")
    runpy.run_path(str(EXAMPLE / "make_data.py"))["main"](
        ["--train", "512", "--test", "200", "--out", str(out)])
    return out


def write_run(folder, digits, prefix, dropout=True):
    """The example's net (with a Dropout, whose random state must resume too)
    and a short solver, in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    net = (EXAMPLE / "lenet_train_test.prototxt").read_text()
    net = net.replace('"digits_train_lmdb"', f'"{digits / "digits_train_lmdb"}"')
    net = net.replace('"digits_test_lmdb"', f'"{digits / "digits_test_lmdb"}"')
    if dropout:
        net = net.replace('layer {\n  name: "ip2"', 'layer {\n  name: "drop1"\n  type: "Dropout"\n'
                          '  bottom: "ip1"\n  top: "ip1"\n  dropout_param { dropout_ratio: 0.5 }\n'
                          '}\nlayer {\n  name: "ip2"')
    (folder / "net.prototxt").write_text(net)
    (folder / "solver.prototxt").write_text(textwrap.dedent(f"""\
        net: "net.prototxt"
        test_iter: 2
        test_interval: 4
        base_lr: 0.01
        momentum: 0.9
        weight_decay: 0.0005
        lr_policy: "inv"
        gamma: 0.0001
        power: 0.75
        display: 2
        max_iter: {2 * N}
        snapshot: {N}
        snapshot_prefix: "{prefix}"
        random_seed: 7
        """))
    return folder / "solver.prototxt"


def cli(*args, cwd, expect=0, fresh=False):
    """``python -m keras_caffe.cli ARGS``, forked, or (``fresh``) a new interpreter."""
    command = ["-m", "keras_caffe.cli", *map(str, args)]
    if fresh:
        proc = subprocess.run([sys.executable, *command], capture_output=True, text=True,
                              cwd=cwd, timeout=600)
    else:
        proc = run_forked(command, cwd=cwd, timeout=600)
    assert proc.returncode == expect, proc.stderr[-3000:]
    return proc


def ours(stderr):
    """Our lines on stderr (TensorFlow's own start-up logging varies by version)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith("keras-caffe")]


def blobs(path):
    from keras_caffe.importers.net.weights import load_weights

    return load_weights(path)


@pytest.fixture(scope="module")
def uninterrupted(digits, tmp_path_factory):
    """A: 2N iterations, uninterrupted, snapshots to out/: its folder and
    Caffe's log. A new interpreter, started with Caffe's single-dash flag."""
    run = tmp_path_factory.mktemp("uninterrupted") / "a"
    solver = write_run(run, digits, "out/lenet")
    return run, cli("train", "-solver", solver, "--log", "caffe", cwd=run, fresh=True).stderr


def test_resume_after_sigkill_equals_uninterrupted(digits, uninterrupted, tmp_path):
    # A: 2N iterations, uninterrupted.
    run_a, log_a = uninterrupted

    # B: the same run, killed with SIGKILL after its iteration-N snapshot, mid-training.
    run_b = tmp_path / "b"
    solver_b = write_run(run_b, digits, "snaps/lenet")
    script = ("import os, signal, keras_caffe\n"
              "s = keras_caffe.Solver('solver.prototxt', log=None)\n"
              f"s.step({N + 2})\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = run_forked(["-c", script], cwd=run_b, timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert (run_b / "snaps" / f"lenet_iter_{N}.solverstate").is_file()
    assert not (run_b / "snaps" / f"lenet_iter_{2 * N}.caffemodel").exists()
    assert not [p for p in (run_b / "snaps").iterdir() if p.name.startswith(".tmp")]

    # C: a new process resumes B from the snapshot and runs N more.
    log_c = cli("train", "--solver", solver_b, "--snapshot", f"snaps/lenet_iter_{N}.solverstate",
                "--log", "caffe", cwd=run_b, fresh=True).stderr
    assert f"Restoring previous solver status from snaps/lenet_iter_{N}.solverstate" in log_c

    a = blobs(run_a / "out" / f"lenet_iter_{2 * N}.caffemodel")
    c = blobs(run_b / "snaps" / f"lenet_iter_{2 * N}.caffemodel")
    assert a.keys() == c.keys()
    for layer in a:
        for x, y in zip(a[layer], c[layer]):
            np.testing.assert_array_equal(x, y, err_msg=layer)  # bitwise
    # The resumed run prints what the uninterrupted one printed after N.
    _, tests_a, losses_a = parse(log_a)
    _, tests_c, losses_c = parse(log_c)
    assert {i: v for i, v in losses_a.items() if i > N} == \
        {i: v for i, v in losses_c.items() if i > N}
    assert [t for t in tests_a if t["NumIters"] > N] == \
        [dict(t, Seconds=u["Seconds"]) for t, u in zip(
            [t for t in tests_c if t["NumIters"] > N], [t for t in tests_a if t["NumIters"] > N])]


def test_train_tests_and_snapshots(digits, uninterrupted, tmp_path):
    run, log = uninterrupted
    train, tests, smoothed = parse(log)
    assert [t["NumIters"] for t in tests] == [0, 4, 8, 12]
    assert all(set(t) >= {"accuracy", "loss"} and 0 <= t["accuracy"] <= 1 for t in tests)
    assert sorted(smoothed) == [0, 2, 4, 6, 8, 10, 12]
    assert sorted(p.name for p in (run / "out").iterdir()) == sorted(
        f"lenet_iter_{i}.{ext}" for i in (N, 2 * N) for ext in ("caffemodel", "solverstate"))
    # The default progress bar mode prints no Caffe lines.
    quiet = tmp_path / "quiet"
    solver = write_run(quiet, digits, "out/lenet", dropout=False)
    assert "Train net output" not in cli("train", "--solver", solver, cwd=quiet).stderr


def test_caffe_style_single_dash_flags(uninterrupted):
    _, log = uninterrupted  # `train -solver S --log caffe`
    assert "Optimization Done." in log


@pytest.mark.parametrize("edit, message", [
    (lambda s, n: s.replace('net: "net.prototxt"', 'net: "missing.prototxt"'),
     "net: net file 'missing.prototxt' not found"),
    (lambda s, n: s.replace('net: "net.prototxt"', 'train_net: "net.prototxt"'),
     "test_iter is set (1 value(s)) but there is no test net"),
    (lambda s, n: s.replace("max_iter: 12", "max_iter: -1"), "max_iter must be >= 0, got -1"),
])
def test_bad_solver_files(digits, tmp_path, edit, message):
    run = tmp_path / "run"
    solver = write_run(run, digits, "out/lenet", dropout=False)
    solver.write_text(edit(solver.read_text(), run))
    proc = cli("train", "--solver", solver, cwd=run, expect=2)
    (line,) = ours(proc.stderr)
    assert line.startswith("keras-caffe: error: ") and message in line
    assert not (run / "out").exists()


def test_missing_lmdb_is_reported_before_training(digits, tmp_path):
    run = tmp_path / "run"
    solver = write_run(run, digits, "out/lenet", dropout=False)
    net = run / "net.prototxt"
    net.write_text(net.read_text().replace(str(digits / "digits_test_lmdb"), "/nonexistent/db"))
    proc = cli("train", "--solver", solver, "--log", "caffe", cwd=run, expect=2)
    assert "/nonexistent/db" in proc.stderr and "mnist" in proc.stderr
    assert "Iteration 0" not in proc.stderr


def test_snapshot_of_another_net_is_refused(digits, tmp_path, golden):
    run = tmp_path / "run"
    solver = write_run(run, digits, "out/lenet", dropout=False)
    other = golden / "snapshot" / "sgd_binaryproto" / "snap" / "run_iter_10.solverstate"
    proc = cli("train", "--solver", solver, "--snapshot", other, cwd=run, expect=2)
    (line,) = [line for line in ours(proc.stderr) if line.startswith("keras-caffe: error:")]
    assert "run_iter_10" in line and "snapshot from another net" in line and "conv1" in line
    assert not (run / "out").exists()


def test_time_prints_per_layer_and_total(golden, tmp_path):
    proc = cli("time", "--model", golden / "timing" / "lenet_dummy.prototxt", "--iterations", "3",
               "--log", "caffe", cwd=tmp_path)
    err = proc.stderr
    for layer in ("conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2"):
        assert re.search(rf"\] +{layer}\tforward: [\d.e+-]+ ms\.", err), layer
        assert re.search(rf"\] +{layer}\tbackward: [\d.e+-]+ ms\.", err), layer
    fwd = float(re.search(r"Average Forward pass: ([\d.e+-]+) ms\.", err).group(1))
    fb = float(re.search(r"Average Forward-Backward: ([\d.e+-]+) ms\.", err).group(1))
    assert 0 < fwd < fb
    # A softmax loss of random weights on random inputs: positive and finite.
    loss = float(re.search(r"Initial loss: ([\d.e+-]+)", err).group(1))
    assert 0 < loss < 50

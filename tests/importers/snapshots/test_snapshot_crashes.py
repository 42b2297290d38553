"""Crash consistency of snapshots under a real SIGKILL at every step of a
snapshot write (issue 18), not only between snapshots.

Each kill point is a process of its own (forked: ``forked.run``), which
restores the golden SGD case's run at iteration 20 (10 iterations, a
snapshot, 10 more: ``prepared``, once per format, its iteration-10 snapshot
already on disk) and snapshots it, killing itself with SIGKILL just before
the k-th file-system step of that snapshot: each of its two files is
written as mkstemp, the data, fsync, rename, directory fsync, so k = 1..8
covers the empty temporary file, the written-but-unsynced one, the renamed
weights beside no solverstate (the half pair), and the renamed solverstate
before its directory is synced. After each kill:

- every snapshot file present under its own name is complete: each
  solverstate ``list_snapshots`` reports loads, and a lone weights file of
  the half pair loads too; what is incomplete is only ever a hidden
  ``.tmp-`` file, never a name keras-caffe or Caffe would read;
- ``latest_snapshot`` is iteration 10 until the second solverstate is
  renamed (k = 8: iteration 20), and resuming from it to iteration 20 gives
  the uninterrupted run's weights bit for bit.
"""

import os
import shutil
import signal

import numpy as np
import pytest

import keras_caffe
from keras_caffe.importers.snapshots.files import latest_snapshot, list_snapshots, load_snapshot
from keras_caffe.importers.snapshots.file_io import TEMP_PREFIX
from keras_caffe.importers.net.weights import load_weights
from support.forked import run as run_forked
from support import GOLDEN, solver_weights

CHILD = r"""
import os, signal, sys, tempfile
import keras_caffe
from keras_caffe.importers.formats import atomic
fmt, kill_at, state = sys.argv[1], int(sys.argv[2]), sys.argv[3]
solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None,
                            snapshot_format=fmt)
solver.restore(state)  # iteration 20; its iteration-10 snapshot is on disk
steps = [0]

def counted(real):
    def step(*args, **kwargs):
        steps[0] += 1
        if steps[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return real(*args, **kwargs)
    return step

atomic.tempfile.mkstemp = counted(tempfile.mkstemp)
atomic.fsync_file = counted(atomic.fsync_file)
atomic.os.replace = counted(os.replace)
atomic.fsync_directory = counted(atomic.fsync_directory)
solver.snapshot()
print("STEPS", steps[0])
"""
FORMATS = {"caffe": range(1, 9), "caffe_hdf5": (2, 4, 6, 8), "keras": (1, 3, 5, 7, 8)}
CASES = [(fmt, k) for fmt, points in FORMATS.items() for k in points]


def _case(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(GOLDEN / "solvers" / "sgd", folder, ignore=shutil.ignore_patterns("bin_run"))
    return folder


def _weights(solver):
    return [v.numpy() for v in solver.net.weights]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return solver_weights(_case(tmp_path_factory.mktemp("whole")), 20)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """{format: (folder, solverstate)}: the golden SGD case trained 10
    iterations, snapshotted, trained 10 more and snapshotted again; the
    folder holds the iteration-10 snapshot in ``bin_run``, the iteration-20
    one is moved out to ``state20`` (the solverstate named)."""
    prepared, cwd = {}, os.getcwd()
    for fmt in FORMATS:
        folder = _case(tmp_path_factory.mktemp(fmt))
        os.chdir(folder)
        try:
            solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None,
                                        snapshot_format=fmt)
            solver.step(10)
            solver.snapshot()
            solver.step(10)
            files = solver.snapshot()
        finally:
            os.chdir(cwd)
        (folder / "state20").mkdir()
        for path in (files.weights, files.solverstate):
            shutil.move(folder / path, folder / "state20")
        prepared[fmt] = folder, folder / "state20" / os.path.basename(files.solverstate)
    return prepared


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """A solver of the case, to load the snapshots into."""
    folder, cwd = _case(tmp_path_factory.mktemp("probe")), os.getcwd()
    os.chdir(folder)
    try:
        return keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    finally:
        os.chdir(cwd)


@pytest.mark.slow  # a process per kill point; the writes are the project's own, on any TensorFlow
@pytest.mark.parametrize("fmt, kill_at", CASES)
def test_sigkill_during_a_snapshot_write(fmt, kill_at, tmp_path, monkeypatch, prepared, probe,
                                        uninterrupted):
    source, state = prepared[fmt]
    folder = tmp_path / "run"
    shutil.copytree(source, folder, ignore=shutil.ignore_patterns("state20"))
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               PYTHONWARNINGS="ignore")
    run = run_forked(["-c", CHILD, fmt, str(kill_at), str(state)], cwd=folder, env=env,
                     timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stdout[-2000:] + run.stderr[-2000:]
    snap = folder / "bin_run"
    names = sorted(p.name for p in snap.iterdir())
    complete = list_snapshots(str(snap / "snap"))
    assert [s.iteration for s in complete] == ([10, 20] if kill_at == 8 else [10])
    monkeypatch.chdir(folder)
    for files in complete:  # each complete pair loads
        load_snapshot(files.solverstate, probe.net, probe.optimizer)
    named = [n for n in names if not n.startswith(TEMP_PREFIX)]
    listed = {os.path.basename(p) for s in complete for p in (s.weights, s.solverstate)}
    for name in sorted(set(named) - listed):  # the half pair's weights, renamed complete
        assert kill_at >= 4 and "iter_20" in name and "solverstate" not in name, names
        if fmt != "keras":
            assert set(load_weights(snap / name)) == {"ip1", "ip2"}
    resumed = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    resumed.restore(latest_snapshot(str(snap / "snap")).solverstate)
    resumed.step(20 - resumed.iter)
    for a, b in zip(_weights(resumed), uninterrupted):
        np.testing.assert_array_equal(a, b)

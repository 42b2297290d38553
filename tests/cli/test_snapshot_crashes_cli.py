"""Crash consistency of ``keras-caffe train`` itself: the installed command
is killed with a real SIGKILL while it is writing a snapshot (issue 18).

``test_snapshot_crashes`` kills a Python child at each exact file-system
step of one snapshot write. Here nothing inside the process is changed: the
command (``python -m keras_caffe train``, a process of its own, forked by
``forked.start``) trains the golden SGD case with a snapshot every
iteration, and the test watches the snapshot folder (inotify) and sends
SIGKILL the moment the n-th temporary file (``.tmp-<name>.<random>``) is
created, that is while a weights or solverstate file is being written,
before its rename. After the kill:

- every file under a snapshot name is complete: each solverstate that
  ``list_snapshots`` reports loads, and so does every weights file,
  including the weights of a pair whose solverstate was not yet renamed;
- only ``.tmp-`` files may be incomplete (the kill hit a write: at least one
  is left, or the write had just been renamed);
- resuming from ``latest_snapshot`` to iteration 12 gives the uninterrupted
  run's weights bit for bit.
"""

import ctypes
import os
import re
import select
import shutil
import signal
import struct

import numpy as np
import pytest

import keras_caffe
from keras_caffe.importers.snapshots.files import latest_snapshot, list_snapshots, load_snapshot
from keras_caffe.importers.snapshots.file_io import TEMP_PREFIX
from keras_caffe.importers.net.weights import load_weights
from support.forked import start
from support import GOLDEN, solver_weights

TARGET = 12
#: (format, the n-th temporary file seen): the first write of all, a
#: solverstate (each snapshot writes weights, then solverstate), and a
#: later weights file.
CASES = [("caffe", 1), ("caffe", 4), ("caffe_hdf5", 2), ("caffe_hdf5", 5), ("keras", 3),
         ("keras", 4)]


def _case(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(GOLDEN / "solvers" / "sgd", folder, ignore=shutil.ignore_patterns("bin_run"))
    solver = (folder / "solver.prototxt").read_text().replace("max_iter: 30", "max_iter: 400")
    (folder / "solver.prototxt").write_text(solver + "snapshot: 1\n")
    (folder / "bin_run").mkdir()
    return folder


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    return solver_weights(_case(tmp_path_factory.mktemp("whole")), TARGET)


@pytest.fixture(scope="module")
def probe(tmp_path_factory):
    """A solver of the case, to load the snapshots into."""
    folder, cwd = _case(tmp_path_factory.mktemp("probe")), os.getcwd()
    os.chdir(folder)
    try:
        return keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    finally:
        os.chdir(cwd)


class _Created:
    """The names of the files created in ``folder``, in order, from Linux's
    inotify: none missed, however short-lived, and nothing to poll."""

    def __init__(self, folder):
        libc = ctypes.CDLL(None, use_errno=True)
        self.fd = libc.inotify_init1(os.O_CLOEXEC)
        if self.fd < 0 or libc.inotify_add_watch(self.fd, os.fsencode(folder), 0x100) < 0:
            raise OSError(ctypes.get_errno(), f"inotify on {folder}")  # 0x100: IN_CREATE

    def read(self):
        data, names, at = os.read(self.fd, 1 << 16), [], 0
        while at < len(data):  # struct inotify_event: wd, mask, cookie, len, name[len]
            length = struct.unpack_from("iIII", data, at)[3]
            names.append(os.fsdecode(data[at + 16:at + 16 + length].rstrip(b"\0")))
            at += 16 + length
        return names

    def close(self):
        os.close(self.fd)


def _kill_at_temporary_file(proc, created, nth):
    """SIGKILL ``proc`` when the ``nth`` temporary file is created where
    ``created`` watches; the names seen. Waits on inotify and on the
    child's exit (no polling, no sleeping)."""
    seen = []
    while proc.poll() is None:
        ready = select.select([created.fd, proc.fileno()], [], [], 300)[0]
        assert ready, f"no file created for 300 s, temporary files seen: {seen}"
        if created.fd in ready:
            seen += [name for name in created.read() if name.startswith(TEMP_PREFIX)]
        if len(seen) >= nth:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(timeout=60)
    return seen


@pytest.mark.slow  # a process per kill point; the writes are the project's own, on any TensorFlow
@pytest.mark.parametrize("fmt, nth", CASES)
def test_sigkill_of_keras_caffe_train_while_it_writes_a_snapshot(fmt, nth, tmp_path, monkeypatch,
                                                                 probe, uninterrupted):
    folder = _case(tmp_path)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               PYTHONWARNINGS="ignore")
    created = _Created(folder / "bin_run")
    proc = start(["-m", "keras_caffe", "train", "--solver", "solver.prototxt", "--weights",
                  "init.caffemodel", "--snapshot-format", fmt, "--log", "caffe"],
                 cwd=folder, env=env)
    try:
        seen = _kill_at_temporary_file(proc, created, nth)
    finally:
        created.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, seen)
    assert len(seen) >= nth

    snap = folder / "bin_run"
    names = sorted(p.name for p in snap.iterdir())
    complete = list_snapshots(str(snap / "snap"))
    # The last temporary file seen belongs to snapshot i (its weights or its
    # solverstate): the kill came before that snapshot's solverstate was
    # renamed, or (the write was quick) just after.
    writing = int(re.search(r"_iter_(\d+)\.", seen[-1]).group(1))
    assert len(complete) in (writing - 1, writing), (seen, names)
    assert [s.iteration for s in complete] == list(range(1, len(complete) + 1)), names
    monkeypatch.chdir(folder)
    for files in complete:
        load_snapshot(files.solverstate, probe.net, probe.optimizer)
    for name in names:  # every weights file under its own name is complete
        if name.startswith(TEMP_PREFIX) or "solverstate" in name:
            continue
        if fmt == "keras":
            probe.net.load_weights(str(snap / name))
        else:
            assert set(load_weights(snap / name)) == {"ip1", "ip2"}, name

    resumed = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    latest = latest_snapshot(str(snap / "snap"))
    if latest is not None:
        resumed.restore(latest.solverstate)
    resumed.step(TARGET - resumed.iter)
    for a, b in zip((v.numpy() for v in resumed.net.weights), uninterrupted):
        np.testing.assert_array_equal(a, b)

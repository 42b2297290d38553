"""examples/horovod_train.py: data-parallel SGD of a small CNN under a real
``horovodrun -np 2`` (Gloo, CPU), the same script as one worker, and the
one-line install hint without Horovod. The example runs from the repository
checkout (tests/../examples), as test_examples.py runs the demo. Its
snapshots go to ``--out DIR`` or a fresh temporary folder that rank 0 names,
never into the working directory.

Thresholds: the worker-averaged validation accuracy measured 0.868 (np=2,
global batch 64, 192 iterations) and 0.903 (np=1, batch 32, 384 iterations)
on the 8-class synthetic gratings (chance 0.125); the tests require 0.75
(YellowFin: 0.851 measured, 0.7 required).
"""

import re
from pathlib import Path

import pytest
from support.horovod_jobs import Cases, check, python, require_horovod
from support import REPO

from keras_caffe.distributed._hvd import INSTALL_HINT  # the tests may read internals

SCRIPT = REPO / "examples" / "horovod_train.py"
FINAL = re.compile(r"final: loss ([0-9.]+) accuracy ([0-9.]+) val_loss ([0-9.]+) "
                   r"val_accuracy ([0-9.]+)")
SNAPSHOTS = ["cnn_iter_128.solverstate", "cnn_iter_128.weights.h5",
             "cnn_iter_192.solverstate", "cnn_iter_192.weights.h5"]


def final(output):
    loss, accuracy, val_loss, val_accuracy = map(float, FINAL.search(output).groups())
    assert 0.0 < loss < 1.0 and 0.0 < val_loss < 1.0
    return accuracy, val_accuracy


def _listing(folder):
    return sorted(p.name for p in Path(folder).iterdir())


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """The script's two ``horovodrun -np 2`` runs (SGD with ``--out``,
    YellowFin with the default folder) as the cases of one launch, each in
    its own working directory; the workers' temporary directory is
    ``root/tmp``."""
    require_horovod()
    root = tmp_path_factory.mktemp("horovod_train")
    cases = Cases(root / "cases")
    for name, extra in (("sgd", ["--display", 40, "--out", root / "sgd" / "out"]),
                        ("yellowfin", ["--yellowfin", "--display", 100])):
        (root / name).mkdir()
        cases.add(name, [SCRIPT, *extra], cwd=root / name)
    (root / "tmp").mkdir()
    return root, cases.horovodrun(env={"TMPDIR": root / "tmp"})


def test_two_workers(two_workers):
    """Rank 0 alone prints the result and Caffe's log and writes the snapshots."""
    root, cases = two_workers
    tmp_path = root / "sgd"
    out = cases.ok("sgd")  # this run's lines of the launch
    assert "[0]<stdout>:2 worker(s), global batch 64, 192 iterations of SGD (step policy, " \
           "scaled x2)" in out
    accuracy, val_accuracy = final(out)
    assert accuracy > 0.7 and val_accuracy > 0.75, out[-3000:]
    out_dir = tmp_path / "out"  # as given, made absolute
    assert f"[0]<stdout>:snapshots go to {out_dir}\n" in out
    assert (f"[0]<stdout>:snapshots in {out_dir}: "
            "cnn_iter_128.solverstate, cnn_iter_192.solverstate") in out
    assert "[1]<stdout>:" not in out  # rank 1 prints nothing ...
    assert not re.search(r"\[1\]<stderr>:I\d{4} .*solver\.cpp", out)  # ... and logs nothing
    # Caffe's log from rank 0: the scaled, warmed-up step policy (0.01 x 2 after the
    # first epoch of 64 iterations, x 0.1 at iteration 144)
    assert "sgd_solver.cpp:112] Iteration 0, lr = 0.01\n" in out
    assert "sgd_solver.cpp:112] Iteration 80, lr = 0.02\n" in out
    assert "sgd_solver.cpp:112] Iteration 160, lr = 0.002\n" in out
    assert "Optimization Done." in out
    assert _listing(out_dir) == SNAPSHOTS
    assert _listing(tmp_path) == ["out"]  # nothing else in the working directory


def test_two_workers_default_folder_is_a_fresh_temporary_one(two_workers):
    """Without --out, rank 0 alone makes one ``horovod_train-*`` folder in the
    temporary directory, names it, and writes the snapshots there; the
    working directory stays empty."""
    root, cases = two_workers
    out = cases.ok("yellowfin")
    [folder] = (root / "tmp").glob("horovod_train-*")  # rank 1 made none
    assert f"[0]<stdout>:snapshots go to {folder}\n" in out
    assert (f"[0]<stdout>:snapshots in {folder}: "
            "cnn_iter_128.solverstate, cnn_iter_192.solverstate") in out
    assert _listing(folder) == SNAPSHOTS
    assert _listing(root / "yellowfin") == []


def test_one_worker_without_horovodrun(tmp_path):
    """One plain process: the default snapshot folder under $TMPDIR, named."""
    require_horovod()
    (tmp_path / "work").mkdir()
    (tmp_path / "tmp").mkdir()
    out = check(python([SCRIPT, "--display", "100"], timeout=240, cwd=tmp_path / "work",
                       env={"TMPDIR": tmp_path / "tmp"})).stdout
    assert "1 worker(s), global batch 32, 384 iterations of SGD (step policy, scaled x1)" in out
    accuracy, val_accuracy = final(out)
    assert accuracy > 0.7 and val_accuracy > 0.75, out[-3000:]
    [folder] = (tmp_path / "tmp").glob("horovod_train-*")
    assert f"snapshots go to {folder}\n" in out
    assert (f"snapshots in {folder}: cnn_iter_256.solverstate, cnn_iter_384.solverstate"
            in out)
    assert _listing(folder) == ["cnn_iter_256.solverstate", "cnn_iter_256.weights.h5",
                                "cnn_iter_384.solverstate", "cnn_iter_384.weights.h5"]
    assert _listing(tmp_path / "work") == []


def test_without_horovod_prints_how_to_install(tmp_path):
    """A horovod package that fails to import (first on PYTHONPATH): exit 1,
    nothing on stdout, the install hint as one line on stderr."""
    blocker = tmp_path / "blocked" / "horovod"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("horovod blocked by the test")\n')
    (tmp_path / "tmp").mkdir()
    result = python([SCRIPT], timeout=120, cwd=tmp_path,
                    env={"PYTHONPATH": blocker.parent, "TMPDIR": tmp_path / "tmp"})
    assert result.returncode == 1, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if "Horovod" in line]
    assert lines == [f"{INSTALL_HINT} (horovod blocked by the test)"]
    assert _listing(tmp_path) == ["blocked", "tmp"]  # no snapshot folder made ...
    assert list((tmp_path / "tmp").glob("horovod_train-*")) == []  # ... anywhere


def test_two_workers_yellowfin(two_workers):
    """--yellowfin: measured val_accuracy 0.851 (np=2); required 0.7."""
    out = two_workers[1].ok("yellowfin")
    assert "[0]<stdout>:2 worker(s), global batch 64, 192 iterations of YellowFin" in out
    accuracy, val_accuracy = final(out)
    assert accuracy > 0.65 and val_accuracy > 0.7, out[-3000:]

"""examples/horovod_train.py: data-parallel SGD of a small CNN under a real
``horovodrun -np 2`` (Gloo, CPU), the same script as one worker, and the
one-line install hint without Horovod. The example runs from the repository
checkout (tests/../examples), as test_examples.py runs the demo.

Thresholds: the worker-averaged validation accuracy measured 0.868 (np=2,
global batch 64, 192 iterations) and 0.903 (np=1, batch 32, 384 iterations)
on the 8-class synthetic gratings (chance 0.125); the tests require 0.75
(YellowFin: 0.851 measured, 0.7 required).
"""

import re

import pytest
from hvd_support import Cases, check, python, require_horovod
from support import REPO

from keras_caffe.distributed._hvd import INSTALL_HINT  # the tests may read internals

SCRIPT = REPO / "examples" / "horovod_train.py"
FINAL = re.compile(r"final: loss ([0-9.]+) accuracy ([0-9.]+) val_loss ([0-9.]+) "
                   r"val_accuracy ([0-9.]+)")


def final(output):
    loss, accuracy, val_loss, val_accuracy = map(float, FINAL.search(output).groups())
    assert 0.0 < loss < 1.0 and 0.0 < val_loss < 1.0
    return accuracy, val_accuracy


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """The script's two ``horovodrun -np 2`` runs (SGD, YellowFin) as the
    cases of one launch, each in its own folder."""
    require_horovod()
    root = tmp_path_factory.mktemp("horovod_train")
    cases = Cases(root / "cases")
    for name, extra in (("sgd", ["--display", 40]),
                        ("yellowfin", ["--yellowfin", "--display", 100])):
        (root / name).mkdir()
        cases.add(name, [SCRIPT, *extra], cwd=root / name)
    return root, cases.horovodrun()


def test_two_workers(two_workers):
    """Rank 0 alone prints the result and Caffe's log and writes the snapshots."""
    root, cases = two_workers
    tmp_path = root / "sgd"
    out = cases.ok("sgd")  # this run's lines of the launch
    assert "[0]<stdout>:2 worker(s), global batch 64, 192 iterations of SGD (step policy, " \
           "scaled x2)" in out
    accuracy, val_accuracy = final(out)
    assert accuracy > 0.7 and val_accuracy > 0.75, out[-3000:]
    assert (f"[0]<stdout>:snapshots in {tmp_path.resolve() / 'horovod_snapshots'}: "
            "cnn_iter_128.solverstate, cnn_iter_192.solverstate") in out
    assert "[1]<stdout>:" not in out  # rank 1 prints nothing ...
    assert not re.search(r"\[1\]<stderr>:I\d{4} .*solver\.cpp", out)  # ... and logs nothing
    # Caffe's log from rank 0: the scaled, warmed-up step policy (0.01 x 2 after the
    # first epoch of 64 iterations, x 0.1 at iteration 144)
    assert "sgd_solver.cpp:112] Iteration 0, lr = 0.01\n" in out
    assert "sgd_solver.cpp:112] Iteration 80, lr = 0.02\n" in out
    assert "sgd_solver.cpp:112] Iteration 160, lr = 0.002\n" in out
    assert "Optimization Done." in out
    written = sorted(p.name for p in (tmp_path / "horovod_snapshots").iterdir())
    assert written == ["cnn_iter_128.solverstate", "cnn_iter_128.weights.h5",
                       "cnn_iter_192.solverstate", "cnn_iter_192.weights.h5"]


def test_one_worker_without_horovodrun(tmp_path):
    require_horovod()
    out = check(python([SCRIPT, "--display", "100"], timeout=240, cwd=tmp_path)).stdout
    assert "1 worker(s), global batch 32, 384 iterations of SGD (step policy, scaled x1)" in out
    accuracy, val_accuracy = final(out)
    assert accuracy > 0.7 and val_accuracy > 0.75, out[-3000:]


def test_without_horovod_prints_how_to_install(tmp_path):
    """A horovod package that fails to import (first on PYTHONPATH): exit 1,
    nothing on stdout, the install hint as one line on stderr."""
    blocker = tmp_path / "blocked" / "horovod"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("horovod blocked by the test")\n')
    result = python([SCRIPT], timeout=120, cwd=tmp_path, env={"PYTHONPATH": blocker.parent})
    assert result.returncode == 1, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if "Horovod" in line]
    assert lines == [f"{INSTALL_HINT} (horovod blocked by the test)"]
    assert not (tmp_path / "horovod_snapshots").exists()


def test_two_workers_yellowfin(two_workers):
    """--yellowfin: measured val_accuracy 0.851 (np=2); required 0.7."""
    out = two_workers[1].ok("yellowfin")
    assert "[0]<stdout>:2 worker(s), global batch 64, 192 iterations of YellowFin" in out
    accuracy, val_accuracy = final(out)
    assert accuracy > 0.65 and val_accuracy > 0.7, out[-3000:]

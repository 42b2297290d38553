"""``horovodrun -np 2 keras-caffe train``: Caffe's solver, data-parallel.

LeNet on the digits LMDB (examples/lenet_solver/make_data.py): two workers
with batch 32 each must end where one worker with batch 64 ends (the data
has no random crop, mirror or shuffle, so worker 0 reads records 0-31 and
worker 1 records 32-63 of what the single worker reads as one batch).
"""

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from support.horovod_jobs import Cases, caffemodel, environment, note_launch, require_horovod, selected

REPO = Path(__file__).resolve().parents[2]
LENET = REPO / "examples" / "lenet_solver"
CLI = ["-m", "keras_caffe.cli"]
SOLVER = """net: "{net}"
test_iter: 2
test_interval: 10
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 5
max_iter: 20
snapshot: 10
snapshot_prefix: "snap/lenet"
solver_mode: CPU
random_seed: 1701
"""


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    require_horovod()
    root = tmp_path_factory.mktemp("lenet")
    note_launch("python (make_data.py: NumPy and LMDB, no TensorFlow)")
    subprocess.run([sys.executable, str(LENET / "make_data.py"), "--train", "1280", "--test",
                    "200", "--out", str(root)], check=True, env=environment(),
                   stdout=subprocess.DEVNULL)
    text = (LENET / "lenet_train_test.prototxt").read_text()
    (root / "net64.prototxt").write_text(text)
    (root / "net32.prototxt").write_text(text.replace("batch_size: 64", "batch_size: 32"))
    (root / "net128.prototxt").write_text(text.replace("batch_size: 64", "batch_size: 128"))
    for batch in (32, 64):
        (root / f"solver{batch}.prototxt").write_text(SOLVER.format(net=f"net{batch}.prototxt"))
    short = SOLVER.replace("max_iter: 20", "max_iter: 10")
    (root / "solver32_iter2.prototxt").write_text(
        short.format(net="net32.prototxt") + "iter_size: 2\n")
    (root / "solver128.prototxt").write_text(short.format(net="net128.prototxt"))
    (root / "solver32_iter4.prototxt").write_text(
        short.format(net="net32.prototxt") + "iter_size: 4\n")
    return root


def add_train(cases, name, cwd, solver, *extra, **options):
    """``keras-caffe train`` in ``cwd`` as case ``name`` of ``cases``."""
    cwd.mkdir(exist_ok=True)
    cases.add(name, [*CLI, "train", "--solver", solver, "--log-format", "caffe", *extra],
              cwd=cwd, **options)


TWO_WORKERS = "test_two_workers_train_like_one_with_twice_the_batch"
RESUMED = "test_resumed_distributed_run_equals_uninterrupted"
XLA = "test_xla_train_step_runs_the_all_reduce_outside_the_compiled_region"
SLOW = "test_iter_size_two_workers_train_like_one_with_four_times_the_batch"


@pytest.fixture(scope="module")
def runs(lenet, request):
    """The module's ``keras-caffe train`` runs in two ``horovodrun -np 2``
    launches (``Cases``), each holding only what the selected tests read:
    ``main``, first the np=1 runs, split between the two processes, each
    run as a plain process would run it (without horovodrun's variables,
    before anything imports Horovod: the command line then trains alone),
    then the np=2 runs; and ``resumed``, a new job resuming ``np2``'s
    iteration-10 snapshot."""
    slow = selected(request, SLOW)
    main = Cases(lenet / "main_cases")
    if selected(request, TWO_WORKERS, XLA):
        add_train(main, "np1", lenet / "np1", lenet / "solver64.prototxt", rank=0, plain=True)
    if slow:
        add_train(main, "np1_iter4", lenet / "np1_iter4", lenet / "solver32_iter4.prototxt",
                  rank=1, plain=True)
        add_train(main, "np1_b128", lenet / "np1_b128", lenet / "solver128.prototxt", rank=1,
                  plain=True)
    if selected(request, TWO_WORKERS, RESUMED):
        add_train(main, "np2", lenet / "np2", lenet / "solver32.prototxt")
    if selected(request, XLA):
        add_train(main, "np2_xla", lenet / "np2_xla", lenet / "solver32.prototxt", "--jit", "on")
    if slow:
        add_train(main, "np2_iter2", lenet / "np2_iter2", lenet / "solver32_iter2.prototxt")
    if main.cases:
        main.horovodrun()
    resumed = Cases(lenet / "resumed_cases")
    if selected(request, RESUMED):
        folder = lenet / "np2_resumed"
        folder.mkdir()
        if (lenet / "np2" / "snap").is_dir():
            shutil.copytree(lenet / "np2" / "snap", folder / "snap")
            (folder / "snap" / "lenet_iter_20.caffemodel").unlink(missing_ok=True)
            (folder / "snap" / "lenet_iter_20.solverstate").unlink(missing_ok=True)
        add_train(resumed, "np2_resumed", folder, lenet / "solver32.prototxt",
                  "--snapshot", "snap/lenet_iter_10.solverstate")
        resumed.horovodrun()
    return SimpleNamespace(main=main, resumed=resumed)


def test_two_workers_train_like_one_with_twice_the_batch(lenet, runs):
    log2 = runs.main.ok("np2")  # this case's lines of the launch
    log1 = runs.main.ok("np1")
    two = caffemodel(lenet / "np2" / "snap" / "lenet_iter_20.caffemodel")
    one = caffemodel(lenet / "np1" / "snap" / "lenet_iter_20.caffemodel")
    assert sorted(two) == sorted(one) == ["conv1", "conv2", "ip1", "ip2"]
    for name in one:
        for a, b in zip(two[name], one[name]):
            # the two halves' gradients are summed in another order; oneDNN's
            # convolutions on TensorFlow 2.16 differ by up to 2.65e-6 (measured)
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # rank 0 alone logs and snapshots
    assert "Iteration 20" in log2 and "2 workers (Horovod)" in log2
    assert not [line for line in log2.splitlines() if line.startswith("[1]") and "] " in line
                and "solver.cpp" in line]
    assert sorted(p.name for p in (lenet / "np2" / "snap").iterdir()) == [
        "lenet_iter_10.caffemodel", "lenet_iter_10.solverstate",
        "lenet_iter_20.caffemodel", "lenet_iter_20.solverstate"]
    assert "Iteration 20" in log1


def test_resumed_distributed_run_equals_uninterrupted(lenet, runs):
    runs.main.ok("np2")
    runs.resumed.ok("np2_resumed")
    resumed = lenet / "np2_resumed"
    whole = caffemodel(lenet / "np2" / "snap" / "lenet_iter_20.caffemodel")
    again = caffemodel(resumed / "snap" / "lenet_iter_20.caffemodel")
    for name in whole:
        for a, b in zip(whole[name], again[name]):
            np.testing.assert_array_equal(a, b)


def test_xla_train_step_runs_the_all_reduce_outside_the_compiled_region(lenet, runs):
    """``--jit on``: forward/backward and the update are XLA-compiled, the
    all-reduce runs between them; the run still equals one worker with twice
    the batch (XLA's own rounding allowed: rtol 1e-4)."""
    log = runs.main.ok("np2_xla")
    assert "XLA on" in log
    runs.main.ok("np1")
    xla = caffemodel(lenet / "np2_xla" / "snap" / "lenet_iter_20.caffemodel")
    one = caffemodel(lenet / "np1" / "snap" / "lenet_iter_20.caffemodel")
    for name in one:
        for a, b in zip(xla[name], one[name]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # test_fit's iter_size test runs that reduce on every TensorFlow
def test_iter_size_two_workers_train_like_one_with_four_times_the_batch(lenet, runs):
    """np=2 x iter_size 2 x batch 32: each worker sums its two passes and
    all-reduces that sum once per iteration. It equals np=1 x iter_size 4 x
    batch 32, the same four batches of 32 summed in another order (rtol 1e-5,
    atol 1e-7, on both kernel families), and np=1 x batch 128 up to how the
    convolutions sum over the batch, grown over 10 iterations (Eigen on TF
    2.21: up to 6.6e-5 absolute; oneDNN: under 1e-7)."""
    for name in ("np2_iter2", "np1_iter4", "np1_b128"):
        runs.main.ok(name)
    two = caffemodel(lenet / "np2_iter2" / "snap" / "lenet_iter_10.caffemodel")
    same_batches = caffemodel(lenet / "np1_iter4" / "snap" / "lenet_iter_10.caffemodel")
    one = caffemodel(lenet / "np1_b128" / "snap" / "lenet_iter_10.caffemodel")
    for name in one:
        for a, b, c in zip(two[name], same_batches[name], one[name]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
            np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-4)

"""Data-parallel ``model.fit`` under a real ``horovodrun -np 2`` (Gloo, CPU).

np=2 with per-worker batch B must train like np=1 with batch 2B on the same
data (the averaged gradient of two halves is the gradient of the whole).
"""

from types import SimpleNamespace

import numpy as np
import pytest
from support.horovod_jobs import FIT_WORKER, Cases, require_horovod

STEPS = 20
OPTIMIZERS = ["sgd", "adam", "yellowfin", "yellowfin-xla"]


def weights(npz):
    return [npz[k] for k in sorted((k for k in npz.files if k.startswith("w")),
                                   key=lambda k: int(k[1:]))]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every run of this module, in three ``horovodrun -np 2`` launches
    (each a ``Cases`` of fit_worker.py runs; a case named N writes
    ``root/N``):

    - ``main``: first the np=1 references with twice the workers' batch,
      split between the two processes, before anything imports Horovod (the
      ``--reference`` path never does: each is what a plain ``python`` run
      computes); then the np=2 runs; last the mismatched models, which fail
      the launch;
    - ``resumed``: a new job resuming ``first``'s snapshot, then the XLA
      step without the callback (which fails the launch);
    - ``killed``: the run whose rank 1 SIGKILLs itself.
    """
    require_horovod()
    root = tmp_path_factory.mktemp("fit")

    def case(name, *extra):
        return [FIT_WORKER, root / name, *extra]

    main = Cases(root / "main_cases")
    for optimizer, rank in zip(OPTIMIZERS, (0, 1, 1, 0)):
        # the sgd one is test_jit_compile_true_all_reduces's reference too
        main.add(f"{optimizer}_ref", case(f"{optimizer}_ref", "--optimizer", optimizer,
                                          "--steps", STEPS, "--batch", 16, "--reference"),
                 rank=rank, plain=True)
    main.add("iter_size_ref", case("iter_size_ref", "--steps", STEPS // 2, "--batch", 32,
                                   "--reference"), rank=0, plain=True)
    main.add("mixed_ref", case("mixed_ref", "--optimizer", "sgd", "--steps", STEPS,
                               "--batch", 16, "--reference", "--mixed"), rank=1, plain=True)
    for optimizer in OPTIMIZERS:
        main.add(optimizer, case(optimizer, "--optimizer", optimizer, "--steps", STEPS,
                                 "--batch", 8))
    main.add("iter_size", case("iter_size", "--steps", STEPS, "--batch", 8, "--iter-size", 2))
    main.add("plain", case("plain", "--steps", 10))
    main.add("lms", case("lms", "--steps", 10, "--lms"))
    main.add("jit", case("jit", "--optimizer", "sgd", "--steps", STEPS, "--batch", 8, "--jit"),
             env={"PYTHONWARNINGS": "default"})
    main.add("mixed", case("mixed", "--optimizer", "sgd", "--steps", STEPS, "--mixed"))
    main.add("whole", case("whole", "--steps", STEPS, "--dropout"))
    main.add("first", case("first", "--steps", 10, "--dropout", "--snapshot-every", 10))
    main.add("mismatch", case("m", "--steps", 3), env={"MISMATCH_RANK": 1}, fails=True,
             timeout=180)
    resumed = Cases(root / "resumed_cases")
    resumed.add("second", case("second", "--steps", STEPS, "--dropout",
                               "--resume", root / "first" / "snap_iter_10.solverstate"))
    resumed.add("xla", case("x", "--optimizer", "sgd", "--steps", 3, "--jit", "--no-broadcast"),
                fails=True, timeout=180)
    killed = Cases(root / "killed_cases").add(
        "kill", case("k", "--steps", 200, "--snapshot-every", 5, "--kill-rank", 1,
                     "--kill-at", 12), fails=True, timeout=120)
    main.horovodrun()
    resumed.horovodrun()
    killed.horovodrun()
    return SimpleNamespace(root=root, main=main, resumed=resumed, killed=killed)


def load(runs, cases, name, rank=0):
    """``rank{rank}.npz`` of case ``name`` (which must have finished)."""
    cases.ok(name)
    return np.load(runs.root / name / f"rank{rank}.npz")


def run_pair(runs, optimizer):
    """(rank 0, rank 1, reference) results of one np=2 run and its np=1 twin."""
    return (load(runs, runs.main, optimizer, 0), load(runs, runs.main, optimizer, 1),
            load(runs, runs.main, f"{optimizer}_ref"))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "yellowfin", "yellowfin-xla"])
def test_two_workers_equal_one_worker_with_twice_the_batch(runs, optimizer):
    rank0, rank1, ref = run_pair(runs, optimizer)
    assert int(rank0["iterations"]) == int(ref["iterations"]) == STEPS
    for a, b in zip(weights(rank0), weights(rank1)):
        np.testing.assert_array_equal(a, b)  # identical parameters everywhere
    for a, b in zip(weights(rank0), weights(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    if optimizer.startswith("yellowfin"):
        # both ranks tune from the same averaged gradient: bit-identical lr and mu
        np.testing.assert_array_equal(rank0["lr"], rank1["lr"])
        np.testing.assert_array_equal(rank0["mu"], rank1["mu"])
        assert len(rank0["lr"]) == STEPS
        np.testing.assert_allclose(rank0["lr"], ref["lr"], rtol=1e-5)
        np.testing.assert_allclose(rank0["mu"], ref["mu"], rtol=1e-5)
        assert rank0["mu"][-1] > 0.0  # the tuner ran


def test_iter_size_all_reduces_once_per_update(runs):
    """np=2 x iter_size 2 x batch 8 trains like np=1 with batch 32 (rtol
    1e-5), and each worker ran one all-reduce per update, of the parameters'
    bytes once (not once per micro-batch)."""
    rank0, rank1, one = (load(runs, runs.main, "iter_size", 0),
                         load(runs, runs.main, "iter_size", 1),
                         load(runs, runs.main, "iter_size_ref"))
    assert int(rank0["iterations"]) == int(one["iterations"]) == STEPS // 2
    for a, b in zip(weights(rank0), weights(rank1)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(weights(rank0), weights(one)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    parameter_bytes = sum(w.size * w.itemsize for w in weights(rank0))
    assert parameter_bytes == 4 * (3 * 3 * 8 + 8 + 6 * 6 * 8 * 2 + 2)
    for rank in (rank0, rank1):
        assert rank["traffic"].tolist() == [STEPS // 2, STEPS // 2 * parameter_bytes]


def test_lms_under_horovod_changes_no_number(runs):
    """LMS (every activation recomputed) in a 2-worker run: the weights are
    those of the same run without LMS, bit for bit."""
    done = {name: load(runs, runs.main, name) for name in ("plain", "lms")}
    for a, b in zip(weights(done["plain"]), weights(done["lms"])):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=0)


def test_jit_compile_true_all_reduces(runs):
    """``jit_compile=True`` on CPU: BroadcastGlobalState turns XLA off for the
    train step with a warning, and the all-reduce still runs (the run equals
    np=1 with twice the batch, which it cannot without averaging)."""
    output = runs.main.ok("jit")  # the case's lines of the launch, with PYTHONWARNINGS=default
    assert "model.jit_compile turned off for the train step" in output
    rank0, rank1 = load(runs, runs.main, "jit", 0), load(runs, runs.main, "jit", 1)
    ref = load(runs, runs.main, "sgd_ref")  # sgd, 20 steps, batch 16: the same reference
    for a, b, r in zip(weights(rank0), weights(rank1), weights(ref)):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-7)


def test_mixed_float16_with_loss_scaling_inside_the_all_reduce(runs):
    """mixed_float16: DistributedOptimizer(LossScaleOptimizer(opt)) trains
    without the workers disagreeing on skipped steps: the ranks stay
    identical, and the run tracks np=1 with twice the batch (float16
    activations round differently per batch size: within 5% in norm)."""
    rank0, rank1, one = (load(runs, runs.main, "mixed", 0), load(runs, runs.main, "mixed", 1),
                         load(runs, runs.main, "mixed_ref"))
    assert int(rank0["iterations"]) == STEPS
    for a, b, r in zip(weights(rank0), weights(rank1), weights(one)):
        np.testing.assert_array_equal(a, b)
        assert np.linalg.norm(a - r) <= 0.05 * np.linalg.norm(r)


def test_xla_step_with_the_all_reduce_fails_loudly(runs):
    """Without the callback an XLA-compiled step containing Horovod's
    all-reduce is refused by TensorFlow: an error, never a skipped reduction.
    (The last case of its launch: the launch's exit status is the case's.)"""
    result = runs.resumed.failure("xla")
    assert result.returncode != 0
    assert "HorovodGroupedAllreduce" in result.stdout
    assert not (runs.root / "x" / "rank0.npz").exists()


def test_mismatched_models_are_reported_at_the_initial_broadcast(runs):
    result = runs.main.failure("mismatch")  # the last case of its launch (MISMATCH_RANK=1)
    assert result.returncode != 0
    assert ("DistributedError: rank 1's model differs from rank 0's: variable "
            "'model:sequential/conv2d/kernel' has shape (3, 3, 1, 9) (float32) on rank 1 but "
            "'model:sequential/conv2d/kernel' has (3, 3, 1, 8) (float32) on rank 0; every "
            "worker must build the same model") in result.stdout


def test_resumed_run_equals_uninterrupted_run(runs):
    """20 steps, versus 10 steps + snapshot (rank 0 writes it) + a new job
    (the first case of another launch) resuming for 10 more; with dropout, so
    the per-rank random states must resume too."""
    runs.main.ok("whole")
    runs.main.ok("first")
    written = sorted(p.name for p in (runs.root / "first").glob("snap_iter_*"))
    assert written == ["snap_iter_10.solverstate", "snap_iter_10.weights.h5"]
    for rank in (0, 1):
        a, b = load(runs, runs.main, "whole", rank), load(runs, runs.resumed, "second", rank)
        assert int(b["iterations"]) == STEPS
        for x, y in zip(weights(a), weights(b)):
            np.testing.assert_array_equal(x, y)


def test_killed_worker_stops_the_others_and_keeps_the_last_snapshot(runs):
    """Rank 1 is SIGKILLed after iteration 12: rank 0's next all-reduce fails,
    it stops with a DistributedError, the job ends (bounded by the timeout:
    a hang fails the test) and the iteration-10 snapshot loads intact (here,
    in a fresh Keras session)."""
    out = runs.root / "k"
    result = runs.killed.failure("kill")
    assert result.returncode != 0
    # horovodrun terminates the other workers once one has died: rank 0
    # either reports the failed collective first or is terminated (SIGTERM,
    # 143) before it can, which one depends on the machine's load.
    if "Process 0 exit with status code 143" not in result.stdout:
        assert ("DistributedError: rank 0 of 2: training stopped at iteration 1"
                in result.stdout), result.stdout[-3000:]
        assert "a worker failed or left during a Horovod collective" in result.stdout
    assert not (out / "rank0.npz").exists()
    import keras

    import keras_caffe
    from keras_caffe.importers.snapshots.files import latest_snapshot, load_snapshot

    found = latest_snapshot(str(out / "snap"))
    assert found.iteration == 10 and found.solverstate.endswith('snap_iter_10.solverstate')
    path = found.solverstate
    m = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, activation='relu'),
                          keras.layers.Flatten(), keras.layers.Dense(2)])
    opt = keras_caffe.SGD(0.05, momentum=0.9, weight_decay=5e-4)
    m.compile(optimizer=opt, loss='mse')
    opt.build(m.trainable_variables)
    load_snapshot(path, m, opt)
    assert int(opt.iterations.numpy()) == 10

"""Data-parallel ``model.fit`` under a real ``horovodrun -np 2`` (Gloo, CPU).

np=2 with per-worker batch B must train like np=1 with batch 2B on the same
data (the averaged gradient of two halves is the gradient of the whole).
"""

import numpy as np
import pytest
from hvd_support import FIT_WORKER, check, horovodrun, python, require_horovod

STEPS = 20


def weights(npz):
    return [npz[k] for k in sorted((k for k in npz.files if k.startswith("w")),
                                   key=lambda k: int(k[1:]))]


def run_pair(tmp_path, optimizer, *extra):
    """(rank 0, rank 1, reference) results of one np=2 run and its np=1 twin."""
    require_horovod()
    out = tmp_path / optimizer
    check(horovodrun([FIT_WORKER, out, "--optimizer", optimizer, "--steps", STEPS,
                      "--batch", 8, *extra]))
    ref = tmp_path / f"{optimizer}_ref"
    check(python([FIT_WORKER, ref, "--optimizer", optimizer, "--steps", STEPS, "--batch", 16,
                  "--reference"]))
    return (np.load(out / "rank0.npz"), np.load(out / "rank1.npz"), np.load(ref / "rank0.npz"))


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "yellowfin", "yellowfin-xla"])
def test_two_workers_equal_one_worker_with_twice_the_batch(tmp_path, optimizer):
    rank0, rank1, ref = run_pair(tmp_path, optimizer)
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


def test_iter_size_all_reduces_once_per_update(tmp_path):
    """np=2 x iter_size 2 x batch 8 trains like np=1 with batch 32 (rtol
    1e-5), and each worker ran one all-reduce per update, of the parameters'
    bytes once (not once per micro-batch)."""
    require_horovod()
    out, ref = tmp_path / "np2", tmp_path / "ref"
    check(horovodrun([FIT_WORKER, out, "--steps", STEPS, "--batch", 8, "--iter-size", 2]))
    check(python([FIT_WORKER, ref, "--steps", STEPS // 2, "--batch", 32, "--reference"]))
    rank0, rank1, one = (np.load(out / "rank0.npz"), np.load(out / "rank1.npz"),
                         np.load(ref / "rank0.npz"))
    assert int(rank0["iterations"]) == int(one["iterations"]) == STEPS // 2
    for a, b in zip(weights(rank0), weights(rank1)):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(weights(rank0), weights(one)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    parameter_bytes = sum(w.size * w.itemsize for w in weights(rank0))
    assert parameter_bytes == 4 * (3 * 3 * 8 + 8 + 6 * 6 * 8 * 2 + 2)
    for rank in (rank0, rank1):
        assert rank["traffic"].tolist() == [STEPS // 2, STEPS // 2 * parameter_bytes]


def test_lms_under_horovod_changes_no_number(tmp_path):
    """LMS (every activation recomputed) in a 2-worker run: the weights are
    those of the same run without LMS, bit for bit."""
    require_horovod()
    runs = {}
    for name, extra in (("plain", []), ("lms", ["--lms"])):
        check(horovodrun([FIT_WORKER, tmp_path / name, "--steps", 10, *extra]))
        runs[name] = np.load(tmp_path / name / "rank0.npz")
    for a, b in zip(weights(runs["plain"]), weights(runs["lms"])):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=0)


def test_jit_compile_true_all_reduces(tmp_path):
    """``jit_compile=True`` on CPU: BroadcastGlobalState turns XLA off for the
    train step with a warning, and the all-reduce still runs (the run equals
    np=1 with twice the batch, which it cannot without averaging)."""
    require_horovod()
    out = tmp_path / "jit"
    result = check(horovodrun([FIT_WORKER, out, "--optimizer", "sgd", "--steps", STEPS,
                               "--batch", 8, "--jit"], env={"PYTHONWARNINGS": "default"}))
    assert "model.jit_compile turned off for the train step" in result.stdout
    ref = tmp_path / "ref"
    check(python([FIT_WORKER, ref, "--optimizer", "sgd", "--steps", STEPS, "--batch", 16,
                  "--reference"]))
    rank0, rank1 = np.load(out / "rank0.npz"), np.load(out / "rank1.npz")
    for a, b, r in zip(weights(rank0), weights(rank1), weights(np.load(ref / "rank0.npz"))):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, r, rtol=1e-5, atol=1e-7)


def test_mixed_float16_with_loss_scaling_inside_the_all_reduce(tmp_path):
    """mixed_float16: DistributedOptimizer(LossScaleOptimizer(opt)) trains
    without the workers disagreeing on skipped steps: the ranks stay
    identical, and the run tracks np=1 with twice the batch (float16
    activations round differently per batch size: within 5% in norm)."""
    require_horovod()
    out = tmp_path / "mixed"
    check(horovodrun([FIT_WORKER, out, "--optimizer", "sgd", "--steps", STEPS, "--mixed"]))
    ref = tmp_path / "ref"
    check(python([FIT_WORKER, ref, "--optimizer", "sgd", "--steps", STEPS, "--batch", 16,
                  "--reference", "--mixed"]))
    rank0, rank1, one = (np.load(out / "rank0.npz"), np.load(out / "rank1.npz"),
                         np.load(ref / "rank0.npz"))
    assert int(rank0["iterations"]) == STEPS
    for a, b, r in zip(weights(rank0), weights(rank1), weights(one)):
        np.testing.assert_array_equal(a, b)
        assert np.linalg.norm(a - r) <= 0.05 * np.linalg.norm(r)


def test_xla_step_with_the_all_reduce_fails_loudly(tmp_path):
    """Without the callback an XLA-compiled step containing Horovod's
    all-reduce is refused by TensorFlow: an error, never a skipped reduction."""
    require_horovod()
    result = horovodrun([FIT_WORKER, tmp_path / "x", "--optimizer", "sgd", "--steps", 3,
                         "--jit", "--no-broadcast"], timeout=180)
    assert result.returncode != 0
    assert "HorovodGroupedAllreduce" in result.stdout
    assert not (tmp_path / "x" / "rank0.npz").exists()


def test_mismatched_models_are_reported_at_the_initial_broadcast(tmp_path):
    require_horovod()
    result = horovodrun([FIT_WORKER, tmp_path / "m", "--steps", 3], env={"MISMATCH_RANK": 1},
                        timeout=180)
    assert result.returncode != 0
    assert ("DistributedError: rank 1's model differs from rank 0's: variable "
            "'model:sequential/conv2d/kernel' has shape (3, 3, 1, 9) (float32) on rank 1 but "
            "'model:sequential/conv2d/kernel' has (3, 3, 1, 8) (float32) on rank 0; every "
            "worker must build the same model") in result.stdout


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    """20 steps, versus 10 steps + snapshot (rank 0 writes it) + a new job
    resuming for 10 more; with dropout, so the per-rank random states must
    resume too."""
    require_horovod()
    whole = tmp_path / "whole"
    check(horovodrun([FIT_WORKER, whole, "--steps", STEPS, "--dropout"]))
    first = tmp_path / "first"
    check(horovodrun([FIT_WORKER, first, "--steps", 10, "--dropout", "--snapshot-every", 10]))
    written = sorted(p.name for p in first.glob("snap_iter_*"))
    assert written == ["snap_iter_10.solverstate", "snap_iter_10.weights.h5"]
    second = tmp_path / "second"
    check(horovodrun([FIT_WORKER, second, "--steps", STEPS, "--dropout",
                      "--resume", first / "snap_iter_10.solverstate"]))
    for rank in (0, 1):
        a, b = np.load(whole / f"rank{rank}.npz"), np.load(second / f"rank{rank}.npz")
        assert int(b["iterations"]) == STEPS
        for x, y in zip(weights(a), weights(b)):
            np.testing.assert_array_equal(x, y)


def test_killed_worker_stops_the_others_and_keeps_the_last_snapshot(tmp_path):
    """Rank 1 is SIGKILLed after iteration 12: rank 0's next all-reduce fails,
    it stops with a DistributedError, the job ends (bounded by the timeout:
    a hang fails the test) and the iteration-10 snapshot loads intact."""
    require_horovod()
    out = tmp_path / "k"
    result = horovodrun([FIT_WORKER, out, "--steps", 200, "--snapshot-every", 5,
                         "--kill-rank", 1, "--kill-at", 12], timeout=120)
    assert result.returncode != 0
    # horovodrun terminates the other workers once one has died: rank 0
    # either reports the failed collective first or is terminated (SIGTERM,
    # 143) before it can, which one depends on the machine's load.
    if "Process 0 exit with status code 143" not in result.stdout:
        assert ("DistributedError: rank 0 of 2: training stopped at iteration 1"
                in result.stdout), result.stdout[-3000:]
        assert "a worker failed or left during a Horovod collective" in result.stdout
    assert not (out / "rank0.npz").exists()
    check(python(["-c", (
        "import sys, keras, keras_caffe\n"
        "from keras_caffe.importers.snapshot import latest_snapshot, load_snapshot\n"
        "found = latest_snapshot(sys.argv[1])\n"
        "assert found.iteration == 10 and found.solverstate.endswith('snap_iter_10.solverstate')\n"
        "path = found.solverstate\n"
        "m = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(8, 3, "
        "activation='relu'), keras.layers.Flatten(), keras.layers.Dense(2)])\n"
        "opt = keras_caffe.SGD(0.05, momentum=0.9, weight_decay=5e-4)\n"
        "m.compile(optimizer=opt, loss='mse')\n"
        "opt.build(m.trainable_variables)\n"
        "load_snapshot(path, m, opt)\n"
        "assert int(opt.iterations.numpy()) == 10\n"), out / "snap"], cwd=tmp_path))

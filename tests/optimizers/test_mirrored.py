"""Caffe's solvers under ``tf.distribute.MirroredStrategy`` in ``model.fit``.

Two logical CPU devices with batch 8 each must train like one device with
batch 16, for each solver with iter_size 2, clip_gradients that clips,
lr_mult 2 and 0, and weight decay (and YellowFin with and without its own
XLA update): the optimizer sums the replicas' gradients once per update and
runs Caffe's pipeline on that sum. Both devices end with identical weights
and optimizer state. The worker runs in a fresh process (the logical devices
must be made before TensorFlow starts), forked (``forked.run``) from one
that has imported TensorFlow but not started it.
"""

import numpy as np
import pytest

from support import REPO
from support.forked import run as run_forked
from support.horovod_jobs import check, environment

WORKER = REPO / "tests" / "support" / "mirrored_worker.py"
CASES = ["sgd", "nesterov", "adagrad", "rmsprop", "adadelta", "adam", "yellowfin",
         "yellowfin-xla"]


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("mirrored")
    check(run_forked([WORKER, out, *CASES], cwd=out, env=environment(), timeout=600, merge=True))
    return {case: np.load(out / f"{case}.npz") for case in CASES}


def keys(npz, prefix):
    return sorted((k for k in npz.files if k.startswith(prefix)),
                  key=lambda k: int(k.rsplit("_", 1)[1]))


@pytest.mark.kernels
@pytest.mark.parametrize("case", CASES)
def test_two_replicas_train_like_one_device_with_the_whole_batch(results, case):
    got = results[case]
    one = [got[k] for k in keys(got, "one_")]
    mirrored = [got[k] for k in keys(got, "mirrored_r0_")]
    assert len(one) == len(mirrored) == 4
    for a, b in zip(mirrored, one):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert list(got["iterations"]) == [8, 8]  # 16 batches, iter_size 2
    # the clipping clips, and ip1's bias (lr_mult 0) never moves from its zeros
    noclip = [got[k] for k in keys(got, "noclip_")]
    assert max(np.abs(a - b).max() for a, b in zip(noclip, one)) > 1e-3
    np.testing.assert_array_equal(mirrored[1], np.zeros_like(mirrored[1]))


@pytest.mark.parametrize("case", CASES)
def test_the_replicas_hold_identical_weights_and_optimizer_state(results, case):
    got = results[case]
    for prefix in ("mirrored", "opt"):
        first = keys(got, f"{prefix}_r0_")
        assert first
        for key in first:
            np.testing.assert_array_equal(got[key], got[key.replace("_r0_", "_r1_")])

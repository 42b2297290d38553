"""Elastic recovery under a real elastic ``horovodrun`` (Gloo, CPU).

Two "hosts" that are both this machine (``localhost:1`` and
``127.0.0.1:1``), ``--min-np 1 --max-np 2``. A worker SIGKILLs itself
after a chosen iteration (fault injection in the worker script, no
timing): its host is blacklisted, the survivor goes back to the last
commit and finishes alone. The result must equal, bit for bit, an
uninterrupted run that switched to one worker at that commit: a 2-worker
run snapshotted there and resumed by one process.
"""

import re

import numpy as np
import pytest
from hvd_support import (
    FIT_WORKER, check, discovery_script, horovodrun, horovodrun_elastic, python, require_horovod)

STEPS = 20


def weights(npz):
    return [npz[k] for k in sorted((k for k in npz.files if k.startswith("w")),
                                   key=lambda k: int(k[1:]))]


def synced(log):
    """[(rank, size, iteration, checksum)] of the workers' sync lines."""
    return [(int(r), int(p), int(i), c) for r, p, i, c in re.findall(
        r"synced rank (\d+) of (\d+) at iteration (\d+): weights (\w+)", log)]


@pytest.fixture(scope="module")
def fit_reference(tmp_path_factory):
    """2 workers to iteration 10 (snapshot), then one process to 20."""
    require_horovod()
    root = tmp_path_factory.mktemp("fit_ref")
    check(horovodrun([FIT_WORKER, root / "first", "--steps", 10, "--dropout",
                      "--snapshot-every", 10]))
    check(python([FIT_WORKER, root / "one", "--steps", STEPS, "--dropout", "--reference",
                  "--resume", root / "first" / "snap_iter_10.solverstate"]))
    return np.load(root / "one" / "rank0.npz")


def test_fit_survives_a_killed_worker(tmp_path, fit_reference):
    """Rank 0 dies after iteration 13 (commits every 5: at 5, 10, 15...).
    Rank 1 goes back to iteration 10, becomes rank 0 of 1 (its dropout
    seeds moved to rank 0's stream), and ends where the reference ends."""
    hosts = discovery_script(tmp_path / "hosts.sh", "localhost:1", "127.0.0.1:1")
    result = check(horovodrun_elastic(
        [FIT_WORKER, tmp_path / "e", "--steps", STEPS, "--dropout", "--elastic",
         "--commit-every", 5, "--kill-rank", 0, "--kill-at", 13], hosts))
    lines = synced(result.stdout)
    assert sorted(lines[:2]) == [(0, 2, 0, lines[0][3]), (1, 2, 0, lines[0][3])]
    assert lines[2:] == [(0, 1, 10, lines[2][3])], lines
    out = np.load(tmp_path / "e" / "rank0.npz")
    assert int(out["iterations"]) == STEPS
    assert not (tmp_path / "e" / "rank1.npz").exists()
    for a, b in zip(weights(out), weights(fit_reference)):
        np.testing.assert_array_equal(a, b)

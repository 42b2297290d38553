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


def test_fit_takes_in_a_new_worker_with_rank_0s_state(tmp_path):
    """One worker, then a second host appears (the discovery script lists
    127.0.0.1 once rank 0 creates a file after iteration 8, and rank 0
    commits until Horovod reports it). The new worker starts from rank 0's
    state (same weights checksum right after the sync), both finish with
    the same weights, and those equal one process to iteration 8
    (snapshot) resumed by a 2-worker job."""
    require_horovod()
    flag = tmp_path / "second_host"
    hosts = discovery_script(tmp_path / "hosts.sh", "localhost:1", "127.0.0.1:1",
                             when={"127.0.0.1": flag})
    result = check(horovodrun_elastic(
        [FIT_WORKER, tmp_path / "e", "--steps", STEPS, "--dropout", "--elastic",
         "--commit-every", 5, "--join-at", 8, "--join-file", flag], hosts, np=1))
    lines = synced(result.stdout)
    assert lines[0][:3] == (0, 1, 0)
    assert sorted(lines[1:]) == [(0, 2, 8, lines[1][3]), (1, 2, 8, lines[1][3])], lines
    rank0, rank1 = np.load(tmp_path / "e" / "rank0.npz"), np.load(tmp_path / "e" / "rank1.npz")
    assert int(rank0["iterations"]) == int(rank1["iterations"]) == STEPS
    for a, b in zip(weights(rank0), weights(rank1)):
        np.testing.assert_array_equal(a, b)
    check(python([FIT_WORKER, tmp_path / "one", "--steps", 8, "--dropout",
                  "--snapshot-every", 8]))
    check(horovodrun([FIT_WORKER, tmp_path / "two", "--steps", STEPS, "--dropout",
                      "--resume", tmp_path / "one" / "snap_iter_8.solverstate"]))
    for a, b in zip(weights(rank0), weights(np.load(tmp_path / "two" / "rank0.npz"))):
        np.testing.assert_array_equal(a, b)


# -- keras-caffe train --elastic ------------------------------------------------------

from test_solver_distributed import caffemodel, lenet, train  # noqa: E402,F401 - fixture

ELASTIC_CLI = FIT_WORKER.parent / "elastic_cli.py"


def same_caffemodels(a, b):
    a, b = caffemodel(a), caffemodel(b)
    assert sorted(a) == sorted(b) == ["conv1", "conv2", "ip1", "ip2"]
    for name in a:
        for x, y in zip(a[name], b[name]):
            np.testing.assert_array_equal(x, y)


@pytest.mark.slow  # the fit tests run the same state sync on every TensorFlow
def test_solver_survives_a_killed_worker(lenet):
    """``keras-caffe train --elastic --commit-every 10``: rank 1 dies at the
    chunk starting at iteration 16; rank 0 goes back to iteration 10 and
    trains alone to 20. Its weights equal the 2-worker run's iteration-10
    snapshot resumed by one process (``keras-caffe train --snapshot``)."""
    hosts = discovery_script(lenet / "hosts.sh", "localhost:1", "127.0.0.1:1")
    cwd = lenet / "elastic"
    cwd.mkdir()
    result = check(horovodrun_elastic(
        [ELASTIC_CLI, "train", "--solver", lenet / "solver32.prototxt", "--log-format", "caffe",
         "--elastic", "--commit-every", 10], hosts, cwd=cwd, env={"KILL_RANK": 1, "KILL_AT": 13}))
    log = result.stdout
    assert "workers: 2 -> 1, resumed from iteration 10" in log, log[-4000:]
    assert "Optimization Done" in log
    if not (lenet / "np2" / "snap" / "lenet_iter_10.caffemodel").exists():
        train(lenet / "np2", lenet / "solver32.prototxt", 2)
    resumed = lenet / "np2_then_np1"
    resumed.mkdir()
    (resumed / "snap").mkdir()
    for suffix in ("caffemodel", "solverstate"):
        name = f"lenet_iter_10.{suffix}"
        (resumed / "snap" / name).write_bytes((lenet / "np2" / "snap" / name).read_bytes())
    train(resumed, lenet / "solver32.prototxt", 1, "--snapshot", "snap/lenet_iter_10.solverstate")
    # the 2-worker part is the plain 2-worker run; the rest is one process resumed
    same_caffemodels(cwd / "snap" / "lenet_iter_10.caffemodel",
                     lenet / "np2" / "snap" / "lenet_iter_10.caffemodel")
    same_caffemodels(cwd / "snap" / "lenet_iter_20.caffemodel",
                     resumed / "snap" / "lenet_iter_20.caffemodel")


@pytest.mark.slow  # the fit tests run the same state sync on every TensorFlow
def test_solver_takes_in_a_new_worker_with_rank_0s_state(lenet):
    """One worker; at the commit of iteration 10 a second host appears and
    its worker joins with rank 0's state; the run ends equal to one process
    snapshotted at 10 and resumed by two (which it cannot unless the joiner
    started from rank 0's weights and data positions)."""
    flag = lenet / "second_host"
    hosts = discovery_script(lenet / "hosts_join.sh", "localhost:1", "127.0.0.1:1",
                             when={"127.0.0.1": flag})
    cwd = lenet / "joined"
    cwd.mkdir()
    result = check(horovodrun_elastic(
        [ELASTIC_CLI, "train", "--solver", lenet / "solver32.prototxt", "--log-format", "caffe",
         "--elastic", "--commit-every", 10], hosts, np=1, cwd=cwd,
        env={"JOIN_AT": 10, "JOIN_FILE": flag}))
    assert "workers: 1 -> 2, resumed from iteration 10" in result.stdout, result.stdout[-4000:]
    one = lenet / "np1_32"
    train(one, lenet / "solver32.prototxt", 1)
    resumed = lenet / "np1_then_np2"
    (resumed / "snap").mkdir(parents=True)
    for suffix in ("caffemodel", "solverstate"):
        name = f"lenet_iter_10.{suffix}"
        (resumed / "snap" / name).write_bytes((one / "snap" / name).read_bytes())
    train(resumed, lenet / "solver32.prototxt", 2, "--snapshot", "snap/lenet_iter_10.solverstate")
    same_caffemodels(cwd / "snap" / "lenet_iter_10.caffemodel",
                     one / "snap" / "lenet_iter_10.caffemodel")
    same_caffemodels(cwd / "snap" / "lenet_iter_20.caffemodel",
                     resumed / "snap" / "lenet_iter_20.caffemodel")


def test_elastic_flag_without_an_elastic_launch_still_stops_in_bounded_time(lenet):
    """``--elastic`` under a plain ``horovodrun -np 2`` (no ``--min-np``):
    Horovod cannot replace workers there, so a lost worker stops the job in
    bounded time (the timeout), without a recovery, and rank 0 says so at
    the start. (Rank 0's ``DistributedError`` line races with the launcher
    terminating it, so it is not required.)"""
    cwd = lenet / "plain"
    cwd.mkdir()
    result = horovodrun([ELASTIC_CLI, "train", "--solver", lenet / "solver32.prototxt",
                         "--log-format", "caffe", "--elastic", "--commit-every", 10], cwd=cwd,
                        env={"KILL_RANK": 1, "KILL_AT": 13}, timeout=180)
    assert result.returncode != 0
    assert "--elastic: not an elastic horovodrun" in result.stdout
    assert "Process 1 exit with status code 137" in result.stdout, result.stdout[-3000:]
    assert "workers: 2 -> 1" not in result.stdout and "Optimization Done" not in result.stdout
    assert not (cwd / "snap" / "lenet_iter_20.caffemodel").exists()
    assert (cwd / "snap" / "lenet_iter_10.caffemodel").exists()

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
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
from support.horovod_jobs import (
    FIT_WORKER, Cases, check, discovery_script, horovodrun_elastic, require_horovod, selected)
from distributed.test_solver_distributed import add_train, caffemodel, lenet  # noqa: F401 - fixture

STEPS = 20
ELASTIC_CLI = FIT_WORKER.parent / "elastic_cli.py"


def weights(npz):
    return [npz[k] for k in sorted((k for k in npz.files if k.startswith("w")),
                                   key=lambda k: int(k[1:]))]


def synced(log):
    """[(rank, size, iteration, checksum)] of the workers' sync lines."""
    return [(int(r), int(p), int(i), c) for r, p, i, c in re.findall(
        r"synced rank (\d+) of (\d+) at iteration (\d+): weights (\w+)", log)]


def copy_snapshot(source, folder, iteration):
    """``source``'s ``snap/lenet_iter_{iteration}`` pair into ``folder/snap``
    (where a run resuming it writes its own), if ``source`` wrote it."""
    (folder / "snap").mkdir(parents=True)
    for suffix in ("caffemodel", "solverstate"):
        name = f"lenet_iter_{iteration}.{suffix}"
        if (source / "snap" / name).is_file():
            shutil.copyfile(source / "snap" / name, folder / "snap" / name)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, request):
    """The runs the elastic jobs are compared with, and the ``--elastic``
    run under a plain horovodrun, in three launches (``Cases``; a fit case
    named N writes ``root/N``), each holding only what the selected tests
    read:

    - ``before`` (``python``): one process to iteration 8 (snapshot) for the
      fit join; ``keras-caffe train`` np=1 for the solver join;
    - ``main`` (``horovodrun -np 2``): the fit reference's 2 workers to
      iteration 10 (snapshot); 2 workers resuming ``before``'s iteration-8
      snapshot; the solver's np=2 run; np=2 resuming the np=1 run's
      iteration-10 snapshot; last the ``--elastic`` run whose rank 1 dies
      (which fails the launch);
    - ``after`` (``python``): one process resuming ``main``'s snapshots
      (fit: iteration 10 to 20; ``keras-caffe train``: np2's iteration 10).
    """
    require_horovod()
    wanted = {name: selected(request, f"test_{name}") for name in (
        "fit_survives_a_killed_worker", "fit_takes_in_a_new_worker_with_rank_0s_state",
        "solver_survives_a_killed_worker", "solver_takes_in_a_new_worker_with_rank_0s_state",
        "elastic_flag_without_an_elastic_launch_still_stops_in_bounded_time")}
    fit_killed, fit_joined, solver_killed, solver_joined, plain = wanted.values()
    root = tmp_path_factory.mktemp("elastic_runs")
    lenet = request.getfixturevalue("lenet") if solver_killed or solver_joined or plain else None
    before, main, after = (Cases(root / f"{name}_cases") for name in ("before", "main", "after"))
    if solver_joined:
        add_train(before, "np1_32", lenet / "np1_32", lenet / "solver32.prototxt")
    if fit_joined:
        before.add("one", [FIT_WORKER, root / "one", "--steps", 8, "--dropout",
                           "--snapshot-every", 8])
    if fit_killed:
        main.add("first", [FIT_WORKER, root / "first", "--steps", 10, "--dropout",
                           "--snapshot-every", 10])
        after.add("one_ref", [FIT_WORKER, root / "one_ref", "--steps", STEPS, "--dropout",
                              "--reference", "--resume",
                              root / "first" / "snap_iter_10.solverstate"])
    if fit_joined:
        main.add("two", [FIT_WORKER, root / "two", "--steps", STEPS, "--dropout",
                         "--resume", root / "one" / "snap_iter_8.solverstate"])
    if solver_killed:
        add_train(main, "np2", lenet / "np2", lenet / "solver32.prototxt")
        add_train(after, "np2_then_np1", lenet / "np2_then_np1", lenet / "solver32.prototxt",
                  "--snapshot", "snap/lenet_iter_10.solverstate")
    if solver_joined:
        add_train(main, "np1_then_np2", lenet / "np1_then_np2", lenet / "solver32.prototxt",
                  "--snapshot", "snap/lenet_iter_10.solverstate")
    if plain:
        (lenet / "plain").mkdir()
        main.add("plain", [ELASTIC_CLI, "train", "--solver", lenet / "solver32.prototxt",
                           "--log-format", "caffe", "--elastic", "--commit-every", 10],
                 cwd=lenet / "plain", env={"KILL_RANK": 1, "KILL_AT": 13}, fails=True,
                 timeout=180)
    if before.cases:
        before.python()
    if solver_joined:
        copy_snapshot(lenet / "np1_32", lenet / "np1_then_np2", 10)
    if main.cases:
        main.horovodrun()
    if solver_killed:
        copy_snapshot(lenet / "np2", lenet / "np2_then_np1", 10)
    if after.cases:
        after.python()
    return SimpleNamespace(root=root, before=before, main=main, after=after)


def load(runs, cases, name, rank=0):
    """``rank{rank}.npz`` of fit case ``name`` (which must have finished)."""
    cases.ok(name)
    return np.load(runs.root / name / f"rank{rank}.npz")


def test_fit_survives_a_killed_worker(tmp_path, runs):
    """Rank 0 dies after iteration 13 (commits every 5: at 5, 10, 15...).
    Rank 1 goes back to iteration 10, becomes rank 0 of 1 (its dropout
    seeds moved to rank 0's stream), and ends where the reference ends: 2
    workers to iteration 10 (snapshot), then one process to 20."""
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
    fit_reference = load(runs, runs.after, "one_ref")
    runs.main.ok("first")
    for a, b in zip(weights(out), weights(fit_reference)):
        np.testing.assert_array_equal(a, b)


def test_fit_takes_in_a_new_worker_with_rank_0s_state(tmp_path, runs):
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
    runs.before.ok("one")
    for a, b in zip(weights(rank0), weights(load(runs, runs.main, "two"))):
        np.testing.assert_array_equal(a, b)


# -- keras-caffe train --elastic ------------------------------------------------------


def same_caffemodels(a, b):
    a, b = caffemodel(a), caffemodel(b)
    assert sorted(a) == sorted(b) == ["conv1", "conv2", "ip1", "ip2"]
    for name in a:
        for x, y in zip(a[name], b[name]):
            np.testing.assert_array_equal(x, y)


@pytest.mark.slow  # the fit tests run the same state sync on every TensorFlow
def test_solver_survives_a_killed_worker(lenet, runs):
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
    runs.main.ok("np2")
    runs.after.ok("np2_then_np1")  # np2's iteration-10 pair copied, resumed by one process
    resumed = lenet / "np2_then_np1"
    # the 2-worker part is the plain 2-worker run; the rest is one process resumed
    same_caffemodels(cwd / "snap" / "lenet_iter_10.caffemodel",
                     lenet / "np2" / "snap" / "lenet_iter_10.caffemodel")
    same_caffemodels(cwd / "snap" / "lenet_iter_20.caffemodel",
                     resumed / "snap" / "lenet_iter_20.caffemodel")


@pytest.mark.slow  # the fit tests run the same state sync on every TensorFlow
def test_solver_takes_in_a_new_worker_with_rank_0s_state(lenet, runs):
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
    runs.before.ok("np1_32")
    runs.main.ok("np1_then_np2")  # np1_32's iteration-10 pair copied, resumed by two workers
    resumed = lenet / "np1_then_np2"
    same_caffemodels(cwd / "snap" / "lenet_iter_10.caffemodel",
                     one / "snap" / "lenet_iter_10.caffemodel")
    same_caffemodels(cwd / "snap" / "lenet_iter_20.caffemodel",
                     resumed / "snap" / "lenet_iter_20.caffemodel")


def test_elastic_flag_without_an_elastic_launch_still_stops_in_bounded_time(lenet, runs):
    """``--elastic`` under a plain ``horovodrun -np 2`` (no ``--min-np``):
    Horovod cannot replace workers there, so a lost worker stops the job in
    bounded time (the timeout), without a recovery, and rank 0 says so at
    the start. (Rank 0's ``DistributedError`` line races with the launcher
    terminating it, so it is not required.) The last case of its launch:
    the launch's exit status is this run's, its output this run's lines."""
    cwd = lenet / "plain"
    result = runs.main.failure("plain")
    assert result.returncode != 0
    assert "--elastic: not an elastic horovodrun" in result.stdout
    assert "Process 1 exit with status code 137" in result.stdout, result.stdout[-3000:]
    assert "workers: 2 -> 1" not in result.stdout and "Optimization Done" not in result.stdout
    assert not (cwd / "snap" / "lenet_iter_20.caffemodel").exists()
    assert (cwd / "snap" / "lenet_iter_10.caffemodel").exists()

"""keras-caffe's solvers and callbacks under JAX's multi-process runtime: two
real processes on localhost (one CPU device each, Gloo's CPU collectives),
joined by ``keras_caffe.data_parallel.initialize``, training under its
``data_parallel()`` distribution over the two global devices, each process
feeding ``process_share`` of every global batch
(tests/support/jax_multiprocess_worker.py).

Checks: the two processes train to the weights one process reaches on the
same global batches (SGD, Adam, YellowFin); rank 0 alone writes
CaffeSnapshot's files (all three formats) and CaffeLogger's lines; those
files restore in a process of its own, and both processes resume from each
format to the uninterrupted run's weights and optimizer state bit for bit;
a process killed with SIGKILL ends the job in bounded time (the survivor
aborts) and leaves its last snapshot loadable. ``initialize`` and
``process_share`` refuse bad arguments (in this process: before any runtime
starts); on TensorFlow and PyTorch the package itself is refused.
"""

import importlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from keras_caffe.errors import ArgumentError, BackendRequirementError

BACKEND = keras.backend.backend()
jax_only = pytest.mark.skipif(
    BACKEND != "jax",
    reason="JAX's multi-process runtime (jax.distributed) runs on the JAX backend only")
if BACKEND == "jax":  # the worker and the package import JAX (refused on other backends)
    import jax

    from keras_caffe import data_parallel
    from keras_caffe.callbacks import restore_snapshot
    from keras_caffe.importers.snapshots.files import latest_snapshot, list_snapshots
    from support import jax_multiprocess_worker as worker

#: Epochs of each run: 4 iterations each (32 samples, global batch 8).
EPOCHS = 3
ITERATIONS_PER_EPOCH = 4
#: Seconds a whole two-process job may take (start-up, compiles, training).
JOB_TIMEOUT_S = 180
#: Seconds from SIGKILL of one process to the other's exit. Measured here
#: with the worker's heartbeat 3 s and shutdown 5 s timeouts: 3.8 s when
#: rank 1 dies (rank 0 waits for its heartbeat), 0.2 s when rank 0 (the
#: coordinator) dies; JAX's defaults (100 s, 300 s) take far longer.
KILL_BOUND_S = 30
SOLVERS = ["sgd", "adam", "yellowfin"]
FORMATS = ["caffe", "caffe_hdf5", "keras"]
#: The snapshots the first job writes: (solver, format) -> prefix name.
#: Caffe's formats hold Caffe's six solvers only, so YellowFin's is ours.
SNAPSHOTS = {("sgd", f): f"sgd_{f}" for f in FORMATS}
SNAPSHOTS.update({("adam", "caffe"): "adam_caffe", ("yellowfin", "keras"): "yellowfin_keras"})
WEIGHTS_SUFFIX = {"caffe": "caffemodel", "caffe_hdf5": "caffemodel.h5", "keras": "weights.h5"}
STATE_SUFFIX = {"caffe": "solverstate", "caffe_hdf5": "solverstate.h5", "keras": "solverstate"}

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(folder, runs, refusals=None):
    """The two worker processes of one job, their output in ``folder/log<rank>``."""
    coordinator = f"127.0.0.1:{_free_port()}"
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    processes = []
    for rank in range(2):
        config = {"coordinator": coordinator, "num_processes": 2, "process_id": rank,
                  "runs": runs, "refusals": refusals}
        with open(folder / f"log{rank}", "w") as log:
            processes.append(subprocess.Popen(
                [sys.executable, worker.__file__, json.dumps(config)], env=env,
                stdout=log, stderr=subprocess.STDOUT))
    return processes


def _logs(folder):
    return "\n".join(f"--- log{rank}:\n{(folder / f'log{rank}').read_text()[-3000:]}"
                     for rank in range(2))


def _job(folder, runs, refusals=None):
    """Run one two-process job to its end; fail with both logs unless both exit 0."""
    processes = _start(folder, runs, refusals)
    deadline = time.monotonic() + JOB_TIMEOUT_S
    try:
        codes = [p.wait(timeout=max(deadline - time.monotonic(), 0.1)) for p in processes]
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
                p.wait()
    if codes != [0, 0]:
        pytest.fail(f"exit codes {codes}\n{_logs(folder)}")


def _arrays(path):
    """A worker's saved state: the weights, then the optimizer's variables."""
    with np.load(path) as npz:
        return [npz[f"arr_{i}"] for i in range(len(npz.files))]


def _report(path):
    with open(path) as f:
        return json.load(f)


def _solverstate(name, format, iteration):
    return f"{name}_iter_{iteration}.{STATE_SUFFIX[format]}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two two-process jobs. The first trains SGD, Adam and YellowFin for
    EPOCHS epochs, rank 0 writing the snapshots of SNAPSHOTS every epoch (SGD
    in all three formats at once, one CaffeSnapshot each) and CaffeLogger's
    lines; it also records process_share's refusals. In the second, both
    processes resume each snapshot of epoch 1 and train to epoch EPOCHS."""
    folder = tmp_path_factory.mktemp("jax_multiprocess")
    snap = folder / "snap"
    _job(folder, [
        {"solver": solver, "epochs": EPOCHS, "out": str(folder / solver),
         "snapshot_every": ITERATIONS_PER_EPOCH,
         "snapshots": [[str(snap / name), format]
                       for (s, format), name in SNAPSHOTS.items() if s == solver]}
        for solver in SOLVERS], refusals=str(folder / "refusals"))
    resumed = folder / "resumed"
    resumed.mkdir()
    _job(resumed, [
        {"solver": solver, "epochs": EPOCHS, "initial_epoch": 1, "out": str(resumed / name),
         "resume": str(snap / _solverstate(name, format, ITERATIONS_PER_EPOCH))}
        for (solver, format), name in SNAPSHOTS.items()])
    return folder


def _one_process(solver):
    """The weights one process (no distribution) reaches on the global batches."""
    x, y = worker.data()
    net = worker.model(solver)
    net.fit(x, y, batch_size=worker.GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return net.get_weights()


@jax_only
@pytest.mark.parametrize("solver", SOLVERS)
def test_two_processes_train_as_one_on_the_global_batch(trained, solver):
    """Each process's final weights equal one process's on the same global
    batches, to the reduction order of the gradient's sum (rtol 1e-5); the
    weights moved (the comparison is not of the initial weights)."""
    expected = _one_process(solver)
    initial = worker.model(solver).get_weights()
    for rank in range(2):
        got = _arrays(trained / f"{solver}.rank{rank}.npz")[:len(expected)]
        assert [w.shape for w in got] == [w.shape for w in expected]
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7)
    assert max(float(np.max(np.abs(e - i))) for e, i in zip(expected, initial)) > 0.05


@jax_only
def test_rank_zero_alone_writes_snapshots_and_log_lines(trained):
    """Rank 0 is the chief: it writes every snapshot (each format's weights
    and solverstate files, every epoch) and CaffeLogger's lines (``Solving``,
    three lines per iteration, ``Optimization Done``); rank 1 writes
    neither, so the folder holds one set of files."""
    iterations = [ITERATIONS_PER_EPOCH * (e + 1) for e in range(EPOCHS)]
    assert sorted(os.listdir(trained / "snap")) == sorted(
        f"{name}_iter_{i}.{suffix[format]}" for (_, format), name in SNAPSHOTS.items()
        for i in iterations for suffix in (WEIGHTS_SUFFIX, STATE_SUFFIX))
    for solver in SOLVERS:
        prefixes = {str(trained / "snap" / name): format
                    for (s, format), name in SNAPSHOTS.items() if s == solver}
        assert _report(trained / f"{solver}.rank0.json") == {
            "is_chief": True, "log_lines": 2 + 3 * EPOCHS * ITERATIONS_PER_EPOCH,
            "written": {prefix: [_solverstate(prefix, format, i) for i in iterations]
                        for prefix, format in prefixes.items()}}, solver
        assert _report(trained / f"{solver}.rank1.json") == {
            "is_chief": False, "log_lines": 0,
            "written": {prefix: [] for prefix in prefixes}}, solver


@jax_only
@pytest.mark.parametrize("solver, format", list(SNAPSHOTS))
def test_rank_zeros_snapshot_restores_in_a_process_alone(trained, solver, format):
    """The last snapshot of each solver and format, written from the two
    processes' replicated arrays, restores here (one process, no
    distribution) to rank 0's final weights and optimizer variables, bit for
    bit, and its iteration."""
    files = latest_snapshot(trained / "snap" / SNAPSHOTS[solver, format])
    assert (files.format, files.iteration) == (format, EPOCHS * ITERATIONS_PER_EPOCH)
    net = worker.model(solver)
    restore_snapshot(net, files.solverstate)
    assert int(net.optimizer.iterations.numpy()) == EPOCHS * ITERATIONS_PER_EPOCH
    got, expected = worker.state(net), _arrays(trained / f"{solver}.rank0.npz")
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype, i
        np.testing.assert_array_equal(g, e, err_msg=str(i))


@jax_only
@pytest.mark.parametrize("solver, format", list(SNAPSHOTS))
def test_both_processes_resume_from_rank_zeros_snapshot(trained, solver, format):
    """Both processes restore rank 0's snapshot of epoch 1 (each solver and
    format) and train epochs 2 and 3 to the uninterrupted run's weights and
    optimizer variables, bit for bit."""
    uninterrupted = _arrays(trained / f"{solver}.rank0.npz")
    for rank in range(2):
        got = _arrays(trained / "resumed" / f"{SNAPSHOTS[solver, format]}.rank{rank}.npz")
        assert len(got) == len(uninterrupted)
        for i, (g, e) in enumerate(zip(got, uninterrupted)):
            np.testing.assert_array_equal(g, e, err_msg=f"rank {rank}, array {i}")


@jax_only
def test_process_share_refuses_what_the_processes_cannot_share(trained):
    """In each of the two processes, process_share refuses a global batch of
    7 (not a multiple of 2 processes) and 12 rows in global batches of 8."""
    owner = "keras_caffe.data_parallel.process_share"
    for rank in range(2):
        assert _report(trained / f"refusals.rank{rank}") == [
            f"{owner}: `global_batch` must be a multiple of the 2 processes, got 7",
            f"{owner}: `array` has 12 rows, not a multiple of global_batch (8)"]


@jax_only
@pytest.mark.parametrize("rows, global_batch, argument, detail", [
    (8, "8", "global_batch", "must be an integer, got '8'"),
    (8, 2.5, "global_batch", "must be an integer, got 2.5"),
    (8, 0, "global_batch", "must be >= 1, got 0"),
    (10, 4, "array", "has 10 rows, not a multiple of global_batch (4)"),
], ids=["batch_text", "batch_fraction", "batch_zero", "rows"])
def test_process_share_refuses_bad_arguments(rows, global_batch, argument, detail):
    """One process (no runtime started): a global batch that is not a
    positive integer, rows that global batches do not divide."""
    with pytest.raises(ArgumentError) as caught:
        data_parallel.process_share(np.zeros((rows, 3)), global_batch)
    assert caught.value.argument == argument
    assert str(caught.value) == f"keras_caffe.data_parallel.process_share: `{argument}` {detail}"


@jax_only
def test_process_share_of_one_process_is_the_whole_array():
    """One process (no runtime started) takes every row, in order; a float
    global batch with an integer value is taken as that integer."""
    array = np.arange(24).reshape(12, 2)
    np.testing.assert_array_equal(data_parallel.process_share(array, 4), array)
    np.testing.assert_array_equal(data_parallel.process_share(array, 6.0), array)


@jax_only
@pytest.mark.parametrize("changes, argument, detail", [
    ({"num_processes": "two"}, "num_processes", "must be an integer, got 'two'"),
    ({"num_processes": 0}, "num_processes", "must be >= 1, got 0"),
    ({"process_id": -1}, "process_id", "must be >= 0, got -1"),
    ({"process_id": True}, "process_id", "must be an integer, got True"),
    ({"process_id": 2}, "process_id", "must be below num_processes (2), got 2"),
    ({"heartbeat_timeout": 0}, "heartbeat_timeout", "must be >= 1, got 0"),
    ({"shutdown_timeout": 2.5}, "shutdown_timeout", "must be an integer, got 2.5"),
    ({"initialization_timeout": None}, "initialization_timeout",
     "must be an integer, got None"),
    ({"coordinator": "localhost"}, "coordinator", "must be 'host:port', got 'localhost'"),
    ({"coordinator": 1234}, "coordinator", "must be 'host:port', got 1234"),
], ids=["processes_text", "processes_zero", "id_negative", "id_bool", "id_too_high",
        "heartbeat_zero", "shutdown_fraction", "initialization_none", "coordinator_no_port",
        "coordinator_int"])
def test_initialize_refuses_bad_arguments(changes, argument, detail):
    """Each bad argument is refused, naming it, before JAX's runtime starts
    (every other argument is good: the checks, not the runtime, refuse), and
    this process is still alone."""
    arguments = dict(coordinator="127.0.0.1:1", num_processes=2, process_id=0, seed=0,
                     heartbeat_timeout=3, shutdown_timeout=5, initialization_timeout=1)
    with pytest.raises(ArgumentError) as caught:
        data_parallel.initialize(**dict(arguments, **changes))
    assert caught.value.argument == argument
    assert str(caught.value) == f"keras_caffe.data_parallel.initialize: `{argument}` {detail}"
    assert jax.process_count() == 1


def test_data_parallel_is_refused_off_jax():
    """JAX: the package imports and names these functions. TensorFlow
    and PyTorch: one line naming the backend and keras_caffe.distributed,
    never an ImportError from JAX."""
    if BACKEND == "jax":
        module = importlib.import_module("keras_caffe.data_parallel")
        for name in ("initialize", "process_share", "data_parallel"):
            assert name in module.__all__ and callable(getattr(module, name)), name
        return
    with pytest.raises(BackendRequirementError) as caught:
        importlib.import_module("keras_caffe.data_parallel")
    assert str(caught.value) == (
        "keras_caffe.data_parallel (keras.distribution's data parallelism) needs Keras's JAX "
        f"backend and the backend is {BACKEND!r}: run with KERAS_BACKEND=jax (pip install "
        "'keras-caffe[jax]'); on tensorflow, keras_caffe.distributed trains on several "
        "devices and workers (Horovod, MirroredStrategy; docs/distributed.md)")
    assert isinstance(caught.value, ImportError)
    assert "keras_caffe.data_parallel" not in sys.modules


@jax_only
@pytest.mark.parametrize("victim", [0, 1], ids=["rank0_killed", "rank1_killed"])
def test_killed_process_ends_the_job(tmp_path, victim):
    """SIGKILL of one process once rank 0 has written a snapshot: the other
    aborts (SIGABRT from JAX's distributed runtime: a lost heartbeat, a
    failed shutdown barrier or a closed Gloo connection) within KILL_BOUND_S,
    and the newest snapshot on disk restores."""
    prefix = tmp_path / "snap" / "run"
    marker = tmp_path / "marker"
    processes = _start(tmp_path, [{
        "solver": "sgd", "epochs": 100_000, "out": str(tmp_path / "sgd"),
        "snapshots": [[str(prefix), "keras"]], "snapshot_every": ITERATIONS_PER_EPOCH,
        "marker": str(marker)}])
    try:
        deadline = time.monotonic() + JOB_TIMEOUT_S
        while not marker.exists():
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                pytest.fail(f"no snapshot marker\n{_logs(tmp_path)}")
            time.sleep(0.05)  # polling interval, not a synchronisation
        processes[victim].kill()
        killed = time.monotonic()
        survivor = processes[1 - victim]
        try:
            code = survivor.wait(timeout=KILL_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"rank {1 - victim} still runs {KILL_BOUND_S} s after rank "
                        f"{victim} was killed\n{_logs(tmp_path)}")
        elapsed = time.monotonic() - killed
    finally:
        for p in processes:
            if p.poll() is None:
                p.kill()
            p.wait()
    assert code == -signal.SIGABRT, _logs(tmp_path)
    assert elapsed < KILL_BOUND_S
    files = latest_snapshot(prefix)
    assert files.iteration >= ITERATIONS_PER_EPOCH
    assert [f.iteration for f in list_snapshots(prefix)] == list(
        range(ITERATIONS_PER_EPOCH, files.iteration + 1, ITERATIONS_PER_EPOCH))
    net = worker.model("sgd")
    restore_snapshot(net, files.solverstate)
    assert int(net.optimizer.iterations.numpy()) == files.iteration

"""Signals during ``keras-caffe train`` as during ``caffe train``
(tools/caffe.cpp, util/signal_handler.cpp, Solver::Step/Solve): SIGINT
(Ctrl-C) stops after a snapshot and exits 0, SIGHUP snapshots and training
goes on, ``-sigint_effect none`` ignores SIGINT, SIGTERM always stops.

The runs train the golden SGD case (batch 16 of 64 rows: the data position
matters) through the installed CLI; each is signalled when its log shows a
given iteration. Resuming a stopped run gives the uninterrupted run's
weights bit for bit. The uninterrupted run is a new interpreter (``python -m
keras_caffe train``); the others run the same command forked
(``forked.start``): processes of their own, signalled as such, without
TensorFlow's import to pay."""

import os
import re
import signal
import tempfile
import threading
import time

import pytest

from support import forked
import keras_caffe
from support import train_runs
from keras_caffe.errors import ArgumentError
from keras_caffe.training.signals import Request, SignalEffects
from support.train_runs import (FOREVER, TIMEOUT, assert_same_weights, command, golden_folder, messages,
                        snapshots)

END = 40  # the uninterrupted run's max_iter (the signals come at iteration 3)


class Running(train_runs.Running):
    """``train_runs.Running``, forked: the watched stream through a FIFO, the
    other to a file."""

    def __init__(self, *args, cwd, watch="stderr"):
        self._folder = tempfile.TemporaryDirectory(prefix="running-")
        fifo, other = (os.path.join(self._folder.name, name) for name in ("watched", "other"))
        os.mkfifo(fifo)
        self._other = open(other, "w+")
        streams = {"stdout": other, "stderr": other, watch: fifo}
        self.proc = forked.start(command(*args)[1:], cwd=cwd, stdout=streams["stdout"],
                                 stderr=streams["stderr"])
        self._watched = open(fifo)  # the child opens it for writing
        self.seen = []

    def finish(self):
        try:
            return super().finish()
        finally:
            self._watched.close()
            self._other.close()
            self._folder.cleanup()


def train(*args, cwd, expect=0):
    """``train_runs.train``, forked."""
    proc = forked.run(command(*args)[1:], cwd=cwd, timeout=TIMEOUT)
    assert proc.returncode == expect, (proc.returncode, proc.stderr[-3000:])
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def uninterrupted(golden, tmp_path_factory):
    """The golden SGD case trained to END without a signal (snapshots every
    10), in a new interpreter."""
    folder = golden_folder(golden, tmp_path_factory.mktemp("signals"), "uninterrupted")
    train_runs.train("--solver", "solver.prototxt", "--max-iter", END, cwd=folder)
    assert snapshots(folder) == [10, 20, 30, 40]
    return folder


def stopping_iteration(log):
    """N of the stop's snapshot, ``Snapshotting to binary proto file snap/run_iter_N``."""
    found = re.findall(r"Snapshotting to binary proto file snap/run_iter_(\d+)\.caffemodel", log)
    return int(found[-1])


def every_10_and(n):
    """The snapshots of a run stopped at ``n``: every 10 iterations, and ``n``."""
    return sorted({*range(10, n + 1, 10), n})


def test_sigint_stops_with_a_snapshot_and_resume_equals_the_uninterrupted_run(
        golden, tmp_path, uninterrupted):
    folder = golden_folder(golden, tmp_path, "stopped")
    run = Running("--solver", "solver.prototxt", "--max-iter", FOREVER, "--log", "caffe",
                  cwd=folder)
    run.wait_for(r"\] Iteration 3 \(")
    run.send(signal.SIGINT)
    status, log, _ = run.finish()
    assert status == 0, log[-3000:]
    assert "Traceback" not in log and "KeyboardInterrupt" not in log
    n = stopping_iteration(log)
    assert 3 < n < END  # display 1: one iteration per compiled call, a look after each
    lines = messages(log)
    assert lines[-4:] == [
        f"SIGINT: stopping at iteration {n}",
        f"Snapshotting to binary proto file snap/run_iter_{n}.caffemodel",
        f"Snapshotting solver state to binary proto file snap/run_iter_{n}.solverstate",
        "Optimization stopped early."]
    assert snapshots(folder) == every_10_and(n)

    resumed = train("--solver", "solver.prototxt", "--snapshot", f"snap/run_iter_{n}.solverstate",
                    "--max-iter", END, "--log", "caffe", cwd=folder).stderr
    assert f"Restoring previous solver status from snap/run_iter_{n}.solverstate" in resumed
    assert messages(resumed)[-1] == "Optimization Done."
    assert_same_weights(folder / "snap" / f"run_iter_{END}.caffemodel",
                        uninterrupted / "snap" / f"run_iter_{END}.caffemodel")


def test_sighup_snapshots_and_training_goes_on(golden, tmp_path, uninterrupted):
    folder = golden_folder(golden, tmp_path, "hup")
    run = Running("--solver", "solver.prototxt", "--max-iter", FOREVER, "--log", "caffe",
                  cwd=folder)
    run.wait_for(r"\] Iteration 3 \(")
    run.send(signal.SIGHUP)
    hup = int(run.wait_for(r"\] SIGHUP: snapshot at iteration (\d+)$").group(1))
    assert 3 < hup < 20
    assert run.wait_for(r"\] (.*)$").group(1) == \
        f"Snapshotting to binary proto file snap/run_iter_{hup}.caffemodel"
    run.wait_for(r"Snapshotting to binary proto file snap/run_iter_20\.")  # it went on
    run.send(signal.SIGINT)
    status, log, _ = run.finish()
    assert status == 0 and messages(log)[-1] == "Optimization stopped early."
    stop = stopping_iteration(log)
    assert stop > 20 and snapshots(folder) == sorted({hup, *every_10_and(stop)})
    # The snapshot on SIGHUP changed nothing in training.
    for n in (10, 20):
        assert_same_weights(folder / "snap" / f"run_iter_{n}.caffemodel",
                            uninterrupted / "snap" / f"run_iter_{n}.caffemodel")


def test_sigint_effect_none_ignores_sigint_and_sigterm_still_stops(golden, tmp_path):
    folder = golden_folder(golden, tmp_path, "none")
    run = Running("--solver", "solver.prototxt", "--max-iter", FOREVER, "--log", "caffe",
                  "-sigint_effect", "none", cwd=folder)
    run.wait_for(r"\] Iteration 3 \(")
    run.send(signal.SIGINT)
    run.wait_for(r"Snapshotting to binary proto file snap/run_iter_10\.")
    run.send(signal.SIGTERM)
    status, log, _ = run.finish()
    assert status == 0, log[-3000:]
    stop = stopping_iteration(log)
    assert "SIGINT" not in log and f"SIGTERM: stopping at iteration {stop}" in messages(log)
    assert stop > 10 and snapshots(folder) == every_10_and(stop)


def test_progress_mode_sigint_prints_the_summary(golden, tmp_path):
    folder = golden_folder(golden, tmp_path, "progress")
    run = Running("--solver", "solver.prototxt", "--max-iter", FOREVER, cwd=folder,
                  watch="stdout")
    run.wait_for(rf"^Iteration \d+/{FOREVER}: loss = ")
    run.send(signal.SIGINT)
    status, out, err = run.finish()
    assert status == 0 and "Traceback" not in err, err[-3000:]
    assert not re.search(r"[\x1b\r\b]", out)  # stdout is a FIFO: plain lines
    lines = out.splitlines()
    summary = [i for i, line in enumerate(lines) if line.startswith("Optimization")]
    assert len(summary) == 1
    head, last = lines[summary[0]], lines[summary[0] + 1:]
    found = re.fullmatch(r"Optimization stopped early \(SIGINT\) at iteration (\d+): (\d+) "
                         r"iterations in [\d.]+s, train loss = [\d.e+-]+", head)
    assert found and found.group(1) == found.group(2), head
    n = int(found.group(1))
    assert last == [f"  Last snapshot (iteration {n}): snap/run_iter_{n}.caffemodel, "
                    f"snap/run_iter_{n}.solverstate"]
    assert lines[summary[0] - 1] == f"Iteration {n}, snapshot: snap/run_iter_{n}.caffemodel, " \
                                    f"snap/run_iter_{n}.solverstate"
    # the bar's line for iteration n (display 1: one a step); its timing, after
    # the values, once a step after the first has ended
    assert re.fullmatch(rf"Iteration {n}/{FOREVER}: loss = [\d.e+-]+, lr = 0\.1"
                        r"( \(\d+[mu]?s/iter, ETA [\d:]+s?\))?", lines[summary[0] - 2])
    assert snapshots(folder) == every_10_and(n)


#: Seconds of training before the SIGINT of the exit tests. tf.data's autotuning
#: thread sleeps for a period that doubles as the pipeline ages (10.24 s from
#: about 10 s on, 20.48 s from about 20 s on); freeing the data stream waits
#: for it, and when it misses the cancellation's wake-up (a race in TensorFlow,
#: keras_caffe/cli/quick_exit.py) the wait is the rest of that period: at 21 s
#: up to about 19 s, what issue 33's user saw.
TRAIN_SECONDS = 21
#: Seconds allowed from "Optimization stopped early" to the process's end (it
#: ends in milliseconds; it waited up to the autotuner's period before).
EXIT_SECONDS = 8


@pytest.mark.parametrize("log", ["caffe", "progress"])
def test_after_sigint_the_process_ends_promptly_with_a_complete_snapshot(
        golden, tmp_path, monkeypatch, log):
    """Issue 33: after the stop message the process ends within EXIT_SECONDS
    in both log modes, its snapshot written whole (renamed into place, no
    temporary file left) and loadable by a new Solver."""
    folder = golden_folder(golden, tmp_path, log)
    watch = "stderr" if log == "caffe" else "stdout"
    run = Running("--solver", "solver.prototxt", "--max-iter", 10 ** 6, "--log", log, cwd=folder,
                  watch=watch)
    # training goes on: Caffe's display line, or the snapshot line (every 10 iterations)
    iteration = r"\] Iteration (\d+) \(" if log == "caffe" else r"^Iteration (\d+), snapshot: "
    run.wait_for(iteration)
    started = time.monotonic()
    while time.monotonic() - started < TRAIN_SECONDS:  # training, line by line
        run.wait_for(iteration)
    run.send(signal.SIGINT)
    stop = run.wait_for(r"(\] |^)Optimization stopped early")
    stopped = time.monotonic()
    status, out, other = run.finish()
    seconds = time.monotonic() - stopped
    assert status == 0, other[-3000:]
    assert seconds < EXIT_SECONDS, f"the process ended {seconds:.1f} s after {stop.string!r}"
    if log == "caffe":
        n = stopping_iteration(out)
    else:
        assert not re.search(r"[\x1b\r\b]", out)  # stdout is a FIFO: plain lines
        n = int(re.search(r"Optimization stopped early \(SIGINT\) at iteration (\d+):",
                          out).group(1))
    assert n in snapshots(folder)
    assert not [name for name in os.listdir(folder / "snap") if name.startswith(".tmp-")]
    monkeypatch.chdir(folder)  # the solverstate names its weights from the run's folder
    with keras_caffe.Solver("solver.prototxt", log=None) as solver:
        solver.restore(f"snap/run_iter_{n}.solverstate")
        assert solver.iter == n


def test_bad_effects_are_refused(golden, tmp_path):
    folder = golden_folder(golden, tmp_path, "bad")
    proc = train("--solver", "solver.prototxt", "-sighup_effect", "restart", cwd=folder,
                 expect=2)
    assert "argument --sighup-effect/-sighup_effect: invalid choice: 'restart'" in proc.stderr
    solver = keras_caffe.Solver(str(folder / "solver.prototxt"), log=None, max_iter=1)
    with pytest.raises(ArgumentError) as err:
        solver.solve(sigint_effect="exit")
    assert str(err.value) == ("Solver.solve: `sigint_effect` must be one of 'stop', 'snapshot', "
                              "'none', got 'exit'")
    assert solver.iter == 0  # refused before training


# -- the handlers themselves -------------------------------------------------------------


def test_handlers_live_only_inside_the_block_and_record_what_came():
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM)}
    with SignalEffects("stop", "snapshot") as effects:
        assert effects.installed
        assert all(signal.getsignal(s) != h for s, h in before.items())
        assert effects.take() == Request()
        os.kill(os.getpid(), signal.SIGHUP)
        assert effects.take() == Request(snapshot=True, stop=False, signals=("SIGHUP",))
        assert effects.take() == Request()
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)  # twice before a look: once
        os.kill(os.getpid(), signal.SIGHUP)
        assert effects.take() == Request(snapshot=True, stop=True, signals=("SIGINT", "SIGHUP"))
    assert {s: signal.getsignal(s) for s in before} == before
    assert not effects.installed


def test_none_records_nothing_to_do_and_sigterm_always_stops():
    with SignalEffects("none", "none") as effects:
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGHUP)
        assert not effects.take()
        os.kill(os.getpid(), signal.SIGTERM)
        assert effects.take() == Request(snapshot=False, stop=True, signals=("SIGTERM",))


def test_outside_the_main_thread_signals_are_left_alone():
    before = signal.getsignal(signal.SIGINT)
    seen = {}

    def worker():
        with SignalEffects() as effects:
            seen["installed"] = effects.installed
            seen["handler"] = signal.getsignal(signal.SIGINT)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert seen == {"installed": False, "handler": before}

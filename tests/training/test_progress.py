"""``keras_caffe.training.progress``, the progress mode's output, with a fake clock:
plain lines (no escape characters, no ``\\r`` or ``\\b``) when stdout is not a
terminal, a bar redrawn in place on a terminal, and an ETA that is never
estimated from the first step (which compiles the train step): none until a
later step has ended, then the time of the steps after the first."""

import io
import re

from keras_caffe.training.progress import Estimate, ProgressLog, duration_text, per_iteration_text


class Clock:
    """Seconds that move only when told."""

    def __init__(self, now=100.0):
        self.now = now

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_no_estimate_from_the_first_step_alone():
    """The compile step only sets where the measure starts."""
    estimate = Estimate(10000)
    estimate.update(1, 50.0)  # step 1 ends after a 40 s compilation
    assert (estimate.per_iteration, estimate.eta) == (None, None)
    estimate.update(101, 51.0)  # 100 iterations in 1 s after it
    assert estimate.per_iteration == 0.01
    assert abs(estimate.eta - 0.01 * 9899) < 1e-9
    estimate.update(10000, 150.0)
    assert abs(estimate.per_iteration - 100.0 / 9999) < 1e-12 and estimate.eta == 0


def test_plain_lines_off_a_terminal_with_the_eta_from_the_steps_after_the_first():
    """Off a terminal: exact plain lines, a bar line per `every` iterations, no ETA at
    step 1 (it took 40 s), then 10 ms an iteration from the steps after it."""
    clock, out = Clock(), io.StringIO()
    log = ProgressLog(10000, out, every=100, clock=clock)
    log.line("Iteration 0, Test net #0: accuracy = 0.1")
    log.begin(0)
    clock.now += 40.0  # the first step: compilation
    log.update(1, 2.302585, 0.01)
    clock.now += 1.0  # then 10 ms an iteration
    log.update(101, 0.5, 0.0099)
    clock.now += 0.5
    log.update(150, 0.4, 0.0099)  # no multiple of 100 passed: no line
    log.snapshotted(150, "snap/x_iter_150.caffemodel", "snap/x_iter_150.solverstate")
    clock.now += 0.5
    log.update(201, 0.3, 0.0098)
    clock.now += 98.0
    log.update(10000, 0.01, 0.005)  # the last: no ETA
    log.finished(10000, 0.01)
    text = out.getvalue()
    assert not re.search(r"[\x1b\r\b]", text)
    assert text.splitlines() == [
        "Iteration 0, Test net #0: accuracy = 0.1",
        "Iteration 1/10000: loss = 2.30259, lr = 0.01",  # no ETA at step 1
        "Iteration 101/10000: loss = 0.5, lr = 0.0099 (10ms/iter, ETA 1:38)",  # 9899 x 10 ms
        "Iteration 150, snapshot: snap/x_iter_150.caffemodel, snap/x_iter_150.solverstate",
        "Iteration 201/10000: loss = 0.3, lr = 0.0098 (10ms/iter, ETA 1:37)",
        "Iteration 10000/10000: loss = 0.01, lr = 0.005 (10ms/iter)",
        "Optimization Done: 10000 iterations in 140.0s, train loss = 0.01",
        "  Last snapshot (iteration 150): snap/x_iter_150.caffemodel, "
        "snap/x_iter_150.solverstate",
    ]


def test_every_display_a_line_and_a_new_bar_starts_a_new_estimate():
    """Solver.step's update points with display 2; a second step() call measures anew."""
    clock, out = Clock(), io.StringIO()
    log = ProgressLog(8, out, every=2, clock=clock)
    log.begin(0)
    for iteration in (1, 3, 4, 5, 7):  # where Solver.step's compiled calls end (display 2)
        clock.now += 1.0
        log.update(iteration, 1.0, 0.1)
    log.begin(7)  # another step() call: measured anew
    clock.now += 30.0
    log.update(8, 0.5, 0.1)
    assert out.getvalue().splitlines() == [
        "Iteration 1/8: loss = 1, lr = 0.1",
        "Iteration 3/8: loss = 1, lr = 0.1 (500ms/iter, ETA 2s)",
        "Iteration 4/8: loss = 1, lr = 0.1 (667ms/iter, ETA 2s)",
        "Iteration 7/8: loss = 1, lr = 0.1 (667ms/iter, ETA 0s)",
        "Iteration 8/8: loss = 0.5, lr = 0.1",  # the new bar's first step
    ]


def test_on_a_terminal_the_bar_is_redrawn_in_place_without_eta_at_step_1():
    """On a terminal: \\r redraws (no \\b), at most every INTERVAL, ETA once a later
    step ended, a newline before a line of its own and at the end."""
    clock, out = Clock(), Terminal()
    log = ProgressLog(10000, out, clock=clock)
    log.begin(0)
    clock.now += 40.0
    log.update(1, 2.302585, 0.01)
    first = out.getvalue()
    assert first == ("\r\x1b[1m    1/10000\x1b[0m \x1b[37m" + "━" * 20 + "\x1b[0m - loss: 2.30259 "
                     "- lr: 0.01\x1b[K")
    clock.now += 0.01
    log.update(2, 2.2, 0.01)  # within INTERVAL of the last redraw: not drawn
    assert out.getvalue() == first
    clock.now += 4.99
    log.update(501, 1.5, 0.01)
    drawn = out.getvalue()[len(first):]
    assert drawn == ("\r\x1b[1m  501/10000\x1b[0m \x1b[32m━\x1b[0m\x1b[37m" + "━" * 19 +
                     "\x1b[0m 1:34 10ms/iter - loss: 1.5 - lr: 0.01\x1b[K")
    assert "\b" not in out.getvalue()
    log.line("Iteration 501, snapshot: a, b")  # below the bar, which it ends
    assert out.getvalue().endswith("\x1b[K\nIteration 501, snapshot: a, b\n")
    clock.now += 100.0
    log.update(10000, 0.1, 0.01)
    assert out.getvalue().endswith("\r\x1b[1m10000/10000\x1b[0m \x1b[32m" + "━" * 20 +
                                   "\x1b[0m\x1b[37m\x1b[0m 11ms/iter - loss: 0.1 - lr: 0.01"
                                   "\x1b[K\n")


def test_duration_and_rate_texts():
    """The ETA and per-iteration formats."""
    assert [duration_text(s) for s in (0.4, 59.9, 60, 3599, 3600, 155661)] == \
        ["0s", "59s", "1:00", "59:59", "1:00:00", "43:14:21"]
    assert [per_iteration_text(s) for s in (2.4, 0.0834, 0.00045)] == \
        ["2s/iter", "83ms/iter", "450us/iter"]

"""``keras-caffe train``'s default output: a progress bar, plus a line per
test pass, a line per snapshot and a summary at the end.

Everything goes to stdout. On a terminal the bar is redrawn in place
(``\\r``) and a line is written below it (the bar is redrawn under it at the
next update), so the lines and the bar never overwrite each other::

      101/600 ━━━━━━━━━━━━━━━━━━━━ 0:41 83ms/iter - loss: 0.228325 - lr: 0.00992565
    Iteration 200, Test net #0: accuracy = 0.91, loss = 0.31
    Iteration 200, snapshot: out/lenet_iter_200.caffemodel, out/lenet_iter_200.solverstate
    ...
    Optimization Done: 600 iterations in 52.3s, train loss = 0.0412
      Test net #0 (iteration 600): accuracy = 0.97, loss = 0.09
      Last snapshot (iteration 600): out/lenet_iter_600.caffemodel, out/lenet_iter_600.solverstate

Written to a file or a pipe, the output is plain lines (no colour, no
``\\r``, no ``\\b``): the bar becomes a line each time the iteration count
passes a multiple of ``every`` (the solver's ``display``), at the first
update and at the last::

    Iteration 1/600: loss = 2.30259, lr = 0.01
    Iteration 101/600: loss = 0.228325, lr = 0.00992565 (83ms/iter, ETA 0:41)

The ETA and the time per iteration are measured from the end of the bar's
first step, never across it: the first step compiles the train step (seconds,
where an iteration takes milliseconds), so until a second step has ended
there is no estimate and none is shown.

Values are written as Caffe's log writes them (``%g``, 6 digits).
"""

import sys
import time

from keras_caffe.caffe_log import number

#: Seconds between two redraws of the bar on a terminal (the last update is always drawn).
INTERVAL = 0.05
#: Characters of the bar on a terminal.
WIDTH = 20
_BOLD, _DONE, _TODO, _RESET, _CLEAR = "\x1b[1m", "\x1b[32m", "\x1b[37m", "\x1b[0m", "\x1b[K"


def outputs_text(values):
    """``name = value, ...`` of ``{output name: value}``."""
    return ", ".join(f"{name} = {number(value)}" for name, value in values.items())


def duration_text(seconds):
    """An ETA as Keras's progress bar writes one: ``7s``, ``1:33``, ``2:05:09``."""
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    if seconds >= 60:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds}s"


def per_iteration_text(seconds):
    """The time of one iteration: ``83ms/iter``, ``2s/iter``, ``450us/iter``."""
    if seconds >= 1:
        return f"{seconds:.0f}s/iter"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.0f}ms/iter"
    return f"{seconds * 1e6:.0f}us/iter"


class Estimate:
    """Time per iteration and time left, from the steps after the first.

    ``update(iteration, now)`` at the end of each step; the first call only
    marks where the measure starts (its step included compilation), so
    ``per_iteration`` and ``eta`` are None until a later call with more
    iterations done."""

    def __init__(self, max_iter):
        self.max_iter = max_iter
        self._base = None  # (iteration, time) at the end of the first step
        self.per_iteration = None
        self.eta = None

    def update(self, iteration, now):
        if self._base is None:
            self._base = (iteration, now)
            return
        done, since = iteration - self._base[0], now - self._base[1]
        if done > 0:
            self.per_iteration = since / done
            self.eta = self.per_iteration * max(self.max_iter - iteration, 0)


class ProgressLog:
    """The progress-mode output of one ``Solver.solve`` (or ``step``).

    Args:
        max_iter: the bar's end.
        stream: where to write (default: ``sys.stdout`` at each write).
        every: on a stream that is not a terminal, write the bar's line when
            the iteration count passes a multiple of ``every``.
        clock: seconds, for the summary's wall time, the ETA and the redraws
            (default ``time.perf_counter``; tests give a fake one).
    """

    def __init__(self, max_iter, stream=None, *, every=1, clock=time.perf_counter):
        self.max_iter = max_iter
        self.stream = stream
        self.every = max(int(every), 1)
        self.clock = clock
        self._estimate = None  # the running bar's Estimate; None before begin
        self._open = False  # the bar's line on the terminal has no newline yet
        self._drawn = None  # the clock at the last redraw on a terminal
        self._written = None  # the iteration of the last bar line, off a terminal
        self.started = clock()
        self.start_iter = None
        self.tests = {}  # test net index -> (iteration, {output: value})
        self.snapshot = None  # (iteration, weights, solverstate)

    def _out(self):
        return self.stream or sys.stdout

    def _write(self, text):
        stream = self._out()
        stream.write(text)
        stream.flush()

    def _terminal(self):
        isatty = getattr(self._out(), "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:  # a closed stream
            return False

    def begin(self, iteration):
        """Start a bar at ``iteration`` (a new bar for each ``step`` call)."""
        if self.start_iter is None:
            self.start_iter = iteration
        self._close_line()
        self._estimate = Estimate(self.max_iter)
        self._drawn = self._written = None

    def update(self, iteration, loss, lr):
        """Redraw the bar (on a terminal at most every ``INTERVAL`` seconds
        and at the end), or write its line (see ``every``)."""
        if self._estimate is None:
            return
        now = self.clock()
        self._estimate.update(iteration, now)
        last = iteration >= self.max_iter
        if not self._terminal():
            first = self._written is None
            if first or last or iteration // self.every > self._written // self.every:
                self._written = iteration
                self._write(self._plain(iteration, loss, lr) + "\n")
            return
        if self._drawn is not None and now - self._drawn < INTERVAL and not last:
            return
        self._drawn = now
        self._draw(iteration, loss, lr, last)

    def _plain(self, iteration, loss, lr):
        text = f"Iteration {iteration}/{self.max_iter}: loss = {number(loss)}, lr = {number(lr)}"
        per_iteration, eta = self._timing()
        timing = ", ".join(filter(None, [per_iteration, eta and f"ETA {eta}"]))
        return f"{text} ({timing})" if timing else text

    def _timing(self):
        """(time per iteration, ETA) as text, each None while unknown; no ETA at the end."""
        estimate = self._estimate
        if estimate.per_iteration is None:
            return None, None
        eta = duration_text(estimate.eta) if estimate.eta else None
        return per_iteration_text(estimate.per_iteration), eta

    def _draw(self, iteration, loss, lr, last):
        digits = len(str(self.max_iter))
        done = min(int(WIDTH * iteration / max(self.max_iter, 1)), WIDTH)
        per_iteration, eta = self._timing()
        info = " ".join(filter(None, [eta, per_iteration,
                                      f"- loss: {number(loss)} - lr: {number(lr)}"]))
        bar = f"{_DONE}{'━' * done}{_RESET}" if done else ""
        self._write(f"\r{_BOLD}{iteration:{digits}d}/{self.max_iter}{_RESET} {bar}{_TODO}"
                    f"{'━' * (WIDTH - done)}{_RESET} {info}{_CLEAR}" + ("\n" if last else ""))
        self._open = not last

    def line(self, text):
        """A line of its own (below the bar on a terminal)."""
        self._close_line()
        self._write(text + "\n")

    def _close_line(self):
        if self._open:
            self._write("\n")
            self._open = False

    def tested(self, iteration, index, values):
        self.tests[index] = (iteration, dict(values))
        self.line(f"Iteration {iteration}, Test net #{index}: {outputs_text(values)}")

    def snapshotted(self, iteration, weights, solverstate):
        self.snapshot = (iteration, weights, solverstate)
        self.line(f"Iteration {iteration}, snapshot: {weights}, {solverstate}")

    def finished(self, iteration, loss, stopped=None):
        """The summary: iterations, wall time, the last train loss, the last
        tests and snapshot. ``stopped``: the text saying why training
        stopped early, if it did."""
        seconds = self.clock() - self.started
        done = iteration - (self.start_iter if self.start_iter is not None else iteration)
        head = f"Optimization stopped early ({stopped}) at iteration {iteration}" if stopped \
            else "Optimization Done"
        loss_text = f", train loss = {number(loss)}" if done else ""
        lines = [f"{head}: {done} iterations in {seconds:.1f}s{loss_text}"]
        for index, (at, values) in sorted(self.tests.items()):
            lines.append(f"  Test net #{index} (iteration {at}): {outputs_text(values)}")
        if self.snapshot is not None:
            at, weights, solverstate = self.snapshot
            lines.append(f"  Last snapshot (iteration {at}): {weights}, {solverstate}")
        for text in lines:
            self.line(text)

"""``keras-caffe train``'s default output: Keras's progress bar, plus a line
per test pass, a line per snapshot and a summary at the end.

Everything goes to stdout, where ``keras.utils.Progbar`` draws: a line is
written below the bar (the bar is redrawn under it at the next update), so
the lines and the bar never overwrite each other::

     4/12 ━━━━━━━━━━━━━━━━━━━━ 1s 95ms/step - loss: 2.1040 - lr: 0.0100
    Iteration 4, Test net #0: accuracy = 0.42, loss = 1.88
    Iteration 6, snapshot: out/lenet_iter_6.caffemodel, out/lenet_iter_6.solverstate
    ...
    Optimization Done: 12 iterations in 3.1s, train loss = 0.412
      Test net #0 (iteration 12): accuracy = 0.91, loss = 0.31
      Last snapshot: out/lenet_iter_12.caffemodel, out/lenet_iter_12.solverstate

Values are written as Caffe's log writes them (``%g``, 6 digits).
"""

import sys
import time

import keras

from keras_caffe.caffe_log import number

#: Seconds between two redraws of the bar (the last update is always drawn).
INTERVAL = 0.05


def outputs_text(values):
    """``name = value, ...`` of ``{output name: value}``."""
    return ", ".join(f"{name} = {number(value)}" for name, value in values.items())


class ProgressLog:
    """The progress-mode output of one ``Solver.solve`` (or ``step``)."""

    def __init__(self, max_iter, stream=None):
        self.max_iter = max_iter
        self.stream = stream
        self._bar = None
        self._open = False  # the bar's line has no newline yet
        self._drawn = 0.0
        self.started = time.perf_counter()
        self.start_iter = None
        self.tests = {}  # test net index -> (iteration, {output: value})
        self.snapshot = None  # (iteration, weights, solverstate)

    def _write(self, text):
        stream = self.stream or sys.stdout
        stream.write(text)
        stream.flush()

    def begin(self, iteration):
        """Start the bar at ``iteration`` (a new bar for each ``step`` call)."""
        if self.start_iter is None:
            self.start_iter = iteration
        self._close_line()
        self._bar = keras.utils.Progbar(max(self.max_iter, 1), stateful_metrics=["loss", "lr"],
                                        interval=0.0)

    def update(self, iteration, loss, lr):
        """Redraw the bar (at most every ``INTERVAL`` seconds, and at the end)."""
        now = time.perf_counter()
        last = iteration >= self.max_iter
        if self._bar is None or (now - self._drawn < INTERVAL and not last):
            return
        self._drawn = now
        self._bar.update(iteration, values=[("loss", loss), ("lr", lr)])
        self._open = not last  # Progbar ends its line when it reaches the target

    def line(self, text):
        """A line of its own, below the bar."""
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
        seconds = time.perf_counter() - self.started
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

"""Caffe's training log lines, in glog's format.

Caffe logs through glog: ``I1122 02:47:14.123456 12345 solver.cpp:239] msg``
(severity and month-day, wall time, thread id, source file:line). Log
parsers written for Caffe (``tools/extra/parse_log.py``, ``plot_training_log.py``
and the many scripts modelled on them) match the messages below and read the
time from the prefix, so keras-caffe writes the same messages, numbers formatted as
C++'s ``ostream`` does by default (6 significant digits, ``%g``), after the
same prefix, naming the Caffe source line that prints each message.

Shared by ``keras_caffe.callbacks.CaffeLogger`` (``model.fit`` on every
Keras backend) and Caffe's training loop (``keras_caffe.Solver``,
``keras-caffe train``/``test``/``time``, on TensorFlow): plain Python and
NumPy, no backend, so it lives outside both packages.
"""

import datetime
import os
import sys

import numpy as np


def number(value):
    """A float as Caffe's ``ostream << value`` writes it (``%g``, 6 digits)."""
    return f"{float(value):.6g}"


class SmoothedLoss:
    """Caffe's ``Solver::UpdateSmoothedLoss``: the mean of the last
    ``average_loss`` iterations' losses, kept in float as Caffe keeps it.

    Until the window is full the mean grows over what was seen; then the
    loss of iteration ``i`` replaces slot ``(i - start_iter) % average_loss``.
    """

    def __init__(self, average_loss, start_iter):
        self.average = max(int(average_loss), 1)
        self.start_iter = start_iter
        self.window = []
        self.value = 0.0

    def update(self, loss, iteration):
        """Add iteration ``iteration``'s loss; returns the smoothed loss."""
        loss, value = np.float32(loss), np.float32(self.value)
        if len(self.window) < self.average:
            self.window.append(loss)
            size = np.float32(len(self.window))
            value = (value * (size - 1) + loss) / size
        else:
            index = (iteration - self.start_iter) % self.average
            value = value + (loss - self.window[index]) / np.float32(self.average)
            self.window[index] = loss
        self.value = float(value)
        return self.value


class CaffeLog:
    """Writes Caffe's log messages to ``stream`` (default: stderr, where
    ``caffe train`` logs with ``GLOG_logtostderr=1``). ``enabled=False``
    writes nothing (the workers other than rank 0 under Horovod)."""

    def __init__(self, stream=None, clock=None, enabled=True):
        self.stream = stream
        self.clock = clock or datetime.datetime.now
        self.enabled = enabled

    def line(self, source, message, severity="I"):
        if not self.enabled:
            return
        now = self.clock()
        prefix = (f"{severity}{now:%m%d %H:%M:%S}.{now.microsecond:06d} "
                  f"{os.getpid():5d} {source}] ")
        stream = self.stream or sys.stderr
        stream.write(prefix + message + "\n")
        stream.flush()

    # -- the Solver's set-up: Solver::Init, Net::CopyTrainedLayersFrom ----------

    def scaffolding(self, device, jit, seed, engine=""):
        """The end of the Solver's set-up: device, XLA, seed and ``engine``
        (the workers or devices it trains on; empty alone)."""
        self.line("solver.cpp:57", f"Solver scaffolding done ({device}, XLA "
                                   f"{'on' if jit else 'off'}, random_seed {seed}{engine}).")

    def creating_net(self, phase, name):
        """``Creating training net from ...`` (TRAIN) / ``Creating test net from ...``."""
        if phase == "TRAIN":
            self.line("solver.cpp:102", f"Creating training net from {name}")
        else:
            self.line("solver.cpp:190", f"Creating test net from {name}")

    def finetuning(self, path):
        self.line("solver.cpp:72", f"Finetuning from {path}")

    def copied_layers(self, order, copied, ignored):
        """Net::CopyTrainedLayersFrom's line per source layer, in the file's ``order``."""
        for name in order:
            if name in copied:
                self.line("net.cpp:749", f"Copying source layer {name}")
            elif name in ignored:
                self.line("net.cpp:746", f"Ignoring source layer {name}")

    # -- the messages of Solver::Solve and Solver::Step -------------------------

    def solving(self, net_name, policy):
        self.line("solver.cpp:289", f"Solving {net_name}")
        self.line("solver.cpp:290", f"Learning Rate Policy: {policy}")

    def iteration(self, iteration, per_second, lapse, display, smoothed_loss):
        self.line("solver.cpp:239", f"Iteration {iteration} ({number(per_second)} iter/s, "
                                    f"{number(lapse)}s/{display} iters), loss = "
                                    f"{number(smoothed_loss)}")

    def outputs(self, kind, values):
        """``Train net output #k`` / ``Test net output #k`` lines.

        ``values``: ``[(name, value, loss_weight)]``; a loss (weight != 0)
        gets Caffe's ``(* weight = weighted loss)`` suffix."""
        source = "solver.cpp:258" if kind == "Train" else "solver.cpp:414"
        for k, (name, value, weight) in enumerate(values):
            suffix = f" (* {number(weight)} = {number(weight * value)} loss)" if weight else ""
            self.line(source, f"    {kind} net output #{k}: {name} = {number(value)}{suffix}")

    def rate(self, iteration, lr):
        self.line("sgd_solver.cpp:112", f"Iteration {iteration}, lr = {number(lr)}")

    def testing(self, iteration, index):
        self.line("solver.cpp:330", f"Iteration {iteration}, Testing net (#{index})")

    #: snapshot format -> the weights line and the solverstate line (source,
    #: file kind), as Caffe's Solver::SnapshotTo{BinaryProto,HDF5} and
    #: SGDSolver::SnapshotSolverStateTo{BinaryProto,HDF5} log them (binary
    #: proto's source lines as the golden Caffe build logs them, HDF5's from
    #: BVLC's source); the Keras format's solverstate is an HDF5 file.
    _SNAPSHOT_LINES = {
        "caffe": (("solver.cpp:464", "binary proto"), ("sgd_solver.cpp:284", "binary proto")),
        "caffe_hdf5": (("solver.cpp:474", "HDF5"), ("sgd_solver.cpp:296", "HDF5")),
        "keras": (("solver.cpp:464", "Keras weights"), ("sgd_solver.cpp:296", "HDF5")),
    }

    def snapshot(self, weights, solverstate, format="caffe"):
        (source, kind), (state_source, state_kind) = self._SNAPSHOT_LINES[format]
        self.line(source, f"Snapshotting to {kind} file {weights}")
        self.line(state_source, f"Snapshotting solver state to {state_kind} file {solverstate}")

    def restoring(self, path):
        self.line("solver.cpp:442", f"Restoring previous solver status from {path}")

    def stopped_early(self):
        self.line("solver.cpp:311", "Optimization stopped early.")

    def finished(self, iteration, smoothed_loss=None):
        if smoothed_loss is not None:
            self.line("solver.cpp:310", f"Iteration {iteration}, loss = {number(smoothed_loss)}")
        self.line("solver.cpp:315", "Optimization Done.")

    def info(self, message, source="keras_caffe.py:0"):
        self.line(source, message)

"""Caffe's ``-sigint_effect`` / ``-sighup_effect``: what a signal does to training.

Caffe (``tools/caffe.cpp``, ``src/caffe/util/signal_handler.cpp``) installs
handlers that only record that SIGINT or SIGHUP arrived; ``Solver::Step``
asks after each iteration (``GetRequestedAction``) and acts:

- ``"stop"``: stop training; ``Solver::Solve`` then writes the snapshot
  ``snapshot_after_train`` asks for (unless this iteration's was just
  written) and logs "Optimization stopped early.";
- ``"snapshot"``: write a snapshot now and go on;
- ``"none"``: nothing (the signal is ignored).

Caffe's defaults: SIGINT (Ctrl-C) stops, SIGHUP snapshots. keras-caffe adds
SIGTERM (what schedulers, ``kill`` and ``horovodrun`` send first), which
always stops, as SIGINT's ``"stop"`` does. A signal that arrives several
times before the solver looks counts once.

``SignalEffects`` is a context manager: the handlers are installed on entry
and the previous ones put back on exit. Python runs signal handlers in the
main thread only, so in any other thread it installs nothing and leaves the
process's signals alone (``installed`` is False; ``take()`` then never
reports a signal).
"""

import signal
import threading
from typing import NamedTuple

import tensorflow as tf

from keras_caffe.distributed._hvd import loaded
from keras_caffe.errors import ArgumentError

#: The effects Caffe accepts for ``-sigint_effect`` / ``-sighup_effect``.
EFFECTS = ("stop", "snapshot", "none")
#: Caffe's defaults (``tools/caffe.cpp``).
SIGINT_EFFECT = "stop"
SIGHUP_EFFECT = "snapshot"


class Request(NamedTuple):
    """What the signals received since the last look ask for."""

    snapshot: bool = False
    stop: bool = False
    signals: tuple = ()  # their names, in arrival order ("SIGINT", ...)

    def __bool__(self):
        return self.snapshot or self.stop

    @property
    def who(self):
        """The signals' names joined (``"SIGINT+SIGHUP"``); none here: the
        request came from another worker (``agree``)."""
        return "+".join(self.signals) or "a signal to another worker"


NOTHING = Request()


def check_effect(owner, name, value):
    """``value`` if it is one of ``EFFECTS``; else ``ArgumentError`` naming ``name``."""
    if value not in EFFECTS:
        raise ArgumentError(owner, name, f"must be one of {', '.join(map(repr, EFFECTS))}, "
                                         f"got {value!r}")
    return value


class SignalEffects:
    """Record SIGINT, SIGHUP and SIGTERM while the ``with`` block runs.

    Args:
        sigint_effect: ``"stop"`` (default), ``"snapshot"`` or ``"none"``.
        sighup_effect: ``"snapshot"`` (default), ``"stop"`` or ``"none"``.
    """

    def __init__(self, sigint_effect=SIGINT_EFFECT, sighup_effect=SIGHUP_EFFECT,
                 owner="Solver.solve"):
        self.effects = {signal.SIGINT: check_effect(owner, "sigint_effect", sigint_effect),
                        signal.SIGTERM: "stop"}
        check_effect(owner, "sighup_effect", sighup_effect)
        if hasattr(signal, "SIGHUP"):  # not on Windows
            self.effects[signal.SIGHUP] = sighup_effect
        self._pending = []
        self._previous = {}
        self.installed = False

    def __enter__(self):
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in self.effects:
            self._previous[signum] = signal.signal(signum, self._record)
        self.installed = True
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            # None: a handler installed from C; the default is what Python can restore.
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        self._previous = {}
        self.installed = False

    def _record(self, signum, frame):
        self._pending.append(signum)

    def take(self):
        """The ``Request`` of the signals received since the last call
        (Caffe's ``SignalHandler::CheckForSignals``), and forget them."""
        pending, self._pending = self._pending, []
        effects = {self.effects[s] for s in pending}
        names = tuple(dict.fromkeys(signal.Signals(s).name for s in pending))
        return Request("snapshot" in effects, "stop" in effects, names)


def requested(effects, distributed):
    """What the signals ask at one of the solver's looks: ``effects``'
    ``take()`` (``NOTHING`` when no ``SignalEffects`` is active, ``effects``
    None), agreed among the workers when ``distributed``."""
    if effects is None:
        return NOTHING
    request = effects.take()
    return agree(request) if distributed else request


def agree(request):
    """Under Horovod with several workers: the request of any worker, on
    every worker (one all-reduce of two flags), so that all of them stop,
    or snapshot, at the same iteration. Every worker must call it at the
    same points; one worker: ``request`` unchanged."""
    hvd = loaded()
    if hvd is None or hvd.size() == 1:
        return request
    flags = tf.constant([int(request.snapshot), int(request.stop)], tf.int32)
    total = hvd.allreduce(flags, op=hvd.Sum, name="keras_caffe_signal_check").numpy()
    return Request(bool(total[0]), bool(total[1]), request.signals)

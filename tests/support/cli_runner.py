"""``keras-caffe`` in the test process: ``run_cli(*args)`` is ``python -m
keras_caffe *args`` run by ``subprocess.run(..., capture_output=True,
text=True)``, without the 5-7 s TensorFlow import of a new process.

It calls ``keras_caffe.cli.main(argv)`` as ``keras_caffe/__main__.py`` does
and gives back a ``subprocess.CompletedProcess``: the exit status
(``main``'s return value, a ``SystemExit``'s code -- argparse's errors exit
with 2, ``--help`` and ``--version`` with 0 --, 1 and a traceback on stderr
for an uncaught exception, -SIGINT for a KeyboardInterrupt, as Python
exits), and what the command wrote to ``sys.stdout`` and ``sys.stderr``,
decoded as ``text=True`` decodes a pipe (UTF-8, ``\\r\\n`` and ``\\r`` read
as ``\\n``). The streams say they are not a terminal (``isatty()`` False, as
a pipe) unless ``tty=True``.

For the call it sets up what a fresh ``python -m keras_caffe`` process
has, and puts the test process's state back afterwards:

- ``env`` (names to values; None removes one) on top of ``os.environ``,
  ``columns`` as ``COLUMNS``, ``cwd``, ``umask``, ``stdin`` (a string) and
  ``sys.argv``; the whole of ``os.environ`` is restored, so what the command
  sets there (``TF_CPU_ALLOCATOR_USE_BFC``, ``TF_CPP_MIN_LOG_LEVEL``) does
  not stay;
- the command line's quiet start without ``--verbose``
  (``keras_caffe._cli_quiet``: ``TF_CPP_MIN_LOG_LEVEL=3`` unless given,
  TensorFlow's Python logger at ERROR, and ``hide_xla_start`` active);
- a fresh Keras session (``clear_session``: auto-names restart, float32,
  no global seed); the test's Keras global state, dtype policy, floatx and
  image data format come back after the call, as do the Python, NumPy and
  TensorFlow random states that ``Solver`` reseeds;
- Python's warnings as a new process shows them (its default filters,
  printed on stderr) and logging as a new process has it (no handler on
  the root logger, so a record reaches stderr through logging's last
  resort; handlers that wrote to the process's stdout or stderr write to
  the captured streams); every logger's level, handlers and propagation
  are restored;
- the SIGINT, SIGTERM and SIGHUP handlers (``Solver.solve`` installs its
  own) are restored.

What only a new process shows is not here: TensorFlow's C++ log lines
(written to file descriptor 2, and those of its import and of XLA's start
only once per process), anything TensorFlow reads once when it starts
(``CUDA_VISIBLE_DEVICES``, ``TF_ENABLE_ONEDNN_OPTS``, ``TF_CPP_MIN_LOG_LEVEL``
given in ``env`` only change ``os.environ``), and whether TensorFlow is
imported. Tests about those start a process.
"""

import contextlib
import io
import logging
import os
import random
import signal
import subprocess
import sys
import traceback
import warnings

import numpy as np

__all__ = ["run_cli", "run_script", "in_process"]

#: The warning filters of a new Python process without -W or PYTHONWARNINGS
#: (``warnings.filters`` at start-up), last first as ``filterwarnings`` adds them.
_DEFAULT_FILTERS = [
    ("ignore", ResourceWarning, ""),
    ("ignore", ImportWarning, ""),
    ("ignore", PendingDeprecationWarning, ""),
    ("ignore", DeprecationWarning, ""),
    ("default", DeprecationWarning, "__main__"),
]
_SIGNALS = [s for s in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, s)]


class _Pipe(io.TextIOWrapper):
    """A captured ``sys.stdout`` / ``sys.stderr``: UTF-8 text over bytes,
    ``isatty()`` as asked (False: a pipe)."""

    def __init__(self, tty=False, errors="strict"):
        super().__init__(io.BytesIO(), encoding="utf-8", errors=errors, line_buffering=True)
        self._tty = tty

    def isatty(self):
        return self._tty

    def text(self):
        """What was written, as ``subprocess.run(text=True)`` reads a pipe."""
        self.flush()
        data = self.buffer.getvalue().decode("utf-8")
        return data.replace("\r\n", "\n").replace("\r", "\n")


def run_cli(*args, cwd=None, env=None, columns=None, stdin=None, umask=None, tty=False):
    """``python -m keras_caffe *args``, in this process: a ``CompletedProcess``
    (``returncode``, ``stdout``, ``stderr``); see the module docstring."""
    from keras_caffe.cli import main

    argv = [str(a) for a in args]
    quiet = "--verbose" not in argv
    with in_process(["keras-caffe", *argv], cwd=cwd, env=env, columns=columns, stdin=stdin,
                    umask=umask, tty=tty, quiet=quiet) as result:
        result.returncode = _exit_status(main, argv)
    return subprocess.CompletedProcess(["keras-caffe", *argv], result.returncode,
                                       result.stdout, result.stderr)


def run_script(path, *args, cwd=None, env=None, columns=None, stdin=None, umask=None,
               tty=False):
    """``python path *args``, in this process (``runpy.run_path`` as
    ``__main__``): a ``CompletedProcess`` as ``run_cli`` gives it."""
    import runpy

    def script(_):
        runpy.run_path(str(path), run_name="__main__")  # returns its globals, not a status

    argv = [str(path), *map(str, args)]
    with in_process(argv, cwd=cwd, env=env, columns=columns, stdin=stdin, umask=umask,
                    tty=tty, quiet=False) as result:
        result.returncode = _exit_status(script, argv)
    return subprocess.CompletedProcess(argv, result.returncode, result.stdout, result.stderr)


def _exit_status(function, argv):
    """What Python's exit status would be after ``sys.exit(function(argv))``."""
    try:
        code = function(argv)
    except SystemExit as exc:
        code = exc.code
    except KeyboardInterrupt:
        traceback.print_exc()
        return -signal.SIGINT  # Python ends itself with SIGINT
    except BaseException:  # noqa: BLE001 -- what the interpreter does with it
        traceback.print_exc()
        return 1
    if code is None or isinstance(code, int):
        return code or 0
    print(code, file=sys.stderr)  # sys.exit("message")
    return 1


class _Result:
    returncode = None
    stdout = ""
    stderr = ""


@contextlib.contextmanager
def in_process(argv, *, cwd=None, env=None, columns=None, stdin=None, umask=None, tty=False,
               quiet=True):
    """The set-up and restoring around a command run in this process; the
    yielded object gets ``stdout`` and ``stderr`` on exit (the caller sets
    ``returncode``)."""
    result = _Result()
    out, err = _Pipe(tty), _Pipe(tty, errors="backslashreplace")
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(_environment(env, columns, quiet))
            stack.enter_context(_process_state(argv, cwd, umask))
            stack.enter_context(_keras_state())
            stack.enter_context(_warnings_as_a_new_process())
            stack.enter_context(_logging_as_a_new_process(out, err))
            stack.enter_context(_streams(out, err, stdin))
            stack.enter_context(_quiet_start(quiet))  # its end() writes to the captured stderr
            yield result
    finally:
        result.stdout, result.stderr = out.text(), err.text()


@contextlib.contextmanager
def _environment(env, columns, quiet):
    saved = dict(os.environ)
    try:
        if columns is not None:
            os.environ["COLUMNS"] = str(columns)
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        if quiet:  # _cli_quiet.quiet_cli_start
            os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


@contextlib.contextmanager
def _process_state(argv, cwd, umask):
    before = os.getcwd()
    saved_argv = sys.argv
    saved_umask = os.umask(umask) if umask is not None else None
    handlers = {name: signal.getsignal(getattr(signal, name)) for name in _SIGNALS}
    try:
        sys.argv = list(argv)
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(before)
        sys.argv = saved_argv
        if saved_umask is not None:
            os.umask(saved_umask)
        for name, handler in handlers.items():
            signum = getattr(signal, name)
            if signal.getsignal(signum) is not handler and handler is not None:
                signal.signal(signum, handler)


@contextlib.contextmanager
def _keras_state():
    """A fresh Keras session for the call; the test's state, and the random
    states ``keras.utils.set_random_seed`` sets, afterwards."""
    import keras
    from keras.src.backend.common import global_state

    trackers = (global_state.GLOBAL_STATE_TRACKER, global_state.GLOBAL_SETTINGS_TRACKER)
    config = (keras.config.floatx(), keras.config.image_data_format(), keras.config.epsilon())
    rng = (random.getstate(), np.random.get_state(), _tf_seed())
    try:
        keras.backend.clear_session(free_memory=False)
        yield
    finally:
        global_state.GLOBAL_STATE_TRACKER, global_state.GLOBAL_SETTINGS_TRACKER = trackers
        keras.config.set_floatx(config[0])
        keras.config.set_image_data_format(config[1])
        keras.config.set_epsilon(config[2])
        random.setstate(rng[0])
        np.random.set_state(rng[1])
        _set_tf_seed(rng[2])


def _tf_seed():
    """TensorFlow's global seed and the generator of its op seeds (what
    ``tf.random.set_seed`` replaces), or None where they are not found."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return None
    from tensorflow.python.eager import context

    ctx = context.context()
    if not (hasattr(ctx, "_seed") and hasattr(ctx, "_rng")):
        return None
    return ctx._seed, ctx._rng


def _set_tf_seed(saved):
    if saved is None:
        return
    from tensorflow.python.eager import context

    ctx = context.context()
    ctx._seed, ctx._rng = saved


@contextlib.contextmanager
def _quiet_start(quiet):
    """What ``_cli_quiet.quiet_cli_start`` leaves for ``main`` without
    ``--verbose``: its state (``hide_xla_start`` then hides XLA's start
    lines) and TensorFlow's Python logger at ERROR."""
    from keras_caffe import _cli_quiet

    saved = dict(_cli_quiet._state)
    tf_logger = logging.getLogger("tensorflow")
    level = tf_logger.level
    try:
        _cli_quiet._state.clear()
        if quiet:
            _cli_quiet._state["quiet"] = True
            tf_logger.setLevel(logging.ERROR)
        yield
    finally:
        _cli_quiet.end()  # a capture left open by a failure
        _cli_quiet._state.clear()
        _cli_quiet._state.update(saved)
        tf_logger.setLevel(level)


def _show_warning(message, category, filename, lineno, file=None, line=None):
    (file or sys.stderr).write(warnings.formatwarning(message, category, filename, lineno, line))


@contextlib.contextmanager
def _warnings_as_a_new_process():
    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category, module in _DEFAULT_FILTERS:
            warnings.filterwarnings(action, category=category, module=module)
        warnings.showwarning = _show_warning
        yield


@contextlib.contextmanager
def _logging_as_a_new_process(out, err):
    """No root handler (records reach stderr through ``logging.lastResort``);
    stream handlers on the process's stdout or stderr write to ``out`` and
    ``err``; every logger as it was afterwards."""
    loggers = [logging.getLogger()] + [
        logger for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)]
    saved = {logger: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
             for logger in loggers}
    targets = {id(sys.stdout): out, id(sys.__stdout__): out,
               id(sys.stderr): err, id(sys.__stderr__): err}
    redirected = {}
    root = logging.getLogger()
    try:
        for logger in loggers:
            for handler in logger.handlers:
                if (type(handler) is logging.StreamHandler and id(handler.stream) in targets
                        and handler not in redirected):
                    redirected[handler] = handler.setStream(targets[id(handler.stream)])
        root.handlers = []
        root.setLevel(logging.WARNING)
        yield
    finally:
        for handler, stream in redirected.items():
            handler.setStream(stream)
        for logger in list(logging.Logger.manager.loggerDict.values()) + [root]:
            if not isinstance(logger, logging.Logger):
                continue
            if logger in saved:
                level, logger.handlers, logger.propagate, logger.disabled = saved[logger]
                logger.setLevel(level)
            else:  # made during the call: what it was given goes with it
                logger.handlers = []


@contextlib.contextmanager
def _streams(out, err, stdin):
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.StringIO(stdin or "")
    sys.stdout, sys.stderr = out, err
    try:
        yield
    finally:
        try:
            out.flush()
            err.flush()
        finally:
            sys.stdin, sys.stdout, sys.stderr = saved


#: ``python -c STARTUP ARGS...``: ``keras-caffe ARGS`` in a fresh process,
#: printing one JSON line: exit code, stdout, stderr, and which of
#: tensorflow/keras/jax/torch got imported (the start-up tests).
STARTUP = """
import contextlib, io, json, sys
sys.argv[0] = "keras-caffe"  # the command line, as its console script starts it
from keras_caffe.cli import main
out, err = io.StringIO(), io.StringIO()
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    try:
        code = main(sys.argv[1:])
    except SystemExit as stop:
        code = stop.code
print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue(),
                  "loaded": sorted({"tensorflow", "keras", "jax", "torch"} & set(sys.modules))}))
"""

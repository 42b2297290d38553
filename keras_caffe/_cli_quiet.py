"""The ``keras-caffe`` command line without TensorFlow's start-up log lines.

Importing TensorFlow prints 5 to 7 lines on stderr (oneDNN, CPU
instructions, "Could not find cuda drivers", "failed call to cuInit", ...).
TensorFlow 2.16 honours ``TF_CPP_MIN_LOG_LEVEL`` for all of them; 2.21 logs
its import-time lines through absl before absl's log is initialized, which
no environment variable silences. So when the process is the command line
(the ``keras-caffe`` script or ``python -m keras_caffe``) without
``--verbose``, ``quiet_cli_start()`` -- the first thing
``keras_caffe/__init__.py`` runs -- sets ``TF_CPP_MIN_LOG_LEVEL=3`` (unless
the user set it) and raises TensorFlow's Python logger to ERROR; the
command line imports TensorFlow only after parsing its arguments
(``keras_caffe.cli.main``), inside ``tensorflow_start()``, which sends file
descriptor 2 to a temporary file while TensorFlow imports; ``end()``
restores stderr and writes back every captured line that is not one of
TensorFlow's log lines, so a traceback or a warning of Python's is never
lost. A library ``import keras_caffe`` is left alone.
"""

import atexit
import contextlib
import logging
import os
import re
import sys
import tempfile

#: TensorFlow's C++ log lines: glog's prefix (``I0000 00:00:...`` or
#: ``2026-11-25 07:46:37.858348: I tensorflow/...``), absl's pre-init notice
#: and the second line of the CPU-instructions message.
_TF_LINE = re.compile(
    r"^([IWEF]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ \S+:\d+\]"
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: [IWEF] \S+:\d+\]"
    r"|WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|To enable the following instructions: .* rebuild TensorFlow with the appropriate)")

_state = {}


def started_as_cli(argv=None, orig_argv=None):
    """Whether this process is ``keras-caffe ...`` or ``python -m keras_caffe[.cli] ...``."""
    argv = sys.argv if argv is None else argv
    orig = list(getattr(sys, "orig_argv", ()) if orig_argv is None else orig_argv)
    if argv and os.path.basename(argv[0]) in ("keras-caffe", "keras-caffe.exe"):
        return True
    return any(a == "-m" and b in ("keras_caffe", "keras_caffe.cli") for a, b in zip(orig, orig[1:]))


def quiet_cli_start():
    """Start hiding TensorFlow's log lines if this is the command line without ``--verbose``."""
    if _state or not started_as_cli() or "--verbose" in sys.argv[1:] \
            or "--verbose" in getattr(sys, "orig_argv", ()):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    # TensorFlow's Python warnings (retracing notices) too
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    _state["quiet"] = True
    atexit.register(end)  # a capture still open at exit (an exception in an import)


@contextlib.contextmanager
def tensorflow_start():
    """In a quiet command line, stderr captured for the block (the import of
    TensorFlow and keras-caffe's API), TensorFlow's lines then dropped."""
    if not _state.get("quiet"):
        yield
        return
    _capture()
    try:
        yield
    finally:
        end()


def hide_xla_start():
    """In a quiet command line, compile one tiny XLA program with stderr
    captured: XLA logs its start (``XLA service ... initialized``,
    ``Compiled cluster using XLA!``) through absl once per process, which no
    environment variable silences, and keras-caffe compiles with XLA on
    CPUs (the optimizer's update, the Eigen backwards). About 40 ms. Called
    by the commands that compute, after their device options took effect
    (this starts TensorFlow's devices)."""
    tf = sys.modules.get("tensorflow")
    if not _state.get("quiet") or tf is None:
        return
    # here, not at the top: keras_caffe/__init__ imports this module first, and
    # kernels' `platform` import would add to every start-up, `--help` included
    from keras_caffe.kernels import cpu_only

    if not cpu_only():
        return
    _capture()
    try:
        tf.function(lambda: tf.constant(1.0) + 1.0, jit_compile=True)()
    finally:
        end()


def _capture():
    """Send file descriptor 2 to a temporary file until ``end()``."""
    try:
        sys.stderr.flush()
        capture = tempfile.TemporaryFile()
        saved = os.dup(2)
        os.dup2(capture.fileno(), 2)
    except OSError:  # no fd 2 to redirect: nothing to hide
        return
    _state.update(capture=capture, saved=saved)


def end():
    """Restore stderr; write back the captured lines that are not TensorFlow's."""
    if not _state.get("capture"):
        return
    capture, saved = _state.pop("capture"), _state.pop("saved")
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os.dup2(saved, 2)
    os.close(saved)
    capture.seek(0)
    text = capture.read().decode("utf-8", "replace")
    capture.close()
    kept = [line for line in text.splitlines(keepends=True) if not _TF_LINE.match(line)]
    if kept:
        sys.stderr.write("".join(kept))
        sys.stderr.flush()

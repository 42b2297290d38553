"""Ending the ``keras-caffe`` process as soon as a command's work is done.

A process that trained exits slowly if it tears TensorFlow down: each
``tf.data`` iterator, when it is freed, stops the thread that autotunes its
pipeline and waits for it; that thread sleeps between two tunings for a
period that doubles up to a minute as training goes on, and the wake-up
that should end its sleep is missed when it wakes before the cancellation
is recorded (``CancellationManager::StartCancel`` runs the callbacks first),
so the wait can be the rest of that period: ``keras-caffe train`` stayed
17-23 s after "Optimization stopped early", with the GIL held, so a second
Ctrl-C was not even seen. Python's own finalization (a full collection,
TensorFlow's destructors) added 1-3 s more on a 2-core machine.

``exit_now(status)`` ends the command line's process at once when its work
and output are complete: it joins the other (non-daemon) Python threads and
runs the ``atexit`` handlers as the interpreter's exit does, flushes stdout
and stderr, and leaves with ``os._exit`` -- nothing else is torn down: the
operating system reclaims the memory, threads and files. Call it only when
every file the command writes is complete and closed (the snapshots are
written to a temporary file and renamed before training returns).

In any other process -- a program that calls ``keras_caffe.cli.main``, the
tests' in-process runs -- it returns and does nothing: only a process whose
``__main__`` is the ``keras-caffe`` script or ``python -m keras_caffe[.cli]``
is ended, and not with ``KERAS_CAFFE_QUICK_EXIT=0`` (a harness that runs
several commands as ``__main__`` in one process, as the tests' horovodrun
launches do).
"""

import atexit
import os
import sys
import threading

#: Set to 0, ``exit_now`` returns: the process goes on (several commands run in it).
ENABLED = "KERAS_CAFFE_QUICK_EXIT"
#: ``python -m`` names of the command line.
ENTRY_MODULES = ("keras_caffe.__main__", "keras_caffe.cli.__main__")
#: File names of the ``keras-caffe`` script (pip's, setuptools' on Windows).
SCRIPTS = ("keras-caffe", "keras-caffe.exe", "keras-caffe-script.py")


def command_line_process(main=None):
    """Whether this process is the ``keras-caffe`` command line: its
    ``__main__`` module (``main``, default ``sys.modules["__main__"]``) is
    the script or one of ``ENTRY_MODULES``."""
    main = sys.modules.get("__main__") if main is None else main
    spec = getattr(main, "__spec__", None)
    if spec is not None:
        return spec.name in ENTRY_MODULES
    return os.path.basename(getattr(main, "__file__", None) or "") in SCRIPTS


def exit_now(status):
    """End the command line's process with ``status`` now (see the module
    docstring); in any other process, return."""
    if not command_line_process() or os.environ.get(ENABLED, "").strip() == "0":
        return
    current = threading.current_thread()
    for thread in threading.enumerate():  # what the interpreter's exit waits for
        if thread is not current and not thread.daemon:
            thread.join()
    # The interpreter runs these at exit (Horovod's shutdown, logging's flush,
    # the quiet start's restored stderr); os._exit below would skip them.
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a reader that went away
            pass
    os._exit(status)

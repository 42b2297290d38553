"""``keras_caffe.cli.quick_exit``: which process ``exit_now`` ends (the
``keras-caffe`` script and ``python -m keras_caffe[.cli]`` only, never a
program calling ``main`` nor the tests' in-process runs). That it ends a
trained process at once is tests/training/test_signals.py's (a real process)."""

import importlib.machinery
import types

from keras_caffe.cli.quick_exit import command_line_process, exit_now


def module(spec=None, file=None):
    """A ``__main__`` module as Python makes it for ``-m spec`` or a script ``file``."""
    main = types.ModuleType("__main__")
    main.__spec__ = importlib.machinery.ModuleSpec(spec, None) if spec else None
    if file:
        main.__file__ = file
    return main


def test_the_command_line_entry_points_are_recognised():
    """The script (pip's, setuptools' on Windows) and both ``-m`` forms."""
    assert command_line_process(module("keras_caffe.__main__"))
    assert command_line_process(module("keras_caffe.cli.__main__"))
    assert command_line_process(module(file="/venv/bin/keras-caffe"))
    assert command_line_process(module(file="/venv/Scripts/keras-caffe-script.py"))


def test_other_programs_are_left_alone():
    """A program that calls main(), python -c, pytest: exit_now returns."""
    assert not command_line_process(module(file="/home/me/train_all.py"))
    assert not command_line_process(module())  # python -c / an interactive session
    assert not command_line_process(module("pytest.__main__"))
    assert not command_line_process()  # this test process
    assert exit_now(0) is None  # and it is still running


def test_a_harness_keeps_its_process_with_the_variable_at_0():
    """``KERAS_CAFFE_QUICK_EXIT=0``: a command-line ``__main__`` is not ended
    (the tests' horovodrun launches run several commands in one process);
    without it the same process ends with the status at once."""
    import os
    import subprocess
    import sys

    code = ("import importlib.machinery, sys, types\n"
            "main = types.ModuleType('__main__')\n"
            "main.__spec__ = importlib.machinery.ModuleSpec('keras_caffe.cli.__main__', None)\n"
            "sys.modules['__main__'] = main\n"
            "from keras_caffe.cli.quick_exit import exit_now\n"
            "exit_now(3)\n"
            "print('still running')\n")
    env = {k: v for k, v in os.environ.items() if k != "KERAS_CAFFE_QUICK_EXIT"}
    kept = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "KERAS_CAFFE_QUICK_EXIT": "0"}, cwd="/")
    assert (kept.returncode, kept.stdout) == (0, "still running\n"), kept.stderr
    ended = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, cwd="/")
    assert (ended.returncode, ended.stdout) == (3, ""), ended.stderr

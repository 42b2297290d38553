"""``keras_caffe.cli.quick_exit``: which process ``exit_now`` ends (the
``keras-caffe`` script and ``python -m keras_caffe[.cli]`` only, never a
program calling ``main`` nor the tests' in-process runs). That it ends a
trained process at once is tests/test_signals.py's (a real process)."""

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

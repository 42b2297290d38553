"""The subcommands of ``keras-caffe``: one module each, registered by name.

A subcommand module decorates its ``run(args)`` with :func:`command`, giving
the name, the help line and a function that adds its arguments to the
subparser::

    @command("time", help="...", arguments=_arguments)
    def run(args): ...

``keras_caffe.cli.main`` builds the parser from this registry in the order the
modules were imported, so adding a subcommand touches one new module and the
import list in ``keras_caffe/cli/__init__.py``.
"""

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    description: str
    arguments: Callable
    run: Callable


COMMANDS: dict[str, Command] = {}


def command(name, *, help, description=None, arguments):
    """Register ``run`` as the subcommand ``name``."""
    def register(run):
        if name in COMMANDS:
            raise ValueError(f"keras-caffe {name}: registered twice")
        COMMANDS[name] = Command(name, help, description or help, arguments, run)
        return run
    return register


def usage(message):
    """A command-line mistake: ``keras-caffe: error: <message>``, exit 2."""
    from keras_caffe.errors import KerasCaffeError

    return KerasCaffeError(message)


def jit(value):
    """``--jit auto|on|off`` as the ``jit_compile`` argument."""
    return "auto" if value == "auto" else value == "on"


def data_format_argument(parser):
    parser.add_argument("--data-format", default="channels_last",
                        choices=["channels_last", "channels_first"])


def input_shape_argument(parser):
    """``--input-shape TOP=C,H,W`` (repeatable): ``input_shapes`` of the Python API."""
    parser.add_argument("--input-shape", action="append", default=[], metavar="TOP=C,H,W",
                        dest="input_shape",
                        help="the per-sample shape of an input or data layer's top, in Caffe's "
                             "order without the batch (data=3,32,32; label=1); repeat for "
                             "several tops. Needed when a data layer's source is not found.")


def input_shapes(values):
    """``["data=3,32,32", "label=1"]`` as ``{"data": (3, 32, 32), "label": (1,)}``
    (None when empty); a usage error naming ``--input-shape`` otherwise."""
    shapes = {}
    for value in values:
        top, sep, dims = value.partition("=")
        top = top.strip()
        try:
            shape = tuple(int(d) for d in dims.split(","))
        except ValueError:
            shape = ()
        if not sep or not top or not shape or min(shape) < 1:
            raise usage(f"--input-shape {value}: give TOP=C,H,W, the top's name and its "
                        "per-sample shape in Caffe's order, positive integers (data=3,32,32)")
        if top in shapes:
            raise usage(f"--input-shape {value}: top {top!r} given twice")
        shapes[top] = shape
    return shapes or None


def cli_wording(message):
    """An importer message in the command line's terms: its Python-only
    ``input_shapes={top: ...}`` advice names ``--input-shape`` instead."""
    import re

    def flag(match):
        top = match.group(1)
        top = "TOP" if top == "top" else top
        return f"--input-shape {top}=C,H,W (the per-sample shape, Caffe's order)"

    message = re.sub(r"input_shapes=\{'?([^':{}]+)'?: [^}]*\}", flag, message)
    return message.replace("`input_shapes`", "--input-shape")

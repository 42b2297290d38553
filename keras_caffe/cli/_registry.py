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

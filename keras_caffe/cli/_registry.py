"""The subcommands of ``keras-caffe``: one module each, registered by name.

A subcommand module decorates its ``run(args)`` with :func:`command`, giving
the name, the help line and a function that adds its arguments to the
subparser::

    @command("time", help="...", arguments=_arguments, inputs=("model",))
    def run(args): ...

``inputs`` names the arguments that are files to read (``input_lists``:
comma-separated lists of them) and ``check`` is a function raising the
command's usage errors: ``main`` runs both before it imports TensorFlow, so
a mistake or a mistyped path answers at once. ``tensorflow_only`` marks a
command built on TensorFlow (Caffe's training loop, tf.data, TensorFlow's
devices, Horovod): on another Keras backend ``main`` refuses it before it
parses the arguments, in one line naming the backend and
``KERAS_BACKEND=tensorflow``.

``keras_caffe.cli.main`` builds the parser from this registry in the order the
modules were imported, so adding a subcommand touches one new module and the
import list in ``keras_caffe/cli/__init__.py``.
"""

import dataclasses
import os
from typing import Callable

from keras_caffe.backends import require_tensorflow_backend
from keras_caffe.errors import KerasCaffeError


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    description: str
    arguments: Callable
    run: Callable
    inputs: tuple = ()
    input_lists: tuple = ()
    usage_check: Callable | None = None
    tensorflow_only: bool = False

    def input_paths(self, args):
        """The input files ``args`` names, in argument order."""
        paths = []
        for dest in self.inputs + self.input_lists:
            value = getattr(args, dest, None)
            if not value:
                continue
            paths += value.split(",") if dest in self.input_lists else [value]
        return paths

    def require_backend(self):
        """``TensorFlowRequirementError`` for a TensorFlow-only command on
        another Keras backend (imports nothing)."""
        if self.tensorflow_only:
            require_tensorflow_backend(f"keras-caffe {self.name}")

    def check(self, args):
        """Before TensorFlow is imported: the command's usage errors (its
        ``check``), then an ``OSError`` for an input file that is not there."""
        if self.usage_check is not None:
            self.usage_check(args)
        for path in self.input_paths(args):
            os.stat(path)


COMMANDS: dict[str, Command] = {}


def command(name, *, help, description=None, arguments, inputs=(), input_lists=(),
            check=None, tensorflow_only=False):
    """Register ``run`` as the subcommand ``name``; ``check(args)`` raises
    its usage errors (``usage``) without importing anything heavy;
    ``tensorflow_only``: the command runs on Keras's TensorFlow backend only."""
    def register(run):
        if name in COMMANDS:
            raise ValueError(f"keras-caffe {name}: registered twice")
        COMMANDS[name] = Command(name, help, description or help, arguments, run,
                                 tuple(inputs), tuple(input_lists), check, tensorflow_only)
        return run
    return register


def usage(message):
    """A command-line mistake: ``keras-caffe: error: <message>``, exit 2."""
    return KerasCaffeError(message)


def jit(value):
    """``--jit auto|on|off`` as the ``jit_compile`` argument."""
    return "auto" if value == "auto" else value == "on"


def data_format_argument(parser):
    parser.add_argument("--data-format", default="channels_last",
                        choices=["channels_last", "channels_first"])


#: ``--pooling-rule``'s choices: keras_caffe.layers.pooling.RULES (importing
#: it here would import Keras before the arguments are parsed).
POOLING_RULES = ("bvlc", "caffe-yolov3")


def pooling_rule_argument(parser):
    """``--pooling-rule``: the ``keras_caffe.importers.pooling_rule`` the net is read under."""
    parser.add_argument("--pooling-rule", choices=POOLING_RULES, default="bvlc",
                        help="Pooling's output size: BVLC Caffe's rule (default), or "
                             "caffe-yolov3's (darknet2caffe's nets, e.g. yolov3-tiny)")


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


def options(parser):
    """The long options ``parser`` takes (``{"--input-shape", "--weights", ...}``)."""
    import re

    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", parser.format_usage()))


#: What ``train`` says where the Python API advises ``input_shapes``: a
#: solver's nets train on their data, so there is no shape to give instead.
TRAINING_DATA = ("training reads its data from there: create it (Caffe's examples do with "
                 "their create_*.sh scripts) or point the layer's source at it")


def cli_wording(message, flags):
    """An importer message in the command line's terms, for a command taking
    the long options ``flags``: the Python-only ``input_shapes={top: ...}``
    advice names ``--input-shape`` where the command has it, and says the
    data is needed where it has not (``train``)."""
    import re

    if "--pooling-rule" in flags:
        message = re.sub(r"import it inside `with keras_caffe\.importers\.pooling_rule\("
                         r"\"([\w-]+)\"\):`", r"give --pooling-rule \1", message)
    if "--input-shape" not in flags:
        message = re.sub(r" or with input_shapes=\{[^}]*\}", "", message)
        return re.sub(r"give its? (?:shapes )?with input_shapes=\{[^}]*\}"
                      r"(?: or analyze the deploy net)?", TRAINING_DATA, message)

    def flag(match):
        top = match.group(1)
        top = "TOP" if top == "top" else top
        return f"--input-shape {top}=C,H,W (the per-sample shape, Caffe's order)"

    message = re.sub(r"input_shapes=\{'?([^':{}]+)'?: [^}]*\}", flag, message)
    return message.replace("`input_shapes`", "--input-shape")


def argument_wording(err, flags):
    """An ``ArgumentError`` about an argument the command has as an option,
    in the option's name (``--device-flops is needed ...``); None otherwise."""
    flag = "--" + err.argument.replace("_", "-")
    return f"{flag} {err.detail}" if flag in flags else None

"""The ``keras-caffe`` command line.

    keras-caffe import deploy.prototxt --weights net.caffemodel -o net.keras
    keras-caffe import train_val.prototxt --phase TRAIN --summary
    keras-caffe import --list-layers
    keras-caffe export net.keras -o net.caffemodel [--prototxt net.prototxt]
    keras-caffe analyze deploy.prototxt --batch 1024 --workers 32 --bandwidth 10Gbit/s
    keras-caffe analyze deploy.prototxt --batch 1024 --workers 1,2,4,8 --device-flops 6.1T
    keras-caffe train --solver solver.prototxt [--snapshot x_iter_N.solverstate] [--weights w.caffemodel]
    horovodrun -np 4 keras-caffe train --solver solver.prototxt [--scale-lr --warmup-iters 500]
    keras-caffe train --solver solver.prototxt --gpu 0,1        (or --gpu all: MirroredStrategy)
    keras-caffe train --solver solver.prototxt --cpu-devices 2 --devices CPU:0,CPU:1
    horovodrun -np 4 --min-np 2 --host-discovery-script h.sh keras-caffe train --solver s --elastic
    keras-caffe train --solver solver.prototxt --lms 1000 --lms-frac 0.4
    keras-caffe time --model train_val.prototxt --iterations 50
    keras-caffe time --model train_val.prototxt --iterations 50 --json
    keras-caffe test --model train_val.prototxt --weights net.caffemodel --iterations 50
    keras-caffe device_query
    keras-caffe install-horovod [--dry-run] [--sdist horovod-0.28.1.tar.gz] [--gpu auto|nccl|none]
    keras-caffe --version

Bad input prints one line, ``keras-caffe: error: ...``, and exits with 2.
TensorFlow's log lines are hidden unless ``--verbose`` (``keras_caffe._cli_quiet``).

``import``, ``export`` and ``analyze`` run on every Keras backend (TensorFlow,
JAX, PyTorch: ``KERAS_BACKEND``); ``train``, ``test``, ``time``,
``device_query`` and ``install-horovod`` are built on TensorFlow, and on
another backend say so in that one line (``keras_caffe.backends``).
"""

import argparse
import contextlib
import os
import sys

from keras_caffe import __version__, _cli_quiet
from keras_caffe._require import tensorflow_distributions
from keras_caffe.backends import SUPPORTED, backend_name, is_tensorflow
from keras_caffe.cli._registry import COMMANDS, argument_wording, cli_wording, options
# The subcommands, in the order of `keras-caffe --help`.
from keras_caffe.cli import (  # noqa: F401
    import_cmd, export_cmd, analyze_cmd, train_cmd, test_cmd, time_cmd, device_query_cmd,
    install_horovod_cmd)
from keras_caffe.cli.import_cmd import layer_table, save_atomically  # noqa: F401
from keras_caffe.errors import ArgumentError, BackendRequirementError, KerasCaffeError

__all__ = ["main"]


def main(argv=None):
    """Run ``keras-caffe`` with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    The arguments are parsed and the input files found before TensorFlow
    and keras-caffe's API are imported (seconds), so ``--help``, a usage
    error or a missing file answers at once. A TensorFlow-only command on
    another backend is refused first, whatever its arguments."""
    argv = sys.argv[1:] if argv is None else [str(a) for a in argv]
    refusal = _backend_refusal(argv)
    if refusal is not None:
        print(f"keras-caffe: error: {refusal}", file=sys.stderr)
        return 2
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    # here, not at the top: kernels imports `platform`, which would slow `--help`'s start-up
    from keras_caffe.kernels import POOLED_CPU_ALLOCATOR, pool_cpu_memory

    entry = COMMANDS[args.command]
    pooled = False
    try:
        entry.check(args)  # usage errors and missing input files, before TensorFlow
        with _cli_quiet.tensorflow_start():
            # before any command runs a TensorFlow op (not under --lms: see its docstring);
            # it imports TensorFlow, so on TensorFlow's backend only
            pooled = is_tensorflow() and pool_cpu_memory(lms=getattr(args, "lms", None) is not None)
            # here, not at the top: the API (Keras, the .keras serializables) imports
            # Keras's backend, only once the arguments are parsed and the inputs found
            import keras_caffe._api  # noqa: F401
        with _pooling_rule(args):
            return entry.run(args) or 0
    except (KerasCaffeError, BackendRequirementError, OSError) as err:
        flags = options(parser.commands[entry.name])
        if isinstance(err, OSError) and err.filename:
            message = f"{err.filename}: {err.strerror}"
        elif isinstance(err, ArgumentError) and argument_wording(err, flags):
            message = argument_wording(err, flags)
        else:
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            message = cli_wording(message, flags)
        print(f"keras-caffe: error: {message}", file=sys.stderr)
        return 2
    finally:
        if pooled:  # TensorFlow read it; what runs after main chooses for itself
            os.environ.pop(POOLED_CPU_ALLOCATOR, None)


def _backend_refusal(argv):
    """The one line refusing a TensorFlow-only command (``argv``'s first word:
    the command line's own options take no value) on another Keras backend;
    None for any other command, and for ``--help`` or ``--version``."""
    words = [a for a in argv if not a.startswith("-")]
    entry = COMMANDS.get(words[0]) if words else None
    if entry is None or {"-h", "--help", "--version"} & set(argv):
        return None
    try:
        entry.require_backend()
    except BackendRequirementError as err:
        return str(err)
    return None


def _pooling_rule(args):
    """The ``pooling_rule`` block of ``--pooling-rule`` (none for a command without it)."""
    if getattr(args, "pooling_rule", None) is None:
        return contextlib.nullcontext()
    # here, not at the top: keras_caffe.importers imports Keras and its backend (start-up)
    from keras_caffe.importers import pooling_rule

    return pooling_rule(args.pooling_rule)


def _parser():
    parser = argparse.ArgumentParser(prog="keras-caffe", description="Caffe's way, in Keras 3.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the versions and exit")
    parser.add_argument("--verbose", action="store_true", help=_VERBOSE)
    sub = parser.add_subparsers(dest="command")
    parser.commands = {}  # name -> its subparser (main words errors in its options)
    for entry in COMMANDS.values():
        command = sub.add_parser(entry.name, help=entry.help, description=entry.description,
                                 conflict_handler="resolve")
        parser.commands[entry.name] = command
        # also after the subcommand; a subcommand may give --verbose more to do
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                             help=_VERBOSE)
        entry.arguments(command)
    return parser


_VERBOSE = "show TensorFlow's log lines (hidden by default)"


class _Version(argparse.Action):
    """``--version``: ``version()``, computed only when asked for."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version())
        parser.exit()


def version():
    """``keras-caffe X (Keras Y, backend NAME Z)``: Keras's backend and its
    version (TensorFlow's, JAX's, PyTorch's), from the installed packages'
    metadata, without importing them (TensorFlow takes seconds)."""
    name = backend_name()
    return (f"keras-caffe {__version__} (Keras {_installed('keras')}, "
            f"backend {name} {_installed(SUPPORTED.get(name, name))})")


def _installed(package):
    """The installed version of ``package`` (TensorFlow: of whichever of its
    distributions is installed), or ``not installed``."""
    import importlib.metadata

    if package == "tensorflow":
        found = tensorflow_distributions()
        return found[0][1] if found else "not installed"
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"

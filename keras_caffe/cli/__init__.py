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
"""

import argparse
import os
import sys

from keras_caffe import _cli_quiet
from keras_caffe.cli._registry import COMMANDS, cli_wording
# The subcommands, in the order of `keras-caffe --help`.
from keras_caffe.cli import (  # noqa: F401
    import_cmd, export_cmd, analyze_cmd, train_cmd, test_cmd, time_cmd, device_query_cmd,
    install_horovod_cmd)
from keras_caffe.cli.import_cmd import layer_table, save_atomically  # noqa: F401

__all__ = ["main"]


def main(argv=None):
    """Run ``keras-caffe`` with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    _cli_quiet.end()
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from keras_caffe.errors import KerasCaffeError
    from keras_caffe.kernels import POOLED_CPU_ALLOCATOR, pool_cpu_memory

    # before any command runs a TensorFlow op (not under --lms: see its docstring)
    pooled = pool_cpu_memory(lms=getattr(args, "lms", None) is not None)
    try:
        return COMMANDS[args.command].run(args) or 0
    except (KerasCaffeError, OSError) as err:
        if isinstance(err, OSError) and err.filename:
            message = f"{err.filename}: {err.strerror}"
        else:
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
            message = cli_wording(message)
        print(f"keras-caffe: error: {message}", file=sys.stderr)
        return 2
    finally:
        if pooled:  # TensorFlow read it; what runs after main chooses for itself
            os.environ.pop(POOLED_CPU_ALLOCATOR, None)


def _parser():
    parser = argparse.ArgumentParser(prog="keras-caffe", description="Caffe's way, in Keras 3.")
    parser.add_argument("--version", action="version", version=version())
    parser.add_argument("--verbose", action="store_true", help=_VERBOSE)
    sub = parser.add_subparsers(dest="command")
    for entry in COMMANDS.values():
        command = sub.add_parser(entry.name, help=entry.help, description=entry.description,
                                 conflict_handler="resolve")
        # also after the subcommand; a subcommand may give --verbose more to do
        command.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                             help=_VERBOSE)
        entry.arguments(command)
    return parser


_VERBOSE = "show TensorFlow's log lines (hidden by default)"


def version():
    """``keras-caffe X (TensorFlow Y, Keras Z)``."""
    import keras
    import tensorflow as tf

    from keras_caffe import __version__

    return f"keras-caffe {__version__} (TensorFlow {tf.__version__}, Keras {keras.__version__})"

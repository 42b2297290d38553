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
    keras-caffe install-horovod [--dry-run] [--sdist horovod-0.28.1.tar.gz] [--gpu auto|nccl|none]

Bad input prints one line, ``keras-caffe: error: ...``, and exits with 2.
"""

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from keras_caffe.cli._registry import COMMANDS  # noqa: E402
# The subcommands, in the order of `keras-caffe --help`.
from keras_caffe.cli import (  # noqa: E402,F401
    import_cmd, export_cmd, analyze_cmd, train_cmd, time_cmd, install_horovod_cmd)
from keras_caffe.cli.import_cmd import layer_table, save_atomically  # noqa: E402,F401

__all__ = ["main"]


def main(argv=None):
    """Run ``keras-caffe`` with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from keras_caffe.errors import KerasCaffeError

    try:
        return COMMANDS[args.command].run(args) or 0
    except (KerasCaffeError, OSError) as err:
        if isinstance(err, OSError) and err.filename:
            message = f"{err.filename}: {err.strerror}"
        else:
            message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"keras-caffe: error: {message}", file=sys.stderr)
        return 2


def _parser():
    parser = argparse.ArgumentParser(prog="keras-caffe", description="Caffe's way, in Keras 3.")
    sub = parser.add_subparsers(dest="command")
    for entry in COMMANDS.values():
        entry.arguments(sub.add_parser(entry.name, help=entry.help,
                                       description=entry.description))
    return parser

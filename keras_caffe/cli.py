"""The ``keras-caffe`` command line.

    keras-caffe import deploy.prototxt --weights net.caffemodel -o net.keras
    keras-caffe import train_val.prototxt --phase TRAIN --summary
    keras-caffe import --list-layers
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
import contextlib
import logging
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    from keras_caffe.errors import KerasCaffeError

    try:
        return COMMANDS[args.command](args) or 0
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
    imp = sub.add_parser("import", help="Caffe prototxt (+ caffemodel) -> a Keras model",
                         description="Import a Caffe net; print its layers; optionally save it.")
    imp.add_argument("net", nargs="?", help="the .prototxt (deploy or train_val)")
    imp.add_argument("--weights", help=".caffemodel or .caffemodel.h5")
    imp.add_argument("-o", "--output", help="save the model here (a .keras file)")
    imp.add_argument("--phase", default="TEST", choices=["TEST", "TRAIN"])
    imp.add_argument("--data-format", default="channels_last",
                     choices=["channels_last", "channels_first"])
    imp.add_argument("--summary", action="store_true", help="only print the layer table")
    imp.add_argument("--list-layers", action="store_true", help="print the supported layer types and where each comes from (BVLC Caffe or a fork)")
    ana = sub.add_parser(
        "analyze", help="weights |W|, activations |D|, FLOPs, data-parallel communication time",
        description="Per layer and in total: weight and activation bytes (float32, FireCaffe's "
                    "|W| and |D|), forward+backward FLOPs per batch, and the communication time "
                    "per step of a parameter server, a reduction tree and a ring all-reduce.")
    ana.add_argument("net", help="the .prototxt")
    ana.add_argument("--batch", type=int, default=1, help="batch per step (all workers)")
    ana.add_argument("--workers", default="1",
                     help="data-parallel workers p, or a list (1,2,4,8) for a scaling table")
    ana.add_argument("--bandwidth", default="10Gbit/s",
                     help="per-link bandwidth: bytes/s or with a unit (10Gbit/s, 1.25GB/s)")
    ana.add_argument("--device-flops",
                     help="one worker's sustained FLOP/s (6.1T, 3.9e12): adds the predicted step "
                          "time and speed-up of each scheme at each p (needed for a list)")
    ana.add_argument("--overlap", action="store_true",
                     help="with --device-flops: step = max(compute, communication), not the sum")
    ana.add_argument("--phase", default="TEST", choices=["TEST", "TRAIN"])
    ana.add_argument("--json", action="store_true", help="print JSON instead of tables")
    train = sub.add_parser(
        "train", help="train a Caffe solver file (like `caffe train`)",
        description="Run a solver.prototxt end to end: its train and test nets, data layers, "
                    "lr policy, tests, display and snapshots, as `caffe train -solver` does.")
    train.add_argument("--solver", "-solver", required=True, help="the solver.prototxt")
    train.add_argument("--snapshot", "-snapshot",
                       help="resume from this .solverstate (ours or Caffe's)")
    train.add_argument("--weights", "-weights",
                       help="start from these .caffemodel weights (comma-separated list)")
    train.add_argument("--log", "--log-format", dest="log", choices=["progress", "caffe"],
                       default="progress",
                       help="a progress bar (default), or Caffe's log lines on stderr (under "
                            "horovodrun write --log-format: horovodrun takes --log for its own "
                            "--log-level)")
    train.add_argument("--data-format", default="channels_last",
                       choices=["channels_last", "channels_first"])
    train.add_argument("--snapshot-format", choices=["caffe", "caffe_hdf5", "keras"],
                       help="default: the solver's snapshot_format")
    train.add_argument("--jit", choices=["auto", "on", "off"], default="auto",
                       help="XLA for the train step (auto: on GPUs)")
    train.add_argument("--scale-lr", action="store_true",
                       help="under horovodrun: multiply the rate by the number of workers "
                            "(the large-batch rule)")
    train.add_argument("--lms", type=float, metavar="N",
                       help="Large Model Support: recompute (or stage through host memory) "
                            "activations larger than N KB on the backward pass")
    train.add_argument("--lms-frac", type=float, metavar="F",
                       help="with --lms: only when the net's predicted activations exceed F x "
                            "the device's memory")
    train.add_argument("--gpu", "-gpu", metavar="IDS",
                       help="Caffe's -gpu: GPU ids (0,1) or 'all'; several train in this "
                            "process with tf.distribute.MirroredStrategy, each on the net's batch "
                            "(global batch x the number of GPUs)")
    train.add_argument("--devices", metavar="NAMES",
                       help="TensorFlow devices to train on, comma-separated (CPU:0,CPU:1 or "
                            "GPU:0,GPU:1); several: MirroredStrategy, as --gpu")
    train.add_argument("--cpu-devices", type=int, metavar="N",
                       help="split the CPU into N logical devices CPU:0..CPU:N-1 before "
                            "TensorFlow starts (to run --devices on a machine without GPUs)")
    train.add_argument("--elastic", action="store_true",
                       help="under an elastic horovodrun (--min-np, --host-discovery-script): "
                            "a lost worker is dropped and the others resume from the last "
                            "commit; new workers join with rank 0's state")
    train.add_argument("--commit-every", type=int, metavar="N",
                       help="with --elastic: commit the state every N iterations (default: the "
                            "solver's display, else snapshot, else 100)")
    train.add_argument("--warmup-iters", type=int, default=0,
                       help="with --scale-lr: reach the scaled rate linearly over this many "
                            "iterations")
    tim = sub.add_parser(
        "time", help="time a net's forward and backward passes, per layer (like `caffe time`)",
        description="Average forward, backward and forward-backward time per layer and in "
                    "total over --iterations batches, in the TRAIN phase as `caffe time`.")
    tim.add_argument("--model", "-model", required=True, help="the .prototxt")
    tim.add_argument("--iterations", "-iterations", type=int, default=50)
    tim.add_argument("--phase", "-phase", default="TRAIN", choices=["TRAIN", "TEST"])
    tim.add_argument("--log", choices=["table", "caffe"], default="table",
                     help="a table (default), or Caffe's log lines on stderr")
    tim.add_argument("--data-format", default="channels_last",
                     choices=["channels_last", "channels_first"])
    tim.add_argument("--jit", choices=["auto", "on", "off"], default="auto")
    _install_horovod_parser(sub)
    return parser


def _install_horovod_parser(sub):
    hvd = sub.add_parser(
        "install-horovod", help="build Horovod 0.28.1 (Gloo) against the installed TensorFlow",
        description="Download Horovod 0.28.1's sdist, check its sha256, apply keras-caffe's "
                    "patches and build it into this Python against the TensorFlow installed "
                    "here (2.16 to 2.21), with Gloo (and NCCL when TensorFlow, a CUDA "
                    "toolkit and nccl.h are there). TensorFlow is never reinstalled.")
    hvd.add_argument("--dry-run", action="store_true",
                     help="print the plan (TensorFlow, patches, environment, GPU) and stop")
    hvd.add_argument("--sdist", metavar="PATH",
                     help="a local horovod-0.28.1.tar.gz instead of downloading it")
    hvd.add_argument("--gpu", choices=["auto", "nccl", "none"], default="auto",
                     help="auto (default): NCCL when TensorFlow is a CUDA build and nvcc and "
                          "nccl.h are found; nccl: require it; none: Gloo only")
    hvd.add_argument("--jobs", "-j", type=int, help="parallel compile jobs (default: the CPUs)")
    hvd.add_argument("--any-tensorflow", action="store_true",
                     help="build even for a TensorFlow outside 2.16-2.21 (untested)")
    hvd.add_argument("--keep-build-dir", action="store_true",
                     help="keep the temporary build directory (always kept on failure)")
    hvd.add_argument("--verbose", action="store_true", help="show the compiler's output")


def _jit(value):
    return "auto" if value == "auto" else value == "on"


def _cmd_train(args):
    from keras_caffe.lms import from_cli

    if args.warmup_iters < 0:
        raise _usage(f"--warmup-iters must be >= 0, got {args.warmup_iters}")
    if args.commit_every is not None and (args.commit_every < 1 or not args.elastic):
        raise _usage(f"--commit-every {args.commit_every}: needs --elastic and N >= 1")
    lms = from_cli(args.lms, args.lms_frac)
    with _lms_log(lms is not None):
        return _train(args, lms)


@contextlib.contextmanager
def _lms_log(enabled):
    """LMS's decision line ("what was decided and why") on stderr."""
    if not enabled:
        yield
        return
    logger = logging.getLogger("keras_caffe.lms")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _train_devices(args):
    """The devices of ``--gpu`` / ``--devices`` (None: the solver file's
    choice), after ``--cpu-devices`` split the CPU."""
    from keras_caffe import distributed

    if args.gpu is not None and args.devices is not None:
        raise _usage("--gpu and --devices are alternatives: give one")
    if args.cpu_devices is not None:
        _split_cpu(args.cpu_devices)
    if args.gpu is None and args.devices is None:
        return None
    if distributed.launched():
        raise _usage(f"{'--gpu' if args.gpu is not None else '--devices'} under horovodrun: use "
                     "one engine at a time (horovodrun gives each worker one GPU; --gpu trains "
                     "on several GPUs in one process)")
    if args.devices is not None:
        return [d.strip() for d in args.devices.split(",") if d.strip()]
    return _gpus(args.gpu)


def _gpus(text):
    """Caffe's ``-gpu`` list (``0,1`` or ``all``) as TensorFlow device names."""
    import tensorflow as tf

    found = [int(d.name.rsplit(":", 1)[1]) for d in tf.config.list_logical_devices("GPU")]
    if text.strip() == "all":
        if not found:
            raise _usage("--gpu all: no GPU found")
        return [f"GPU:{i}" for i in found]
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise _usage(f"--gpu {text}: give GPU ids (0 or 0,1) or 'all'") from None
    missing = [i for i in ids if i not in found]
    if missing:
        raise _usage(f"--gpu {text}: no GPU {', '.join(map(str, missing))}; GPUs found: "
                     f"{', '.join(map(str, found)) or 'none'}")
    return [f"GPU:{i}" for i in ids]


def _split_cpu(count):
    """``count`` logical CPU devices; must run before TensorFlow starts."""
    import tensorflow as tf

    if count < 1:
        raise _usage(f"--cpu-devices must be >= 1, got {count}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:
        raise _usage("--cpu-devices: TensorFlow has already started its devices") from None


def _train(args, lms):
    from keras_caffe import distributed
    from keras_caffe.solver import Solver

    devices = _train_devices(args)
    if distributed.launched():  # started by horovodrun: data-parallel
        try:
            distributed.init()
        except distributed.HorovodUnavailableError as err:
            print(f"keras-caffe: error: {str(err).splitlines()[0]}", file=sys.stderr)
            return 1
    try:
        with Solver(args.solver, weights=args.weights, log=args.log,
                    data_format=args.data_format, snapshot_format=args.snapshot_format,
                    jit_compile=_jit(args.jit), scale_lr=args.scale_lr,
                    warmup_iters=args.warmup_iters, lms=lms, devices=devices,
                    elastic=args.elastic, commit_every=args.commit_every) as solver:
            solver.solve(resume_file=args.snapshot)
    except distributed.HorovodUnavailableError as err:  # --elastic needs Horovod
        print(f"keras-caffe: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0


def _cmd_time(args):
    from keras_caffe.timing import print_timing, time_net

    if args.iterations < 1:
        raise _usage(f"--iterations must be >= 1, got {args.iterations}")
    report = time_net(args.model, iterations=args.iterations, phase=args.phase,
                      data_format=args.data_format, jit_compile=_jit(args.jit))
    print_timing(report, style=args.log)
    return 0


def _cmd_import(args):
    from rich.console import Console

    console = Console()
    if args.list_layers:
        from keras_caffe.importers import registered_types
        from keras_caffe.importers.registry import origin

        types = registered_types()
        width = max(map(len, types)) + 2
        # Plain lines (never cut): the type, then where it comes from.
        for layer_type in types:
            print(f"{layer_type:<{width}}{origin(layer_type)}")
        return 0
    if not args.net:
        raise _usage("import needs a net (.prototxt), or --list-layers")
    if args.output and not args.output.endswith(".keras"):
        raise _usage(f"-o {args.output}: the output must be a .keras file")
    from keras_caffe.importers.api import import_net

    imported = import_net(args.net, args.weights, phase=args.phase, data_format=args.data_format)
    console.print(layer_table(imported))
    if args.output and not args.summary:
        save_atomically(imported.model, args.output)
        console.print(f"saved {args.output}", highlight=False)
    return 0


def layer_table(imported):
    """A rich table of the Caffe layers: name, type, output shape(s), params."""
    import numpy as np
    from rich.table import Table

    from keras_caffe.importers.graph import Context

    from keras_caffe.importers.api import caffe_parts

    counts = {name: sum(int(np.prod(w.shape)) for w in layer.caffe_variables()[start:start + count])
              for name, (layer, start, count, _) in caffe_parts(imported.model).items()}
    ctx = Context(None, None, imported.source)
    table = Table(title=f"{imported.net.name or imported.source}")
    for column, justify in (("layer", "left"), ("type", "left"), ("output shape (N, C, H, W)", "left"),
                            ("params", "right")):
        table.add_column(column, justify=justify)
    total = 0
    for layer in imported.net.layer:
        shapes = ", ".join(_shape_text(ctx, imported.blobs[top])
                           for top in layer.top if top in imported.blobs)
        params = counts.get(layer.name, 0)
        total += params
        table.add_row(layer.name, layer.type, shapes, f"{params:,}" if params else "")
    table.add_section()
    table.add_row("total", "", "", f"{total:,}")
    return table


def _shape_text(ctx, blob):
    if blob.tensor is None:
        return "loss"  # a loss or metric: computed by the training loop
    return str(tuple(d if d is not None else "N" for d in ctx.caffe_shape(blob))).replace("'", "")


def save_atomically(model, path):
    """``model.save`` to a temporary .keras file, then rename: no partial file."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".keras", dir=directory)
    os.close(fd)
    try:
        model.save(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _cmd_analyze(args):
    import json

    from rich.console import Console

    from keras_caffe.importers.analyze import analyze_scaling

    report, scaling = analyze_scaling(args.net, args.workers, args.device_flops,
                                      batch=args.batch, bandwidth=args.bandwidth,
                                      phase=args.phase, overlap=args.overlap)
    if args.json:
        data = report.to_dict()
        if scaling is not None:
            data["scaling"] = scaling.to_dict()
        print(json.dumps(data, indent=2))
    else:
        Console().print(report)
        if scaling is not None:
            Console().print(scaling)
    return 0


def _usage(message):
    from keras_caffe.errors import KerasCaffeError

    return KerasCaffeError(message)


def _cmd_install_horovod(args):
    from keras_caffe import horovod_build

    return horovod_build.main(args)


COMMANDS = {"import": _cmd_import, "analyze": _cmd_analyze, "train": _cmd_train,
            "time": _cmd_time, "install-horovod": _cmd_install_horovod}

if __name__ == "__main__":
    sys.exit(main())

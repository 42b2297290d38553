"""``keras-caffe train``: a solver file end to end, as ``caffe train``.

Signals, as ``caffe train`` (``tools/caffe.cpp``): Ctrl-C (SIGINT) stops
training after the running iterations, writes a snapshot (the solver's
``snapshot_after_train``, true by default) and exits with 0; SIGHUP writes a
snapshot and training goes on; ``-sigint_effect`` / ``-sighup_effect``
(``stop``, ``snapshot``, ``none``) change that. SIGTERM stops as SIGINT's
``stop`` does. A Ctrl-C before training starts (while the nets are built)
exits with 130 and one line, no traceback.
"""

import contextlib
import logging
import math
import sys

from keras_caffe._cli_quiet import hide_xla_start
from keras_caffe.cli._registry import command, data_format_argument, jit, usage
from keras_caffe.cli.quick_exit import exit_now


def _check(args):
    if args.max_iter is not None and args.max_iter < 1:
        raise usage(f"--max-iter must be >= 1, got {args.max_iter}")
    if args.warmup_iters < 0:
        raise usage(f"--warmup-iters must be >= 0, got {args.warmup_iters}")
    if args.commit_every is not None and (args.commit_every < 1 or not args.elastic):
        raise usage(f"--commit-every {args.commit_every}: needs --elastic and N >= 1")
    if args.gpu is not None and args.devices is not None:
        raise usage("--gpu and --devices are alternatives: give one")
    if args.lms is None:
        for flag, given in (("--lms-frac", args.lms_frac is not None),
                            ("--lms-parts", args.lms_parts)):
            if given:
                raise usage(f"{flag} needs --lms N (the threshold in KB)")
    elif not (math.isfinite(args.lms) and args.lms >= 0):
        raise usage(f"--lms must be in [0, inf), got {args.lms:g}")
    if args.lms_frac is not None and not 0 <= args.lms_frac <= 1:
        raise usage(f"--lms-frac must be in [0, 1], got {args.lms_frac:g}")


def _arguments(parser):
    parser.add_argument("--solver", "-solver", required=True, help="the solver.prototxt")
    parser.add_argument("--snapshot", "-snapshot",
                        help="resume from this .solverstate (ours or Caffe's)")
    parser.add_argument("--weights", "-weights",
                        help="start from these .caffemodel weights (comma-separated list)")
    parser.add_argument("--max-iter", "-max_iter", type=int, metavar="N",
                        help="train to iteration N instead of the solver's max_iter (N >= 1)")
    for name, default in (("sigint", "stop"), ("sighup", "snapshot")):
        parser.add_argument(f"--{name}-effect", f"-{name}_effect", default=default,
                            choices=["stop", "snapshot", "none"],
                            help=f"what {name.upper()} does while training (Caffe's "
                                 f"-{name}_effect; default: {default}): stop (snapshot, then "
                                 "stop; exit 0), snapshot (and go on) or none. SIGTERM stops")
    parser.add_argument("--log", "--log-format", dest="log", choices=["progress", "caffe"],
                        default="progress",
                        help="a progress bar (default), or Caffe's log lines on stderr (under "
                             "horovodrun write --log-format: horovodrun takes --log for its own "
                             "--log-level)")
    data_format_argument(parser)
    parser.add_argument("--snapshot-format", choices=["caffe", "caffe_hdf5", "keras"],
                        help="default: the solver's snapshot_format")
    parser.add_argument("--jit", choices=["auto", "on", "off"], default="auto",
                        help="XLA for the train step (auto: on GPUs)")
    parser.add_argument("--scale-lr", action="store_true",
                        help="under horovodrun: multiply the rate by the number of workers "
                             "(the large-batch rule)")
    parser.add_argument("--lms", type=float, metavar="N",
                        help="Large Model Support: recompute (or stage through host memory) "
                             "activations larger than N KB on the backward pass")
    parser.add_argument("--lms-frac", type=float, metavar="F",
                        help="with --lms: only when the net's predicted activations exceed F x "
                             "the device's memory")
    parser.add_argument("--lms-parts", action="store_true",
                        help="with --lms, on Eigen's CPU kernels (no oneDNN): recompute "
                             "convolutions over parts of the batch, so each holds a smaller "
                             "im2col workspace (less memory, more time, weight gradients summed "
                             "part by part)")
    parser.add_argument("--gpu", "-gpu", metavar="IDS",
                        help="Caffe's -gpu: GPU ids (0,1) or 'all'; several train in this "
                             "process with tf.distribute.MirroredStrategy, each on the net's batch "
                             "(global batch x the number of GPUs)")
    parser.add_argument("--devices", metavar="NAMES",
                        help="TensorFlow devices to train on, comma-separated (CPU:0,CPU:1 or "
                             "GPU:0,GPU:1); several: MirroredStrategy, as --gpu")
    parser.add_argument("--cpu-devices", type=int, metavar="N",
                        help="split the CPU into N logical devices CPU:0..CPU:N-1 before "
                             "TensorFlow starts (to run --devices on a machine without GPUs)")
    parser.add_argument("--elastic", action="store_true",
                        help="under an elastic horovodrun (--min-np, --host-discovery-script): "
                             "a lost worker is dropped and the others resume from the last "
                             "commit; new workers join with rank 0's state")
    parser.add_argument("--commit-every", type=int, metavar="N",
                        help="with --elastic: commit the state every N iterations (default: the "
                             "solver's display, else snapshot, else 100)")
    parser.add_argument("--warmup-iters", type=int, default=0,
                        help="with --scale-lr: reach the scaled rate linearly over this many "
                             "iterations")


@command("train", help="train a Caffe solver file (like `caffe train`)",
         description="Run a solver.prototxt end to end: its train and test nets, data layers, "
                     "lr policy, tests, display and snapshots, as `caffe train -solver` does.",
         arguments=_arguments, inputs=("solver", "snapshot"), input_lists=("weights",),
         check=_check, tensorflow_only=True)
def run(args):
    # here, not at the top: keeps `keras-caffe --help` start-up free of TensorFlow
    from keras_caffe.lms.policy import from_cli

    lms = from_cli(args.lms, args.lms_frac, args.lms_parts)
    try:
        with _lms_log(lms is not None):
            return _train(args, lms)
    except KeyboardInterrupt:  # before solve installs its handlers, or after
        print("keras-caffe: interrupted outside training (nothing to snapshot)", file=sys.stderr)
        return 130


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
    # here, not at the top: keeps `keras-caffe --help` start-up free of TensorFlow
    from keras_caffe import distributed

    if args.cpu_devices is not None:
        _split_cpu(args.cpu_devices)
    if args.gpu is None and args.devices is None:
        return None
    if distributed.launched():
        raise usage(f"{'--gpu' if args.gpu is not None else '--devices'} under horovodrun: use "
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
            raise usage("--gpu all: no GPU found")
        return [f"GPU:{i}" for i in found]
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise usage(f"--gpu {text}: give GPU ids (0 or 0,1) or 'all'") from None
    missing = [i for i in ids if i not in found]
    if missing:
        raise usage(f"--gpu {text}: no GPU {', '.join(map(str, missing))}; GPUs found: "
                     f"{', '.join(map(str, found)) or 'none'}")
    return [f"GPU:{i}" for i in ids]


def _split_cpu(count):
    """``count`` logical CPU devices; must run before TensorFlow starts."""
    import tensorflow as tf

    if count < 1:
        raise usage(f"--cpu-devices must be >= 1, got {count}")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
    except RuntimeError:
        raise usage("--cpu-devices: TensorFlow has already started its devices") from None


def _train(args, lms):
    # here, not at the top: keeps `keras-caffe --help` start-up free of TensorFlow
    from keras_caffe import distributed
    from keras_caffe.training.solver import Solver  # TensorFlow, as above

    devices = _train_devices(args)
    hide_xla_start()
    if distributed.launched():  # started by horovodrun: data-parallel
        try:
            distributed.init()
        except distributed.HorovodUnavailableError as err:
            print(f"keras-caffe: error: {str(err).splitlines()[0]}", file=sys.stderr)
            return 1
    try:
        with Solver(args.solver, weights=args.weights, log=args.log,
                    data_format=args.data_format, snapshot_format=args.snapshot_format,
                    jit_compile=jit(args.jit), scale_lr=args.scale_lr,
                    warmup_iters=args.warmup_iters, lms=lms, devices=devices,
                    elastic=args.elastic, commit_every=args.commit_every,
                    max_iter=args.max_iter) as solver:
            solver.solve(resume_file=args.snapshot, sigint_effect=args.sigint_effect,
                         sighup_effect=args.sighup_effect)
            # Trained, snapshot written: end the process before the Solver's
            # data streams are freed, which can take a minute (quick_exit).
            exit_now(0)
    except distributed.HorovodUnavailableError as err:  # --elastic needs Horovod
        print(f"keras-caffe: error: {str(err).splitlines()[0]}", file=sys.stderr)
        return 1
    return 0

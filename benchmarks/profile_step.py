"""Where a `keras-caffe train` iteration's time goes, from TensorFlow's profiler.

    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/profile_step.py --net lenet
    python benchmarks/profile_step.py --solver my_solver.prototxt --iterations 20

Trains the net with ``keras_caffe.training.solver.Solver`` (the loop
`keras-caffe train` runs): ``--warmup`` iterations to trace and compile,
``--iterations`` timed without the profiler (wall and CPU milliseconds per
iteration, CPU from ``time.process_time``: all threads), then the same number
under ``tf.profiler.experimental``. From the trace (the host plane of its
``.xplane.pb``) it prints, per iteration:

- each thread pool's busy time (top-level events) and events: the compute
  threads that run the step's ops, tf.data's threads (the data layers'
  pipelines), Eigen's intra-op threads;
- the ops: for every op type, its **self** time (its events' time less the
  events nested inside them) and how many times it ran, so an op that waits
  on another (an XLA cluster's ``BlockUntilReady``) is not counted twice;
- the op count per step (TensorFlow and XLA kernels, not the executor's own
  events), and the time outside ops: the executor's own events (``Process``,
  ``Start``, ``Done``...) and the compute threads' time with no event.

``--net`` takes the nets of ``benchmarks/train_vs_caffe.py`` (DummyData
input; ``--golden`` or ``$KERAS_CAFFE_GOLDEN`` for LeNet and CIFAR-10 quick).
Work inside Eigen's intra-op threads has few events of its own: a kernel's
self time is the part its calling thread ran, and the CPU column says how
much the process spent in all.
"""

import argparse
import collections
import glob
import os
import sys
import tempfile
import time
from pathlib import Path

import train_vs_caffe  # the nets, their solver files, write_json (benchmarks/)
from arguments import positive_int  # benchmarks/arguments.py

REPO = Path(__file__).resolve().parents[1]

#: The executor's and XLA runtime's own events: framework, not kernels.
FRAMEWORK = frozenset({
    "Process", "Start", "Done", "ExecutorDoneCallback", "ExecuteAsyncOnStream",
    "BlockUntilReady", "ParallelFor", "Run", "FunctionRun", "Execute", "EagerExecute",
    "EagerKernelExecute", "TFE_Py_ExecuteCancelable", "ExecutorState::Process",
})


#: The executor's threads, which run the step's kernels.
COMPUTE = "tf_Compute"


def pool_of(line_name):
    """A thread's pool from its trace line's name (``tf_Compute/123`` -> ``tf_Compute``)."""
    return line_name.split("/")[0]


def op_type(event_name):
    """The op type of an event's name: TensorFlow names kernels ``node:Type``."""
    return event_name.rsplit(":", 1)[-1]


def self_times(lines):
    """``({(pool, name): [self ps, count]}, {line: (top-level busy ps, events)})``
    from ``lines``: ``[(line name, [(start ps, duration ps, name)])]``. A
    nested event's time is taken off its parent's, so each picosecond counts
    once, for the innermost event running on that thread."""
    by_name = collections.defaultdict(lambda: [0, 0])
    busy = {}
    for line_name, events in lines:
        pool = pool_of(line_name)
        stack, top = [], 0
        for start, duration, name in sorted(events, key=lambda e: (e[0], -e[1])):
            while stack and stack[-1][0] <= start:
                stack.pop()
            key = (pool, name)
            by_name[key][0] += duration
            by_name[key][1] += 1
            if stack:
                by_name[stack[-1][1]][0] -= duration
            else:
                top += duration
            stack.append((start + duration, key))
        busy[line_name] = (top, len(events))
    return dict(by_name), busy


def summary(lines, iterations, wall_s):
    """The per-iteration report of a trace: pools, ops, framework, outside."""
    by_name, busy = self_times(lines)
    pools = collections.defaultdict(lambda: [0, 0, 0])
    for line_name, (top, count) in busy.items():
        p = pools[pool_of(line_name)]
        p[0] += top
        p[1] += count
        p[2] += 1
    ops = collections.defaultdict(lambda: [0, 0])
    framework = collections.defaultdict(lambda: [0, 0])
    launched = 0  # kernels the executor ran on its compute threads
    for (pool, name), (ps, count) in by_name.items():
        if pool == "python":
            continue
        kind = op_type(name)
        target = framework if kind in FRAMEWORK else ops
        target[kind][0] += ps
        target[kind][1] += count
        if pool == COMPUTE and kind not in FRAMEWORK:
            launched += count
    per = 1e9 * iterations  # ps -> ms per iteration
    compute = [line for line in busy if pool_of(line) == COMPUTE]
    idle = sum(wall_s * 1e12 - busy[line][0] for line in compute)
    return {
        "iterations": iterations,
        "wall_ms": wall_s * 1e3 / iterations,
        "pools": {name: {"busy_ms": b / per, "events": c / iterations, "threads": n}
                  for name, (b, c, n) in sorted(pools.items(), key=lambda kv: -kv[1][0])},
        "ops": {name: {"self_ms": ps / per, "calls": c / iterations}
                for name, (ps, c) in sorted(ops.items(), key=lambda kv: -kv[1][0])},
        "op_count": launched / iterations,
        "op_ms": sum(ps for ps, _ in ops.values()) / per,
        "framework": {name: {"self_ms": ps / per, "calls": c / iterations}
                      for name, (ps, c) in sorted(framework.items(), key=lambda kv: -kv[1][0])},
        "framework_ms": sum(ps for ps, _ in framework.values()) / per,
        "compute_idle_ms": idle / per,
        "compute_threads": len(compute),
    }


def read_trace(logdir):
    """``[(line name, [(start ps, duration ps, event name)])]`` of the host plane."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # TensorFlow's own trace format

    files = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
    if not files:
        sys.exit(f"profile_step: the profiler wrote no .xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(files[0]).read_bytes())
    lines = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            lines.append((line.name, [(e.offset_ps, e.duration_ps, names[e.metadata_id])
                                      for e in line.events]))
    return lines


def solver_file(args, workdir):
    if args.solver:
        return Path(args.solver).resolve()
    net = train_vs_caffe.NETS[args.net]
    return train_vs_caffe.write_solver(net, Path(args.golden), workdir, 10 ** 8, 10 ** 7)


def profile(args):
    import tensorflow as tf

    from keras_caffe.errors import KerasCaffeError
    from keras_caffe.training.solver import Solver

    workdir = tempfile.mkdtemp(prefix="profile_step_")
    path = solver_file(args, workdir)
    os.chdir(path.parent if args.solver else workdir)
    try:
        solver = Solver(str(path), log=None, jit_compile=args.jit)
    except KerasCaffeError as error:  # a bad solver or net file: keras-caffe's own line
        sys.exit(f"profile_step: {error}")
    solver.step(args.warmup)
    wall, cpu = time.perf_counter(), time.process_time()
    solver.step(args.iterations)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    logdir = tempfile.mkdtemp(prefix="profile_step_trace_")
    tf.profiler.experimental.start(logdir)
    traced = time.perf_counter()
    solver.step(args.iterations)
    traced = time.perf_counter() - traced
    tf.profiler.experimental.stop()
    report = summary(read_trace(logdir), args.iterations, traced)
    report["unprofiled"] = {"wall_ms": wall * 1e3 / args.iterations,
                            "cpu_ms": cpu * 1e3 / args.iterations}
    report["net"] = args.net or str(path)
    report["onednn"] = os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default")
    return report


def print_report(report, top):
    u = report["unprofiled"]
    print(f"{report['net']} (TF_ENABLE_ONEDNN_OPTS={report['onednn']}), "
          f"{report['iterations']} iterations")
    print(f"  unprofiled: {u['wall_ms']:.2f} ms wall, {u['cpu_ms']:.2f} ms CPU per iteration "
          f"({u['cpu_ms'] / u['wall_ms']:.2f} cores busy)")
    print(f"  profiled:   {report['wall_ms']:.2f} ms wall per iteration")
    print(f"  ops: {report['op_count']:.1f} kernels per iteration on the compute threads, "
          f"{report['op_ms']:.2f} ms self time (all threads); "
          f"framework events {report['framework_ms']:.2f} ms; compute threads "
          f"({report['compute_threads']}) without an event {report['compute_idle_ms']:.2f} ms")
    print("  thread pools (ms busy per iteration, events):")
    for name, p in report["pools"].items():
        print(f"    {name:32s} {p['busy_ms']:9.3f} {p['events']:9.1f}  x{p['threads']} threads")
    print("  ops by self time (ms per iteration, calls per iteration):")
    for name, o in list(report["ops"].items())[:top]:
        print(f"    {name:48s} {o['self_ms']:9.3f} {o['calls']:7.1f}")
    print("  framework events by self time:")
    for name, o in list(report["framework"].items())[:8]:
        print(f"    {name:48s} {o['self_ms']:9.3f} {o['calls']:7.1f}")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--net", choices=("lenet", "cifar10_quick", "caffenet"))
    which.add_argument("--solver", help="a solver.prototxt (its data layers must be readable)")
    parser.add_argument("--golden", default=os.environ.get(
        "KERAS_CAFFE_GOLDEN", str(REPO / "tests" / "golden")),
                        help="the golden data folder (LeNet's and CIFAR-10 quick's nets)")
    parser.add_argument("--warmup", type=positive_int, default=20)
    parser.add_argument("--iterations", type=positive_int, default=50)
    parser.add_argument("--jit", choices=("auto", "on", "off"), default="auto")
    parser.add_argument("--top", type=int, default=30, help="op types to list")
    parser.add_argument("--json", help="also write the report here")
    args = parser.parse_args(argv)
    if args.solver and not Path(args.solver).is_file():
        parser.error(f"--solver {args.solver}: no such file")
    args.jit = {"on": True, "off": False}.get(args.jit, args.jit)
    return args


def main(argv=None):
    args = parse_args(argv)
    report = profile(args)
    print_report(report, args.top)
    if args.json:
        train_vs_caffe.write_json(args.json, report)


if __name__ == "__main__":
    main()

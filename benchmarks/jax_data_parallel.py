"""Step time of JAX's DataParallel on N devices against one device and against Horovod np=N.

    python benchmarks/jax_data_parallel.py [--devices 2] [--batch 64] [--steps 30]
        [--rounds 6] [--configs jax-1,jax-n,horovod] [--quick] [--tf-threads K]
        [--jax-python .venv-jax/bin/python] [--tf-python .venv/bin/python]
        [--horovodrun .venv/bin/horovodrun] [--json PATH]

One run trains the same net, BVLC Caffe's LeNet (the golden
``tests/golden/forward/lenet/original_lenet.prototxt`` imported with
``keras_caffe.import_model``, logits ``ip2``, 0.43M parameters) with the same
solver (``keras_caffe.SGD(0.001, momentum=0.9)``, softmax cross-entropy) on
the same global batch (``--batch``, default 64) of random 28x28 images,
three ways, each in its own process(es), through ``model.fit``:

- ``jax-1``: JAX, one CPU device (``.venv-jax``), the step jit-compiled;
- ``jax-n``: JAX, ``--devices`` N virtual CPU devices
  (``XLA_FLAGS=--xla_force_host_platform_device_count=N``, fixed when JAX
  starts, hence a process of its own) under ``keras.distribution.DataParallel``
  (``keras_caffe.data_parallel.data_parallel()``): each device takes
  ``batch / N`` rows of each global batch, XLA all-reduces the gradients;
- ``horovod``: TensorFlow + Horovod, ``horovodrun -np N -H localhost:N
  --gloo`` (``.venv``), each worker ``batch / N`` rows a step,
  ``keras_caffe.distributed.DistributedOptimizer`` (one fused all-reduce a
  step), the step a ``tf.function`` without XLA (Horovod's ops have no XLA
  kernel), ``--tf-threads`` intra-op threads per worker (default: the
  machine's cores / N, so the N workers together use every core once, as
  XLA's one thread pool does for the JAX processes).

Every process imports, builds, compiles and runs one untimed warm-up window,
then waits; this script then hands out the timed windows one at a time,
alternating the configurations A B C | C B A | A B C ... over ``--rounds``
rounds (each window ``--steps`` steps of one ``fit`` call, its per-call setup
spread over them, ended by reading a weight back so that JAX's queued work
counts), so that the machine's drift hits all alike. The processes not
timed meanwhile are paused (SIGSTOP, SIGCONT before their own window): idle
Horovod workers keep their background threads cycling, 0.2-0.4 CPU seconds
a second on this project's 2-core machine, which would slow the JAX windows.

Printed: the machine (CPU model, SIMD flags, cores, load average before and
after), the versions in each venv, the command, the median ms per step of
each configuration with its windows' range, and the ratios jax-n / jax-1
and jax-n / horovod, each as a ratio of medians and as the median of the
rounds' own ratios (robust to drift); and how many cores each
configuration's processes kept busy in its windows (CPU seconds per second).
On a CPU the N virtual devices (and the N Horovod workers) share the
machine's cores: with N at or above the core count the ratios measure what
data parallelism costs on top of the same work (splitting, all-reduce,
synchronisation), not scaling. The
jax-n / horovod ratio also holds the two frameworks' own speed (XLA against
TensorFlow's kernels). CPU only: N virtual devices are a CPU feature, and one
GPU cannot stand for N.

``--quick``: 2 steps a window, 2 rounds (a smoke run of seconds, numbers
meaningless). This script runs on any Python (it imports no framework); its
workers are itself with ``--worker`` run by the venvs' interpreters.
"""

import argparse
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from arguments import positive_int  # benchmarks/arguments.py

REPO = Path(__file__).resolve().parents[1]
NET = REPO / "tests" / "golden" / "forward" / "lenet" / "original_lenet.prototxt"
CONFIGS = ("jax-1", "jax-n", "horovod")
#: SIMD flags of /proc/cpuinfo worth naming in the machine line.
SIMD_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
              "amx_tile")
#: Each venv's packages whose versions the machine lines name.
PACKAGES = {"jax": ("jax", "jaxlib", "keras", "keras-caffe", "numpy"),
            "tf": ("tensorflow", "horovod", "keras", "keras-caffe", "numpy")}
POLL = 0.005  # seconds between looks for a file (the idle processes' only work)
WAIT = 900  # seconds a process waits for its next window, or the driver for an answer


class BenchmarkError(Exception):
    """A worker failed or went silent: the message holds its log's tail."""


# -- the command line ---------------------------------------------------------------------


def config_list(text):
    names = [n for n in text.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if not names or unknown or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"expected distinct names among {', '.join(CONFIGS)} separated by commas, "
            f"got {text!r}")
    return [n for n in CONFIGS if n in names]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=positive_int, default=2,
                        help="N: JAX's virtual CPU devices and Horovod's workers (default 2)")
    parser.add_argument("--batch", type=positive_int, default=64,
                        help="global batch, a multiple of --devices (default 64)")
    parser.add_argument("--steps", type=positive_int, default=30,
                        help="training steps per timed window (default 30)")
    parser.add_argument("--rounds", type=positive_int, default=6,
                        help="timed windows per configuration, alternated (default 6)")
    parser.add_argument("--configs", type=config_list, default=list(CONFIGS),
                        help=f"which to run (default {','.join(CONFIGS)})")
    parser.add_argument("--quick", action="store_true",
                        help="2 steps a window, 2 rounds: a smoke run")
    parser.add_argument("--tf-threads", type=positive_int,
                        help="intra-op threads per Horovod worker (default cores / N, at least 1)")
    parser.add_argument("--jax-python", default=str(REPO / ".venv-jax" / "bin" / "python"))
    parser.add_argument("--tf-python", default=str(REPO / ".venv" / "bin" / "python"))
    parser.add_argument("--horovodrun",
                        help="Horovod's launcher (default: horovodrun beside --tf-python)")
    parser.add_argument("--json", metavar="PATH", type=Path,
                        help="also write the machine, settings and windows to PATH")
    parser.add_argument("--worker", choices=CONFIGS, help=argparse.SUPPRESS)
    parser.add_argument("--control", help=argparse.SUPPRESS)  # a worker's folder
    args = parser.parse_args(argv)
    if args.batch % args.devices:
        parser.error(f"--batch {args.batch} is not a multiple of --devices {args.devices}")
    if args.quick:
        args.steps, args.rounds = 2, 2
    if args.horovodrun is None:
        args.horovodrun = str(Path(args.tf_python).parent / "horovodrun")
    if args.tf_threads is None:
        args.tf_threads = max(1, (os.cpu_count() or 1) // args.devices)
    return args


# -- the schedule and the arithmetic ---------------------------------------------------------


def schedule(configs, rounds):
    """The timed windows in order: ``(round, config)``, the configurations
    forwards in even rounds and backwards in odd ones (A B C | C B A ...)."""
    order = []
    for r in range(rounds):
        order += [(r, c) for c in (configs if r % 2 == 0 else configs[::-1])]
    return order


def summary(windows):
    """Per configuration: median, min and max ms per step over its windows."""
    return {name: {"median": statistics.median(ms), "min": min(ms), "max": max(ms)}
            for name, ms in windows.items()}


def ratio(windows, top, bottom):
    """``top / bottom``: the ratio of the medians and the median of the
    rounds' own ratios (each round times both once, next to each other)."""
    return {"of_medians": statistics.median(windows[top]) / statistics.median(windows[bottom]),
            "paired": statistics.median(a / b for a, b in zip(windows[top], windows[bottom]))}


# -- the machine -----------------------------------------------------------------------------


def cpu_info(path="/proc/cpuinfo"):
    """(model name, SIMD flags of interest sorted) of the first CPU in ``path``."""
    model, flags = "unknown CPU", []
    try:
        text = Path(path).read_text()
    except OSError:
        return model, flags
    for line in text.splitlines():
        if line.startswith("model name") and model == "unknown CPU":
            model = line.split(":", 1)[1].strip()
        elif line.startswith("flags") and not flags:
            flags = sorted(set(line.split(":", 1)[1].split()) & set(SIMD_FLAGS))
    return model, flags


def versions(python, packages):
    """The installed versions of ``packages`` in ``python``'s environment
    (no framework imported), or ``None`` when that interpreter is missing."""
    if not Path(python).exists():
        return None
    code = ("import importlib.metadata as m, json, sys\n"
            "def v(p):\n"
            "    try:\n        return m.version(p)\n"
            "    except m.PackageNotFoundError:\n        return None\n"
            "print(json.dumps({p: v(p) for p in sys.argv[1:]}))")
    done = subprocess.run([python, "-c", code, *packages], capture_output=True, text=True,
                          timeout=120, cwd=tempfile.gettempdir())
    return json.loads(done.stdout) if done.returncode == 0 else None


def machine_lines(info):
    load = " ".join(f"{x:.2f}" for x in info["load_start"])
    lines = [f"{info['cpu']}, {info['cores']} logical CPUs, flags "
             f"{' '.join(info['flags']) or 'none listed'}; load average at start {load}"]
    for venv, found in info["versions"].items():
        text = ", ".join(f"{p} {v}" for p, v in found.items() if v) if found else "not found"
        lines.append(f"{venv} venv ({info['pythons'][venv]}): {text}")
    return lines


# -- a worker ----------------------------------------------------------------------------------


def write_json(path, data):
    """Write ``data`` so that a reader never sees half of it."""
    tmp = Path(f"{path}.tmp{os.getpid()}")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def wait_window(control, name, k):
    path = Path(control) / f"go-{name}-{k}"
    deadline = time.monotonic() + WAIT
    while not path.exists():
        if time.monotonic() > deadline:
            sys.exit(f"{name}: no window {k} within {WAIT} s")
        time.sleep(POLL)


def lenet():
    import keras_caffe

    return keras_caffe.import_model(str(NET), outputs=["ip2"])


def compile_sgd(model, optimizer, **options):
    import keras

    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), **options)


def data(rows, seed):
    import numpy as np

    rng = np.random.default_rng(seed)
    return (rng.random((rows, 28, 28, 1), dtype="float32"),
            rng.integers(0, 10, rows).astype("int32"))


def timed_fit(model, x, y, batch, callbacks=None, before=None):
    """Milliseconds per step of one ``fit`` over ``x``, ``before()`` run first
    (untimed)."""
    import keras

    if before is not None:
        before()
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
    keras.ops.convert_to_numpy(model.trainable_variables[-1])  # wait for queued work
    return (time.perf_counter() - start) / (len(x) // batch) * 1e3


def windows_loop(args, run_window, chief=True):
    for k in range(args.rounds):
        wait_window(args.control, args.worker, k)
        ms = run_window()
        if chief:
            write_json(Path(args.control) / f"{args.worker}-{k}.json", {"ms": ms})


def jax_worker(args):
    import jax
    import keras

    import keras_caffe

    devices = args.devices if args.worker == "jax-n" else 1
    if jax.device_count() != devices:
        sys.exit(f"{args.worker}: JAX sees {jax.device_count()} devices, expected {devices}")
    if devices > 1:
        from keras_caffe.data_parallel import data_parallel

        keras.distribution.set_distribution(data_parallel())
    keras.utils.set_random_seed(0)
    model = lenet()
    compile_sgd(model, keras_caffe.SGD(0.001, momentum=0.9))
    x, y = data(args.steps * args.batch, 0)
    timed_fit(model, x, y, args.batch)  # compile, first allocations
    write_json(Path(args.control) / f"{args.worker}.ready",
               {"devices": [str(d) for d in jax.devices()],
                "parameters": model.count_params()})
    windows_loop(args, lambda: timed_fit(model, x, y, args.batch))


def horovod_worker(args):
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.tf_threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.tf_threads)
    import horovod.tensorflow as hvd

    import keras_caffe
    import keras_caffe.distributed as kd
    from keras_caffe.callbacks import BroadcastGlobalState
    from keras_caffe.kernels import cpu_kernels

    me = kd.init(seed=0)
    if me.size != args.devices:
        sys.exit(f"horovod: {me.size} workers, expected {args.devices}")
    model = lenet()
    compile_sgd(model, kd.DistributedOptimizer(keras_caffe.SGD(0.001, momentum=0.9)),
                jit_compile=False)
    local = args.batch // me.size
    x, y = data(args.steps * local, me.rank)

    def barrier():
        hvd.allreduce(tf.constant(0.0), op=hvd.Sum).numpy()

    timed_fit(model, x, y, local, callbacks=[BroadcastGlobalState()])  # trace, same weights
    if me.is_chief:
        write_json(Path(args.control) / "horovod.ready",
                   {"workers": me.size, "threads": args.tf_threads, "kernels": cpu_kernels(),
                    "parameters": model.count_params()})
    windows_loop(args, lambda: timed_fit(model, x, y, local, before=barrier),
                 chief=me.is_chief)


# -- the driver --------------------------------------------------------------------------------


def launch(args, name, control):
    """Start configuration ``name``'s process(es): the Popen, its log path."""
    flags = [str(Path(__file__).resolve()), "--worker", name, "--control", str(control),
             "--devices", str(args.devices), "--batch", str(args.batch), "--steps",
             str(args.steps), "--rounds", str(args.rounds), "--tf-threads", str(args.tf_threads)]
    env = dict(os.environ, PYTHONWARNINGS="ignore", TF_CPP_MIN_LOG_LEVEL="3")
    if name == "horovod":
        env.update(KERAS_BACKEND="tensorflow", CUDA_VISIBLE_DEVICES="")
        command = [args.horovodrun, "-np", str(args.devices), "-H",
                   f"localhost:{args.devices}", "--gloo", args.tf_python, *flags]
    else:
        count = args.devices if name == "jax-n" else 1
        env.update(KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", XLA_FLAGS=(
            f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={count}"
        ).strip())
        command = [args.jax_python, *flags]
    log = Path(control) / f"{name}.log"
    with open(log, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                   cwd=control, start_new_session=True)
    return process, log


def wait_file(path, processes):
    """Wait for ``path``; a process of ours that ends first is an error."""
    deadline = time.monotonic() + WAIT
    while not path.exists():
        for name, (process, log) in processes.items():
            if process.poll() is not None:
                tail = log.read_text()[-4000:]
                raise BenchmarkError(f"{name} ended (exit {process.returncode}) before "
                                     f"{path.name}:\n{tail}")
        if time.monotonic() > deadline:
            raise BenchmarkError(f"no {path.name} within {WAIT} s")
        time.sleep(POLL)
    return json.loads(path.read_text())


def descendants(pid):
    """``pid`` and the processes it started, theirs too (``/proc``'s
    children lists; horovodrun puts each worker in a session of its own)."""
    found = [pid]
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            found += descendants(int(child))
    return found


def signal_tree(process, sig):
    """Send ``sig`` to one configuration's processes, ours by their ids."""
    for pid in descendants(process.pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def cpu_seconds(process):
    """User + system CPU seconds of one configuration's processes so far."""
    ticks = 0
    for pid in descendants(process.pid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def stop(processes):
    """End our own processes (resumed first if paused)."""
    for process, _ in processes.values():
        if process.poll() is None:
            signal_tree(process, signal.SIGCONT)
            signal_tree(process, signal.SIGTERM)
    for process, _ in processes.values():
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def measure(args):
    """Start every configuration, time the windows in schedule order; the
    workers' ready notes and the windows' ms per step by configuration."""
    with tempfile.TemporaryDirectory(prefix="jax_data_parallel-") as control:
        control = Path(control)
        processes = {name: launch(args, name, control) for name in args.configs}
        try:
            ready = {name: wait_file(control / f"{name}.ready", processes)
                     for name in args.configs}
            windows = {name: [] for name in args.configs}
            busy = {name: [] for name in args.configs}
            for process, _ in processes.values():
                signal_tree(process, signal.SIGSTOP)
            for k, name in schedule(args.configs, args.rounds):
                process = processes[name][0]
                signal_tree(process, signal.SIGCONT)
                cpu, start = cpu_seconds(process), time.perf_counter()
                (control / f"go-{name}-{k}").touch()
                windows[name].append(wait_file(control / f"{name}-{k}.json", processes)["ms"])
                busy[name].append((cpu_seconds(process) - cpu) / (time.perf_counter() - start))
                signal_tree(process, signal.SIGSTOP)
            for process, _ in processes.values():
                signal_tree(process, signal.SIGCONT)
            for name, (process, log) in processes.items():
                if process.wait(timeout=120) != 0:
                    raise BenchmarkError(f"{name} exit {process.returncode}:\n"
                                         f"{log.read_text()[-4000:]}")
        finally:
            stop(processes)
    return ready, windows, busy


def note(n, cores):
    """What the ratios measure on ``cores`` cores with ``n`` devices."""
    shared = (f"Note: the {n} virtual devices (and the {n} Horovod workers) share this "
              f"machine's {cores} CPU cores; none are added")
    if n >= cores:
        shared += (": the ratios measure data parallelism's overhead on the same work "
                   "(splitting the batch, the all-reduce, synchronisation), not scaling.")
    else:
        shared += (": the ratios mix that overhead with how well one device alone keeps "
                   "the cores busy; they are not scaling.")
    return shared + " jax-n / horovod also holds XLA's speed against TensorFlow's kernels."


def report(args, info, ready, windows, busy):
    """The printed lines: machine, command, the table, the ratios, the note."""
    n, cores = args.devices, info["cores"]
    stats = summary(windows)
    labels = {"jax-1": "JAX, 1 CPU device",
              "jax-n": f"JAX, {n} virtual CPU devices, DataParallel",
              "horovod": f"TF + Horovod np={n} (gloo), {args.tf_threads} thread(s)/worker"}
    lines = machine_lines(info)
    lines.append("command: " + info["command"])
    lines.append(f"net: Caffe's LeNet ({NET.relative_to(REPO)}, 0.43M parameters), "
                 f"keras_caffe.SGD(0.001, momentum=0.9), global batch {args.batch} "
                 f"({args.batch // n} per device/worker on {n}), model.fit, {args.steps} steps "
                 f"a window x {args.rounds} windows each, alternated A B C | C B A")
    if "horovod" in ready:
        lines.append(f"TensorFlow's CPU kernels: {ready['horovod']['kernels']}")
    lines.append("")
    lines.append(f"{'configuration':<52} {'ms/step':>9} {'windows':>17} {'cores busy':>10}")
    for name in args.configs:
        s = stats[name]
        lines.append(f"{labels[name]:<52} {s['median']:>9.2f} "
                     f"{s['min']:>8.2f}-{s['max']:<8.2f} {statistics.median(busy[name]):>10.2f}")
    ratios = {}
    for top, bottom in (("jax-n", "jax-1"), ("jax-n", "horovod")):
        if top in windows and bottom in windows:
            ratios[f"{top}/{bottom}"] = r = ratio(windows, top, bottom)
            lines.append(f"ratio {top} / {bottom}: {r['of_medians']:.3f} "
                         f"(median of the rounds' ratios {r['paired']:.3f})")
    lines.append("ms/step: median over the windows (their range after it); cores busy: CPU "
                 "seconds of the configuration's processes per second of its windows (median)")
    lines.append(f"load average at end {' '.join(f'{x:.2f}' for x in info['load_end'])}")
    lines.append(note(n, cores))
    return lines, stats, ratios


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        (horovod_worker if args.worker == "horovod" else jax_worker)(args)
        return 0
    model, flags = cpu_info()
    script = os.path.relpath(Path(__file__).resolve(), Path.cwd())
    info = {"cpu": model, "flags": flags, "cores": os.cpu_count(),
            "command": shlex.join(["python", script, *(sys.argv[1:] if argv is None else argv)]),
            "pythons": {"jax": args.jax_python, "tf": args.tf_python},
            "versions": {"jax": versions(args.jax_python, PACKAGES["jax"]),
                         "tf": versions(args.tf_python, PACKAGES["tf"])},
            "load_start": list(os.getloadavg())}
    try:
        ready, windows, busy = measure(args)
    except BenchmarkError as error:
        print(f"jax_data_parallel: {error}", file=sys.stderr)
        return 1
    info["load_end"] = list(os.getloadavg())
    lines, stats, ratios = report(args, info, ready, windows, busy)
    print("\n".join(lines))
    if args.json:
        settings = {k: getattr(args, k) for k in
                    ("devices", "batch", "steps", "rounds", "configs", "tf_threads")}
        args.json.write_text(json.dumps(
            {"machine": info, "settings": settings, "ready": ready, "windows_ms": windows,
             "cores_busy": busy, "ms_per_step": stats, "ratios": ratios}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``keras-caffe train`` against BVLC ``caffe train``, side by side, in the same run.

    python benchmarks/train_vs_caffe.py [--caffe PATH] [--rounds 2] [--nets lenet,cifar10_quick,caffenet]
                                        [--configs caffe_1,...] [--iterations N]
                                        [--json results.json] [--logs DIR] [--no-roofline]
                                        [--matmul-sizes 1024,2048] [--matmul-repeats 3]
    python benchmarks/train_vs_caffe.py --from-logs DIR   # the tables of a run's kept logs

Without ``--caffe`` it builds BVLC Caffe (CPU, OpenBLAS) once with
``benchmarks/build_caffe.sh`` into ``~/.cache/keras-caffe/caffe-<commit>/`` and
reuses that build afterwards.

The nets: LeNet (batch 64) and CIFAR-10 quick (batch 100) as Caffe was timed
in ``golden/timing`` (BVLC's example nets with one DummyData input, the example
solvers' hyper-parameters), and CaffeNet at batch 16
(``benchmarks/data/caffenet_dummy.prototxt``: BVLC's
``models/bvlc_reference_caffenet/train_val.prototxt`` with a DummyData input).

Each round runs, for each net, five processes one after the other on a copy of
the same solver (``max_iter`` and ``display`` set for the run):
``caffe train -solver S`` with ``OPENBLAS_NUM_THREADS=1`` and ``=2``, then
``python -m keras_caffe train --solver S --log caffe`` with
``TF_ENABLE_ONEDNN_OPTS=1`` and ``=0``, and ``=0`` with
``KERAS_CAFFE_CPU_TUNING=0`` (TensorFlow's own gradients instead of
keras-caffe's for MAX pooling, convolutions and large InnerProducts, the
update not compiled, TensorFlow's CPU memory not pooled: what keras-caffe ran
on Eigen's kernels before those;
``--configs`` picks columns). Both print Caffe's display line
``Iteration N (x iter/s, Ys/D iters), loss = ...`` (Caffe's
``Solver::Step``, solver.cpp; keras-caffe's ``caffe_log.py``), timing the
``display`` iterations since the previous display line; both are read the same
way: the rate lines from iteration ``2 * display`` on (start-up, tracing and
the first display window excluded), milliseconds per iteration = 1000 / rate.
A cell of the table is the median of one round's windows: a row per net per
round. The ratios are taken within a round (Caffe's better thread count in
that round over keras-caffe's time) and summed up as the median of the
per-round ratios, never as a ratio of windows pooled across rounds (pooling
can give a ratio above every round's own). The machine is shared and noisy:
the load average is printed before and after. ``--json`` is rewritten after every
process (``"complete": false`` until the table is in), so an interrupted run
keeps what it measured.

Each process's CPU time (user + system, all its threads, from
``/proc/PID/stat``) is read as each display line arrives, and written into
its log as a line ``train_vs_caffe cpu: iteration N cpu_s S``. Over the same
steady windows that gives the CPU milliseconds per iteration: the first
table's CPU ratio (Caffe's 1-thread CPU ms over keras-caffe's, beside the
wall ratio: less work per iteration, whatever the threads), and the second
table (CPU ms, and over the wall ms how many cores each program kept busy).

The roofline table (``--no-roofline`` skips it): each net's FLOPs per
training iteration from ``keras-caffe analyze --phase TRAIN --json`` at the
net's batch (forward 2 x multiply-adds, backward twice the forward: 3 x 2 x
MACs) over each column's step time gives GFLOP/s, and that over the column's
float32 matrix-product ceiling (``benchmarks/matmul_rate.py``'s worker, in
the same run before the training processes: OpenBLAS with Caffe's thread
count for Caffe, TensorFlow with oneDNN on or off for keras-caffe) gives the
percentage. ``--logs`` keeps these numbers in ``roofline.json`` for
``--from-logs``.
"""

import argparse
import dataclasses
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "benchmarks" / "data"
DEFAULT_GOLDEN = REPO.parent / "shared" / "golden"

#: Caffe's display line (solver.cpp, Solver::Step), as keras-caffe's --log caffe writes it too.
RATE_LINE = re.compile(r"\] Iteration (\d+) \(([-+.\deE]+) iter/s, ([-+.\deE]+)s/(\d+) iters\)")


@dataclasses.dataclass(frozen=True)
class Net:
    label: str
    solver: str  #: file name
    home: str  #: "golden" (golden/timing) or "data" (benchmarks/data)
    iterations: int
    display: int
    batch: int  #: the DummyData batch, for ``keras-caffe analyze``


NETS = {
    "lenet": Net("LeNet, batch 64", "lenet_dummy_solver.prototxt", "golden", 300, 50, 64),
    "cifar10_quick": Net("CIFAR-10 quick, batch 100", "cifar10_quick_dummy_solver.prototxt",
                         "golden", 300, 50, 100),
    "caffenet": Net("CaffeNet, batch 16", "caffenet_dummy_solver.prototxt", "data", 30, 6, 16),
}

#: column key -> (engine, environment variables, heading)
CONFIGS = {
    "caffe_1": ("caffe", {"OPENBLAS_NUM_THREADS": "1"}, "Caffe 1 thr"),
    "caffe_2": ("caffe", {"OPENBLAS_NUM_THREADS": "2"}, "Caffe 2 thr"),
    "keras_caffe_onednn": ("keras-caffe", {"TF_ENABLE_ONEDNN_OPTS": "1"}, "k-c oneDNN"),
    "keras_caffe_eigen": ("keras-caffe", {"TF_ENABLE_ONEDNN_OPTS": "0"}, "k-c no oneDNN"),
    "keras_caffe_eigen_untuned": ("keras-caffe", {"TF_ENABLE_ONEDNN_OPTS": "0",
                                                  "KERAS_CAFFE_CPU_TUNING": "0"},
                                  "k-c no oneDNN, untuned"),
}

#: The line ``run_one`` adds to a log after each display line: the process's CPU seconds then.
CPU_LINE = re.compile(r"^train_vs_caffe cpu: iteration (\d+) cpu_s ([-+.\deE]+)$", re.M)

#: The columns whose speed over Caffe's best thread count the table gives.
RATIOS = {"keras_caffe_onednn": "oneDNN / Caffe", "keras_caffe_eigen": "no oneDNN / Caffe"}

#: column key -> the benchmarks/matmul_rate.py engine whose float32 product rate is its ceiling
#: (numpy's OpenBLAS stands for the one Caffe links: the same library, maybe not the same build).
CEILING_ENGINE = {"caffe_1": "openblas_1", "caffe_2": "openblas_2",
                  "keras_caffe_onednn": "tf_onednn", "keras_caffe_eigen": "tf_eigen",
                  "keras_caffe_eigen_untuned": "tf_eigen"}

#: What a run keeps beside its logs (``--logs``) for ``--from-logs``'s roofline table.
ROOFLINE_FILE = "roofline.json"


# -- log parsing (tests/benchmarks/test_benchmark_scripts.py) ----------------------------


def display_windows(text):
    """Every display line with a rate: ``[(iteration, iter_per_s, seconds, display)]``."""
    return [(int(it), float(rate), float(seconds), int(display))
            for it, rate, seconds, display in RATE_LINE.findall(text)]


def steady_windows(text):
    """The display windows after start-up: iteration >= 2 * display (Iteration 0's
    line has no window, the first window holds start-up and tracing)."""
    return [w for w in display_windows(text) if w[0] >= 2 * w[3]]


def ms_per_iteration(text):
    """Milliseconds per iteration of each steady window (1000 / the printed rate)."""
    return [1e3 / rate for _, rate, _, _ in steady_windows(text)]


def cpu_line(iteration, seconds):
    """The line ``run_one`` adds after a display line (``CPU_LINE`` reads it back)."""
    return f"train_vs_caffe cpu: iteration {iteration} cpu_s {seconds:.3f}\n"


def cpu_marks(text):
    """``{iteration: CPU seconds}`` from the lines ``run_one`` added to a log."""
    return {int(it): float(seconds) for it, seconds in CPU_LINE.findall(text)}


def cpu_ms_per_iteration(text):
    """CPU milliseconds (all threads) per iteration of each steady window whose
    start and end both have a CPU mark: ``(cpu[N] - cpu[N - display]) / display``."""
    marks = cpu_marks(text)
    return [1e3 * (marks[it] - marks[it - display]) / display
            for it, _, _, display in steady_windows(text)
            if it in marks and it - display in marks]


def process_cpu_seconds(pid, proc="/proc"):
    """User plus system CPU seconds of process ``pid`` and all its threads, from
    ``/proc/PID/stat`` (fields 14 and 15, in clock ticks); None where unreadable."""
    try:
        stat = (Path(proc) / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# -- the machine -----------------------------------------------------------------------


def cpu_info(path="/proc/cpuinfo"):
    """(model name, sorted SIMD flags of interest, logical CPUs) from /proc/cpuinfo."""
    model, flags = platform.processor() or "unknown", set()
    try:
        text = Path(path).read_text()
    except OSError:
        return model, [], os.cpu_count()
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    model = found.group(1).strip() if found else model
    found = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    if found:
        wanted = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
                  "amx_tile")
        flags = {f for f in found.group(1).split() if f in wanted}
    return model, sorted(flags), os.cpu_count()


def versions(python):
    """TensorFlow's and Keras's versions as the keras-caffe processes see them."""
    code = "import tensorflow as tf, keras; print(tf.__version__, keras.__version__)"
    out = subprocess.run([python, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    parts = out.stdout.split()
    return (parts[0], parts[1]) if len(parts) == 2 else ("unknown", "unknown")


def openblas_version():
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "libopenblas0-pthread"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


# -- running -------------------------------------------------------------------------------


def caffe_binary(args):
    """``--caffe``, else the cached build (built first if missing)."""
    if args.caffe:
        return args.caffe
    command = [str(REPO / "benchmarks" / "build_caffe.sh")]
    if args.caffe_source:
        command += ["--source", args.caffe_source]
    out = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True)
    return out.stdout.strip().splitlines()[-1]


def net_file(net, golden):
    """The net prototxt ``net``'s solver names (its ``net:`` line), as an absolute path."""
    home = golden / "timing" if net.home == "golden" else DATA
    found = re.search(r'^net: "(.+)"', (home / net.solver).read_text(), re.M)
    return (home / found.group(1)).resolve()


def write_solver(net, golden, workdir, iterations, display):
    """A copy of ``net``'s solver in ``workdir`` with the net's absolute path,
    ``max_iter`` and ``display`` set; returns its path."""
    home = golden / "timing" if net.home == "golden" else DATA
    text = (home / net.solver).read_text()
    text = re.sub(r'^net: "(.+)"', lambda m: f'net: "{(home / m.group(1)).resolve()}"', text,
                  flags=re.M)
    text = re.sub(r"^max_iter: \d+", f"max_iter: {iterations}", text, flags=re.M)
    text = re.sub(r"^display: \d+", f"display: {display}", text, flags=re.M)
    path = Path(workdir) / net.solver
    path.write_text(text)
    return path


def command_for(engine, solver, caffe, python):
    if engine == "caffe":
        return [caffe, "train", "-solver", str(solver)]
    return [python, "-m", "keras_caffe", "train", "--solver", str(solver), "--log", "caffe"]


def run_one(engine, env_vars, solver, caffe, python, workdir):
    """One training process; returns (its log text, wall seconds). After each
    display line the text has the process's CPU seconds at that moment
    (``CPU_LINE``), read as the line arrives."""
    env = dict(os.environ, GLOG_logtostderr="1", TF_CPP_MIN_LOG_LEVEL="2", **env_vars)
    start = time.perf_counter()
    lines = []
    with subprocess.Popen(command_for(engine, solver, caffe, python), cwd=workdir, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        for line in proc.stdout:
            lines.append(line)
            found = RATE_LINE.search(line)
            seconds = process_cpu_seconds(proc.pid) if found else None
            if seconds is not None:
                lines.append(cpu_line(found.group(1), seconds))
        returncode = proc.wait()
    wall = time.perf_counter() - start
    text = "".join(lines)
    if returncode != 0:
        tail = "\n".join(text.splitlines()[-15:])
        sys.exit(f"train_vs_caffe: {engine} train -solver {solver} exited with "
                 f"{returncode}:\n{tail}")
    return text, wall


# -- the roofline: FLOPs per iteration and the matrix-product ceiling ---------------------


def flops_per_iteration(net, golden, python):
    """Forward + backward FLOPs of one training iteration of ``net``, from
    ``keras-caffe analyze --phase TRAIN --json`` at the net's batch (2 FLOPs
    per multiply-add forward, twice the forward backward: 3 x 2 x MACs)."""
    command = [python, "-m", "keras_caffe", "analyze", str(net_file(net, golden)), "--phase",
               "TRAIN", "--batch", str(net.batch), "--json"]
    # from a temporary folder: in the repository root, ``-m keras_caffe`` would
    # find the source tree's keras_caffe/ (without importers/) before the installed one
    with tempfile.TemporaryDirectory() as folder:
        out = subprocess.run(command, capture_output=True, text=True, cwd=folder,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    if out.returncode != 0:
        sys.exit(f"train_vs_caffe: {' '.join(command)} exited with {out.returncode}:\n"
                 f"{out.stderr[-2000:]}")
    return json.loads(out.stdout)["total"]["flops"]


def matmul_ceilings(configs, python, sizes, repeats):
    """``{config: GFLOP/s}``: the best float32 ``n x n`` product rate over
    ``sizes`` of each column's engine (``CEILING_ENGINE``), each engine timed
    once by benchmarks/matmul_rate.py's worker in a process with its variables."""
    spec = spec_from_file_location("matmul_rate", Path(__file__).with_name("matmul_rate.py"))
    matmul_rate = module_from_spec(spec)
    spec.loader.exec_module(matmul_rate)
    rates = {}
    for engine_key in dict.fromkeys(CEILING_ENGINE[key] for key in configs):
        engine, variables, _ = matmul_rate.ENGINES[engine_key]
        out = subprocess.run([python, matmul_rate.__file__, "--worker", engine, "--sizes",
                              ",".join(map(str, sizes)), "--repeats", str(repeats)],
                             capture_output=True, text=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **variables))
        if out.returncode != 0:
            sys.exit(f"train_vs_caffe: matmul_rate.py --worker {engine} exited with "
                     f"{out.returncode}:\n{out.stderr[-2000:]}")
        rates[engine_key] = max(json.loads(out.stdout.strip().splitlines()[-1]).values())
        print(f"  ceiling {engine_key:12s} {rates[engine_key]:9.1f} GFLOP/s", flush=True)
    return {key: rates[CEILING_ENGINE[key]] for key in configs}


def save_log(logs, name, text):
    if logs:
        Path(logs).mkdir(parents=True, exist_ok=True)
        (Path(logs) / name).write_text(text)


def measure(args, nets, caffe, golden, progress=lambda results: None):
    """{net: {config: [{"round", "ms", "wall_s"}]}}, the rounds alternating the configs;
    ``progress(results)`` after each process (the partial results)."""
    results = {name: {key: [] for key in args.configs} for name in nets}
    with tempfile.TemporaryDirectory(prefix="train_vs_caffe-") as workdir:
        for round_ in range(args.rounds):
            for name in nets:
                net = NETS[name]
                iterations = args.iterations or net.iterations
                display = max(1, iterations // 6) if args.iterations else net.display
                solver = write_solver(net, golden, workdir, iterations, display)
                for key in args.configs:
                    engine, env_vars, _ = CONFIGS[key]
                    text, wall = run_one(engine, env_vars, solver, caffe, args.python, workdir)
                    save_log(args.logs, f"{name}_{key}_round{round_ + 1}.log", text)
                    ms = ms_per_iteration(text)
                    if not ms:
                        sys.exit(f"train_vs_caffe: no display windows after start-up in the "
                                 f"{engine} log of {name} (iterations {iterations}, display "
                                 f"{display})")
                    results[name][key].append({"round": round_ + 1, "ms": ms, "wall_s": wall,
                                               "cpu_ms": cpu_ms_per_iteration(text)})
                    print(f"  round {round_ + 1} {name:14s} {key:26s} "
                          f"{statistics.median(ms):9.1f} ms/iter  ({wall:.0f} s in all)",
                          flush=True)
                    progress(results)
    return results


def results_from_logs(logs):
    """The results of a run from the logs it kept (``--logs``), as ``measure``
    returns them (wall times unknown): to re-read an interrupted run."""
    results = {}
    keys = "|".join(sorted(CONFIGS, key=len, reverse=True))
    for path in sorted(Path(logs).glob("*_round*.log")):
        found = re.fullmatch(rf"(\w+?)_({keys})_round(\d+)\.log", path.name)
        text = path.read_text() if found else ""
        ms = ms_per_iteration(text)
        if ms:
            net, key, round_ = found.group(1), found.group(2), int(found.group(3))
            results.setdefault(net, {}).setdefault(key, []).append(
                {"round": round_, "ms": ms, "wall_s": None, "cpu_ms": cpu_ms_per_iteration(text)})
    # a net counts when it has Caffe and at least one keras-caffe column
    return {net: {key: by_config[key] for key in CONFIGS if key in by_config}
            for net, by_config in results.items()
            if {"caffe_1", "caffe_2"} <= set(by_config) and set(by_config) & set(RATIOS)}


# -- the tables: per round, never pooled across rounds -------------------------------------


def round_cells(by_config):
    """``{round: {config: run}}`` from ``{config: [run, ...]}``."""
    out = {}
    for key, runs in by_config.items():
        for run in runs:
            out.setdefault(run["round"], {})[key] = run
    return dict(sorted(out.items()))


def gflops_per_s(flops, ms):
    """GFLOP/s of ``flops`` operations done in ``ms`` milliseconds."""
    return flops / (ms / 1e3) / 1e9


def rows(results, roofline=None):
    """One row per net per round, from that round's windows only (a ratio is
    never taken of windows pooled across rounds):

    - ``ms_per_iter``: each column's median wall milliseconds per iteration;
    - ``wall_ratio``: Caffe's better thread count's ms in that round over each
      keras-caffe column's (the Caffe columns must be there);
    - where the logs have CPU marks, ``cpu_ms_per_iter`` (median CPU ms per
      iteration, all threads), ``cores_busy`` (that over the wall ms) and
      ``cpu_ratio``: Caffe's 1-thread CPU ms over each keras-caffe column's;
    - given ``roofline`` (``{"flops_per_iter": {net: FLOPs}, "ceiling_gflops":
      {config: GFLOP/s}}``), ``gflops`` (the net's FLOPs per iteration over
      each column's ms) and ``percent_of_ceiling`` (that over the column's
      matrix-product ceiling)."""
    roofline = roofline or {}
    flops = roofline.get("flops_per_iter", {})
    ceilings = roofline.get("ceiling_gflops", {})
    out = []
    for name, by_config in results.items():
        for round_, runs in round_cells(by_config).items():
            ms = {key: statistics.median(run["ms"]) for key, run in runs.items()}
            row = {"net": name, "label": NETS[name].label, "round": round_, "ms_per_iter": ms}
            if {"caffe_1", "caffe_2"} <= set(ms):
                best = min(ms["caffe_1"], ms["caffe_2"])
                row["wall_ratio"] = {key: best / ms[key] for key in RATIOS if key in ms}
            cpu = {key: statistics.median(run["cpu_ms"]) for key, run in runs.items()
                   if run.get("cpu_ms")}
            if cpu:
                row["cpu_ms_per_iter"] = cpu
                row["cores_busy"] = {key: value / ms[key] for key, value in cpu.items()}
                if "caffe_1" in cpu:
                    row["cpu_ratio"] = {key: cpu["caffe_1"] / cpu[key]
                                        for key in RATIOS if key in cpu}
            if name in flops:
                row["gflops"] = {key: gflops_per_s(flops[name], value)
                                 for key, value in ms.items()}
                row["percent_of_ceiling"] = {key: 100 * rate / ceilings[key]
                                             for key, rate in row["gflops"].items()
                                             if ceilings.get(key)}
            out.append(row)
    return out


def medians(table):
    """One row per net: the median over its rounds of each per-round ratio
    (``wall_ratio``, ``cpu_ratio``), with the number of rounds it had."""
    out = []
    for name in dict.fromkeys(row["net"] for row in table):
        mine = [row for row in table if row["net"] == name]
        summary = {"net": name, "label": mine[0]["label"], "rounds": len(mine)}
        for field in ("wall_ratio", "cpu_ratio"):
            values = {key: [row[field][key] for row in mine if key in row.get(field, {})]
                      for key in RATIOS}
            found = {key: statistics.median(v) for key, v in values.items() if v}
            if found:
                summary[field] = found
        out.append(summary)
    return out


def _ratio(value):
    return "-" if value is None else f"{value:.2f}x"


def print_table(table, roofline=None):
    """The wall table (with the CPU ratio beside the wall ratio), the CPU
    table where the logs have CPU marks, the roofline table given the
    FLOPs and ceilings (``roofline``, as ``rows`` takes it)."""
    columns = [key for key in CONFIGS if any(key in row["ms_per_iter"] for row in table)]
    ratios = [key for key in RATIOS if any(key in row.get("wall_ratio", {}) for row in table)]
    cpu_ratios = [key for key in RATIOS if any(key in row.get("cpu_ratio", {}) for row in table)]
    headings = (["net", "round"] + [CONFIGS[key][2] for key in columns]
                + [RATIOS[key] for key in ratios] + [RATIOS[key] + ", CPU" for key in cpu_ratios])
    summaries = {row["net"]: row for row in medians(table)}
    lines = []
    for index, row in enumerate(table):
        cells = [row["label"], str(row["round"])]
        cells += [f"{row['ms_per_iter'][key]:.1f}" if key in row["ms_per_iter"] else "-"
                  for key in columns]
        cells += [_ratio(row.get("wall_ratio", {}).get(key)) for key in ratios]
        cells += [_ratio(row.get("cpu_ratio", {}).get(key)) for key in cpu_ratios]
        lines.append(cells)
        if index + 1 == len(table) or table[index + 1]["net"] != row["net"]:
            summary = summaries[row["net"]]
            cells = [row["label"], f"median of {summary['rounds']}"] + ["" for _ in columns]
            cells += [_ratio(summary.get("wall_ratio", {}).get(key)) for key in ratios]
            cells += [_ratio(summary.get("cpu_ratio", {}).get(key)) for key in cpu_ratios]
            lines.append(cells)
    print("ms per training iteration, median of the round's windows; lower is better. "
          "Ratios per round: wall = Caffe's better thread count's ms / keras-caffe's; "
          "CPU = Caffe 1 thread's CPU ms / keras-caffe's (all threads); "
          "median of N = the median of the N per-round ratios")
    print_aligned([headings] + lines)
    with_cpu = [row for row in table if "cpu_ms_per_iter" in row]
    if with_cpu:
        headings = ["net", "round"] + [CONFIGS[key][2] for key in columns]
        lines = [[row["label"], str(row["round"])]
                 + [f"{row['cpu_ms_per_iter'][key]:.1f} ({row['cores_busy'][key]:.2f})"
                    if key in row["cpu_ms_per_iter"] else "-" for key in columns]
                 for row in with_cpu]
        print("CPU ms per training iteration, all threads, median of the round's windows "
              "(cores kept busy: CPU ms over wall ms)")
        print_aligned([headings] + lines)
    with_flops = [row for row in table if "gflops" in row]
    if with_flops:
        ceilings = (roofline or {}).get("ceiling_gflops", {})
        flops = (roofline or {}).get("flops_per_iter", {})
        headings = ["net", "round"] + [CONFIGS[key][2] for key in columns]
        lines = []
        for row in with_flops:
            cells = [row["label"], str(row["round"])]
            for key in columns:
                rate = row["gflops"].get(key)
                percent = row["percent_of_ceiling"].get(key)
                cells.append("-" if rate is None else f"{rate:.1f}" if percent is None
                             else f"{rate:.1f} ({percent:.0f}%)")
            lines.append(cells)
        print("roofline: GFLOP/s = FLOPs per iteration / ms per iteration (FLOPs: keras-caffe "
              "analyze --phase TRAIN, forward + backward = 3 x 2 x multiply-adds; "
              + ", ".join(f"{NETS[n].label}: {f / 1e9:.2f} G" for n, f in flops.items()) + ")")
        print("(% of the column's float32 matrix-product ceiling, benchmarks/matmul_rate.py in "
              "the same run: " + (", ".join(f"{CONFIGS[key][2]} {ceilings[key]:.1f}"
                                            for key in columns if ceilings.get(key))
                                  or "none measured") + " GFLOP/s)")
        print_aligned([headings] + lines)


def print_aligned(lines):
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    for cells in lines:
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                        for i, (c, w) in enumerate(zip(cells, widths))))


def write_json(path, payload):
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(payload, indent=1) + "\n")
    os.replace(tmp, path)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--caffe", help="a caffe binary (default: build or reuse the cached "
                                        "build of benchmarks/build_caffe.sh)")
    parser.add_argument("--caffe-source", help="git URL or directory to clone Caffe from when "
                                               "building (default: GitHub)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--iterations", type=int,
                        help="max_iter for every net (display = iterations // 6); default per "
                             "net: " + ", ".join(f"{k} {n.iterations} (display {n.display})"
                                                 for k, n in NETS.items()))
    parser.add_argument("--nets", default=",".join(NETS),
                        help=f"comma-separated, of {', '.join(NETS)}")
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help=f"comma-separated columns, of {', '.join(CONFIGS)} (Caffe's two "
                             "are always run)")
    parser.add_argument("--golden", default=os.environ.get("KERAS_CAFFE_GOLDEN",
                                                           str(DEFAULT_GOLDEN)))
    parser.add_argument("--python", default=sys.executable,
                        help="the Python whose keras_caffe runs (default: this one)")
    parser.add_argument("--json", help="also write the results here")
    parser.add_argument("--logs", help="keep every process's log in this directory")
    parser.add_argument("--from-logs", metavar="DIR",
                        help="run nothing: print the table of the logs an earlier --logs kept")
    parser.add_argument("--no-roofline", action="store_true",
                        help="skip the roofline table (no keras-caffe analyze, no "
                             "matmul_rate.py ceiling)")
    parser.add_argument("--matmul-sizes", default="1024,2048",
                        help="the product sizes n whose best rate is the ceiling")
    parser.add_argument("--matmul-repeats", type=int, default=3)
    args = parser.parse_args(argv)
    nets = [n.strip() for n in args.nets.split(",") if n.strip()]
    unknown = [n for n in nets if n not in NETS]
    if unknown or not nets:
        parser.error(f"--nets: unknown {', '.join(unknown) or '(none given)'}; "
                     f"known: {', '.join(NETS)}")
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    try:
        args.matmul_sizes = [int(n) for n in args.matmul_sizes.split(",")]
    except ValueError:
        parser.error(f"--matmul-sizes: not a comma-separated list of integers: "
                     f"{args.matmul_sizes!r}")
    args.configs = [key for key in CONFIGS
                    if key in configs or key in ("caffe_1", "caffe_2")]
    if not args.from_logs and any(NETS[n].home == "golden" for n in nets) and \
            not (Path(args.golden) / "timing").is_dir():
        parser.error(f"--golden: no timing/ folder in {args.golden} (the golden Caffe data; "
                     "or set KERAS_CAFFE_GOLDEN)")
    if args.rounds < 1 or (args.iterations is not None and args.iterations < 6):
        parser.error("--rounds must be >= 1 and --iterations >= 6")
    return args, nets


def read_roofline(logs):
    """What a run kept beside its logs for the roofline table, or None."""
    path = Path(logs) / ROOFLINE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def main(argv=None):
    args, nets = parse_args(argv)
    if args.from_logs:
        roofline = None if args.no_roofline else read_roofline(args.from_logs)
        print_table(rows(results_from_logs(args.from_logs), roofline), roofline)
        return
    caffe = caffe_binary(args)
    model, flags, cpus = cpu_info()
    tf_version, keras_version = versions(args.python)
    machine = {"cpu": model, "logical_cpus": cpus, "flags": flags,
               "avx512": any(f.startswith("avx512") for f in flags),
               "load_before": os.getloadavg(), "tensorflow": tf_version, "keras": keras_version,
               "openblas": openblas_version(), "caffe": caffe, "python": args.python}
    print(f"{model}, {cpus} logical CPUs, flags {' '.join(flags)} "
          f"(AVX-512: {'yes' if machine['avx512'] else 'no'}); TensorFlow {tf_version}, "
          f"Keras {keras_version}; OpenBLAS {machine['openblas']}; caffe {caffe}")
    print("load average before: " + " ".join(f"{x:.2f}" for x in machine["load_before"]),
          flush=True)
    roofline = None
    if not args.no_roofline:
        roofline = {"flops_per_iter": {name: flops_per_iteration(NETS[name], Path(args.golden),
                                                                 args.python) for name in nets},
                    "ceiling_gflops": matmul_ceilings(args.configs, args.python,
                                                      args.matmul_sizes, args.matmul_repeats),
                    "matmul_sizes": args.matmul_sizes}
        if args.logs:
            Path(args.logs).mkdir(parents=True, exist_ok=True)
            write_json(Path(args.logs) / ROOFLINE_FILE, roofline)

    def partial(results):  # an interrupted run leaves what it measured
        if args.json:
            write_json(args.json, {"machine": machine, "rounds": args.rounds, "complete": False,
                                   "roofline": roofline, "runs": results})

    results = measure(args, nets, caffe, Path(args.golden), partial)
    machine["load_after"] = os.getloadavg()
    table = rows(results, roofline)
    print_table(table, roofline)
    print("load average after: " + " ".join(f"{x:.2f}" for x in machine["load_after"]))
    if args.json:
        write_json(args.json, {"machine": machine, "rounds": args.rounds, "complete": True,
                               "roofline": roofline, "table": table, "medians": medians(table),
                               "runs": results})


if __name__ == "__main__":
    main()

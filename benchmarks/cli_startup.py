"""How long ``keras-caffe`` takes to answer what needs no TensorFlow.

    python benchmarks/cli_startup.py [--runs 7] [--keras-caffe PATH]

``--help``, ``--version``, a usage error and a missing input file are
answered before TensorFlow is imported (``keras_caffe.cli.main``). Each case
is run ``--runs`` times as a fresh process, in turn with the two references
measured in the same run: ``python -c pass`` (the interpreter's own start, the
floor) and ``python -c "import tensorflow"`` (what every answer cost when the
command line imported TensorFlow first). The table gives the median and the
worst wall-clock seconds of each, and each case's median over the floor's
and over TensorFlow's import.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

#: case -> the arguments of ``keras-caffe`` (None: a reference, run by Python)
CASES = {
    "python -c pass": ["-c", "pass"],
    "python -c 'import tensorflow'": ["-c", "import tensorflow"],
    "keras-caffe --help": ["--help"],
    "keras-caffe --version": ["--version"],
    "keras-caffe train (usage error)": ["train"],
    "keras-caffe import missing.prototxt": ["import", "/nonexistent/missing.prototxt"],
    "keras-caffe train --solver missing": ["train", "--solver", "/nonexistent/solver.prototxt"],
}
REFERENCES = ("python -c pass", "python -c 'import tensorflow'")


def command(case, script):
    """The process of ``case``: the references by this Python, the others by ``script``."""
    args = CASES[case]
    return [sys.executable, *args] if case in REFERENCES else [script, *args]


def time_once(argv):
    """Wall-clock seconds of one run of ``argv`` (its output discarded)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd="/")
    return time.perf_counter() - start


def table(times):
    """Rows: case, median, worst, median / ``python -c pass``, median / TensorFlow's import."""
    floor = statistics.median(times[REFERENCES[0]])
    tensorflow = statistics.median(times[REFERENCES[1]])
    rows = [f"{'case':38} {'median s':>9} {'worst s':>8} {'/ pass':>7} {'/ import tf':>11}"]
    for case, runs in times.items():
        median = statistics.median(runs)
        rows.append(f"{case:38} {median:9.3f} {max(runs):8.3f} {median / floor:6.1f}x "
                    f"{median / tensorflow:10.2f}x")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--keras-caffe", default=shutil.which("keras-caffe")
                        or os.path.join(os.path.dirname(sys.executable), "keras-caffe"))
    args = parser.parse_args(argv)
    args.keras_caffe = os.path.abspath(args.keras_caffe)  # the runs start in /
    times = {case: [] for case in CASES}
    for _ in range(args.runs):  # in turn, so the machine's load falls on every case alike
        for case in CASES:
            times[case].append(time_once(command(case, args.keras_caffe)))
    from train_vs_caffe import cpu_info  # the sibling script (its folder is on sys.path)

    model, flags, cpus = cpu_info()
    print(f"{model}; {', '.join(flags) or 'no SIMD flags read'}; {cpus} logical CPUs; "
          f"load average {os.getloadavg()[0]:.2f}; {args.runs} runs of each, in turn")
    print("\n".join(table(times)))


if __name__ == "__main__":
    main()

"""benchmarks/jax_data_parallel.py: JAX's DataParallel on N virtual CPU
devices against one device and against Horovod np=N.

The script's driver imports no framework; its workers run in the venvs.
Here each framework's part runs in its own venv, with this interpreter as
the worker's: on JAX a quick run of ``jax-1`` and ``jax-n`` (N = 2), on
TensorFlow a quick run of ``horovod`` under ``horovodrun -np 2`` (skipped
without Horovod unless ``KERAS_CAFFE_EXPECT_HOROVOD=1``). On every backend:
the window schedule, the arithmetic, the machine lines, the argument checks,
and a worker that dies reported in one line.
"""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import keras
import pytest

from support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "jax_data_parallel.py"


@pytest.fixture(scope="module")
def bench():
    """The script as a module (benchmarks/ is not installed)."""
    return load_script(SCRIPT)


def run_script(tmp_path, *argv, timeout=300):
    """The driver as a process (this interpreter), outside the source tree."""
    return subprocess.run([sys.executable, str(SCRIPT), *argv], cwd=tmp_path, timeout=timeout,
                          capture_output=True, text=True,
                          env=dict(os.environ, PYTHONWARNINGS="ignore"))


def check_windows(result, configs):
    """Two positive windows per configuration, the medians of them."""
    assert result["settings"]["configs"] == configs
    assert result["settings"]["steps"] == 2 and result["settings"]["rounds"] == 2
    assert sorted(result["windows_ms"]) == sorted(configs)
    for name in configs:
        windows = result["windows_ms"][name]
        assert len(windows) == 2 and all(ms > 0 for ms in windows), (name, windows)
        assert result["ms_per_step"][name]["median"] == pytest.approx(statistics.median(windows))
        busy = result["cores_busy"][name]  # CPU seconds per second of its windows
        assert len(busy) == 2 and all(0 < b <= 2 * os.cpu_count() for b in busy), (name, busy)


@pytest.mark.skipif(keras.backend.backend() != "jax",
                    reason="the JAX configurations need the JAX backend's venv")
def test_quick_run_of_the_jax_configurations(tmp_path):
    """jax-1 and jax-n in their own processes: one device against two under
    DataParallel; positive windows, the ratio jax-n / jax-1 of their medians,
    no Horovod ratio, the machine and note printed."""
    import jax

    path = tmp_path / "out.json"
    done = run_script(tmp_path, "--quick", "--configs", "jax-1,jax-n", "--devices", "2",
                      "--jax-python", sys.executable, "--json", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(path.read_text())
    check_windows(result, ["jax-1", "jax-n"])
    assert result["ready"]["jax-1"]["devices"] == ["cpu:0"]
    assert result["ready"]["jax-n"]["devices"] == ["cpu:0", "cpu:1"]
    assert result["ready"]["jax-1"]["parameters"] == 431080  # 520 + 25050 + 400500 + 5010
    assert result["machine"]["versions"]["jax"]["jax"] == jax.__version__
    assert list(result["ratios"]) == ["jax-n/jax-1"]
    windows = result["windows_ms"]
    assert result["ratios"]["jax-n/jax-1"]["of_medians"] == pytest.approx(
        statistics.median(windows["jax-n"]) / statistics.median(windows["jax-1"]))
    out = done.stdout
    assert "JAX, 2 virtual CPU devices, DataParallel" in out and "ratio jax-n / jax-1: " in out
    assert "ratio jax-n / horovod" not in out
    assert f"{os.cpu_count()} logical CPUs" in out and "load average at end" in out
    assert "command: python " in out and "--configs jax-1,jax-n" in out


@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="Horovod runs on TensorFlow (keras_caffe.distributed)")
def test_quick_run_of_horovod(tmp_path):
    """horovodrun -np 2 --gloo: both workers report, each with cores / 2
    threads (at least 1); positive windows; no ratio without the JAX side."""
    from support.horovod_jobs import require_horovod

    require_horovod()
    path = tmp_path / "out.json"
    done = run_script(tmp_path, "--quick", "--configs", "horovod", "--devices", "2",
                      "--tf-python", sys.executable, "--json", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    result = json.loads(path.read_text())
    check_windows(result, ["horovod"])
    threads = max(1, os.cpu_count() // 2)
    assert result["ready"]["horovod"]["workers"] == 2
    assert result["ready"]["horovod"]["threads"] == result["settings"]["tf_threads"] == threads
    assert result["ready"]["horovod"]["kernels"] in ("oneDNN", "Eigen")
    assert result["ready"]["horovod"]["parameters"] == 431080
    assert result["ratios"] == {}
    assert f"TF + Horovod np=2 (gloo), {threads} thread(s)/worker" in done.stdout


def test_a_worker_that_dies_is_one_line(tmp_path):
    """A worker interpreter that exits at once: the run stops, exit status 1,
    naming the configuration and its exit status."""
    done = run_script(tmp_path, "--quick", "--configs", "jax-1", "--jax-python", "/bin/false",
                      timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith("jax_data_parallel: jax-1 ended (exit 1) before jax-1.ready:")


def test_schedule_alternates_the_configurations(bench):
    """A B C | C B A | A B C: each round times every configuration once."""
    assert bench.schedule(["a", "b", "c"], 3) == [
        (0, "a"), (0, "b"), (0, "c"), (1, "c"), (1, "b"), (1, "a"), (2, "a"), (2, "b"),
        (2, "c")]


def test_summary_and_ratios(bench):
    """Medians and ranges; the ratio of medians and the median of the
    rounds' ratios (4/2, 3/1, 5/5 -> 2)."""
    windows = {"jax-n": [4.0, 3.0, 5.0], "jax-1": [2.0, 1.0, 5.0]}
    assert bench.summary(windows) == {"jax-n": {"median": 4.0, "min": 3.0, "max": 5.0},
                                      "jax-1": {"median": 2.0, "min": 1.0, "max": 5.0}}
    assert bench.ratio(windows, "jax-n", "jax-1") == {"of_medians": 2.0, "paired": 2.0}


def test_cpu_info_and_machine_lines(bench, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\n"
                       "flags\t\t: fpu sse2 avx avx2 fma avx512f sha_ni\n"
                       "processor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    assert bench.cpu_info(cpuinfo) == ("AMD EPYC 9R14", ["avx", "avx2", "avx512f", "fma"])
    assert bench.cpu_info(tmp_path / "missing") == ("unknown CPU", [])
    info = {"cpu": "AMD EPYC 9R14", "cores": 2, "flags": ["avx2"],
            "load_start": [0.5, 0.25, 1.0], "pythons": {"jax": "/j/python", "tf": "/t/python"},
            "versions": {"jax": {"jax": "0.10.2", "keras": "3.15.1"}, "tf": None}}
    assert bench.machine_lines(info) == [
        "AMD EPYC 9R14, 2 logical CPUs, flags avx2; load average at start 0.50 0.25 1.00",
        "jax venv (/j/python): jax 0.10.2, keras 3.15.1", "tf venv (/t/python): not found"]


def test_the_note_says_what_the_ratios_measure(bench):
    assert bench.note(2, 2) == (
        "Note: the 2 virtual devices (and the 2 Horovod workers) share this machine's 2 CPU "
        "cores; none are added: the ratios measure data parallelism's overhead on the same "
        "work (splitting the batch, the all-reduce, synchronisation), not scaling. "
        "jax-n / horovod also holds XLA's speed against TensorFlow's kernels.")
    assert "how well one device alone keeps the cores busy" in bench.note(2, 16)


@pytest.mark.parametrize("argv, message", [
    (["--batch", "63"], "--batch 63 is not a multiple of --devices 2"),
    (["--devices", "0"], "--devices: expected a positive integer, got '0'"),
    (["--configs", "jax-1,tpu"], "--configs: expected distinct names among jax-1, jax-n, "
                                 "horovod separated by commas, got 'jax-1,tpu'"),
    (["--configs", "jax-1,jax-1"], "got 'jax-1,jax-1'"),
])
def test_bad_arguments_are_usage_errors(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_quick_and_the_defaults(bench):
    """--quick is 2 steps x 2 rounds; the configurations keep their order;
    horovodrun is found beside --tf-python; threads are cores / N."""
    args = bench.parse_args(["--quick", "--configs", "horovod,jax-1", "--devices", "4",
                             "--tf-python", "/v/bin/python"])
    assert (args.steps, args.rounds, args.configs) == (2, 2, ["jax-1", "horovod"])
    assert args.horovodrun == "/v/bin/horovodrun"
    assert args.tf_threads == max(1, os.cpu_count() // 4)

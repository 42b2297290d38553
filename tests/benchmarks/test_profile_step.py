"""benchmarks/profile_step.py: the self-time arithmetic on a hand-made trace
(nested events, the executor's own events apart from kernels), and one real
profile of LeNet's training step read back from TensorFlow's trace file."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "profile_step.py"

MS = 10 ** 9  # picoseconds in a millisecond


@pytest.fixture(scope="module")
def profile():
    return load_script(SCRIPT)


def test_nested_events_count_once_for_the_innermost(profile):
    """A 10 ms ``Process`` holding a 6 ms MatMul that holds a 1 ms
    ParallelFor: self times 4, 5 and 1 ms; one top-level event of 10 ms."""
    lines = [("tf_Compute/1", [(0, 10 * MS, "Process"), (2 * MS, 6 * MS, "dense/MatMul:MatMul"),
                               (3 * MS, 1 * MS, "ParallelFor")])]
    by_name, busy = profile.self_times(lines)
    assert by_name[("tf_Compute", "Process")] == [4 * MS, 1]
    assert by_name[("tf_Compute", "dense/MatMul:MatMul")] == [5 * MS, 1]
    assert by_name[("tf_Compute", "ParallelFor")] == [1 * MS, 1]
    assert busy["tf_Compute/1"] == (10 * MS, 3)


def test_events_after_a_finished_one_are_not_its_children(profile):
    lines = [("tf_Compute/1", [(5 * MS, 2 * MS, "b:Relu"), (0, 4 * MS, "a:Conv2D")])]
    by_name, busy = profile.self_times(lines)
    assert by_name[("tf_Compute", "a:Conv2D")] == [4 * MS, 1]
    assert by_name[("tf_Compute", "b:Relu")] == [2 * MS, 1]
    assert busy["tf_Compute/1"] == (6 * MS, 2)


def test_summary_per_iteration(profile):
    """Two iterations of 10 ms on two compute threads and a tf.data thread:
    kernels by op type (``node:Type``), framework events apart, the compute
    threads' time without an event, and only the compute threads' kernels
    in the op count."""
    lines = [
        ("tf_Compute/1", [(0, 8 * MS, "Process"), (1 * MS, 5 * MS, "c1:Conv2D"),
                          (10 * MS, 6 * MS, "c2:Conv2D")]),
        ("tf_Compute/2", [(2 * MS, 4 * MS, "m:MatMul")]),
        ("tf_data_private_threadpool/9", [(0, 2 * MS, "r:StatelessRandomNormalV2")]),
        ("python", [(0, 20 * MS, "Run")]),
    ]
    report = profile.summary(lines, iterations=2, wall_s=0.020)
    assert report["wall_ms"] == pytest.approx(10.0)
    assert report["ops"]["Conv2D"] == {"self_ms": pytest.approx(5.5), "calls": 1.0}
    assert report["ops"]["MatMul"] == {"self_ms": pytest.approx(2.0), "calls": 0.5}
    assert report["ops"]["StatelessRandomNormalV2"]["self_ms"] == pytest.approx(1.0)
    assert list(report["ops"])[0] == "Conv2D"  # sorted by self time
    assert report["framework"] == {"Process": {"self_ms": pytest.approx(1.5), "calls": 0.5}}
    assert "Run" not in report["framework"]  # the Python thread only waits on the step
    assert report["op_count"] == 1.5  # 3 kernels on the compute threads, 2 iterations
    assert report["op_ms"] == pytest.approx(8.5)
    # thread 1 busy 8 + 6 = 14 ms of 20, thread 2 4 of 20: 22 ms idle / 2 iterations
    assert report["compute_idle_ms"] == pytest.approx(11.0)
    assert report["compute_threads"] == 2
    assert report["pools"]["tf_Compute"] == {"busy_ms": pytest.approx(9.0), "events": 2.0,
                                             "threads": 2}


def test_bad_counts_are_usage_errors(profile, capsys):
    with pytest.raises(SystemExit) as stop:
        profile.parse_args(["--net", "lenet", "--iterations", "0"])
    assert stop.value.code == 2
    assert "--iterations: expected a positive integer, got '0'" in capsys.readouterr().err


def test_missing_solver_is_a_usage_error(profile, capsys, tmp_path):
    with pytest.raises(SystemExit) as stop:
        profile.parse_args(["--solver", str(tmp_path / "none.prototxt")])
    assert stop.value.code == 2
    assert f"--solver {tmp_path / 'none.prototxt'}: no such file" in capsys.readouterr().err


@pytest.mark.tensorflow_only  # keras-caffe's training loop
def test_bad_solver_file_is_keras_caffes_one_line(tmp_path):
    """A solver file Caffe would refuse ends the script with keras-caffe's
    own error as one line, no traceback."""
    solver = tmp_path / "solver.prototxt"
    solver.write_text('net: "missing_net.prototxt"\nbase_lr: 0.01\n')
    done = subprocess.run([sys.executable, str(SCRIPT), "--solver", str(solver)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("profile_step: ")
    assert "missing_net.prototxt" in done.stderr


@pytest.mark.tensorflow_only  # keras-caffe's training loop and TensorFlow's profiler
def test_profiles_lenet_from_tensorflows_trace(golden, tmp_path):
    """The script on LeNet (DummyData, Eigen's kernels): the trace file is
    found and read, the step's kernels are there by type (its convolutions
    and matrix products), and the numbers are consistent with each other."""
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--net", "lenet", "--golden", str(golden),
         "--warmup", "3", "--iterations", "4", "--json", str(out)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="0"))
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["net"] == "lenet" and report["iterations"] == 4
    assert report["onednn"] == "0"
    assert report["unprofiled"]["wall_ms"] > 0 and report["unprofiled"]["cpu_ms"] > 0
    assert {"MatMul", "StatelessRandomNormalV2"} <= set(report["ops"]) or \
        {"MatMul", "StatelessRandomUniformV2"} <= set(report["ops"])
    assert any("Conv2D" in name for name in report["ops"])
    assert report["op_count"] >= 10
    assert 0 < report["op_ms"]
    assert report["compute_threads"] >= 1
    assert "kernels per iteration on the compute threads" in done.stdout

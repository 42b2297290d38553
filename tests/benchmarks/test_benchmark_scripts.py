"""benchmarks/train_vs_caffe.py's log reading, on Caffe's own logs (golden/timing,
recorded with BVLC Caffe) and on ``keras-caffe train --log caffe``'s: the
benchmark reads both engines' speed from the same display lines, so both
must keep printing them. The benchmark itself (which runs Caffe) is never run
here. And benchmarks/matmul_rate.py's arithmetic, table and worker (numpy only,
at tiny sizes)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "train_vs_caffe.py"


@pytest.fixture(scope="module")
def bench():
    return load_script(SCRIPT)


#: An excerpt of `python -m keras_caffe train --solver lenet_solver.prototxt --log caffe`
#: (the golden LeNet DummyData solver, max_iter 120, display 20; TF 2.21, this machine).
KERAS_CAFFE_LOG = """\
I0000 00:00:1795593684.672447   29192 cuda_platform.cc:52] failed call to cuInit
I1125 08:01:26.612499 29192 solver.cpp:289] Solving LeNet
I1125 08:01:26.612509 29192 solver.cpp:290] Learning Rate Policy: inv
I1125 08:01:30.911167 29192 solver.cpp:239] Iteration 0 (0 iter/s, 4.28132s/20 iters), loss = 3.02779
I1125 08:01:30.911281 29192 solver.cpp:258]     Train net output #0: loss = 3.02779 (* 1 = 3.02779 loss)
I1125 08:01:30.913710 29192 sgd_solver.cpp:112] Iteration 0, lr = 0.01
I1125 08:01:31.272368 29192 solver.cpp:239] Iteration 20 (55.3712 iter/s, 0.361198s/20 iters), loss = 4.79572e-08
I1125 08:01:31.273412 29192 sgd_solver.cpp:112] Iteration 20, lr = 0.00998503
I1125 08:01:31.637465 29192 solver.cpp:239] Iteration 40 (54.7796 iter/s, 0.365099s/20 iters), loss = 4.79572e-08
I1125 08:01:32.037435 29192 solver.cpp:239] Iteration 60 (50.0038 iter/s, 0.399969s/20 iters), loss = 4.79572e-08
I1125 08:01:32.657781 29192 solver.cpp:239] Iteration 80 (32.2404 iter/s, 0.620341s/20 iters), loss = 4.79572e-08
I1125 08:01:33.103881 29192 solver.cpp:239] Iteration 100 (44.8329 iter/s, 0.446101s/20 iters), loss = 4.79572e-08
I1125 08:01:33.824336 29192 solver.cpp:310] Iteration 120, loss = 4.79572e-08
I1125 08:01:33.824408 29192 solver.cpp:315] Optimization Done.
"""


def test_caffe_lenet_log(bench, golden):
    text = (Path(golden) / "timing" / "train_lenet_threads-1.log").read_text()
    assert bench.display_windows(text) == [(0, -2.08008e-27, 0.02, 50), (50, 57.9374, 0.863, 50),
                                           (100, 58.8235, 0.85, 50), (150, 58.7544, 0.851, 50)]
    assert bench.steady_windows(text) == [(100, 58.8235, 0.85, 50), (150, 58.7544, 0.851, 50)]
    assert bench.ms_per_iteration(text) == pytest.approx([17.000009, 17.020002], abs=1e-6)


def test_caffe_cifar10_quick_log(bench, golden):
    text = (Path(golden) / "timing" / "train_cifar10_quick_threads-2.log").read_text()
    assert bench.display_windows(text)[0] == (0, 1.59217e+10, 0.128, 50)
    assert bench.steady_windows(text) == [(100, 8.8574, 5.645, 50), (150, 8.75503, 5.711, 50)]
    assert bench.ms_per_iteration(text) == pytest.approx([112.899948, 114.220054], abs=1e-6)


def test_keras_caffe_log_excerpt(bench):
    assert [w[0] for w in bench.display_windows(KERAS_CAFFE_LOG)] == [0, 20, 40, 60, 80, 100]
    assert bench.steady_windows(KERAS_CAFFE_LOG) == [
        (40, 54.7796, 0.365099, 20), (60, 50.0038, 0.399969, 20), (80, 32.2404, 0.620341, 20),
        (100, 44.8329, 0.446101, 20)]
    assert bench.ms_per_iteration(KERAS_CAFFE_LOG) == pytest.approx(
        [18.254971, 19.998480, 31.016985, 22.305048], abs=1e-6)


@pytest.mark.tensorflow_only  # keras-caffe train; DummyData shapes through tf.data
def test_keras_caffe_prints_the_lines_the_benchmark_reads(bench, golden, tmp_path):
    """The installed CLI's --log caffe output, through the benchmark's own
    solver writer: display 3, max_iter 12 -> steady windows at 6 and 9."""
    net = bench.NETS["lenet"]
    solver = bench.write_solver(net, Path(golden), tmp_path, 12, 3)
    text = solver.read_text()
    assert f'net: "{Path(golden).resolve() / "timing" / "lenet_dummy.prototxt"}"' in text
    assert "max_iter: 12\n" in text and "display: 3\n" in text
    command = bench.command_for("keras-caffe", solver, None, sys.executable)
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"), timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert [w[0] for w in bench.display_windows(done.stderr)] == [0, 3, 6, 9]
    assert [(w[0], w[3]) for w in bench.steady_windows(done.stderr)] == [(6, 3), (9, 3)]
    assert all(ms > 0 for ms in bench.ms_per_iteration(done.stderr))


def test_cpu_info(bench, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\n"
                       "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw sha_ni\n\n"
                       "processor\t: 1\nmodel name\t: AMD EPYC 9R14\n")
    model, flags, _ = bench.cpu_info(cpuinfo)
    assert (model, flags) == ("AMD EPYC 9R14", ["avx", "avx2", "avx512bw", "avx512f", "fma"])


def test_unknown_net_is_a_usage_error(bench, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(["--nets", "lenet,vgg"])
    assert exit_.value.code == 2
    assert ("--nets: unknown vgg; known: lenet, cifar10_quick, caffenet"
            in capsys.readouterr().err)


def caffe_lenet_logs(golden, folder):
    """Caffe's golden LeNet train logs (1 and 2 threads) as a kept round 1."""
    timing = Path(golden) / "timing"
    for key, source in (("caffe_1", "train_lenet_threads-1.log"),
                        ("caffe_2", "train_lenet_threads-2.log")):
        (folder / f"lenet_{key}_round1.log").write_text((timing / source).read_text())
    return timing


def test_table_from_kept_logs(bench, golden, tmp_path):
    """--from-logs: Caffe's golden LeNet logs (1 and 2 threads) against the
    keras-caffe excerpt (both oneDNN settings), one round."""
    timing = caffe_lenet_logs(golden, tmp_path)
    for key in ("keras_caffe_onednn", "keras_caffe_eigen"):
        (tmp_path / f"lenet_{key}_round1.log").write_text(KERAS_CAFFE_LOG)
    (tmp_path / "cifar10_quick_caffe_1_round1.log").write_text(
        (timing / "train_cifar10_quick_threads-1.log").read_text())  # incomplete: left out
    [row] = bench.rows(bench.results_from_logs(tmp_path))
    assert (row["net"], row["round"]) == ("lenet", 1)
    assert row["ms_per_iter"]["caffe_1"] == pytest.approx(17.010005, abs=1e-6)
    assert row["ms_per_iter"]["keras_caffe_onednn"] == pytest.approx(21.151764, abs=1e-6)
    assert row["ms_per_iter"]["caffe_2"] == pytest.approx(23.669995, abs=1e-6)
    assert row["wall_ratio"] == {"keras_caffe_onednn": pytest.approx(0.804188, abs=1e-6),
                                 "keras_caffe_eigen": pytest.approx(0.804188, abs=1e-6)}
    assert "cpu_ratio" not in row and "gflops" not in row  # no CPU lines, no roofline given
    assert "keras_caffe_eigen_untuned" not in row["ms_per_iter"]  # a column the run left out


def test_configs_option(bench, golden, capsys):
    args, _ = bench.parse_args(["--configs", "keras_caffe_eigen_untuned,keras_caffe_eigen",
                                "--golden", str(golden)])
    assert args.configs == ["caffe_1", "caffe_2", "keras_caffe_eigen", "keras_caffe_eigen_untuned"]
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(["--configs", "keras_caffe_xla"])
    assert exit_.value.code == 2
    assert "--configs: unknown keras_caffe_xla; known: caffe_1, caffe_2" in capsys.readouterr().err


def test_table_prints_each_kernel_familys_speed(bench, golden, tmp_path, capsys):
    """Two ratio columns, oneDNN's and Eigen's, each over Caffe's best; the
    untuned column is a time only."""
    caffe_lenet_logs(golden, tmp_path)
    for key in ("keras_caffe_eigen", "keras_caffe_eigen_untuned"):
        (tmp_path / f"lenet_{key}_round1.log").write_text(KERAS_CAFFE_LOG)
    table = bench.rows(bench.results_from_logs(tmp_path))
    assert table[0]["wall_ratio"] == {"keras_caffe_eigen": pytest.approx(0.804188, abs=1e-6)}
    bench.print_table(table)
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[:2] == ["net", "round"]
    assert "k-c no oneDNN, untuned" in out[1] and "no oneDNN / Caffe" in out[1]
    assert "oneDNN / Caffe" not in out[1].replace("no oneDNN / Caffe", "")
    assert out[2].split() == ["LeNet,", "batch", "64", "1", "17.0", "23.7", "21.2", "21.2",
                              "0.80x"]
    assert out[3].split() == ["LeNet,", "batch", "64", "median", "of", "1", "0.80x"]
    assert len(out) == 4


# -- CPU time per iteration: the second table ----------------------------------------------


#: KERAS_CAFFE_LOG with the CPU lines run_one adds after each display line
#: (the 60 one left out: the windows ending at 60 and 80 have no CPU time).
CPU_MARKS = {0: 12.58, 20: 13.23, 40: 13.93, 80: 15.39, 100: 16.10}


def with_cpu_marks(bench, text, marks):
    out = []
    for line in text.splitlines(keepends=True):
        out.append(line)
        found = bench.RATE_LINE.search(line)
        if found and int(found.group(1)) in marks:
            out.append(bench.cpu_line(found.group(1), marks[int(found.group(1))]))
    return "".join(out)


def test_cpu_ms_per_steady_window(bench):
    text = with_cpu_marks(bench, KERAS_CAFFE_LOG, CPU_MARKS)
    assert bench.cpu_marks(text) == CPU_MARKS
    # steady windows end at 40, 60, 80, 100 (display 20); 60 and 80 lack a mark at an end
    assert bench.cpu_ms_per_iteration(text) == pytest.approx([35.0, 35.5], abs=1e-9)
    assert bench.cpu_ms_per_iteration(KERAS_CAFFE_LOG) == []


def test_process_cpu_seconds_reads_proc_stat(bench, tmp_path):
    """Fields 14 and 15 (utime, stime) counted after the command name, which
    may hold spaces and parentheses."""
    (tmp_path / "4242").mkdir()
    (tmp_path / "4242" / "stat").write_text(
        "4242 (odd (name) x) R 1 4242 4242 0 -1 4194304 900 0 0 0 250 50 0 0 20 0 3 0 "
        "12345 0 0\n")
    ticks = os.sysconf("SC_CLK_TCK")
    assert bench.process_cpu_seconds(4242, proc=tmp_path) == pytest.approx(300 / ticks)
    assert bench.process_cpu_seconds(4243, proc=tmp_path) is None
    assert bench.process_cpu_seconds(os.getpid()) > 0


#: A stand-in for `caffe train`: prints three display lines, busy for 0.3 s of
#: CPU time before each of the last two (no sleeping: CPU time must pass).
FAKE_CAFFE = """\
import sys, time
def busy(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass
for it in (0, 5, 10):
    if it:
        busy(0.3)
    print(f"I1127 00:00:00.0 1 solver.cpp:239] Iteration {it} (10 iter/s, 0.5s/5 iters), "
          "loss = 1", file=sys.stderr, flush=True)
"""


def test_run_one_marks_the_cpu_time_of_each_display_line(bench, tmp_path):
    script = tmp_path / "fake_caffe.py"
    script.write_text(FAKE_CAFFE)
    caffe = tmp_path / "caffe"
    caffe.write_text(f"#!/bin/sh\nexec {sys.executable} {script} \"$@\"\n")
    caffe.chmod(0o755)
    text, wall = bench.run_one("caffe", {}, tmp_path / "solver.prototxt", str(caffe),
                               sys.executable, tmp_path)
    marks = bench.cpu_marks(text)
    assert sorted(marks) == [0, 5, 10] and wall > 0
    assert 0.25 <= marks[10] - marks[5] < 1.0  # 0.3 s busy, read in clock ticks
    assert bench.steady_windows(text) == [(10, 10.0, 0.5, 5)]
    [cpu_ms] = bench.cpu_ms_per_iteration(text)
    assert cpu_ms == pytest.approx(1e3 * (marks[10] - marks[5]) / 5)


def test_cpu_table_from_kept_logs(bench, golden, tmp_path, capsys):
    """Caffe's golden logs have no CPU lines: the second table has keras-caffe's
    CPU time and cores kept busy, no CPU ratio (no Caffe CPU time to divide),
    and no "all cores busy" column any more."""
    caffe_lenet_logs(golden, tmp_path)
    (tmp_path / "lenet_keras_caffe_eigen_round1.log").write_text(
        with_cpu_marks(bench, KERAS_CAFFE_LOG, CPU_MARKS))
    [row] = bench.rows(bench.results_from_logs(tmp_path))
    assert row["cpu_ms_per_iter"] == {"keras_caffe_eigen": pytest.approx(35.25)}
    assert row["cores_busy"]["keras_caffe_eigen"] == pytest.approx(35.25 / 21.151764, abs=1e-6)
    assert "cpu_ratio" not in row and "speed_if_all_cores_busy" not in row
    bench.print_table([row])
    out = capsys.readouterr().out.splitlines()
    assert out[4].startswith("CPU ms per training iteration")
    assert out[5].split() == ["net", "round", "Caffe", "1", "thr", "Caffe", "2", "thr", "k-c",
                              "no", "oneDNN"]
    assert out[6].split() == ["LeNet,", "batch", "64", "1", "-", "-", "35.2", "(1.67)"]
    assert len(out) == 7 and "all cores busy" not in "\n".join(out)


def test_no_cpu_table_without_cpu_lines(bench, golden, tmp_path, capsys):
    """Logs kept before the CPU lines existed: the first table only (caption,
    headings, the round's row, the median row)."""
    caffe_lenet_logs(golden, tmp_path)
    (tmp_path / "lenet_keras_caffe_eigen_round1.log").write_text(KERAS_CAFFE_LOG)
    [row] = bench.rows(bench.results_from_logs(tmp_path))
    assert "cpu_ms_per_iter" not in row and "cpu_ratio" not in row
    bench.print_table([row])
    assert len(capsys.readouterr().out.splitlines()) == 4


# -- per round, never pooled: two rounds of made-up logs --------------------------------


def display_log(bench, ms, cpu_ms=None, display=50):
    """A Caffe-style log: Iteration 0's line, one start-up window of 100 ms per
    iteration, then one steady window per value of ``ms`` (ms per iteration);
    with ``cpu_ms`` (CPU ms per iteration, all windows) the CPU lines too."""
    lines, cpu = [], 1.0
    for index, value in enumerate([100.0] + list(ms)):
        iteration = (index + 1) * display
        if index == 0:
            lines.append("I1127 00:00:00.0 1 solver.cpp:239] Iteration 0 (0 iter/s, 0.1s/50 "
                         "iters), loss = 1\n")
            if cpu_ms is not None:
                lines.append(bench.cpu_line(0, cpu))
        lines.append(f"I1127 00:00:00.0 1 solver.cpp:239] Iteration {iteration} "
                     f"({1e3 / value:.6f} iter/s, {value * display / 1e3:.6f}s/{display} "
                     f"iters), loss = 1\n")
        if cpu_ms is not None:
            cpu += cpu_ms * display / 1e3
            lines.append(bench.cpu_line(iteration, cpu))
    return "".join(lines)


#: Round 1: Caffe 1 thread has one steady window of 40 ms, keras-caffe three of 20
#: (2.00x); round 2: Caffe three of 100 ms, keras-caffe one of 60 (1.67x). Windows
#: pooled across rounds would give Caffe's median 100 over keras-caffe's 20: 5.00x,
#: above both rounds' ratios. Caffe's 2 threads are slower in both rounds.
TWO_ROUNDS = {
    1: {"caffe_1": ([40.0], 40.0), "caffe_2": ([200.0], 90.0),
        "keras_caffe_eigen": ([20.0, 20.0, 20.0], 30.0)},
    2: {"caffe_1": ([100.0] * 3, 100.0), "caffe_2": ([200.0], 190.0),
        "keras_caffe_eigen": ([60.0], 50.0)},
}


def two_round_logs(bench, folder):
    for round_, configs in TWO_ROUNDS.items():
        for key, (ms, cpu_ms) in configs.items():
            (folder / f"lenet_{key}_round{round_}.log").write_text(
                display_log(bench, ms, cpu_ms))


def test_ratios_are_per_round_and_summed_up_as_their_median(bench, tmp_path):
    two_round_logs(bench, tmp_path)
    table = bench.rows(bench.results_from_logs(tmp_path))
    assert [row["round"] for row in table] == [1, 2]
    assert not {"speed_vs_caffe_best", "round_range"} & set(table[0])  # the pooled fields
    assert table[0]["ms_per_iter"] == {"caffe_1": pytest.approx(40.0),
                                       "caffe_2": pytest.approx(200.0),
                                       "keras_caffe_eigen": pytest.approx(20.0)}
    assert table[0]["wall_ratio"] == {"keras_caffe_eigen": pytest.approx(2.0)}
    assert table[1]["wall_ratio"] == {"keras_caffe_eigen": pytest.approx(100 / 60)}
    # CPU ratio: Caffe 1 thread's CPU ms over keras-caffe's, in the same round
    assert table[0]["cpu_ratio"] == {"keras_caffe_eigen": pytest.approx(40 / 30)}
    assert table[1]["cpu_ratio"] == {"keras_caffe_eigen": pytest.approx(100 / 50)}
    assert table[1]["cores_busy"]["caffe_2"] == pytest.approx(190 / 200)
    [summary] = bench.medians(table)
    assert summary == {"net": "lenet", "label": "LeNet, batch 64", "rounds": 2,
                       "wall_ratio": {"keras_caffe_eigen": pytest.approx((2.0 + 100 / 60) / 2)},
                       "cpu_ratio": {"keras_caffe_eigen": pytest.approx((40 / 30 + 2.0) / 2)}}


def test_printed_table_has_a_row_per_round_and_the_cpu_ratio_beside_the_wall_ratio(
        bench, tmp_path, capsys):
    two_round_logs(bench, tmp_path)
    bench.print_table(bench.rows(bench.results_from_logs(tmp_path)))
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ms per training iteration, median of the round's windows")
    assert out[1].split() == ["net", "round", "Caffe", "1", "thr", "Caffe", "2", "thr", "k-c",
                              "no", "oneDNN", "no", "oneDNN", "/", "Caffe", "no", "oneDNN", "/",
                              "Caffe,", "CPU"]
    assert out[2].split() == ["LeNet,", "batch", "64", "1", "40.0", "200.0", "20.0", "2.00x",
                              "1.33x"]
    assert out[3].split() == ["LeNet,", "batch", "64", "2", "100.0", "200.0", "60.0", "1.67x",
                              "2.00x"]
    assert out[4].split() == ["LeNet,", "batch", "64", "median", "of", "2", "1.83x", "1.67x"]
    assert out[5].startswith("CPU ms per training iteration, all threads")
    assert out[7].split() == ["LeNet,", "batch", "64", "1", "40.0", "(1.00)", "90.0", "(0.45)",
                              "30.0", "(1.50)"]
    assert "5.00x" not in "\n".join(out)  # the ratio of windows pooled across rounds
    assert "all cores busy" not in "\n".join(out)


def test_roofline_columns(bench, tmp_path, capsys):
    """GFLOP/s = FLOPs per iteration / step time; % of the column's ceiling."""
    two_round_logs(bench, tmp_path)
    roofline = {"flops_per_iter": {"lenet": 880512000},
                "ceiling_gflops": {"caffe_1": 80.0, "caffe_2": 120.0, "keras_caffe_eigen": 100.0}}
    table = bench.rows(bench.results_from_logs(tmp_path), roofline)
    assert table[0]["gflops"] == {"caffe_1": pytest.approx(0.880512 / 0.040),
                                  "caffe_2": pytest.approx(0.880512 / 0.200),
                                  "keras_caffe_eigen": pytest.approx(0.880512 / 0.020)}
    assert table[0]["percent_of_ceiling"] == {
        "caffe_1": pytest.approx(100 * 22.0128 / 80), "caffe_2": pytest.approx(100 * 4.40256 / 120),
        "keras_caffe_eigen": pytest.approx(44.0256)}
    assert table[1]["percent_of_ceiling"]["keras_caffe_eigen"] == pytest.approx(
        100 * 0.880512 / 0.060 / 100)
    bench.print_table(table, roofline)
    out = capsys.readouterr().out.splitlines()
    assert out[9] == ("roofline: GFLOP/s = FLOPs per iteration / ms per iteration (FLOPs: "
                      "keras-caffe analyze --phase TRAIN, forward + backward = 3 x 2 x "
                      "multiply-adds; LeNet, batch 64: 0.88 G)")
    assert out[10] == ("(% of the column's float32 matrix-product ceiling, "
                       "benchmarks/matmul_rate.py in the same run: Caffe 1 thr 80.0, "
                       "Caffe 2 thr 120.0, k-c no oneDNN 100.0 GFLOP/s)")
    assert out[12].split() == ["LeNet,", "batch", "64", "1", "22.0", "(28%)", "4.4", "(4%)",
                               "44.0", "(44%)"]
    assert out[13].split() == ["LeNet,", "batch", "64", "2", "8.8", "(11%)", "4.4", "(4%)",
                               "14.7", "(15%)"]
    assert len(out) == 14


def test_from_logs_reads_the_runs_roofline(bench, tmp_path, capsys):
    """--from-logs uses the FLOPs and ceilings the run kept (roofline.json);
    --no-roofline leaves the table out."""
    two_round_logs(bench, tmp_path)
    bench.write_json(tmp_path / bench.ROOFLINE_FILE,
                     {"flops_per_iter": {"lenet": 880512000},
                      "ceiling_gflops": {"keras_caffe_eigen": 100.0}})
    bench.main(["--from-logs", str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[12].split() == ["LeNet,", "batch", "64", "1", "22.0", "4.4", "44.0", "(44%)"]
    bench.main(["--from-logs", str(tmp_path), "--no-roofline"])
    assert len(capsys.readouterr().out.splitlines()) == 9


def test_cpus_option_is_gone(bench, capsys):
    """The "all cores busy" column and its --cpus option were dropped."""
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(["--from-logs", "x", "--cpus", "2"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --cpus 2" in capsys.readouterr().err


@pytest.mark.tensorflow_only  # keras-caffe train; DummyData shapes through tf.data
def test_flops_per_iteration_from_keras_caffe_analyze(bench, golden):
    """The installed CLI's analyze --phase TRAIN at LeNet's batch 64: 3 x 2 x MACs."""
    flops = bench.flops_per_iteration(bench.NETS["lenet"], Path(golden), sys.executable)
    assert flops == 880512000 == 3 * 293504000


def test_matmul_ceilings_map_each_column_to_its_engine(bench):
    """Caffe's columns get OpenBLAS at their thread count (numpy only here, tiny sizes)."""
    assert bench.CEILING_ENGINE == {"caffe_1": "openblas_1", "caffe_2": "openblas_2",
                                    "keras_caffe_onednn": "tf_onednn",
                                    "keras_caffe_eigen": "tf_eigen",
                                    "keras_caffe_eigen_untuned": "tf_eigen"}
    ceilings = bench.matmul_ceilings(["caffe_1", "caffe_2"], sys.executable, [16, 32], 2)
    assert sorted(ceilings) == ["caffe_1", "caffe_2"]
    assert all(rate > 0 for rate in ceilings.values())


# -- benchmarks/matmul_rate.py: the matrix-product ceiling -----------------------------


@pytest.fixture(scope="module")
def matmul_rate():
    return load_script(SCRIPT.parent / "matmul_rate.py")


def test_matmul_rate_counts_two_n_cubed_operations(matmul_rate):
    assert matmul_rate.gflops(1000, 0.5) == pytest.approx(4.0)
    assert matmul_rate.gflops(2048, 1.0) == pytest.approx(2 * 2048 ** 3 / 1e9)


def test_matmul_rate_table_divides_by_openblas_better_thread_count(matmul_rate):
    results = {"tf_onednn": {"64": 30.0}, "tf_eigen": {"64": 12.0},
               "openblas_1": {"64": 20.0}, "openblas_2": {"64": 24.0}}
    head, row = matmul_rate.table(results, [64])
    assert head.split() == ["n", "TF", "oneDNN", "TF", "Eigen", "OpenBLAS", "1", "thr",
                            "OpenBLAS", "2", "thr", "oneDNN", "/", "OpenBLAS", "Eigen", "/",
                            "OpenBLAS"]
    assert row.split() == ["64", "30.0", "12.0", "20.0", "24.0", "1.25x", "0.50x"]


def test_matmul_rate_worker_prints_one_rate_per_size(matmul_rate, capsys):
    matmul_rate.main(["--worker", "numpy", "--sizes", "8,16", "--repeats", "2"])
    rates = json.loads(capsys.readouterr().out)
    assert sorted(rates) == ["16", "8"]
    assert all(rate > 0 for rate in rates.values())
    assert len(matmul_rate.time_products("numpy", 8, 3)) == 3


# -- benchmarks/yellowfin_no_tuning.py and yellowfin_closed_loop.py: the claims' checks ------
# (make verify-claims runs them with --check; here on made-up runs, no training)


@pytest.fixture(scope="module")
def no_tuning():
    return load_script(SCRIPT.parent / "yellowfin_no_tuning.py")


def made_up_runs(experiment, yellowfin_loss):
    """The claim's grid on a CNN task with made-up losses (best SGD and Adam
    0.5, a rate barely learning) and YellowFin at ``yellowfin_loss``."""
    losses = {"SGD": (3.0, 0.6, 0.5, 0.7), "Adam": (2.1, 0.5, 0.55)}
    runs = []
    for candidate in experiment.candidates():
        loss = yellowfin_loss if candidate.family == "YellowFin" else \
            losses[candidate.family][len([r for r in runs
                                          if r.candidate.family == candidate.family])]
        run = experiment.Run(candidate, loss, [2.0] * 9 + [loss], 1.0)
        if candidate.family == "YellowFin":
            run.yf_lr, run.yf_mu = [0.1] * 10, [0.5] * 10
        runs.append(run)
    return runs


@pytest.mark.parametrize("yellowfin_loss, code", [(0.5, 0), (0.6, 1)])
def test_no_tuning_check_exit_status(no_tuning, monkeypatch, capsys, yellowfin_loss, code):
    """--check: exit 0 when the claim holds on every task and seed, else 1
    with each failure printed (YellowFin 0.6 against 0.5: ratio 1.2)."""
    experiment = no_tuning.experiment
    seeds = []
    monkeypatch.setattr(experiment, "run_task", lambda task, progress=None, yellowfin=None: (
        seeds.append(task.seed) or made_up_runs(experiment, yellowfin_loss)))
    assert no_tuning.main(["--steps", "20", "--tasks", "cnn", "--seeds", "0,1", "--check"]) == code
    out = capsys.readouterr().out
    assert seeds == [0, 1]
    fails = [line for line in out.splitlines() if line.startswith("CLAIM FAILS: ")]
    assert len(fails) == (4 if code else 0)  # SGD and Adam on each seed
    assert f"claim {'FAILS' if code else 'holds'}: 2 seed(s) x 1 task(s), 20 steps" in out
    assert "TensorFlow " in out and "load average" in out  # the machine line
    # without --check the same runs exit 0
    assert no_tuning.main(["--steps", "20", "--tasks", "cnn"]) == 0


def test_no_tuning_arguments(no_tuning, capsys):
    assert no_tuning.seed_list("0,1,2") == [0, 1, 2]
    for argv, message in ((["--check", "--yf", "lr_factor=2"], "leave out --yf"),
                          (["--seeds", "0,x"], "seeds are integers separated by commas"),
                          (["--steps", "25"], "positive multiple of 10")):
        with pytest.raises(SystemExit) as exit_:
            no_tuning.main(argv)
        assert exit_.value.code == 2
        assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def closed_loop():
    return load_script(SCRIPT.parent / "yellowfin_closed_loop.py")


@pytest.mark.parametrize("closed_hits, code", [([700, 700, 600], 0), ([900, 1100, 600], 1)])
def test_closed_loop_check_exit_status(closed_loop, monkeypatch, capsys, closed_hits, code):
    import numpy as np

    def runs(workers, steps, seeds, target):
        assert (workers, steps, seeds, target) == (9, 2000, 3, 1e-3)
        return {"open": np.array([[1000, 0.01]] * 3, float),
                "closed": np.array([[h, 0.01] for h in closed_hits], float),
                "reference": np.array(closed_hits, float), "momentum": 0.5,
                "target_momentum": 0.6}

    monkeypatch.setattr(closed_loop.experiment, "async_runs", runs)
    assert closed_loop.main(["--seeds", "3", "--check"]) == code
    out = capsys.readouterr().out
    assert "closed faster on " + ("3/3" if code == 0 else "2/3") + " seeds" in out
    assert ("claim FAILS" if code else "claim holds") in out
    assert len([line for line in out.splitlines() if line.startswith("CLAIM FAILS")]) == \
        (2 if code else 0)  # median 900 >= 800; faster on 0.67 < 0.8


# -- benchmarks/cli_startup.py: the command line's answers without TensorFlow ---------------


def test_cli_startup_table_divides_by_both_references():
    startup = load_script(SCRIPT.parent / "cli_startup.py")
    times = {case: [1.0] for case in startup.CASES}
    times["python -c pass"] = [0.04, 0.05, 0.06]
    times["python -c 'import tensorflow'"] = [4.0, 5.0, 9.0]
    times["keras-caffe --help"] = [0.10, 0.30, 0.20]
    rows = startup.table(times)
    assert rows[1].split() == ["python", "-c", "pass", "0.050", "0.060", "1.0x", "0.01x"]
    assert rows[3].split() == ["keras-caffe", "--help", "0.200", "0.300", "4.0x", "0.04x"]
    assert startup.command("keras-caffe --help", "/v/keras-caffe") == ["/v/keras-caffe", "--help"]
    assert startup.command("python -c pass", "/v/keras-caffe") == [sys.executable, "-c", "pass"]

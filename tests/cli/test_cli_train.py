"""``keras-caffe train``'s output and options through the installed CLI:
the progress mode's lines, plain off a terminal (the bar's, with the losses
of Caffe's log lines of the same run, and the test, snapshot and summary
lines), ``--max-iter``, the snapshot log line of each format, and what
``--weights`` copied (Caffe's ``Net::CopyTrainedLayersFrom`` lines). The
command runs in this process (``train_runs.train_in_process``, what ``python
-m keras_caffe train`` prints); signals, which need a process, are
tests/training/test_signals.py's."""

import re

import pytest

import keras_caffe
from keras_caffe.errors import ArgumentError
from support.train_runs import golden_folder, messages, snapshots
from support.train_runs import train_in_process as train

TEST_DATA = """layer {
  name: "test_data" type: "HDF5Data" top: "data" top: "label"
  include { phase: TEST }
  hdf5_data_param { source: "data_list.txt" batch_size: 32 shuffle: false }
}
"""
ACCURACY = """layer {
  name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST }
}
"""


@pytest.fixture
def tested(golden, tmp_path):
    """The golden SGD case with a test net (the 64 rows, 2 batches of 32),
    tested every 4 iterations, a snapshot every 4, max_iter 100 in the file."""
    folder = golden_folder(golden, tmp_path, "tested")
    net = (folder / "train_net.prototxt").read_text()
    net = net.replace("hdf5_data_param {", "include { phase: TRAIN }\n  hdf5_data_param {", 1)
    first, rest = net.split('layer {\n  name: "ip1"', 1)
    (folder / "train_test.prototxt").write_text(
        first + TEST_DATA + 'layer {\n  name: "ip1"' + rest + ACCURACY)
    solver = (folder / "solver.prototxt").read_text()
    solver = solver.replace('net: "train_net.prototxt"', 'net: "train_test.prototxt"')
    solver = solver.replace("max_iter: 10", "max_iter: 100").replace("snapshot: 10", "snapshot: 4")
    (folder / "solver.prototxt").write_text(solver.replace("display: 1", "display: 2") +
                                            "test_iter: 2\ntest_interval: 4\n")
    return folder


def caffe_tests(log):
    """{iteration: "accuracy = a, loss = l"} from Caffe's Test net output lines."""
    found, at = {}, None
    for line in messages(log):
        head = re.fullmatch(r"Iteration (\d+), Testing net \(#0\)", line)
        if head:
            at = int(head.group(1))
        value = re.fullmatch(r" +Test net output #\d+: (\w+) = ([\d.e+-]+).*", line)
        if value:
            found.setdefault(at, []).append(f"{value.group(1)} = {value.group(2)}")
    return {k: ", ".join(v) for k, v in found.items()}


def test_progress_mode_shows_tests_snapshots_and_a_summary(tested):
    caffe = train("--solver", "solver.prototxt", "--max-iter", 8, "--log", "caffe",
                  cwd=tested).stderr
    expected = caffe_tests(caffe)
    assert sorted(expected) == [0, 4, 8]
    final_loss = re.search(r"\] Iteration 8, loss = ([\d.e+-]+)\n", caffe).group(1)
    for path in (tested / "snap").iterdir():
        path.unlink()

    proc = train("--solver", "solver.prototxt", "--max-iter", 8, cwd=tested)
    assert "Test net output" not in proc.stderr  # no Caffe lines in this mode
    assert not re.search(r"[\x1b\r\b]", proc.stdout)  # not a terminal: plain lines
    bar = [line for line in proc.stdout.splitlines() if re.match(r"Iteration \d+/8: ", line)]
    lines = [line for line in proc.stdout.splitlines() if line not in bar]
    snap = "snap/run_iter_{0}.caffemodel, snap/run_iter_{0}.solverstate".format
    head = re.fullmatch(r"Optimization Done: 8 iterations in [\d.]+s, train loss = (.*)",
                        lines[-3])
    assert head and head.group(1) == final_loss, lines[-3]
    assert lines[:-3] == [
        f"Iteration 0, Test net #0: {expected[0]}",
        f"Iteration 4, snapshot: {snap(4)}",  # Caffe's order: after iteration 4's update
        f"Iteration 4, Test net #0: {expected[4]}",  # before iteration 5's
        f"Iteration 8, snapshot: {snap(8)}",
        f"Iteration 8, Test net #0: {expected[8]}",
    ]
    assert lines[-2:] == [f"  Test net #0 (iteration 8): {expected[8]}",
                          f"  Last snapshot (iteration 8): {snap(8)}"]
    # The bar's lines: one at the first update, then where a multiple of display
    # (2) was passed, and at the end; the smoothed loss after n iterations is
    # Caffe's display of iteration n - 1. No ETA from the first step alone.
    loss = dict(re.findall(r"\] Iteration (\d+) \([^)]*\), loss = ([\d.e+-]+)\n", caffe))
    timing = r" \(\d+[mu]?s/iter, ETA \d+s\)"
    assert bar[0] == f"Iteration 1/8: loss = {loss['0']}, lr = 0.1"
    assert re.fullmatch(rf"Iteration 3/8: loss = {re.escape(loss['2'])}, lr = 0\.1{timing}", bar[1])
    assert re.fullmatch(rf"Iteration 4/8: loss = [\d.e+-]+, lr = 0\.1{timing}", bar[2])
    assert re.fullmatch(rf"Iteration 7/8: loss = {re.escape(loss['6'])}, lr = 0\.1{timing}", bar[3])
    assert re.fullmatch(r"Iteration 8/8: loss = [\d.e+-]+, lr = 0\.1 \(\d+[mu]?s/iter\)", bar[4])
    assert len(bar) == 5
    accuracy = float(re.search(r"accuracy = ([\d.]+)", expected[8]).group(1))
    assert 0.0 <= accuracy <= 1.0 and snapshots(tested) == [4, 8]


def test_max_iter_is_validated(tested):
    proc = train("--solver", "solver.prototxt", "--max-iter", 0, cwd=tested, expect=2)
    assert proc.stderr.strip().splitlines()[-1] == \
        "keras-caffe: error: --max-iter must be >= 1, got 0"
    with pytest.raises(ArgumentError) as err:
        keras_caffe.Solver(str(tested / "solver.prototxt"), log=None, max_iter=-3)
    assert str(err.value) == "Solver: `max_iter` must be >= 1, got -3"
    solver = keras_caffe.Solver(str(tested / "solver.prototxt"), log=None, max_iter=3)
    assert solver.max_iter == 3 and solver.param.max_iter == 3


@pytest.mark.parametrize("fmt, lines", [
    ("caffe", ["solver.cpp:464] Snapshotting to binary proto file snap/run_iter_2.caffemodel",
               "sgd_solver.cpp:284] Snapshotting solver state to binary proto file "
               "snap/run_iter_2.solverstate"]),
    ("caffe_hdf5", ["solver.cpp:474] Snapshotting to HDF5 file snap/run_iter_2.caffemodel.h5",
                    "sgd_solver.cpp:296] Snapshotting solver state to HDF5 file "
                    "snap/run_iter_2.solverstate.h5"]),
    ("keras", ["solver.cpp:464] Snapshotting to Keras weights file snap/run_iter_2.weights.h5",
               "sgd_solver.cpp:296] Snapshotting solver state to HDF5 file "
               "snap/run_iter_2.solverstate"]),
])
def test_each_snapshot_format_names_itself(golden, tmp_path, fmt, lines):
    folder = golden_folder(golden, tmp_path, fmt)
    log = train("--solver", "solver.prototxt", "--max-iter", 2, "--snapshot-format", fmt,
                "--log", "caffe", cwd=folder).stderr
    found = [re.sub(r"^\S+ \S+ +\d+ ", "", line) for line in log.splitlines()
             if "Snapshotting" in line]
    assert found == lines


def renamed(golden, tmp_path, new_name):
    """The golden case with ip2 renamed: the init weights' ip2 is ignored."""
    folder = golden_folder(golden, tmp_path, "renamed")
    net = (folder / "train_net.prototxt").read_text()
    net = net.replace('name: "ip2"', f'name: "{new_name}"')
    (folder / "train_net.prototxt").write_text(net)
    return folder


def test_weights_report_in_caffe_log(golden, tmp_path):
    folder = renamed(golden, tmp_path, "ip2_new")
    log = train("--solver", "solver.prototxt", "--weights", "init.caffemodel", "--max-iter", 1,
                "--log", "caffe", cwd=folder).stderr
    lines = [re.sub(r"^\S+ \S+ +\d+ ", "", line) for line in log.splitlines()
             if re.search(r"(net|solver)\.cpp:7\d+\]|layer|fillers", line)]
    assert lines == [
        "solver.cpp:72] Finetuning from init.caffemodel",
        "net.cpp:749] Copying source layer ip1",
        "net.cpp:746] Ignoring source layer ip2",
        "keras_caffe.py:0] Copied 1 layer(s) from init.caffemodel: ip1",
        "keras_caffe.py:0] Not in init.caffemodel, learned from their fillers: ip2_new",
    ]


def test_weights_report_in_progress_mode_is_one_line(golden, tmp_path):
    folder = renamed(golden, tmp_path, "ip2_new")
    proc = train("--solver", "solver.prototxt", "--weights", "init.caffemodel", "--max-iter", 1,
                 cwd=folder)
    ours = [line for line in proc.stderr.splitlines() if "init.caffemodel" in line]
    assert ours == ["Copied 1 layer(s) from init.caffemodel: ip1. Ignoring source layer(s) not "
                    "in the net: ip2. Not in init.caffemodel, learned from their fillers: ip2_new"]


def test_weights_of_another_shape_are_refused(golden, tmp_path):
    folder = golden_folder(golden, tmp_path, "shape")
    net = folder / "train_net.prototxt"
    net.write_text(net.read_text().replace("num_output: 16", "num_output: 8"))
    proc = train("--solver", "solver.prototxt", "--weights", "init.caffemodel", cwd=folder,
                 expect=2)
    assert proc.stderr.strip().splitlines()[-1] == (
        "keras-caffe: error: init.caffemodel: layer 'ip1': blob 0 has shape (16, 20) in the "
        "weights, the net needs (8, 20) To learn this layer's parameters from scratch rather "
        "than copying from a saved net, rename the layer.")
    assert snapshots(folder) == []

"""Issue 17, the command line's output: tables that never cut a number,
``--json``, ``--input-shape``, ``time`` as ``caffe time``, ``test``,
``device_query``, ``--version`` and TensorFlow's log lines hidden unless
``--verbose``. Through the installed CLI run in this process
(``cli_runner.run_cli``: what ``python -m keras_caffe`` prints, stdout a
pipe), and in a subprocess where the process is what is tested: TensorFlow's
log lines, which only a new process prints, and a real pipe."""

import io
import json
import math
import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from support.cli_runner import STARTUP, run_cli
from keras_caffe import _cli_quiet
from keras_caffe.cli import _registry
from keras_caffe.analysis.tables import Column, Grid, print_grid
from keras_caffe.errors import ArgumentError


def cli(*args, columns=None, cwd=None, env=None):
    """``keras-caffe *args`` in this process: the CompletedProcess that
    ``process`` gives (stdout not a terminal)."""
    return run_cli(*args, columns=columns, cwd=cwd,
                   env={"TF_CPP_MIN_LOG_LEVEL": None, **(env or {})})


def process(*args, columns=None, cwd=None, env=None):
    """``python -m keras_caffe *args``: the CompletedProcess (stdout piped)."""
    environ = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",)}
    if columns is not None:
        environ["COLUMNS"] = str(columns)
    environ.update(env or {})
    return subprocess.run([sys.executable, "-m", "keras_caffe", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=environ, timeout=600)


@pytest.fixture
def lenet(golden):
    return golden / "forward" / "lenet" / "deploy_used.prototxt"


@pytest.fixture
def lenet_train(golden):
    """LeNet's train net with a DummyData layer (64x1x28x28) and its loss."""
    return golden / "timing" / "lenet_dummy.prototxt"


# -- tables --------------------------------------------------------------------------------


@pytest.mark.parametrize("columns", [40, 80])
def test_analyze_piped_prints_every_number_whole(lenet, columns):
    """Piped (not a terminal) at 40 and 80 columns: plain lines, every total
    and every scaling cell whole (was `6,998,…` and `1.…`)."""
    args = [lenet, "--batch", "64", "--workers", "1,2,4,8", "--device-flops", "6.1T"]
    data = json.loads(cli("analyze", *args, "--json").stdout)
    proc = cli("analyze", *args, columns=columns)
    assert proc.returncode == 0 and proc.stderr == ""
    out = proc.stdout
    assert "…" not in out
    total = data["total"]
    words = set(out.split())
    assert {f"{total['weights']:,}", f"{total['weight_bytes'] / 1e6:,.2f}",
            f"{total['activation_bytes'] / 1e6:,.2f}"} <= words
    for layer in data["layers"]:
        line = next(l for l in out.splitlines() if l.split()[:2] == [layer["name"], layer["type"]])
        assert f"{layer['weights']:,}" in line.split()
    for row in data["scaling"]["rows"]:
        line = next(l for l in out.splitlines() if l.split()[:2] == [str(row["workers"]),
                                                                      str(row["per_worker_batch"])])
        cells = line.split()
        for key in ("parameter_server", "reduction_tree", "ring_allreduce"):
            assert f"{row['speedup'][key]:.1f}x" in cells
            assert f"{row['step_s'][key] * 1e3:,.1f}" in cells


def test_import_piped_keeps_layer_names_and_json(golden, tmp_path):
    """Long layer names are never cut; ``--json`` gives the same table."""
    net = tmp_path / "long.prototxt"
    name = "a_rather_long_convolution_layer_name_that_rich_used_to_cut"
    net.write_text(
        'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 '
        'dim: 8 dim: 8 } } }\n'
        f'layer {{ name: "{name}" type: "Convolution" bottom: "data" top: "c" '
        'convolution_param { num_output: 1234 kernel_size: 3 } }\n')
    # a process: its stdout a real pipe, which print_grid must tell from a terminal
    proc = process("import", net, columns=40)
    assert proc.returncode == 0 and proc.stderr == ""
    line = next(l for l in proc.stdout.splitlines() if l.startswith(name))
    assert line.split() == [name, "Convolution", "(N,", "1234,", "6,", "6)", "34,552"]
    data = json.loads(cli("import", net, "--json").stdout)
    assert data["layers"][1] == {"name": name, "type": "Convolution", "tops": ["c"],
                                 "shapes": [[None, 1234, 6, 6]], "params": 34552}
    assert data["params"] == 34552 and data["saved"] is None


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _grid():
    grid = Grid("t", [Column("layer"), Column("weights", True), Column("FLOPs", True)])
    grid.add_row("conv1_with_a_long_name", "6,998,123", "1.234G")
    grid.add_row("total", "6,998,123", "1.234G", rule=True)
    return grid


def test_terminal_too_narrow_prints_plain_text(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    out = _Terminal()
    print_grid(_grid(), file=out)
    assert out.getvalue().splitlines()[1:] == [
        "layer                     weights   FLOPs", "----------------------  ---------  ------",
        "conv1_with_a_long_name  6,998,123  1.234G", "----------------------  ---------  ------",
        "total                   6,998,123  1.234G", ""]


def test_wide_terminal_prints_rich_with_numbers_whole(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    out = _Terminal()
    print_grid(_grid(), file=out)
    text = re.sub(r"\x1b\[[0-9;]*m", "", out.getvalue())
    assert "┃" in text and text.count("6,998,123") == 2 and "…" not in text


# -- --input-shape and input_shapes ------------------------------------------------------


NO_SHAPE = ('layer { name: "data" type: "Input" top: "data" }\n'
            'layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" '
            'convolution_param { num_output: 4 kernel_size: 5 } }\n'
            'layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" '
            'pooling_param { pool: MAX kernel_size: 3 stride: 2 } }\n'
            'layer { name: "pool2" type: "Pooling" bottom: "pool1" top: "pool2" '
            'pooling_param { pool: MAX kernel_size: 3 stride: 2 } }\n'
            'layer { name: "pool3" type: "Pooling" bottom: "pool2" top: "pool3" '
            'pooling_param { pool: MAX kernel_size: 3 stride: 2 } }\n')


def test_input_shape_flag(tmp_path):
    net = tmp_path / "net.prototxt"
    net.write_text(NO_SHAPE)
    proc = cli("import", net)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "keras-caffe: error: layer 'data': states no shape for top 'data'; give it in "
        "input_param or with --input-shape data=C,H,W (the per-sample shape, Caffe's order)"]
    data = json.loads(cli("import", net, "--input-shape", "data=3,32,32", "--json").stdout)
    assert [layer["shapes"] for layer in data["layers"]] == [
        [[None, 3, 32, 32]], [[None, 4, 28, 28]], [[None, 4, 14, 14]], [[None, 4, 7, 7]],
        [[None, 4, 3, 3]]]
    proc = cli("analyze", net, "--input-shape", "data=32,32,3", "--input-shape", "data=3,32,32")
    assert proc.stderr.splitlines() == ["keras-caffe: error: --input-shape data=3,32,32: top "
                                        "'data' given twice"]
    proc = cli("analyze", net, "--input-shape", "data=3,32,32", "--batch", "2", "--json")
    assert json.loads(proc.stdout)["layers"][1]["tops"] == {"conv1": [2, 4, 28, 28]}


@pytest.mark.parametrize("value", ["data", "data=", "=3,4", "data=3,x", "data=3,0,4"])
def test_input_shape_values_refused_name_the_flag(value):
    with pytest.raises(keras_caffe.KerasCaffeError) as err:
        _registry.input_shapes([value])
    assert str(err.value) == (f"--input-shape {value}: give TOP=C,H,W, the top's name and its "
                              "per-sample shape in Caffe's order, positive integers "
                              "(data=3,32,32)")


def test_input_shapes_are_caffes_order_and_hwc_is_named():
    model = keras_caffe.import_model(NO_SHAPE, input_shapes={"data": (3, 32, 32)})
    assert tuple(model.input.shape) == (None, 32, 32, 3)  # channels_last model, Caffe's order given
    with pytest.raises(ArgumentError) as err:
        keras_caffe.import_model(NO_SHAPE, input_shapes={"data": (32, 32, 3)})
    assert str(err.value) == (
        "import_model: `input_shapes` 'data': (32, 32, 3) looks like (H, W, C); input_shapes "
        "takes Caffe's order (C, H, W) whatever the data_format, here (3, 32, 32). The import "
        "failed with: layer 'conv1': (Convolution) kernel extent 5 exceeds the padded input "
        "size 3 (input shape (1, 32, 32, 3))")
    with pytest.raises(ArgumentError) as err:
        keras_caffe.import_model(NO_SHAPE, input_shapes={"data": 32})
    assert str(err.value) == (
        "import_model: `input_shapes` entry 'data': 32 is not a shape: give the top's "
        "per-sample shape in Caffe's order, positive integers, such as (3, 32, 32)")


def test_cli_wording_of_the_importers_advice():
    flags = {"--input-shape", "--weights"}
    assert _registry.cli_wording(
        "layer 'data': (Data) reads its data from a database or file, so the shape of top "
        "'data' is unknown; give it with input_shapes={'data': (C, H, W)} or analyze the "
        "deploy net", flags) == (
        "layer 'data': (Data) reads its data from a database or file, so the shape of top "
        "'data' is unknown; give it with --input-shape data=C,H,W (the per-sample shape, "
        "Caffe's order) or analyze the deploy net")
    assert _registry.cli_wording("give its shapes with input_shapes={top: shape without the "
                                 "batch}", flags) == ("give its shapes with --input-shape TOP=C,H,W "
                                                      "(the per-sample shape, Caffe's order)")


def test_train_with_a_missing_database_says_to_create_it(tmp_path):
    """``keras-caffe train`` on a net whose LMDB is not there (issue 33: it
    advised --input-shape, which train refuses)."""
    (tmp_path / "net.prototxt").write_text(
        'name: "n" layer { name: "mnist" type: "Data" top: "data" top: "label" '
        'data_param { source: "mnist_train_lmdb" backend: LMDB batch_size: 4 } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
        'inner_product_param { num_output: 2 } }\n'
        'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }\n')
    (tmp_path / "solver.prototxt").write_text(
        'net: "net.prototxt" base_lr: 0.01 lr_policy: "fixed" max_iter: 1 solver_mode: CPU\n')
    proc = run_cli("train", "--solver", "solver.prototxt", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "keras-caffe: error: layer 'mnist': Data source 'mnist_train_lmdb' not found (looked in "
        "the current directory and next to the prototxt); training reads its data from there: "
        "create it (Caffe's examples do with their create_*.sh scripts) or point the layer's "
        "source at it")


def test_train_is_never_advised_a_flag_it_does_not_take():
    """``train`` has no --input-shape: its data is needed, and the advice says how (issue 33)."""
    flags = _registry.options(keras_caffe.cli._parser().commands["train"])
    assert "--solver" in flags and "--input-shape" not in flags
    assert _registry.cli_wording(
        "layer 'mnist': Data source 'examples/mnist/mnist_train_lmdb' not found (looked in the "
        "current directory and next to the prototxt); give its shapes with input_shapes={top: "
        "shape without the batch}", flags) == (
        "layer 'mnist': Data source 'examples/mnist/mnist_train_lmdb' not found (looked in the "
        "current directory and next to the prototxt); training reads its data from there: "
        "create it (Caffe's examples do with their create_*.sh scripts) or point the layer's "
        "source at it")
    assert _registry.cli_wording(
        "layer 'in': states no shape for top 'x'; give it in input_param or with "
        "input_shapes={'x': shape without the batch}", flags) == (
        "layer 'in': states no shape for top 'x'; give it in input_param")
    for name, parser in keras_caffe.cli._parser().commands.items():  # which commands take --input-shape
        assert ("--input-shape" in _registry.options(parser)) == (
            name in ("import", "analyze", "test", "time")), name


# -- time ----------------------------------------------------------------------------------


LENET_LAYERS = [("data", "DummyData"), ("conv1", "Convolution"), ("pool1", "Pooling"),
                ("conv2", "Convolution"), ("pool2", "Pooling"), ("ip1", "InnerProduct"),
                ("relu1", "ReLU"), ("ip2", "InnerProduct"), ("loss", "SoftmaxWithLoss")]


def test_time_lists_every_caffe_layer_and_adds_up(lenet_train):
    """Every layer of the net under Caffe's name (data and loss included);
    the layers plus the remainder are the measured passes; the total is
    measured and is the iterations' forward-backward; no TensorFlow lines."""
    # a process: TensorFlow's log lines (of its start and XLA's) only a new one prints
    proc = process("time", "--model", lenet_train, "--iterations", "5", "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    data = json.loads(proc.stdout)
    assert [(row["name"], row["type"]) for row in data["layers"]] == LENET_LAYERS
    rest = data["remainder"]
    assert rest["name"] == "framework / not attributed"
    for key in ("forward_ms", "backward_ms"):
        rows = sum(row[key] for row in data["layers"])
        assert rest[key] >= 0
        assert math.isclose(rows + rest[key], data[key], rel_tol=1e-12)
    assert math.isclose(data["forward_backward_ms"] * 5, data["total_ms"], rel_tol=1e-12)
    assert data["forward_ms"] + data["backward_ms"] <= data["forward_backward_ms"]
    times = {row["name"]: row for row in data["layers"]}
    for name in ("conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2", "loss"):
        assert times[name]["forward_ms"] > 0 and times[name]["backward_ms"] > 0, name
    assert math.isfinite(data["initial_loss"]) and data["initial_loss"] > 0


def test_time_table_and_caffe_log(lenet_train):
    proc = cli("time", "--model", lenet_train, "--iterations", "2", columns=40)
    assert proc.returncode == 0 and proc.stderr == ""
    lines = proc.stdout.splitlines()
    assert lines[0] == "LeNet: average of 2 iterations, /device:CPU:0, XLA off" \
        or "GPU" in lines[0]
    names = [line.split()[0] for line in lines[3:3 + len(LENET_LAYERS)]]
    assert names == [name for name, _ in LENET_LAYERS]
    table = {line.split("  ")[0].strip(): re.findall(r"\d+\.\d{3}", line) for line in lines}
    forward = sum(float(table[name][0]) for name, _ in LENET_LAYERS)
    forward += float(table["framework / not attributed"][0])
    assert abs(forward - float(table["forward / backward pass"][0])) <= 0.006  # rounding
    proc = cli("time", "--model", lenet_train, "--iterations", "2", "--log", "caffe")
    messages = [line.split("] ", 1)[1] for line in proc.stderr.splitlines()]
    assert [m.split("\t")[0].strip() for m in messages[3:3 + 2 * 9:2]] == [
        name for name, _ in LENET_LAYERS]
    assert [m.split(":")[0] for m in messages[-5:]] == [
        "Average Forward pass", "Average Backward pass", "Average Forward-Backward",
        "Total Time", "*** Benchmark ends ***"]


# -- test ----------------------------------------------------------------------------------


def _expected_losses(folder, batches):
    """SoftmaxWithLoss of the golden tiny MLP on batch k = rows 16 (k % 4) ..."""
    init, data = np.load(folder / "init.npz"), np.load(folder / "data.npz")
    losses, accuracies = [], []
    for k in range(batches):
        x = data["data"][16 * (k % 4):16 * (k % 4) + 16].astype(np.float64)
        y = data["label"][16 * (k % 4):16 * (k % 4) + 16].astype(int)
        h = np.maximum(x @ init["ip1_w"].T + init["ip1_b"], 0)
        z = h @ init["ip2_w"].T + init["ip2_b"]
        z = z - z.max(axis=1, keepdims=True)
        logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
        losses.append(-logp[np.arange(16), y].mean())
        accuracies.append((z.argmax(axis=1) == y).mean())
    return np.array(losses), np.array(accuracies)


def test_test_prints_caffes_lines(golden):
    """Batch 0's loss is Caffe's iteration-0 loss (2.00119 in caffe_binary.log);
    every batch's and the mean's numbers match a NumPy forward of the net."""
    folder = golden / "solvers" / "sgd"
    # a process: `test` hides XLA's start lines, which only a new process prints
    proc = process("test", "--model", "train_net.prototxt", "--weights", "init.caffemodel",
                   "--iterations", "5", cwd=folder)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    losses, _ = _expected_losses(folder, 5)
    lines = proc.stdout.splitlines()
    assert lines[0] == "Batch 0, loss = 2.00119"
    assert len(lines) == 7
    for k, line in enumerate(lines[:5]):
        head, value = line.rsplit(" = ", 1)
        assert head == f"Batch {k}, loss"
        np.testing.assert_allclose(float(value), losses[k], rtol=2e-5)
    head, value = lines[5].split(": ")
    assert head == "Loss"
    np.testing.assert_allclose(float(value), losses.mean(), rtol=2e-5)
    match = re.fullmatch(r"loss = (\S+) \(\* 1 = (\S+) loss\)", lines[6])
    assert match and match[1] == match[2] == value


def test_test_json_with_accuracy(golden, tmp_path):
    folder = golden / "solvers" / "sgd"
    net = (folder / "train_net.prototxt").read_text().replace(
        "data_list.txt", str(folder / "data_list.txt"))
    net += ('layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" '
            'top: "accuracy" }\n')
    (tmp_path / "net.prototxt").write_text(net)
    proc = cli("test", "--model", tmp_path / "net.prototxt", "--weights",
               folder / "init.caffemodel", "--iterations", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    losses, accuracies = _expected_losses(folder, 4)
    assert [(o["name"], o["loss_weight"]) for o in data["outputs"]] == [("loss", 1.0),
                                                                         ("accuracy", 0.0)]
    np.testing.assert_allclose([b["loss"] for b in data["batches"]], losses, rtol=2e-5)
    np.testing.assert_allclose([b["accuracy"] for b in data["batches"]], accuracies, atol=1e-7)
    np.testing.assert_allclose(data["outputs"][1]["mean"], accuracies.mean(), atol=1e-7)
    np.testing.assert_allclose(data["loss"], losses.mean(), rtol=2e-5)


def test_test_needs_weights_and_data(lenet):
    proc = cli("test", "--model", lenet)
    assert proc.returncode == 2 and "the following arguments are required: --weights" in \
        proc.stderr
    proc = cli("test", "--model", lenet, "--weights", lenet.parent / "weights.caffemodel")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"keras-caffe: error: {lenet}: the TEST net has no data layer to read batches from "
        "(test scores a train_val net's data)"]


# -- device_query, --version, --verbose ----------------------------------------------------


def test_device_query():
    proc = cli("device_query", "--json")
    assert proc.returncode == 0 and proc.stderr == ""
    info = json.loads(proc.stdout)
    assert info["tensorflow"] == tf.__version__
    assert "CPU:0" in info["devices"]
    assert len(info["gpus"]) == len(tf.config.list_physical_devices("GPU"))
    with open("/proc/cpuinfo") as f:
        text = f.read()
    model = re.search(r"^model name\s*:\s*(.*)$", text, re.M)
    flags = set(re.search(r"^flags\s*:\s*(.*)$", text, re.M)[1].split())
    assert info["cpu"]["model"] == model[1].strip()
    assert info["cpu"]["instructions"] == [f for f in ("sse4_2", "avx", "avx2", "fma", "avx512f",
                                                       "avx512_vnni", "avx512_bf16",
                                                       "avx512_fp16", "amx_tile", "amx_bf16",
                                                       "neon", "asimd") if f in flags]
    assert info["cpu"]["onednn"].startswith("on" if os.environ.get("TF_ENABLE_ONEDNN_OPTS")
                                            != "0" else "off")
    proc = cli("device_query", "--gpu", "7")
    found = ", ".join(str(i) for i in range(len(info["gpus"]))) or "none"
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"keras-caffe: error: --gpu 7: no such GPU; GPUs found: {found}"]


def test_version():
    proc = cli("--version")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == (f"keras-caffe {keras_caffe.__version__} (Keras {keras.__version__}, "
                           f"backend tensorflow {tf.__version__})\n")


def test_tensorflow_lines_hidden_unless_verbose():
    # processes: only a new process prints TensorFlow's start-up lines
    quiet = process("import", "--list-layers")
    assert quiet.returncode == 0 and quiet.stderr == ""
    for args in (["--verbose", "import", "--list-layers"], ["import", "--list-layers",
                                                            "--verbose"]):
        loud = process(*args)
        assert loud.returncode == 0 and loud.stdout == quiet.stdout
        assert any(_cli_quiet._TF_LINE.match(line) for line in loud.stderr.splitlines()), \
            loud.stderr


def test_quiet_start_keeps_what_is_not_tensorflows():
    """A Python warning or traceback printed while stderr is captured comes back."""
    # a process: the capture is of file descriptor 2, handed back at the process's exit
    code = ("import sys; sys.argv[0] = 'keras-caffe'; import keras_caffe._cli_quiet as q; "
            "q.quiet_cli_start(); import os; start = q.tensorflow_start(); start.__enter__(); "
            "os.write(2, b'I0000 00:00:1795593001.256052   20495 port.cc:153] oneDNN x\\n'); "
            "os.write(2, b'2026-11-25 07:46:37.858348: I tensorflow/core/util/port.cc:113] y\\n'); "
            "print('a real warning', file=sys.stderr); raise SystemExit('the end')")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stderr.splitlines() == ["a real warning", "the end"]




@pytest.mark.parametrize("args, code, out, err", [
    (["--help"], 0, "usage: keras-caffe [-h]", ""),
    (["--version"], 0, "keras-caffe ", ""),
    ([], 2, "usage: keras-caffe [-h]", ""),
    (["train"], 2, "", "keras-caffe train: error: the following arguments are required: "
     "--solver/-solver"),
    (["import", "/no/such/net.prototxt", "-o", "net.h5"], 2, "",
     "keras-caffe: error: -o net.h5: the output must be a .keras file"),
    (["train", "--solver", "/no/solver.prototxt", "--max-iter", "0"], 2, "",
     "keras-caffe: error: --max-iter must be >= 1, got 0"),
    (["time", "--model", "{net}", "--input-shape", "data=3,x"], 2, "",
     "keras-caffe: error: --input-shape data=3,x: give TOP=C,H,W, the top's name and its "
     "per-sample shape in Caffe's order, positive integers (data=3,32,32)"),
    (["import", "/no/such/net.prototxt"], 2, "",
     "keras-caffe: error: /no/such/net.prototxt: No such file or directory"),
    (["import", "{net}", "--weights", "/no/such.caffemodel"], 2, "",
     "keras-caffe: error: /no/such.caffemodel: No such file or directory"),
    (["train", "--solver", "/no/solver.prototxt"], 2, "",
     "keras-caffe: error: /no/solver.prototxt: No such file or directory"),
    (["train", "--solver", "{net}", "--weights", "{net},/no/b.caffemodel"], 2, "",
     "keras-caffe: error: /no/b.caffemodel: No such file or directory"),
    (["time", "--model", "/no/m.prototxt"], 2, "",
     "keras-caffe: error: /no/m.prototxt: No such file or directory"),
])
def test_answers_before_importing_tensorflow(args, code, out, err, golden):
    """--help, --version, usage errors and missing input files answer
    without importing TensorFlow (seconds): start-up stays under a second
    (issue 33; benchmarks/cli_startup.py measures it)."""
    net = str(golden / "forward" / "lenet" / "deploy_used.prototxt")
    args = [a.replace("{net}", net) for a in args]
    proc = subprocess.run([sys.executable, "-c", STARTUP, *args], capture_output=True,
                          text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    assert result["loaded"] == [] and result["code"] == code
    assert result["out"].startswith(out)
    assert result["err"].splitlines()[-1:] == ([err] if err else [])
    if args == ["--version"]:
        assert result["out"] == (f"keras-caffe {keras_caffe.__version__} (Keras "
                                 f"{keras.__version__}, backend tensorflow {tf.__version__})\n")


def test_started_as_cli():
    assert _cli_quiet.started_as_cli(["/venv/bin/keras-caffe", "time"], [])
    assert _cli_quiet.started_as_cli(["-m"], ["python", "-m", "keras_caffe", "time"])
    assert _cli_quiet.started_as_cli(["-m"], ["python", "-m", "keras_caffe.cli", "time"])
    assert not _cli_quiet.started_as_cli(["-m"], ["python", "-m", "keras_caffe.other"])
    assert not _cli_quiet.started_as_cli(["script.py"], ["python", "script.py"])

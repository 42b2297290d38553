"""The keras-caffe command line."""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_caffe import cli
from keras_caffe.importers import registered_types
from support import to_keras_layout


@pytest.fixture
def lenet(golden):
    return golden / "forward" / "lenet"


def test_import_prints_the_layer_table_and_saves(lenet, tmp_path, capsys):
    out = tmp_path / "lenet.keras"
    rc = cli.main(["import", str(lenet / "deploy_used.prototxt"),
                   "--weights", str(lenet / "weights.caffemodel"), "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    for row in (("conv1", "Convolution", "(N, 20, 24, 24)", "520"),
                ("ip1", "InnerProduct", "(N, 500)", "400,500"), ("total", "431,080")):
        assert any(all(cell in line for cell in row) for line in text.splitlines()), row
    assert f"saved {out}" in text
    model = keras.models.load_model(out)
    x = np.load(lenet / "input.npy")
    prob = np.load(lenet / "outputs.npz")["prob"]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(to_keras_layout(x, "channels_last"))),
                               prob, atol=1e-5)
    assert sorted(os.listdir(tmp_path)) == ["lenet.keras"]


def test_summary_only_inspects(lenet, tmp_path, capsys):
    out = tmp_path / "lenet.keras"
    assert cli.main(["import", str(lenet / "deploy_used.prototxt"), "--summary", "-o", str(out)]) == 0
    assert "pool2" in capsys.readouterr().out
    assert not out.exists()


def test_list_layers(capsys):
    """One line per type: its name, then its origin (BVLC Caffe or the fork)."""
    from keras_caffe.importers.net.registry import origin

    assert cli.main(["import", "--list-layers"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == registered_types()
    for line, layer_type in zip(lines, registered_types()):
        assert line[len(layer_type):].strip() == origin(layer_type)
    found = dict(line.split(None, 1) for line in lines)
    assert found["Convolution"] == "BVLC Caffe"
    assert found["Permute"] == "SSD (weiliu89/caffe)"


@pytest.mark.parametrize(
    "args, message",
    [
        (["import", "missing.prototxt"], "missing.prototxt: No such file or directory"),
        (["import"], "import needs a net (.prototxt), or --list-layers"),
        (["import", "x.prototxt", "-o", "net.h5"], "-o net.h5: the output must be a .keras file"),
    ],
)
def test_bad_usage_is_one_line_and_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"keras-caffe: error: {message}"]


def test_bad_net_names_the_problem(tmp_path, capsys):
    net = tmp_path / "net.prototxt"
    net.write_text('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 } } }\n'
                   'layer { name: "x" type: "Frobnicate" bottom: "data" top: "x" }\n')
    out = tmp_path / "net.keras"
    assert cli.main(["import", str(net), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"keras-caffe: error: {net}: unsupported layer type(s) Frobnicate; supported: ")
    assert not out.exists()


def test_failed_save_leaves_no_partial_file(lenet, tmp_path, monkeypatch, capsys):
    out = tmp_path / "lenet.keras"

    def broken_save(model, path, *args, **kwargs):
        Path(path).write_bytes(b"PK\x03\x04 half a zip")
        raise OSError("disk full")

    monkeypatch.setattr(keras.Model, "save", broken_save)
    assert cli.main(["import", str(lenet / "deploy_used.prototxt"), "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == \
        f"keras-caffe: error: {out}: disk full"  # the user's path, not the temporary file's
    assert os.listdir(tmp_path) == []


def test_console_script_is_installed(lenet):
    # processes: the installed `keras-caffe` script and a real process's exit status
    script = Path(sys.executable).with_name("keras-caffe")
    proc = subprocess.run([str(script), "import", str(lenet / "deploy_used.prototxt"), "--summary"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "InnerProduct" in proc.stdout
    proc = subprocess.run([str(script), "import", "nowhere.prototxt"], capture_output=True, text=True)
    assert proc.returncode == 2
    ours = [line for line in proc.stderr.splitlines() if line.startswith("keras-caffe")]
    assert ours == ["keras-caffe: error: nowhere.prototxt: No such file or directory"]


def test_analyze_json(lenet, capsys):
    import json

    assert cli.main(["analyze", str(lenet / "deploy_used.prototxt"), "--batch", "64",
                     "--workers", "16", "--bandwidth", "10Gbit/s", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    text = json.dumps(report)
    assert "431080" in text and "1724320" in text  # LeNet's weights and |W| bytes


def test_analyze_table_and_bad_bandwidth(lenet, capsys):
    assert cli.main(["analyze", str(lenet / "deploy_used.prototxt")]) == 0
    assert "ring all-reduce" in capsys.readouterr().out
    assert cli.main(["analyze", str(lenet / "deploy_used.prototxt"), "--bandwidth", "fast"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("keras-caffe: error: ") and "bandwidth" in err[0]


@pytest.mark.tensorflow_only  # HDF5Data's shapes from its source (tests/cli/test_cli_backends.py)
def test_import_train_phase_summary(golden, capsys):
    """The issue's `keras-caffe import train_val.prototxt --phase TRAIN --summary`."""
    net = golden / "solvers" / "sgd" / "train_net.prototxt"
    assert cli.main(["import", str(net), "--phase", "TRAIN", "--summary"]) == 0
    out = capsys.readouterr().out
    for row in (("data", "HDF5Data", "(N, 20), (N,)"), ("loss", "SoftmaxWithLoss")):
        assert any(all(cell in line for cell in row) for line in out.splitlines()), row


def test_analyze_scaling_table(lenet, capsys):
    net = str(lenet / "deploy_used.prototxt")
    assert cli.main(["analyze", net, "--batch", "64", "--workers", "1,2,4",
                     "--device-flops", "6.1T", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["workers"] == 4 and [r["workers"] for r in data["scaling"]["rows"]] == [1, 2, 4]
    # the flag's name, not the Python argument's (issue 33)
    assert cli.main(["analyze", net, "--workers", "1,2"]) == 2
    assert capsys.readouterr().err == (
        "keras-caffe: error: --device-flops is needed for a list of worker counts: give one "
        "worker's sustained FLOP/s, such as '6.1T'\n")


@pytest.mark.tensorflow_only  # keras-caffe train
def test_run_cli_leaves_the_test_process_as_it_found_it(golden, tmp_path):
    """``cli_runner.run_cli`` runs ``train`` (it seeds, installs signal
    handlers, sets environment variables, logs) in a fresh Keras session and
    gives the test process back as it was."""
    import logging
    import random
    import signal
    import warnings

    from support.cli_runner import run_cli
    from keras_caffe import _cli_quiet
    from support.train_runs import golden_folder

    def state():
        return {
            "environ": dict(os.environ), "cwd": os.getcwd(), "argv": list(sys.argv),
            "umask": (os.umask(0o022), os.umask(os.umask(0o022)))[1],
            "streams": (sys.stdin, sys.stdout, sys.stderr),
            "signals": [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)],
            "warnings": (list(warnings.filters), warnings.showwarning),
            "root": (list(logging.getLogger().handlers), logging.getLogger().level),
            "tensorflow_logger": logging.getLogger("tensorflow").level,
            "quiet": dict(_cli_quiet._state),
            "policy": keras.config.dtype_policy().name, "floatx": keras.config.floatx(),
            "random": random.getstate(), "numpy": np.random.get_state()[1].tolist(),
        }

    folder = golden_folder(golden, tmp_path, "run")
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    before = state()
    assert keras.layers.ReLU().name == "re_lu"
    before["random"] = random.getstate()  # (a layer draws its default seed)
    proc = run_cli("train", "--solver", "solver.prototxt", "--max-iter", 1, "--log", "caffe",
                   cwd=folder, umask=0o077)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Optimization Done." in proc.stderr and proc.stdout == ""
    after = state()
    assert after == before
    assert keras.layers.ReLU().name == "re_lu_1"  # the test's Keras session goes on

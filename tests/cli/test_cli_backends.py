"""The ``keras-caffe`` command line on every Keras backend (issue 35):
``--help``, ``--version`` (naming the backend and its version) and usage
errors answer without importing Keras or any backend; ``import``,
``export`` and ``analyze`` round-trip Caffe's bytes; ``train``, ``test``,
``time``, ``device_query`` and ``install-horovod`` are TensorFlow's and on
JAX or PyTorch refuse in one line. Runs on every backend
(tests/support/tiers.py BACKENDS), through the installed CLI in this process
(``cli_runner.run_cli``) or, where the process is what is tested, in a new
one."""

import importlib
import json
import subprocess
import sys

import keras
import pytest

import keras_caffe
from keras_caffe.backends import SUPPORTED
from keras_caffe.cli._registry import COMMANDS
from support.cli_runner import STARTUP, run_cli

BACKEND = keras.backend.backend()
#: The commands built on TensorFlow.
TENSORFLOW_COMMANDS = ["train", "test", "time", "device_query", "install-horovod"]



def startup(*args, cwd="/"):
    """``main(args)`` in a new process: (exit status, stdout, stderr, the
    modules of Keras and its backends loaded by then)."""
    proc = subprocess.run([sys.executable, "-c", STARTUP, *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.splitlines()[-1])
    return result["code"], result["out"], result["err"], result["loaded"]


def refusal(command):
    """The one line a TensorFlow-only command gives on JAX or PyTorch."""
    return (f"keras-caffe: error: keras-caffe {command} needs Keras's TensorFlow backend and the "
            f"backend is {BACKEND!r}: run with KERAS_BACKEND=tensorflow (TensorFlow >= 2.16: "
            f"pip install 'keras-caffe[tensorflow]'); on {BACKEND} keras-caffe offers the "
            "solvers, schedules, importer, snapshots and callbacks (docs/backends.md)")


@pytest.fixture
def lenet(golden):
    return golden / "forward" / "lenet"


def tensorflow_command_args(golden):
    """Each TensorFlow-only command with arguments it would accept."""
    solver = golden / "solvers" / "sgd"
    lenet = golden / "forward" / "lenet"
    return {
        "train": ["train", "--solver", solver / "solver.prototxt"],
        "test": ["test", "--model", solver / "train_net.prototxt", "--weights",
                 solver / "init.caffemodel"],
        "time": ["time", "--model", lenet / "deploy_used.prototxt"],
        "device_query": ["device_query"],
        "install-horovod": ["install-horovod", "--dry-run"],
    }


def test_the_version_names_keras_and_its_backend():
    """``--version``: keras-caffe's, Keras's and the backend's versions, from
    the packages' metadata: no module of Keras or a backend is imported."""
    backend = importlib.import_module(SUPPORTED[BACKEND])
    code, out, err, loaded = startup("--version")
    assert (code, err, loaded) == (0, "", [])
    assert out == (f"keras-caffe {keras_caffe.__version__} (Keras {keras.__version__}, "
                   f"backend {BACKEND} {backend.__version__})\n")


@pytest.mark.parametrize("args, code, out, err", [
    (["--help"], 0, "usage: keras-caffe [-h]", ""),
    (["train", "--help"], 0, "usage: keras-caffe train [-h]", ""),
    ([], 2, "usage: keras-caffe [-h]", ""),
    (["import", "/no/such/net.prototxt", "-o", "net.h5"], 2, "",
     "keras-caffe: error: -o net.h5: the output must be a .keras file"),
    (["analyze", "/no/such/net.prototxt"], 2, "",
     "keras-caffe: error: /no/such/net.prototxt: No such file or directory"),
    (["export", "/no/such.keras", "-o", "x.caffemodel"], 2, "",
     "keras-caffe: error: /no/such.keras: No such file or directory"),
])
def test_answers_before_importing_keras(args, code, out, err):
    """--help and usage errors answer without importing Keras or a backend
    (start-up stays under a second, issue 33)."""
    found = startup(*args)
    assert found[0] == code and found[1].startswith(out) and found[3] == []
    assert found[2].splitlines()[-1:] == ([err] if err else [])


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the refusals of JAX and PyTorch")
def test_tensorflow_commands_refuse_in_one_line_at_once(golden):
    """Before anything is imported: exit status 2 and one line naming the
    command, the backend and KERAS_BACKEND=tensorflow."""
    for command, args in tensorflow_command_args(golden).items():
        code, out, err, loaded = startup(*args)
        assert (code, out, err.splitlines(), loaded) == (2, "", [refusal(command)], []), command


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the refusals of JAX and PyTorch")
def test_tensorflow_commands_refuse_through_the_cli(golden):
    """The same line from the installed CLI, with or without good arguments."""
    for command, args in tensorflow_command_args(golden).items():
        proc = run_cli(*args)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", refusal(command) + "\n")
    # before argparse's usage errors, which would only lead to this line
    for command, args in (("train", ["train"]),
                          ("train", ["train", "--solver", "/no/solver.prototxt", "--max-iter", "0"]),
                          ("time", ["--verbose", "time", "--model"])):
        proc = run_cli(*args)
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", refusal(command) + "\n")


def test_the_registry_marks_the_tensorflow_commands():
    assert [name for name, entry in COMMANDS.items() if entry.tensorflow_only] == \
        TENSORFLOW_COMMANDS
    assert [name for name, entry in COMMANDS.items() if not entry.tensorflow_only] == \
        ["import", "export", "analyze"]


def test_import_export_analyze_round_trip(lenet, tmp_path):
    """Caffe's LeNet imported with its weights, saved, exported: Caffe's
    .caffemodel byte for byte (what TensorFlow's export gives); the exported
    prototxt analyzed: LeNet's 431,080 weights."""
    keras_file = tmp_path / "lenet.keras"
    proc = run_cli("import", lenet / "deploy_used.prototxt", "--weights",
                   lenet / "weights.caffemodel", "-o", keras_file)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == f"saved {keras_file}"
    out, net = tmp_path / "back.caffemodel", tmp_path / "back.prototxt"
    proc = run_cli("export", keras_file, "-o", out, "--prototxt", net)
    assert (proc.returncode, proc.stdout.splitlines()) == (0, [f"saved {out}", f"saved {net}"]), \
        proc.stderr
    assert out.read_bytes() == (lenet / "weights.caffemodel").read_bytes()
    proc = run_cli("analyze", net, "--batch", "64", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["batch"] == 64 and sum(row["weights"] for row in report["layers"]) == 431080


@pytest.mark.skipif(BACKEND == "tensorflow", reason="TensorFlow reads the source itself")
def test_a_data_layer_without_its_shapes_asks_for_input_shape(golden):
    """On JAX and PyTorch the tf.data layer's shapes come from --input-shape:
    the one line says so in the command line's terms."""
    net = golden / "solvers" / "sgd" / "train_net.prototxt"
    message = (f"keras-caffe: error: layer 'data' (HDF5Data) finds its tops' shapes through "
               f"keras_caffe.importers.data (tf.data), which needs Keras's TensorFlow backend, "
               f"and the backend is {BACKEND!r}: give the shapes of top(s) 'data', 'label' with "
               "--input-shape TOP=C,H,W (the per-sample shape, Caffe's order) to import it as "
               "Inputs (as a deploy net's), or run with KERAS_BACKEND=tensorflow")
    for command in ("import", "analyze"):
        proc = run_cli(command, net, "--phase", "TRAIN")
        assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", message + "\n"), command
    proc = run_cli("analyze", net, "--phase", "TRAIN", "--input-shape", "data=20",
                   "--input-shape", "label=1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert sum(row["weights"] for row in json.loads(proc.stdout)["layers"]) == 336 + 85

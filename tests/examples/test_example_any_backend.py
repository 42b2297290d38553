"""examples/any_backend.py, the README's solver and import examples on any
Keras backend, runs as a script in a new process on this run's backend
(``KERAS_BACKEND``; tests/support/tiers.py BACKENDS) and prints what it
did: Caffe's SGD and a solver file's optimizer, a YellowFin fit, BVLC
Caffe's LeNet imported with Caffe's outputs, saved and loaded, exported to
the same bytes; on JAX and PyTorch without TensorFlow ever imported."""

import os
import re
import subprocess
import sys

import keras
import pytest

import keras_caffe
from support import GOLDEN, REPO

SCRIPT = REPO / "examples" / "any_backend.py"
BACKEND = keras.backend.backend()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """The example's lines and its output folder (one run for the module's tests)."""
    out = tmp_path_factory.mktemp("any_backend")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--golden", str(GOLDEN), "--out", str(out)],
                          cwd=out, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return proc.stdout.splitlines(), out


def test_it_names_the_backend_and_the_solvers(run):
    """The backend line, then the README's SGD and the golden ``sgd`` case's
    solver file, as their reprs say."""
    lines, _ = run
    assert lines[:3] == [
        f"keras-caffe {keras_caffe.__version__} on Keras {keras.__version__}, backend {BACKEND}",
        "SGD: SGD(base_lr=0.01, lr_policy='step', gamma=0.1, stepsize=100000, momentum=0.9, "
        "weight_decay=0.0005, lr_mult={'*/bias': 2.0}, decay_mult={'*/bias': 0.0})",
        "solver.prototxt -> SGD(base_lr=0.1, lr_policy='fixed', momentum=0.9, "
        "weight_decay=0.0005)",
    ]


def test_yellowfin_trains_and_tunes(run):
    """Two epochs of 20 batches: 40 steps, the loss lower in the second, a
    positive tuned rate and a momentum in [0, 1)."""
    found = re.fullmatch(r"YellowFin: (\d+) steps, loss ([\d.]+) -> ([\d.]+), "
                         r"tuned lr ([\d.e+-]+), tuned momentum ([\d.e+-]+)", run[0][3])
    assert found, run[0][3]
    steps, first, last, rate, momentum = int(found[1]), *map(float, found.groups()[1:])
    assert steps == 40
    assert 1.5 < first < 1.8 and last < first
    assert rate > 0 and 0 <= momentum < 1


def test_lenet_imports_saves_and_exports_as_caffe_has_it(run):
    """LeNet's output within 1e-5 of BVLC Caffe's, the .keras file loading
    back to the same outputs, the exported caffemodel byte for byte Caffe's."""
    lines, out = run
    found = re.fullmatch(r"LeNet imported: output \(2, 10\), largest \|Keras - BVLC Caffe\| "
                         r"difference ([\d.e+-]+)", lines[4])
    assert found, lines[4]
    assert float(found[1]) < 1e-5
    size = (GOLDEN / "forward" / "lenet" / "weights.caffemodel").stat().st_size
    assert lines[5:7] == [
        "lenet.keras loaded back: largest difference 0.00e+00",
        f"out.caffemodel: {size} bytes, the same as weights.caffemodel: yes; "
        "imported again: largest difference 0.00e+00",
    ]
    assert (out / "lenet.keras").is_file() and (out / "out.caffemodel").stat().st_size == size


def test_tensorflow_is_imported_only_on_its_backend(run):
    """On JAX and PyTorch neither ``import keras_caffe`` nor ``import_model``
    nor anything after imports TensorFlow (Keras imports it on its own backend)."""
    answer = "yes" if BACKEND == "tensorflow" else "no"
    assert run[0][7:] == [f"TensorFlow imported: after import keras_caffe {answer}, "
                          f"after import_model {answer}, at the end {answer}"]

"""keras-caffe on each Keras backend (keras_caffe/backends.py): the backend
check ``import keras_caffe`` runs first, the public names each backend has,
and the TensorFlow-only features refused by name on JAX and PyTorch.

Runs on every backend (tests/support/tiers.py BACKENDS): ``make test`` on
TensorFlow, ``make test-backends`` on JAX and PyTorch in venvs without
TensorFlow. The checks that start ``import keras_caffe`` afresh run it in a
child process, since the backend is chosen once per process."""

import importlib.util
import json
import os
import subprocess
import sys

import keras
import pytest

import keras_caffe
from keras_caffe.errors import BackendRequirementError, TensorFlowRequirementError

BACKEND = keras.backend.backend()
HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None

#: The message a TensorFlow-only feature gives on JAX or PyTorch.
def refusal(feature):
    return (f"{feature} needs Keras's TensorFlow backend and the backend is {BACKEND!r}: "
            f"run with KERAS_BACKEND=tensorflow (TensorFlow >= 2.16: "
            f"pip install 'keras-caffe[tensorflow]'); on {BACKEND} keras-caffe offers the "
            f"solvers, schedules, importer, snapshots and callbacks (docs/backends.md)")


def run_python(code, tmp_path, **env):
    """``python -c code`` in a fresh process with ``env`` (None: unset), its
    Keras configuration folder an empty ``tmp_path``; (status, stderr's last line)."""
    environ = dict(os.environ, KERAS_HOME=str(tmp_path))
    for key, value in env.items():
        environ.pop(key, None)
        if value is not None:
            environ[key] = value
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    lines = done.stderr.strip().splitlines()
    return done.returncode, (lines[-1] if lines else ""), done.stdout


def test_the_backend_is_the_one_keras_runs():
    """backend_name() agrees with Keras once Keras is imported."""
    from keras_caffe.backends import backend_name, is_tensorflow

    assert backend_name() == BACKEND
    assert is_tensorflow() == (BACKEND == "tensorflow")


def test_backend_name_reads_keras_json_without_importing_keras(tmp_path):
    """As Keras: KERAS_BACKEND first, else keras.json's backend in
    KERAS_HOME, else tensorflow; read without importing Keras."""
    (tmp_path / "keras.json").write_text(json.dumps({"backend": "jax"}))
    code = ("import sys; from keras_caffe.backends import backend_name; "
            "print(backend_name(), 'keras' in sys.modules)")
    # keras_caffe/__init__ imports Keras, so the module is loaded from its file alone
    code = ("import importlib.util, sys, types; "
            "spec = importlib.util.find_spec('keras_caffe'); "
            "sys.modules['keras_caffe'] = types.ModuleType('keras_caffe'); "
            "sys.modules['keras_caffe'].__path__ = spec.submodule_search_locations; "
            + code.split('; ', 1)[1])
    status, last, out = run_python(code, tmp_path, KERAS_BACKEND=None)
    assert (status, out.split()) == (0, ["jax", "False"]), last
    status, last, out = run_python(code, tmp_path, KERAS_BACKEND="torch")
    assert (status, out.split()) == (0, ["torch", "False"]), last
    (tmp_path / "keras.json").unlink()
    status, last, out = run_python(code, tmp_path, KERAS_BACKEND=None)
    assert (status, out.split()) == (0, ["tensorflow", "False"]), last


def test_an_unsupported_backend_is_refused_in_one_line(tmp_path):
    status, last, _ = run_python("import keras_caffe", tmp_path, KERAS_BACKEND="numpy")
    assert status == 1
    assert last == ("keras_caffe.errors.BackendRequirementError: keras-caffe runs on the Keras "
                    "backends tensorflow, jax, torch; this Keras is set to 'numpy' "
                    "(KERAS_BACKEND): set KERAS_BACKEND to one of them")


def test_a_backend_that_is_not_installed_is_named_with_its_extra(tmp_path):
    """A backend whose package this venv lacks: one line with the extra."""
    missing = next(b for b in ("jax", "torch") if importlib.util.find_spec(b) is None)
    status, last, _ = run_python("import keras_caffe", tmp_path, KERAS_BACKEND=missing)
    assert status == 1
    assert last == (f"keras_caffe.errors.BackendRequirementError: Keras's backend is "
                    f"{missing!r} (KERAS_BACKEND) and {missing} is not installed: "
                    f"pip install 'keras-caffe[{missing}]'")


@pytest.mark.skipif(HAS_TENSORFLOW, reason="needs a venv without TensorFlow (make test-backends)")
def test_keras_default_backend_without_tensorflow_names_the_installed_one(tmp_path):
    """No KERAS_BACKEND, no keras.json: Keras's default, TensorFlow, is not
    there; the message says which installed backend to set instead."""
    status, last, _ = run_python("import keras_caffe", tmp_path, KERAS_BACKEND=None)
    assert status == 1
    assert last == ("keras_caffe.errors.TensorFlowRequirementError: keras-caffe needs TensorFlow "
                    ">= 2.16 and none is installed: pip install 'keras-caffe[tensorflow]' "
                    "(Keras's backend is 'tensorflow', from Keras's default or keras.json; "
                    f"installed here: {BACKEND}: KERAS_BACKEND={BACKEND} runs keras-caffe's "
                    "core on it)")


def test_the_core_names_are_there_on_every_backend():
    for name in ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam", "YellowFin",
                 "optimizer_from_solver", "schedules", "import_model", "export_caffemodel",
                 "param_multipliers", "layers", "LayerLimitError", "BackendRequirementError"):
        assert name in keras_caffe.__all__, name
        assert getattr(keras_caffe, name) is not None
    namespace = {}
    exec("from keras_caffe import *", namespace)
    assert "SGD" in namespace and "import_model" in namespace


TENSORFLOW_ONLY = ["Solver", "get_solver", "LMS"]


@pytest.mark.parametrize("name", TENSORFLOW_ONLY)
def test_tensorflow_only_names(name):
    """On TensorFlow: there and in __all__; elsewhere: not in __all__ (so
    ``import *`` works) and refused by name when reached."""
    if BACKEND == "tensorflow":
        assert name in keras_caffe.__all__
        assert callable(getattr(keras_caffe, name))
        return
    assert name not in keras_caffe.__all__ and name not in dir(keras_caffe)
    with pytest.raises(TensorFlowRequirementError) as caught:
        getattr(keras_caffe, name)
    assert str(caught.value) == refusal(f"keras_caffe.{name}")
    with pytest.raises(TensorFlowRequirementError):
        exec(f"from keras_caffe import {name}", {})


@pytest.mark.parametrize("module, feature", [
    ("keras_caffe.training", "keras_caffe.training (Caffe's training loop: Solver, keras-caffe train)"),
    ("keras_caffe.lms", "keras_caffe.lms (Large Model Support)"),
    ("keras_caffe.distributed", "keras_caffe.distributed (Horovod, MirroredStrategy)"),
    ("keras_caffe.importers.data", "keras_caffe.importers.data (Caffe's data layers as tf.data)"),
])
def test_tensorflow_only_packages_say_so(module, feature):
    """The TensorFlow-only packages: one line naming the backend, never
    ModuleNotFoundError: tensorflow."""
    if BACKEND == "tensorflow":
        assert importlib.import_module(module) is not None
        return
    sys.modules.pop(module, None)
    with pytest.raises(TensorFlowRequirementError) as caught:
        importlib.import_module(module)
    assert str(caught.value) == refusal(feature)
    assert isinstance(caught.value, BackendRequirementError) and isinstance(caught.value, ImportError)


def test_data_pipelines_are_reached_lazily():
    """keras_caffe.importers imports on every backend; its data-layer names
    load on first use (TensorFlow's backend only)."""
    import keras_caffe.importers as importers

    assert callable(importers.import_model)
    if BACKEND == "tensorflow":
        assert importers.DataPipeline.__name__ == "DataPipeline"
        return
    with pytest.raises(TensorFlowRequirementError):
        importers.net_pipeline  # noqa: B018


def test_no_tensorflow_is_imported_on_another_backend(tmp_path):
    """``import keras_caffe`` and a solver's update load no TensorFlow on JAX
    or PyTorch (on TensorFlow it is of course there)."""
    code = ("import sys, numpy as np, keras, keras_caffe\n"
            "v = keras.Variable(np.ones(3, 'float32'))\n"
            "opt = keras_caffe.SGD(0.1, momentum=0.9, iter_size=2, clip_gradients=1.0)\n"
            "opt.apply([keras.ops.ones(3)], [v])\n"
            "print('tensorflow' in sys.modules)\n")
    status, last, out = run_python(code, tmp_path, KERAS_BACKEND=BACKEND)
    assert status == 0, last
    assert out.split() == [str(BACKEND == "tensorflow")]

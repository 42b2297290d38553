"""The public API as a user meets it: what ``import keras_caffe`` reaches,
signatures, ``repr`` and configs, the exported errors, iterable pipelines,
the examples' imports and the install hints."""

import ast
import copy
import importlib
import inspect
import os
import pkgutil
import re
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import keras_caffe
from keras_caffe import schedules
from support import REPO

SOLVERS = [keras_caffe.SGD, keras_caffe.Nesterov, keras_caffe.AdaGrad, keras_caffe.RMSProp,
           keras_caffe.AdaDelta, keras_caffe.Adam]
SHARED = ["weight_decay", "regularization_type", "clip_gradients", "iter_size", "lr_mult",
          "decay_mult", "float32_fields"]
PUBLIC_MODULES = ["keras_caffe", "keras_caffe.importers", "keras_caffe.callbacks",
                  "keras_caffe.distributed", "keras_caffe.distributed.elastic",
                  "keras_caffe.schedules"]
#: Public modules without an ``__all__``: the README's ``keras_caffe.proto.caffe_pb2``.
PUBLIC_EXTRA = {"keras_caffe.proto": {"caffe_pb2"}}


# -- what `import keras_caffe` reaches ------------------------------------------------------

def test_submodules_listed_and_reachable_lazily(tmp_path):
    """``import keras_caffe`` does not load the callbacks (kept fast), yet
    ``keras_caffe.callbacks`` and friends are attributes and in ``dir()``."""
    code = ("import sys, keras_caffe\n"
            "print('keras_caffe.callbacks' in sys.modules)\n"
            "print(sorted({'callbacks', 'importers', 'distributed'} - set(dir(keras_caffe))))\n"
            "print(keras_caffe.callbacks.CaffeSnapshot.__name__, "
            "keras_caffe.importers.training_args.__name__, "
            "keras_caffe.distributed.DistributedOptimizer.__name__)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-3:] == [
        "False", "[]", "CaffeSnapshot training_args DistributedOptimizer"]


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_every_exported_name_exists(module):
    loaded = importlib.import_module(module)
    missing = [name for name in loaded.__all__ if not hasattr(loaded, name)]
    assert missing == []
    assert len(set(loaded.__all__)) == len(loaded.__all__)


# -- errors --------------------------------------------------------------------------------

def _package_modules():
    """Every module of the installed package, imported (the CLI, LMS,
    analyze, distributed, ... included); Horovod's build tools need no Horovod.
    ``data_parallel`` runs on JAX only (tests/distributed/test_jax_*.py check
    its errors come from keras_caffe.errors)."""
    names = []
    for info in pkgutil.walk_packages(keras_caffe.__path__, "keras_caffe."):
        if info.name.endswith("__main__") or info.name.startswith("keras_caffe.data_parallel"):
            continue
        names.append(importlib.import_module(info.name))
    return names


def test_every_error_class_is_exported_from_keras_caffe():
    """Every KerasCaffeError subclass (and the two ImportErrors of our own)
    defined anywhere in the package is ``keras_caffe.<Name>``, in __all__."""
    defined = {}
    for module in _package_modules():
        for name, value in vars(module).items():
            if (isinstance(value, type) and issubclass(value, Exception)
                    and value.__module__.startswith("keras_caffe")
                    and not name.startswith("_")):
                defined[value.__name__] = value
    ours = {name: cls for name, cls in defined.items()
            if issubclass(cls, keras_caffe.KerasCaffeError)
            or cls.__module__ == "keras_caffe.errors"}
    assert {"KerasCaffeError", "SnapshotError", "UnknownLayerTypeError", "LayerLimitError",
            "DuplicateLayerTypeError", "HorovodUnavailableError",
            "TensorFlowRequirementError"} <= set(ours)
    for name, cls in ours.items():
        assert getattr(keras_caffe, name) is cls, name
        assert name in keras_caffe.__all__, name
    assert keras_caffe.distributed.HorovodUnavailableError is keras_caffe.HorovodUnavailableError
    assert keras_caffe.importers.SnapshotError is keras_caffe.SnapshotError


# -- signatures, repr, config ---------------------------------------------------------------

@pytest.mark.parametrize("cls", SOLVERS, ids=lambda c: c.__name__)
def test_solver_signature_shows_the_caffe_arguments(cls):
    parameters = inspect.signature(cls).parameters
    own = [name for name in parameters if name not in SHARED + ["kwargs"]]
    assert own == ["learning_rate", *cls.solver_fields]
    for name in SHARED:
        assert parameters[name].kind is inspect.Parameter.KEYWORD_ONLY, name
    assert parameters["weight_decay"].default == 0.0
    assert parameters["iter_size"].default == 1
    assert all(parameters[name].annotation is not inspect.Parameter.empty
               for name in own + SHARED)


def test_yellowfin_signature_shows_the_caffe_arguments():
    parameters = inspect.signature(keras_caffe.YellowFin).parameters
    for name in ("learning_rate", "momentum", "lr_factor", "beta", "curv_win_width",
                 "weight_decay", "clip_gradients", "iter_size", "lr_mult", "decay_mult"):
        assert name in parameters, name


def test_help_shows_the_arguments():
    text = inspect.signature(keras_caffe.SGD).format() if hasattr(
        inspect.Signature, "format") else str(inspect.signature(keras_caffe.SGD))
    assert "weight_decay: 'float' = 0.0" in text and "iter_size: 'int' = 1" in text


def test_py_typed_is_installed():
    assert os.path.isfile(os.path.join(os.path.dirname(keras_caffe.__file__), "py.typed"))


def test_repr_shows_the_caffe_fields():
    sgd = keras_caffe.SGD(schedules.Step(0.01, gamma=0.1, stepsize=100000), momentum=0.9,
                          weight_decay=5e-4, lr_mult={"*/bias": 2.0})
    assert repr(sgd) == ("SGD(base_lr=0.01, lr_policy='step', gamma=0.1, stepsize=100000, "
                         "momentum=0.9, weight_decay=0.0005, lr_mult={'*/bias': 2.0})")
    assert repr(keras_caffe.Adam(0.001)) == (
        "Adam(base_lr=0.001, lr_policy='fixed', momentum=0.9, momentum2=0.999, delta=1e-08, "
        "weight_decay=0.0)")
    assert repr(keras_caffe.AdaGrad(0.1, iter_size=2, clip_gradients=10)) == (
        "AdaGrad(base_lr=0.1, lr_policy='fixed', delta=1e-08, weight_decay=0.0, "
        "clip_gradients=10.0, iter_size=2)")
    assert repr(keras_caffe.YellowFin(beta=0.99)) == (
        "YellowFin(learning_rate=<tuned from 0.0001>, momentum=<tuned from 0.0>, beta=0.99, "
        "weight_decay=0.0)")
    assert repr(keras_caffe.YellowFin(lr_factor=0.5, iter_size=2, closed_loop=True)) == (
        "YellowFin(learning_rate=<tuned from 0.0001>, lr_factor=0.5, momentum=<tuned from "
        "0.0>, weight_decay=0.0, iter_size=2, closed_loop=True)")
    assert repr(schedules.Warmup(schedules.Fixed(0.1), warmup_iter=5)) == (
        "Warmup(Fixed(base_lr=0.1), warmup_iter=5, start_factor=0.1)")


SOLVER_TEXT = """type: "Adam" base_lr: 0.1 lr_policy: "inv" gamma: 0.0001 power: 0.75
momentum: 0.9 momentum2: 0.999 delta: 1e-8 weight_decay: 0.0005 clip_gradients: 3.3"""


def test_a_solver_files_values_are_shown_as_written():
    """caffe.proto's float fields hold float32: 0.1 is 0.10000000149011612 as
    a Python float. The optimizer computes with that, as Caffe does, and
    shows 0.1."""
    adam = keras_caffe.optimizer_from_solver(SOLVER_TEXT)
    assert adam.momentum == float(np.float32(0.9)) != 0.9
    config = adam.get_config()
    assert config["learning_rate"]["config"] == {
        "base_lr": 0.1, "gamma": 0.0001, "power": 0.75, "float32_fields": True}
    assert {k: config[k] for k in ("momentum", "momentum2", "delta", "weight_decay",
                                   "clip_gradients", "float32_fields")} == {
        "momentum": 0.9, "momentum2": 0.999, "delta": 1e-8, "weight_decay": 0.0005,
        "clip_gradients": 3.3, "float32_fields": True}
    assert repr(adam) == ("Adam(base_lr=0.1, lr_policy='inv', gamma=0.0001, power=0.75, "
                          "momentum=0.9, momentum2=0.999, delta=1e-08, weight_decay=0.0005, "
                          "clip_gradients=3.3)")
    restored = keras_caffe.Adam.from_config(copy.deepcopy(config))
    assert restored.get_config() == config
    # the same float32 values, so the same numbers
    for name in ("momentum", "momentum2", "delta", "caffe_weight_decay", "clip_gradients"):
        assert getattr(restored, name) == getattr(adam, name), name
    rates = [float(adam.rate_at(i)) for i in (0, 7, 1000)]
    assert [float(restored.rate_at(i)) for i in (0, 7, 1000)] == rates


def test_a_float_rate_is_configured_as_given():
    """Keras keeps the rate in a float32 variable; the config gives the
    decimal, not 0.009999999776482582."""
    config = keras_caffe.SGD(0.01, momentum=0.9).get_config()
    assert config["learning_rate"] == 0.01 and config["momentum"] == 0.9
    assert "float32_fields" not in config
    yf = keras_caffe.YellowFin(learning_rate=0.1, lr_factor=0.3)
    assert yf.get_config()["learning_rate"] == 0.1


def test_python_values_are_kept_as_given():
    """A value given in Python is used and configured as is (float64 where
    Caffe computes in double), not rounded to float32."""
    step = schedules.Exp(0.1, gamma=0.999)
    assert step.gamma == 0.999 and step.get_config() == {"base_lr": 0.1, "gamma": 0.999}
    solver = schedules.from_solver('lr_policy: "exp" base_lr: 0.1 gamma: 0.999')
    assert solver.gamma == float(np.float32(0.999))
    assert solver.get_config() == {"base_lr": 0.1, "gamma": 0.999, "float32_fields": True}
    assert schedules.Exp.from_config(solver.get_config()).gamma == solver.gamma


def test_float32_fields_must_be_a_bool():
    with pytest.raises(keras_caffe.ArgumentError,
                       match=r"^SGD: `float32_fields` must be True or False, got 1$"):
        keras_caffe.SGD(float32_fields=1)
    with pytest.raises(keras_caffe.ArgumentError,
                       match=r"^Step: `float32_fields` must be True or False, got 'yes'$"):
        schedules.Step(0.1, 0.1, 10, float32_fields="yes")


# -- pipelines -------------------------------------------------------------------------------

DUMMY_NET = """name: "d"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
                     data_filler { type: "constant" value: 2 } } }"""


def test_a_pipeline_is_iterable():
    pipeline = keras_caffe.importers.net_pipeline(DUMMY_NET, "TRAIN")
    assert isinstance(pipeline, keras_caffe.importers.DataPipeline)
    batches = [batch for _, batch in zip(range(3), pipeline)]
    assert len(batches) == 3
    assert sorted(batches[0]) == ["data", "label"]
    np.testing.assert_array_equal(batches[2]["data"].numpy(), np.full((4, 3), 2.0, np.float32))
    first = next(iter(pipeline.dataset()))
    np.testing.assert_array_equal(first["data"].numpy(), batches[0]["data"].numpy())


# -- the examples ------------------------------------------------------------------------------

def _public_names():
    names = {module: set(importlib.import_module(module).__all__) for module in PUBLIC_MODULES}
    return {**names, **PUBLIC_EXTRA}


def _example_violations(path, public):
    """Private or non-exported keras_caffe names an example uses: imports
    (``import keras_caffe.x``, ``from keras_caffe.x import y``) and attribute
    chains on names bound to keras_caffe modules (``kd.init``)."""
    def allowed(module, name):
        return name in public[module] or f"{module}.{name}" in public

    tree = ast.parse(path.read_text(), str(path))
    bound, bad = {}, []  # local name -> public module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != "keras_caffe":
                    continue
                if alias.name not in public:
                    bad.append(f"import {alias.name}")
                elif alias.asname:
                    bound[alias.asname] = alias.name
                bound.setdefault("keras_caffe", "keras_caffe")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_caffe"):
            for alias in node.names:
                if node.module not in public or not allowed(node.module, alias.name):
                    bad.append(f"from {node.module} import {alias.name}")
                elif f"{node.module}.{alias.name}" in public:
                    bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        if isinstance(node.value, ast.Name) and node.value.id in bound:
            module = bound[node.value.id]
        elif isinstance(node.value, ast.Attribute) and isinstance(node.value.value, ast.Name) \
                and node.value.value.id in bound:
            module = f"{bound[node.value.value.id]}.{node.value.attr}"
            if module not in public:
                continue  # reported at the inner attribute
        else:
            continue
        if not allowed(module, node.attr):
            bad.append(f"{module}.{node.attr}")
    return sorted(set(bad))


EXAMPLES = sorted((REPO / "examples").rglob("*.py"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(REPO / "examples")))
def test_examples_use_only_the_public_api(path):
    assert _example_violations(path, _public_names()) == []


def test_the_import_check_finds_private_names(tmp_path):
    example = tmp_path / "bad.py"
    example.write_text("import keras_caffe\nimport keras_caffe.distributed as kd\n"
                       "from keras_caffe.cli import layer_table\n"
                       "from keras_caffe.callbacks.caffe_logger import BatchLosses\n"
                       "from keras_caffe.importers import import_net, _private\n"
                       "kd.init(); kd._hvd\nkeras_caffe.callbacks.CaffeLogger\n"
                       "keras_caffe.importers.net.importing\nkeras_caffe.lms.plan.Node\n")
    assert _example_violations(example, _public_names()) == [
        "from keras_caffe.callbacks.caffe_logger import BatchLosses",
        "from keras_caffe.cli import layer_table",
        "from keras_caffe.importers import _private",
        "keras_caffe.distributed._hvd",
        "keras_caffe.importers.net",  # the first step of a chain that is not public
        "keras_caffe.lms",
    ]


# -- install hints ---------------------------------------------------------------------------

def _text_files():
    yield from (REPO / "README.md", REPO / "Makefile")
    yield from (REPO / "docs").glob("*.md")
    for folder in ("keras_caffe", "importers", "callbacks", "examples"):
        yield from (REPO / folder).rglob("*.py")


def test_install_hints_are_quoted_for_zsh():
    """``pip install keras-caffe[lmdb]`` is a glob in zsh: every hint quotes it."""
    unquoted = re.compile(r"pip install[^\n'\"`]*?(?<!['\"])\bkeras-caffe\[")
    found = [f"{path.relative_to(REPO)}: {m.group(0)}" for path in _text_files()
             for m in unquoted.finditer(path.read_text())]
    assert found == []


def test_the_wheel_declares_rich_and_the_tensorboard_extra():
    """The CLI prints its tables with rich; TensorBoard logging has its extra."""
    from importlib.metadata import requires

    try:
        requirements = requires("keras-caffe") or []
    except Exception:  # installed with --target: no metadata on the path
        setup = (REPO / "setup.cfg").read_text()
        assert re.search(r"install_requires =(\n    .*)*\n    rich\n", setup)
        assert re.search(r"\ntensorboard =\n    tensorboard\n", setup)
        assert re.search(r"keras_caffe = py\.typed", setup)
        return
    assert any(r.split(";")[0].strip() == "rich" for r in requirements)
    assert any('extra == "tensorboard"' in r for r in requirements)


# -- a strategy of one replica ---------------------------------------------------------------

def _train_four_steps(optimizer_factory, strategy=None):
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(3)
    x = np.random.default_rng(0).random((32, 6)).astype("float32")
    y = np.random.default_rng(1).integers(0, 3, 32)

    def build():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3, name="ip1")])
        model.compile(optimizer=optimizer_factory(), jit_compile=False,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    if strategy is None:
        model = build()
    else:
        with strategy.scope():
            model = build()
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(8), epochs=1, verbose=0,
              shuffle=False)
    return [w.copy() for w in model.get_weights()], int(model.optimizer.iterations.numpy())


@pytest.mark.parametrize("factory", [
    lambda: keras_caffe.SGD(0.1, momentum=0.9, iter_size=2, clip_gradients=1.0),
    lambda: keras_caffe.YellowFin(iter_size=2, jit_compile=False),
], ids=["SGD", "YellowFin"])
def test_iter_size_under_a_one_replica_strategy(factory):
    """``MirroredStrategy()`` on a machine with one device (the README's
    snippet): iter_size's update branch runs in cross-replica context as with
    several replicas (Keras's own apply would merge_call inside it, which
    TensorFlow refuses), and trains as without a strategy."""
    import tensorflow as tf

    plain, plain_iterations = _train_four_steps(factory)
    mirrored, iterations = _train_four_steps(factory, tf.distribute.MirroredStrategy(["CPU:0"]))
    assert iterations == plain_iterations == 2
    for a, b in zip(mirrored, plain):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_an_imported_keras_file_loads_with_only_import_keras_caffe(tmp_path):
    """``keras.models.load_model`` of a saved import needs nothing beyond
    ``import keras_caffe`` (its initializers and layers are registered)."""
    import subprocess
    import sys

    from support import GOLDEN

    lenet = GOLDEN / "forward" / "lenet"
    out = tmp_path / "lenet.keras"
    code = ("import sys, keras, keras_caffe\n"
            "if sys.argv[1] == 'save':\n"
            "    m = keras_caffe.import_model(sys.argv[2], sys.argv[3])\n"
            "    m.save(sys.argv[4])\n"
            "else:\n"
            "    m = keras.models.load_model(sys.argv[4])\n"
            "    print(m.count_params())\n")
    args = [str(lenet / "deploy_used.prototxt"), str(lenet / "weights.caffemodel"), str(out)]
    subprocess.run([sys.executable, "-c", code, "save", *args], check=True, capture_output=True)
    run = subprocess.run([sys.executable, "-c", code, "load", *args], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[-1] == "431080"


def test_the_command_line_reaches_the_api_through_getattr():
    """In the command line ``keras_caffe/__init__.py`` leaves ``keras_caffe._api``
    (TensorFlow) unimported; every public name is still reached, through
    ``__getattr__``, and ``_API`` names exactly what ``_api`` defines."""
    import keras_caffe._api

    assert keras_caffe._API == set(keras_caffe._api.__all__)
    code = ("import sys; sys.argv[0] = 'keras-caffe'; import keras_caffe; "
            "assert 'tensorflow' not in sys.modules; "
            "names = [n for n in keras_caffe.__all__ if getattr(keras_caffe, n) is None]; "
            "print('tensorflow' in sys.modules, names, keras_caffe.SGD.__module__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "True [] keras_caffe.optimizers.sgd"

"""The importer and exporter on every Keras backend (issue 35): a golden net
imports, runs, exports Caffe's bytes and is analyzed without TensorFlow on
JAX and PyTorch; the tf.data data layer types are stand-ins there
(importers/layer_types/_tensorflow_data.py): a net with one imports as
on TensorFlow when ``input_shapes`` gives its tops' shapes, and otherwise
raises ``TensorFlowRequirementError`` naming the layer and its type. Runs on
every backend (tests/support/tiers.py BACKENDS)."""

import ast
import json
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.analysis import analyze
from keras_caffe.errors import TensorFlowRequirementError
from keras_caffe.importers import (export_caffemodel, import_net, layer_summary, load_weights,
                                   parse_text)
from keras_caffe.importers.layer_types import _tensorflow_data, base
from keras_caffe.importers.net.registry import origin, registered_types
from keras_caffe.proto import caffe_pb2
from support import to_keras_layout

BACKEND = keras.backend.backend()
LAYER_TYPES = Path(base.__file__).parent

#: What a golden net's import, forward pass, export and analysis load, in a new process.
IMPORT_ONLY = """
import json, sys
import keras_caffe
after_import = "tensorflow" in sys.modules
from keras_caffe.analysis import analyze
from keras_caffe.importers import export_caffemodel, import_net, layer_summary
folder, out = sys.argv[1], sys.argv[2]
imported = import_net(folder + "/deploy_used.prototxt", folder + "/weights.caffemodel")
import numpy as np
x = np.load(folder + "/input.npy").transpose(0, 2, 3, 1)
prob = np.asarray(imported.model.predict(x, verbose=0))
export_caffemodel(imported.model, out)
rows = layer_summary(imported)
report = analyze(folder + "/deploy_used.prototxt")
print(json.dumps({"after_import": after_import, "after_all": "tensorflow" in sys.modules,
                  "prob": prob.tolist(), "params": sum(r.params for r in rows),
                  "weights": report.weights}))
"""


@pytest.fixture
def lenet(golden):
    return golden / "forward" / "lenet"


@pytest.fixture
def mlp_train_net(golden):
    """The golden solvers' train net: an HDF5Data layer (tops data and label)."""
    return golden / "solvers" / "sgd" / "train_net.prototxt"


def test_tensorflow_is_loaded_on_its_backend_only(lenet, tmp_path):
    """A new process on this backend: ``import keras_caffe``, then
    ``import_net`` of golden LeNet with Caffe's weights, a forward pass,
    ``export_caffemodel``, ``layer_summary`` and ``analyze``: TensorFlow is
    imported on its own backend and on no other; the numbers are Caffe's."""
    out = tmp_path / "lenet.caffemodel"
    proc = subprocess.run([sys.executable, "-c", IMPORT_ONLY, str(lenet), str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.splitlines()[-1])
    on_tensorflow = BACKEND == "tensorflow"
    assert (result["after_import"], result["after_all"]) == (on_tensorflow, on_tensorflow)
    np.testing.assert_allclose(result["prob"], np.load(lenet / "outputs.npz")["prob"], atol=1e-5)
    assert out.read_bytes() == (lenet / "weights.caffemodel").read_bytes()
    assert result["params"] == result["weights"] == 431080


def test_export_gives_caffes_bytes_back_and_hdf5_weights_load(lenet, tmp_path):
    """In this process: Caffe's .caffemodel imported and exported is the same
    file byte for byte; its HDF5 export loads back into the same blobs."""
    imported = import_net(lenet / "deploy_used.prototxt", lenet / "weights.caffemodel")
    export_caffemodel(imported.model, tmp_path / "back.caffemodel")
    assert (tmp_path / "back.caffemodel").read_bytes() == \
        (lenet / "weights.caffemodel").read_bytes()
    export_caffemodel(imported.model, tmp_path / "back.caffemodel.h5")
    again = keras_caffe.import_model(lenet / "deploy_used.prototxt",
                                     tmp_path / "back.caffemodel.h5")
    x = to_keras_layout(np.load(lenet / "input.npy"), "channels_last")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(x)),
                               np.load(lenet / "outputs.npz")["prob"], atol=1e-5)
    blobs = load_weights(tmp_path / "back.caffemodel.h5")
    caffe = load_weights(lenet / "weights.caffemodel")
    assert list(blobs) == list(caffe) == ["conv1", "conv2", "ip1", "ip2"]
    assert all([b.tobytes() for b in blobs[n]] == [b.tobytes() for b in caffe[n]] for n in caffe)
    assert [(r.name, r.type, r.params) for r in layer_summary(imported)][:3] == [
        ("data", "Input", 0), ("conv1", "Convolution", 520), ("pool1", "Pooling", 0)]


def _module_imports(path):
    """The modules ``path`` imports at its top level."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_the_stand_in_table_lists_every_module_that_needs_tensorflow():
    """MODULES names exactly the modules of importers/layer_types that import
    TensorFlow or keras_caffe.importers.data (tf.data) at their top level:
    the ones the registry must not import on another backend."""
    needs = sorted(path.stem for path in LAYER_TYPES.glob("*.py")
                   if any(name == "tensorflow" or name.startswith("keras_caffe.importers.data")
                          for name in _module_imports(path)))
    assert needs == sorted(_tensorflow_data.MODULES)


@pytest.mark.tensorflow_only
def test_the_stand_in_table_matches_the_units_on_tensorflow():
    """On TensorFlow, the real units: each MODULES type is registered by its
    module, with the origin the table gives its stand-in."""
    for module, types in _tensorflow_data.MODULES.items():
        for layer_type, where in types.items():
            unit = base.unit(layer_type)
            assert type(unit).__module__ == f"keras_caffe.importers.layer_types.{module}"
            assert origin(layer_type) == where
            assert not isinstance(unit, _tensorflow_data.StandIn)


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the stand-ins of JAX and PyTorch")
def test_the_data_types_are_stand_ins_with_their_origins():
    """On JAX and PyTorch: every tf.data type is still registered (the
    importer builds it), as a stand-in with its unit's origin; the
    registry did not import TensorFlow."""
    for types in _tensorflow_data.MODULES.values():
        for layer_type, where in types.items():
            assert isinstance(base.unit(layer_type), _tensorflow_data.StandIn)
            assert layer_type in registered_types() and origin(layer_type) == where
    assert "tensorflow" not in sys.modules


#: The HDF5Data train net's layer table, as on TensorFlow from its source.
MLP_SUMMARY = [("data", "HDF5Data", ((None, 20), (None,)), 0),
               ("ip1", "InnerProduct", ((None, 16),), 336), ("relu1", "ReLU", ((None, 16),), 0),
               ("ip2", "InnerProduct", ((None, 5),), 85), ("loss", "SoftmaxWithLoss", (None,), 0)]


def test_a_data_layer_with_its_shapes_given_imports_as_inputs(mlp_train_net):
    """HDF5Data with ``input_shapes`` for both tops, on every backend: a
    Keras Input of its data top (the label only feeds the loss: a training
    target), the source unread, the layer table TensorFlow gives from the
    source; ``analyze`` counts the same."""
    imported = import_net(mlp_train_net, phase="TRAIN", input_shapes={"data": (20,), "label": ()})
    model = imported.model
    assert [(t.name, tuple(t.shape)) for t in model.inputs] == [("data", (None, 20))]
    assert [tuple(t.shape) for t in model.outputs] == [(None, 5)]
    assert [tuple(row) for row in layer_summary(imported)] == MLP_SUMMARY
    report = analyze(mlp_train_net, batch=16, phase="TRAIN",
                     input_shapes={"data": (20,), "label": ()})
    assert report.weights == 336 + 85


@pytest.mark.tensorflow_only
def test_tensorflow_reads_the_same_shapes_from_the_source(mlp_train_net):
    imported = import_net(mlp_train_net, phase="TRAIN")
    assert [tuple(row) for row in layer_summary(imported)] == MLP_SUMMARY


@pytest.mark.skipif(BACKEND == "tensorflow", reason="TensorFlow reads the source itself")
@pytest.mark.parametrize("action", ["import", "analyze"])
def test_a_data_layer_without_its_shapes_names_itself(mlp_train_net, action):
    """Without ``input_shapes``, only tf.data's layer could find the shapes:
    one TensorFlowRequirementError naming the layer, its type, its tops and
    both ways out; never a ModuleNotFoundError."""
    run = {"import": lambda: keras_caffe.import_model(mlp_train_net, phase="TRAIN"),
           "analyze": lambda: analyze(mlp_train_net, phase="TRAIN")}[action]
    with pytest.raises(TensorFlowRequirementError) as err:
        run()
    assert str(err.value) == (
        f"layer 'data' (HDF5Data) finds its tops' shapes through keras_caffe.importers.data "
        f"(tf.data), which needs Keras's TensorFlow backend, and the backend is {BACKEND!r}: "
        "give the shapes of top(s) 'data', 'label' with input_shapes={top: shape without "
        "the batch} to import it as Inputs (as a deploy net's), or run with "
        "KERAS_BACKEND=tensorflow")
    assert "tensorflow" not in sys.modules


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the stand-ins of JAX and PyTorch")
def test_a_stand_ins_pipeline_is_refused_by_name():
    layer = parse_text('name: "d" type: "DummyData" top: "x" '
                       'dummy_data_param { shape { dim: 2 dim: 3 } }', caffe_pb2.LayerParameter)
    with pytest.raises(TensorFlowRequirementError) as err:
        base.unit("DummyData").pipeline(layer, None)
    assert str(err.value).startswith(
        f"layer 'd' (DummyData)'s tf.data pipeline needs Keras's TensorFlow backend and the "
        f"backend is {BACKEND!r}: run with KERAS_BACKEND=tensorflow")

"""Caffe's Python layer: only the Python layers keras-caffe recognises by
module and layer name (python_layer.PYTHON_LAYERS) are imported, computed by
keras-caffe's own code; every other one is refused, by the importer and by
analyze, and no code from the model file runs."""

import keras
import numpy as np
import pytest

from keras_caffe.errors import UnsafeLayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from keras_caffe.analysis.core import UnknownLayerTypeError
from keras_caffe.importers.layer_types import base, python_layer
from keras_caffe.importers.layer_types.proposal import PyFasterRCNNProposal

INPUTS = ('layer { name: "in" type: "Input" top: "prob" top: "deltas" top: "im_info" '
          "input_param { shape { dim: 1 dim: 18 dim: 3 dim: 4 } shape { dim: 1 dim: 36 dim: 3 "
          "dim: 4 } shape { dim: 1 dim: 3 } } }\n")


def python(name, module, layer, param_str="'feat_stride': 16"):
    return (f'layer {{ name: "{name}" type: "Python" bottom: "prob" bottom: "deltas" '
            f'bottom: "im_info" top: "{name}" python_param {{ module: "{module}" '
            f'layer: "{layer}" param_str: "{param_str}" }} }}\n')


@pytest.mark.layer_type("Python")
def test_known_python_layers_are_a_registry():
    base.load_builtin()
    assert isinstance(python_layer.PYTHON_LAYERS[("rpn.proposal_layer", "ProposalLayer")],
                      PyFasterRCNNProposal)


@pytest.mark.layer_type("Python")
def test_recognised_python_layer_imports_and_runs():
    model = import_model(INPUTS + python("rois", "rpn.proposal_layer", "ProposalLayer"))
    rng = np.random.default_rng(0)
    prob = rng.random((1, 3, 4, 18)).astype(np.float32)
    deltas = (rng.standard_normal((1, 3, 4, 36)) * 0.1).astype(np.float32)
    info = np.array([[48.0, 64.0, 1.0]], np.float32)
    rois = keras.ops.convert_to_numpy(model([prob, deltas, info]))
    assert rois.shape == (300, 5) and np.all(rois[:, 0] == 0) and rois[0, 3] > 0


@pytest.mark.layer_type("Python")
@pytest.mark.parametrize("module, layer", [
    ("os", "system"),
    ("rpn.proposal_layer", "ProposalTargetLayer"),   # the module alone is not enough
    ("my.proposal_layer", "ProposalLayer"),          # nor the class name alone
])
def test_other_python_layers_are_refused(module, layer):
    text = (INPUTS + python("rois", "rpn.proposal_layer", "ProposalLayer")
            + python("evil", module, layer))
    with pytest.raises(UnsafeLayerError) as err:
        import_model(text)
    assert str(err.value) == (
        "<prototxt text>: Python layer(s) 'evil' would run user code named in the model "
        "file; keras-caffe never executes code from a model file. Register a layer type for "
        "the layer's behaviour (keras_caffe.importers.register_layer_type), or replace it in "
        "the prototxt")
    with pytest.raises(UnknownLayerTypeError) as err:
        analyze(text)
    assert err.value.layers == {"evil": "Python"}


@pytest.mark.layer_type("Python")
def test_analyze_sizes_a_recognised_python_layer():
    row = analyze(INPUTS + python("rois", "rpn.proposal_layer", "ProposalLayer")).layers[-1]
    assert row.type == "Python" and row.tops == (("rois", (300, 5)),)

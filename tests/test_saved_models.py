"""``.keras`` files written by an older keras-caffe load with this one.

``tests/saved_models/`` holds files written by commit 892259b, before the
restructuring of issue 34 moved most modules (``make.py`` says how): an
imported Caffe LeNet compiled with keras-caffe's SGD on a
``ScaledLearningRate`` over a ``Step`` policy, and a Keras model trained
with YellowFin. Loaded now, the optimizer state is the stored one bit for
bit, and the outputs are the recorded ones to float32 rounding: they were
recorded with oneDNN's kernels, and Eigen's (``TF_ENABLE_ONEDNN_OPTS=0``)
sum in another order."""

import keras
import numpy as np
import pytest

import keras_caffe
from support import REPO

SAVED = REPO / "tests" / "saved_models"
#: Outputs across CPU kernel families: measured 8.0e-6 relative at most (LeNet, Eigen
#: against the oneDNN recording, 2-core AMD EPYC); the Dense model 0.
RTOL = 5e-5


@pytest.fixture(scope="module")
def expected():
    return np.load(SAVED / "expected.npz")


def test_an_imported_caffe_net_with_caffes_sgd_loads(expected):
    model = keras.saving.load_model(SAVED / "lenet_sgd.keras")
    optimizer = model.optimizer
    assert type(optimizer) is keras_caffe.SGD
    rate = optimizer.get_config()["learning_rate"]
    assert (rate["class_name"], rate["config"]["workers"]) == ("ScaledLearningRate", 2)
    assert rate["config"]["base"]["class_name"] == "Step"
    assert int(optimizer.iterations.numpy()) == int(expected["lenet_iterations"]) == 1
    sums = [np.sum(np.asarray(v.numpy(), "float64")) for v in optimizer.variables]
    np.testing.assert_array_equal(sums, expected["lenet_variables"])
    np.testing.assert_allclose(model.predict(expected["lenet_input"], verbose=0),
                               expected["lenet_output"], rtol=RTOL, atol=0)


def test_a_keras_model_with_yellowfin_loads(expected):
    model = keras.saving.load_model(SAVED / "yellowfin_dense.keras")
    assert type(model.optimizer) is keras_caffe.YellowFin
    values = np.concatenate([np.ravel(np.asarray(v.numpy(), "float64"))
                             for v in model.optimizer.variables])
    np.testing.assert_array_equal(values, expected["dense_variables"])
    np.testing.assert_allclose(model.predict(expected["dense_input"], verbose=0),
                               expected["dense_output"], rtol=RTOL, atol=0)

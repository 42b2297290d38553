"""Swish and MultinomialLogisticLoss against numpy ports of BVLC's
swish_layer.cpp and multinomial_logistic_loss_layer.cpp Forward_cpu."""

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, training_args
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


@pytest.mark.layer_type("Swish")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("beta", [1.0, 2.5, -0.5])
def test_swish(data_format, beta):
    x = np.linspace(-6, 6, 2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
    text = f'layer {{ name: "s" type: "Swish" bottom: "data" top: "s" swish_param {{ beta: {beta} }} }}\n'
    got = run_layers(text, {"data": x}, data_format=data_format)["s"]
    np.testing.assert_allclose(got, x / (1 + np.exp(-beta * x)), rtol=1e-6, atol=1e-6)


MLL = """
layer { name: "in" type: "Input" top: "prob" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "loss" type: "MultinomialLogisticLoss" bottom: "prob" bottom: "label" top: "loss" }
"""


@pytest.mark.layer_type("MultinomialLogisticLoss")
def test_multinomial_logistic_loss_is_caffes():
    """-sum_i log(max(p[i, label_i], kLOG_THRESHOLD = 1e-20)) / num."""
    model = import_model(MLL, phase="TRAIN")
    loss = training_args(model)["loss"]
    loss = loss if not isinstance(loss, dict) else next(iter(loss.values()))
    prob = np.array([[0.2, 0.5, 0.3], [0.0, 0.0, 1.0], [0.7, 0.2, 0.1], [0.3, 0.3, 0.4]],
                    np.float32)
    label = np.array([1, 0, 0, 2], np.float32)
    want = -np.sum(np.log(np.maximum(prob[np.arange(4), label.astype(int)], 1e-20))) / 4
    got = float(keras.ops.convert_to_numpy(loss(label, prob)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.layer_type("MultinomialLogisticLoss")
def test_multinomial_logistic_loss_refuses_spatial_predictions():
    text = MLL.replace("shape { dim: 4 dim: 3 }", "shape { dim: 4 dim: 3 dim: 2 dim: 2 }")
    with pytest.raises(LayerError, match=r"layer 'loss': \(MultinomialLogisticLoss\) the "
                                         r"prediction must be \(N, C\) or \(N, C, 1, 1\), got "
                                         r"\(4, 3, 2, 2\)"):
        import_model(text, phase="TRAIN")

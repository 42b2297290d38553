"""BVLC's LSTMUnit against a numpy port of LSTMUnitLayer::Forward_cpu
(lstm_unit_layer.cpp, BVLC Caffe master 9b891540)."""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels


def lstm_unit_reference(c_prev, x, cont):
    """Per n, d: i, f, o, g of X[n] at d, H + d, 2H + d, 3H + d; f is
    cont * sigmoid (0 when cont is 0); C = f * C_prev + i * g, H = o tanh C."""
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    n, h = c_prev.shape[1], c_prev.shape[2]
    c, hidden = np.zeros_like(c_prev), np.zeros_like(c_prev)
    for k in range(n):
        for d in range(h):
            i = sigmoid(x[0, k, d])
            f = 0.0 if cont[0, k] == 0 else cont[0, k] * sigmoid(x[0, k, h + d])
            o = sigmoid(x[0, k, 2 * h + d])
            g = np.tanh(x[0, k, 3 * h + d])
            c[0, k, d] = f * c_prev[0, k, d] + i * g
            hidden[0, k, d] = o * np.tanh(c[0, k, d])
    return c, hidden


@pytest.mark.layer_type("LSTMUnit")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_lstm_unit_matches_caffe(data_format):
    rng = np.random.RandomState(0)
    c_prev = rng.randn(1, 3, 4).astype("float32")
    x = rng.randn(1, 3, 16).astype("float32")
    cont = np.array([[1.0, 0.0, 0.5]], np.float32)
    got = run_layers('layer { name: "u" type: "LSTMUnit" bottom: "c0" bottom: "x" bottom: "cont" '
                     'top: "c" top: "h" }', {"c0": c_prev, "x": x, "cont": cont},
                     data_format=data_format)
    want_c, want_h = lstm_unit_reference(c_prev, x, cont)
    np.testing.assert_allclose(got["c"], want_c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["h"], want_h, rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("LSTMUnit")
def test_lstm_unit_checks_its_bottoms():
    text = ('layer { name: "in" type: "Input" top: "c0" top: "x" top: "cont" input_param { '
            'shape { dim: 1 dim: 3 dim: 4 } shape { %s } shape { dim: 1 dim: 3 } } }\n'
            'layer { name: "u" type: "LSTMUnit" bottom: "c0" bottom: "x" bottom: "cont" '
            'top: "c" top: "h" }')
    with pytest.raises(LayerError, match=r"layer 'u': \(LSTMUnit\) bottom 1 \(the gates\) must be "
                                         r"\(1, 3, 16\) for c_prev \(1, 3, 4\), got \(1, 3, 12\)"):
        analyze(text % "dim: 1 dim: 3 dim: 12", batch=None)
    assert analyze(text % "dim: 1 dim: 3 dim: 16", batch=None).layers[-1].tops == (
        ("c", (1, 3, 4)), ("h", (1, 3, 4)))

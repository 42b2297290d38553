"""ReLU6 (MobileNet-v2 forks) and SENet's Axpy against numpy references."""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


@pytest.mark.layer_type("ReLU6")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_relu6_clips_at_0_and_6(data_format):
    x = np.linspace(-9, 9, 2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    text = 'layer { name: "r" type: "ReLU6" bottom: "data" top: "data" }\n'
    got = run_layers(text, {"data": x}, data_format=data_format)["data"]
    np.testing.assert_array_equal(got, np.minimum(np.maximum(x, 0), 6))


@pytest.mark.layer_type("ReLU6")
def test_relu6_refuses_a_slope():
    text = ('layer { name: "r" type: "ReLU6" bottom: "data" top: "y" '
            "relu_param { negative_slope: 0.1 } }\n")
    with pytest.raises(LayerError, match=r"layer 'r': \(ReLU6\) takes no relu_param"):
        run_layers(text, {"data": np.zeros((1, 2), np.float32)})


def axpy_reference(a, x, y):
    """axpy_layer.cpp Forward_cpu: top = y, then top[n, c] += a[n, c] * x[n, c]."""
    n, c = x.shape[:2]
    return y + a.reshape(n, c, *([1] * (x.ndim - 2))) * x


AXPY = 'layer { name: "axpy" type: "Axpy" bottom: "a" bottom: "x" bottom: "y" top: "z" }\n'


@pytest.mark.layer_type("Axpy")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("a_shape, x_shape", [((2, 3, 1, 1), (2, 3, 4, 5)), ((2, 3), (2, 3, 4, 5)),
                                              ((2, 4), (2, 4, 3))])
def test_axpy_matches_senet(data_format, a_shape, x_shape):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(a_shape).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    y = rng.standard_normal(x_shape).astype(np.float32)
    got = run_layers(AXPY, {"a": a, "x": x, "y": y}, data_format=data_format)["z"]
    np.testing.assert_allclose(got, axpy_reference(a, x, y), rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Axpy")
@pytest.mark.parametrize("shapes, message", [
    (((2, 3, 2, 1), (2, 3, 4, 5), (2, 3, 4, 5)), r"bottom 0 must be \(N, C\) or \(N, C, 1, 1\)"),
    (((2, 4), (2, 3, 4, 5), (2, 3, 4, 5)), r"bottom 0 must be \(N, C\)"),
    (((2, 3), (2, 3, 4, 5), (2, 3, 5, 4)), "bottoms 1 and 2 must have one shape"),
])
def test_axpy_refuses_mismatched_bottoms(shapes, message):
    inputs = {name: np.zeros(s, np.float32) for name, s in zip("axy", shapes)}
    with pytest.raises(LayerError, match=rf"layer 'axpy': \(Axpy\) {message}"):
        run_layers(AXPY, inputs)

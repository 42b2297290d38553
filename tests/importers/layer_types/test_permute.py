"""Permute, SSD's fork layer (weiliu89/caffe src/caffe/layers/permute_layer.cpp):
the top is ``np.transpose(bottom, order)``, axes the order leaves out
following in increasing order."""

import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import LayerError
from support import DATA_FORMATS, run_layers

RNG = np.random.RandomState(11)


def permute(order, extra="", bottom="x"):
    orders = " ".join(f"order: {o}" for o in order)
    return (f'layer {{ name: "perm" type: "Permute" bottom: "{bottom}" top: "p" '
            f'permute_param {{ {orders} }} }}\n' + extra)


DOUBLE = 'layer { name: "double" type: "Power" bottom: "x" top: "y" power_param { scale: 2 } }\n'



def fork_permute(x, order):
    """PermuteLayer::LayerSetUp's order, then the transpose."""
    full = list(order) + [a for a in range(x.ndim) if a not in order]
    return np.transpose(x, full)


@pytest.mark.layer_type("Permute")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("order", [(0, 2, 3, 1), (0, 1, 3, 2), (0, 3), (0, 3, 1, 2), (), (0, 1)])
def test_permute(order, data_format):
    x = RNG.randn(2, 3, 4, 5).astype("float32")
    out = run_layers(DOUBLE + permute(order, bottom="y"), {"x": x}, data_format=data_format)["p"]
    np.testing.assert_array_equal(out, fork_permute(2 * x, order))


@pytest.mark.layer_type("Permute")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_ssd_head_permute_then_flatten(data_format):
    """SSD's mbox head: conv (N, C, H, W) -> Permute 0 2 3 1 -> Flatten. On
    channels-last data the permute is the tensor as it is: no layer runs."""
    x = RNG.randn(2, 6, 3, 4).astype("float32")
    text = permute((0, 2, 3, 1), 'layer { name: "flat" type: "Flatten" bottom: "p" top: "f" }\n')
    out = run_layers(text, {"x": x}, data_format=data_format)["f"]
    np.testing.assert_array_equal(out, np.transpose(x, (0, 2, 3, 1)).reshape(2, -1))
    model = keras_caffe.import_model(
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 6 dim: 3 '
        'dim: 4 } } }\n' + text, data_format=data_format)
    names = [layer.name for layer in model.layers]
    assert ("perm" in names) == (data_format == "channels_first")


@pytest.mark.layer_type("Permute")
def test_permute_of_a_flattened_blob():
    x = RNG.randn(2, 3, 2, 2).astype("float32")
    text = ('layer { name: "flat" type: "Flatten" bottom: "x" top: "f" }\n'
            'layer { name: "r" type: "Reshape" bottom: "f" top: "r" '
            'reshape_param { shape { dim: 0 dim: 4 dim: 3 } } }\n'
            'layer { name: "perm" type: "Permute" bottom: "r" top: "p" permute_param { order: 0 '
            'order: 2 order: 1 } }')
    out = run_layers(text, {"x": x})["p"]
    np.testing.assert_array_equal(out, np.transpose(x.reshape(2, 4, 3), (0, 2, 1)))


@pytest.mark.layer_type("Permute")
@pytest.mark.parametrize("order, message", [
    ((0, 4), r"layer 'perm': \(Permute\) order 4 is out of range for a 4-D input"),
    ((0, 2, 2), r"layer 'perm': \(Permute\) order repeats axis 2"),
])
def test_permute_refuses_what_the_fork_refuses(order, message):
    with pytest.raises(LayerError, match=message):
        run_layers(permute(order), {"x": np.zeros((1, 2, 3, 4), "float32")})


@pytest.mark.layer_type("Permute")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("order", [(3, 0, 1, 2), (1, 0), (2, 3, 0, 1)])
def test_permute_moving_the_batch_axis_transposes_every_axis(order, data_format):
    """CRNN's ``order: 3 0 1 2``: (N, C, H, W) -> (W, N, C, H), a T x N x ...
    sequence for an LSTM (the fork's Forward_cpu permutes every axis)."""
    x = RNG.randn(2, 3, 4, 5).astype("float32")
    full = list(order) + [a for a in range(4) if a not in order]
    out = run_layers(permute(order), {"x": x}, data_format=data_format)["p"]
    np.testing.assert_array_equal(out, np.transpose(x, full))


def test_analyze_gives_the_converters_shape():
    from keras_caffe.analysis import analyze

    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 '
            'dim: 4 dim: 5 } } }\n' + permute((0, 3)))
    report = analyze(text)
    model = keras_caffe.import_model(text, data_format="channels_first")
    row = [r for r in report.layers if r.name == "perm"][0]
    assert tuple(row.tops[0][1][1:]) == model.output_shape[1:] == (5, 3, 4)

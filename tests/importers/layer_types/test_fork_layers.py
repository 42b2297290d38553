"""Normalize (SSD: weiliu89/caffe src/caffe/layers/normalize_layer.cpp) and
ShuffleChannel (ShuffleNet's shuffle_channel_layer.cpp), against numpy ports
of their Forward_cpu."""

import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import LayerError
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

RNG = np.random.RandomState(17)


def normalize_reference(x, scale, across_spatial, eps=1e-10):
    """NormalizeLayer::Forward_cpu: norm = sqrt(sum x^2 + eps) per sample
    (across_spatial) or per position over channels, then the scale."""
    x = x.astype(np.float64)
    if across_spatial:
        norm = np.sqrt((x ** 2).reshape(len(x), -1).sum(1) + eps).reshape(-1, 1, 1, 1)
    else:
        norm = np.sqrt(eps + (x ** 2).sum(1, keepdims=True))
    scale = np.asarray(scale, np.float64)
    return x / norm * (scale.reshape(1, -1, 1, 1) if scale.ndim else scale)


@pytest.mark.layer_type("Normalize")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("across_spatial, channel_shared", [
    (False, False), (True, True), (False, True), (True, False)])
def test_normalize(data_format, across_spatial, channel_shared):
    x = RNG.randn(2, 3, 4, 5).astype("float32")
    x[1, :, 0, 0] = 0.0  # a position of zeros: eps keeps it finite
    text = (f'layer {{ name: "norm" type: "Normalize" bottom: "x" top: "n" norm_param {{ '
            f'across_spatial: {str(across_spatial).lower()} '
            f'channel_shared: {str(channel_shared).lower()} '
            f'scale_filler {{ type: "constant" value: 20 }} }} }}')
    scale = np.float32(2.5) if channel_shared else np.array([1.0, 20.0, -3.0], np.float32)
    out = run_layers(text, {"x": x}, weights={"norm": [scale]}, data_format=data_format)["n"]
    np.testing.assert_allclose(out, normalize_reference(x, scale, across_spatial),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Normalize")
def test_normalize_starts_at_its_filler_and_trains_its_scale():
    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 '
            'dim: 4 dim: 4 } } }\n'
            'layer { name: "norm" type: "Normalize" bottom: "x" top: "n" norm_param { '
            'across_spatial: false channel_shared: false scale_filler { type: "constant" '
            'value: 20 } } }')
    model = keras_caffe.import_model(text)
    np.testing.assert_array_equal(model.get_layer("norm").caffe_blobs()[0], [20, 20, 20])
    x = to_keras_layout(RNG.randn(2, 3, 4, 4).astype("float32"), "channels_last")
    _, (grad,) = gradients(lambda feed: weighted_sum(model(feed), np.arange(3, dtype=np.float32)),
                           [x], model.trainable_variables)
    # d loss / d scale_c = sum over positions of x_c / norm * c
    expected = (normalize_reference(np.moveaxis(x, -1, 1), 1.0, False).sum((0, 2, 3))
                * np.arange(3))
    np.testing.assert_allclose(grad, expected, rtol=1e-4, atol=1e-4)


def shuffle_reference(x, group):
    """ShuffleChannelLayer: (N, g, C/g, H, W) -> (N, C/g, g, H, W)."""
    n, c = x.shape[:2]
    return x.reshape(n, group, c // group, *x.shape[2:]).swapaxes(1, 2).reshape(x.shape)


@pytest.mark.layer_type("ShuffleChannel")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("group", [1, 2, 3, 6])
def test_shuffle_channel(data_format, group):
    x = RNG.randn(2, 6, 3, 4).astype("float32")
    text = (f'layer {{ name: "shuffle" type: "ShuffleChannel" bottom: "x" top: "s" '
            f'shuffle_channel_param {{ group: {group} }} }}\n'
            'layer { name: "double" type: "Power" bottom: "s" top: "d" power_param { scale: 2 } }')
    out = run_layers(text, {"x": x}, data_format=data_format)["d"]
    np.testing.assert_array_equal(out, 2 * shuffle_reference(x, group))


@pytest.mark.layer_type("ShuffleChannel")
def test_shuffle_channel_group_must_divide_the_channels():
    text = ('layer { name: "shuffle" type: "ShuffleChannel" bottom: "x" top: "s" '
            'shuffle_channel_param { group: 4 } }')
    with pytest.raises(LayerError, match=r"layer 'shuffle': \(ShuffleChannel\) group 4 does not "
                                         r"divide the 6 channels"):
        run_layers(text, {"x": np.zeros((1, 6, 2, 2), "float32")})

"""Region against a numpy port of the Caffe ports' forward
(openvinotoolkit/training_toolbox_caffe src/caffe/layers/region_layer.cpp
``RegionLayer::Forward_cpu`` with ``entry_index``/``softmax_cpu``, the same
as sokeeffe/caffe_yolo's and darknet's ``forward_region_layer``; ``softmax``
false as darknet's forward without it), in both data formats, with the
refusals."""

import math

import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients

pytestmark = pytest.mark.kernels


def region_reference(x, classes, coords, num, softmax=True):
    """Forward_cpu: copy, then per image and anchor logistic on the 2*W*H
    values of entries 0-1 and the W*H of entry ``coords``; softmax (largest
    subtracted, in the port's order) over the classes of each cell."""
    batch, channels, height, width = x.shape
    flat = x.astype(np.float32).reshape(-1).copy()
    out = flat.copy()
    wh = width * height
    inputs = wh * num * (classes + coords + 1)

    def entry_index(b, location, entry):
        n, loc = location // wh, location % wh
        return b * inputs + n * wh * (coords + classes + 1) + entry * wh + loc

    def logistic(v):
        return np.float32(1.0 / (1.0 + math.exp(-float(v))))

    for b in range(batch):
        for n in range(num):
            index = entry_index(b, n * wh, 0)
            for i in range(index, index + 2 * wh):
                out[i] = logistic(out[i])
            index = entry_index(b, n * wh, coords)
            for i in range(index, index + wh):
                out[i] = logistic(out[i])
    if softmax:
        for b in range(batch):
            for n in range(num):
                base = entry_index(b, n * wh, coords + 1)
                for g in range(wh):
                    values = [flat[base + g + i * wh] for i in range(classes)]
                    largest = max(values)
                    e = [math.exp(float(v) - float(largest)) for v in values]
                    total = sum(e)
                    for i in range(classes):
                        out[base + g + i * wh] = np.float32(e[i] / total)
    return out.reshape(x.shape)


def region_text(params):
    return (f'layer {{ name: "reg" type: "Region" bottom: "data" top: "reg" '
            f"region_param {{ {params} }} }}\n")


@pytest.mark.layer_type("Region")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape, classes, coords, num, softmax", [
    ((2, 25 * 5, 3, 4), 20, 4, 5, True),    # YOLOv2 VOC head, non-square
    ((1, 2 * 8, 5, 5), 3, 4, 2, True),
    ((1, 6, 2, 3), 1, 4, 1, True),           # one class: probability 1
    ((2, 2 * 7, 3, 3), 2, 4, 2, False),      # classes pass through
    ((1, 3 * 6, 2, 2), 3, 2, 3, True),       # coords 2: no raw coordinate
    ((1, 2 * 9, 2, 2), 2, 6, 2, True),       # coords 6: four raw coordinates
])
def test_region_matches_the_ports(data_format, shape, classes, coords, num, softmax):
    x = (3 * np.random.default_rng(0).standard_normal(shape)).astype(np.float32)
    params = f"classes: {classes} coords: {coords} num: {num} softmax: {str(softmax).lower()}"
    got = run_layers(region_text(params), {"data": x}, data_format=data_format)["reg"]
    np.testing.assert_allclose(got, region_reference(x, classes, coords, num, softmax),
                               rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Region")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_region_defaults_and_biases(data_format):
    """Defaults: 20 classes, 4 coords, 5 anchors, softmax; biases (anchors)
    are read by the detection code, not by the layer."""
    x = np.random.default_rng(2).standard_normal((1, 125, 2, 2)).astype(np.float32)
    got = run_layers(region_text("biases: 1.08 biases: 1.19"), {"data": x},
                     data_format=data_format)["reg"]
    np.testing.assert_allclose(got, region_reference(x, 20, 4, 5), rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Region")
def test_region_has_no_gradient():
    """The ports' Backward_cpu does nothing: no gradient reaches the bottom."""
    model = import_model('layer { name: "in" type: "Input" top: "data" input_param { shape { '
                         'dim: 1 dim: 7 dim: 2 dim: 2 } } }\n'
                         + region_text("classes: 2 num: 1"), data_format="channels_first")
    (grad,), _ = gradients(lambda feed: ops.sum(model(feed)), [np.ones((1, 7, 2, 2), np.float32)])
    assert grad is None or not np.any(grad)


@pytest.mark.layer_type("Region")
def test_region_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 2 dim: 125 '
            'dim: 13 dim: 13 } } }\n' + region_text("classes: 20 num: 5"))
    row = analyze(text, batch=None).layers[-1]
    assert row.tops == (("reg", (2, 125, 13, 13)),)
    assert row.weight_shapes == () and row.forward_flops == 0


@pytest.mark.layer_type("Region")
@pytest.mark.parametrize("shape, params, message", [
    ((1, 24, 2, 2), "classes: 3 num: 2",
     r"\(Region\) needs num \* \(coords \+ 1 \+ classes\) = 2 \* 8 = 16 channels, got 24"),
    ((1, 8, 2, 2), "classes: 0 num: 2", r"\(Region\) region_param.classes must be positive, "
                                        r"got 0"),
    ((1, 8, 2, 2), "classes: 3 num: 0", r"\(Region\) region_param.num must be positive, got 0"),
    ((1, 8, 2, 2), "classes: 3 coords: 1 num: 2",
     r"\(Region\) region_param.coords must be at least 2 \(x and y\), got 1"),
    ((2, 16), "classes: 3 num: 2", r"\(Region\) needs a 4-D input \(N, C, H, W\), got \(2, 16\)"),
])
def test_region_refusals(shape, params, message):
    with pytest.raises(LayerError, match=f"^layer 'reg': {message}$"):
        run_layers(region_text(params), {"data": np.zeros(shape, np.float32)})


@pytest.mark.layer_type("Region")
def test_region_refuses_a_loss_weight():
    text = ('layer { name: "reg" type: "Region" bottom: "data" top: "reg" loss_weight: 1 '
            'region_param { classes: 2 num: 1 } }\n')
    with pytest.raises(LayerError, match=r"^layer 'reg': \(Region\) has no backward \(the forks' "
                                         r"does nothing\), so its top cannot take a "
                                         r"loss_weight$"):
        run_layers(text, {"data": np.zeros((1, 7, 2, 2), np.float32)})


@pytest.mark.layer_type("Region")
def test_region_in_a_saved_model_round_trips(tmp_path):
    import keras

    model = import_model('layer { name: "in" type: "Input" top: "data" input_param { shape { '
                         'dim: 1 dim: 14 dim: 3 dim: 3 } } }\n' + region_text("classes: 2 num: 2"))
    path = tmp_path / "region.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    x = to_keras_layout(np.random.default_rng(3).standard_normal((1, 14, 3, 3)).astype(
        np.float32), "channels_last")
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6)

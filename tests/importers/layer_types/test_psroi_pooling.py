"""PSROIPooling (R-FCN) against a numpy port of daijifeng001/caffe-rfcn's
src/caffe/layers/psroi_pooling_layer.cpp ``PSROIPoolingForward_cpu`` (the
.cu kernel ``PSROIPoolingForward`` computes the same), its gradient against
finite differences of the port."""

import math

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def c_round(x):
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def psroi_reference(x, rois, output_dim, group_size, scale):
    """Per roi: corners rounded (the end + 1) and scaled, at least 0.1 wide;
    bin (ph, pw) spans [floor(ph*bh + y1), ceil((ph+1)*bh + y1)) clipped,
    of channel (c*g + ph)*g + pw; its mean, 0 when empty (float32 as Caffe)."""
    f = np.float32
    _, channels, height, width = x.shape
    out = np.zeros((len(rois), output_dim, group_size, group_size), np.float64)
    for n, (b, x1, y1, x2, y2) in enumerate(rois):
        sw, sh = f(c_round(x1)) * f(scale), f(c_round(y1)) * f(scale)
        ew, eh = f(c_round(x2) + 1.0) * f(scale), f(c_round(y2) + 1.0) * f(scale)
        bin_h = max(eh - sh, f(0.1)) / f(group_size)
        bin_w = max(ew - sw, f(0.1)) / f(group_size)
        for c in range(output_dim):
            for ph in range(group_size):
                for pw in range(group_size):
                    hs = min(max(math.floor(f(ph) * bin_h + sh), 0), height)
                    he = min(max(math.ceil(f(ph + 1) * bin_h + sh), 0), height)
                    ws = min(max(math.floor(f(pw) * bin_w + sw), 0), width)
                    we = min(max(math.ceil(f(pw + 1) * bin_w + sw), 0), width)
                    if he > hs and we > ws:
                        channel = (c * group_size + ph) * group_size + pw
                        out[n, c, ph, pw] = x[int(b), channel, hs:he, ws:we].mean()
    return out


LAYER = ('layer {{ name: "ps" type: "PSROIPooling" bottom: "data" bottom: "rois" top: "ps" '
         "psroi_pooling_param {{ {params} }} }}\n")

ROIS = np.array([
    [0, 0, 0, 15, 11],            # the whole map (scale 0.5)
    [1, 2.4, 3.6, 9.5, 7.5],      # rounding of the corners
    [1, 5, 5, 5, 5],              # one pixel
    [0, -10, -6, 4, 3],           # partly outside: clipped
    [1, 40, 30, 60, 50],          # outside: every bin empty
    [0, 8, 4, 6, 2],              # end before start: 0.1 wide
], np.float32)


@pytest.mark.layer_type("PSROIPooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("output_dim, group_size, scale", [(2, 3, 0.5), (3, 2, 1.0), (1, 4, 0.25)])
def test_psroi_pooling_matches_rfcn(data_format, output_dim, group_size, scale):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, output_dim * group_size ** 2, 8, 10)).astype(np.float32)
    params = f"spatial_scale: {scale} output_dim: {output_dim} group_size: {group_size}"
    got = run_layers(LAYER.format(params=params), {"data": x, "rois": ROIS},
                     data_format=data_format)["ps"]
    want = psroi_reference(x, ROIS, output_dim, group_size, scale)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("PSROIPooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_psroi_pooling_gradient(data_format):
    """d(sum(w * top))/dx along a random direction: Keras's gradient against
    a central difference of the (linear) port."""
    
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 18, 8, 10)).astype(np.float32)
    text = ('layer { name: "in" type: "Input" top: "data" top: "rois" input_param { '
            "shape { dim: 2 dim: 18 dim: 8 dim: 10 } shape { dim: 6 dim: 5 } } }\n"
            + LAYER.format(params="spatial_scale: 0.5 output_dim: 2 group_size: 3"))
    model = import_model(text, data_format=data_format)
    weights = rng.standard_normal((6, 2, 3, 3))
    direction = rng.standard_normal(x.shape)
    cotangent = to_keras_layout(weights, data_format).astype(np.float32)
    (grad, _), _ = gradients(lambda feed, rois: weighted_sum(model([feed, rois]), cotangent),
                             [to_keras_layout(x, data_format), ROIS])
    if data_format == "channels_last":
        grad = np.moveaxis(grad, -1, 1)
    eps = 1e-3
    plus = (psroi_reference(x + eps * direction, ROIS, 2, 3, 0.5) * weights).sum()
    minus = (psroi_reference(x - eps * direction, ROIS, 2, 3, 0.5) * weights).sum()
    np.testing.assert_allclose((grad * direction).sum(), (plus - minus) / (2 * eps), rtol=1e-4)


@pytest.mark.layer_type("PSROIPooling")
def test_psroi_pooling_shape_rule():
    text = ('layer { name: "in" type: "Input" top: "data" top: "rois" input_param { '
            "shape { dim: 1 dim: 1029 dim: 38 dim: 50 } shape { dim: 300 dim: 5 } } }\n"
            + LAYER.format(params="spatial_scale: 0.0625 output_dim: 21 group_size: 7"))
    row = analyze(text, batch=None).layers[-1]
    assert row.tops == (("ps", (300, 21, 7, 7)),)
    assert row.weights == 0


@pytest.mark.layer_type("PSROIPooling")
@pytest.mark.parametrize("params, shapes, message", [
    ("output_dim: 2 group_size: 3", ((1, 18, 4, 4), (3, 5)),
     "psroi_pooling_param.spatial_scale is required"),
    ("spatial_scale: 1 group_size: 3", ((1, 18, 4, 4), (3, 5)),
     "psroi_pooling_param.output_dim is required"),
    ("spatial_scale: 1 output_dim: 0 group_size: 3", ((1, 18, 4, 4), (3, 5)),
     "psroi_pooling_param.output_dim and group_size must be positive, got 0 and 3"),
    ("spatial_scale: 1 output_dim: 2 group_size: 3", ((1, 16, 4, 4), (3, 5)),
     "bottom 0 has 16 channels; output_dim * group_size^2 is 18"),
    ("spatial_scale: 1 output_dim: 2 group_size: 3", ((1, 18, 4, 4), (3, 4)),
     "bottom 1 must be the rois (R, 5), got (3, 4)"),
    ("spatial_scale: 1 output_dim: 2 group_size: 3", ((18, 4, 4), (3, 5)),
     "bottom 0 must be (N, C, H, W), got (18, 4, 4)"),
])
def test_psroi_pooling_bad_parameters(params, shapes, message):
    inputs = {"data": np.zeros(shapes[0], np.float32), "rois": np.zeros(shapes[1], np.float32)}
    with pytest.raises(LayerError) as err:
        run_layers(LAYER.format(params=params), inputs)
    assert str(err.value) == f"layer 'ps': (PSROIPooling) {message}"

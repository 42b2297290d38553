"""ROIPooling (Fast/Faster R-CNN) against a numpy port of
rbgirshick/caffe-fast-rcnn's roi_pooling_layer.cpp ``Forward_cpu``."""

import math

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def c_round(x):
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)


def roi_pooling_reference(x, rois, pooled_h, pooled_w, scale):
    """Per roi: corners scaled and rounded; region at least 1x1; bin ph spans
    [floor(ph*bh), ceil((ph+1)*bh)) from the start, clipped to the map; an
    empty bin gives 0, any other its maximum."""
    _, c, height, width = x.shape
    out = np.zeros((len(rois), c, pooled_h, pooled_w), np.float32)
    for r, (b, x1, y1, x2, y2) in enumerate(rois):
        sw, sh, ew, eh = (c_round(v * scale) for v in (x1, y1, x2, y2))
        bin_h = max(eh - sh + 1, 1) / pooled_h
        bin_w = max(ew - sw + 1, 1) / pooled_w
        for ph in range(pooled_h):
            for pw in range(pooled_w):
                hs = min(max(math.floor(ph * bin_h) + sh, 0), height)
                he = min(max(math.ceil((ph + 1) * bin_h) + sh, 0), height)
                ws = min(max(math.floor(pw * bin_w) + sw, 0), width)
                we = min(max(math.ceil((pw + 1) * bin_w) + sw, 0), width)
                if he > hs and we > ws:
                    out[r, :, ph, pw] = x[int(b), :, hs:he, ws:we].max(axis=(1, 2))
    return out


LAYER = ('layer {{ name: "pool" type: "ROIPooling" bottom: "data" bottom: "rois" top: "pool" '
         "roi_pooling_param {{ pooled_h: {h} pooled_w: {w} spatial_scale: {s} }} }}\n")


@pytest.mark.layer_type("ROIPooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("pooled, scale", [((2, 2), 1.0), ((3, 2), 0.0625), ((7, 7), 0.5)])
def test_roi_pooling_matches_fast_rcnn(data_format, pooled, scale):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    size = 1 / scale
    rois = np.array([
        [0, 0, 0, 11 * size, 9 * size],          # the whole map
        [1, 2 * size, 1 * size, 5 * size, 7 * size],
        [1, 3.5 * size, 2.5 * size, 3.5 * size, 2.5 * size],  # one pixel, .5 rounding
        [0, -4 * size, -3 * size, 2 * size, 1 * size],         # partly outside: clipped
        [0, 20 * size, 20 * size, 30 * size, 30 * size],       # outside: every bin empty
    ], np.float32)
    text = LAYER.format(h=pooled[0], w=pooled[1], s=scale)
    got = run_layers(text, {"data": x, "rois": rois}, data_format=data_format)["pool"]
    want = roi_pooling_reference(x, rois, *pooled, scale)
    np.testing.assert_array_equal(got, want)


@pytest.mark.layer_type("ROIPooling")
def test_roi_pooling_shape_rule():
    text = ('layer { name: "in" type: "Input" top: "data" top: "rois" input_param { '
            "shape { dim: 1 dim: 512 dim: 38 dim: 50 } shape { dim: 300 dim: 5 } } }\n"
            + LAYER.format(h=7, w=7, s=0.0625))
    row = analyze(text, batch=None).layers[-1]
    assert row.tops == (("pool", (300, 512, 7, 7)),)
    assert row.weights == 0


@pytest.mark.layer_type("ROIPooling")
@pytest.mark.parametrize("params, shapes, message", [
    (dict(h=0, w=2, s=1), ((1, 2, 4, 4), (3, 5)), "pooled_h and pooled_w must be positive"),
    (dict(h=2, w=2, s=1), ((1, 2, 4, 4), (3, 4)), r"bottom 1 must be the rois \(R, 5\)"),
    (dict(h=2, w=2, s=1), ((1, 2, 4), (3, 5)), r"bottom 0 must be \(N, C, H, W\)"),
])
def test_roi_pooling_bad_input(params, shapes, message):
    inputs = {"data": np.zeros(shapes[0], np.float32), "rois": np.zeros(shapes[1], np.float32)}
    with pytest.raises(LayerError, match=rf"layer 'pool': \(ROIPooling\) {message}"):
        run_layers(LAYER.format(**params), inputs)

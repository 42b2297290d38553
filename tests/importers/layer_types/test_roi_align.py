"""ROIAlign against a numpy port of Tencent/ncnn's src/layer/roialign.cpp
``ROIAlign::forward`` (version 0, ncnn's own, and 1, detectron2's) with
``bilinear_interpolate``, on rois with a batch index (the Caffe layers'
(R, 5)); its gradient against finite differences of the port."""

import math

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

f = np.float32


def bilinear(plane, x, y):
    """ncnn's bilinear_interpolate (x, y >= 0). Where ncnn would read past
    the map (a sample on or past the last row or column), the last one."""
    h, w = plane.shape
    x0, y0 = int(x), int(y)
    x1, y1 = x0 + 1, y0 + 1
    a0, a1 = f(x1) - x, x - f(x0)
    b0, b1 = f(y1) - y, y - f(y0)
    if x1 >= w:
        x1, a0, a1 = w - 1, f(1), f(0)
        x0 = min(x0, w - 1)
    if y1 >= h:
        y1, b0, b1 = h - 1, f(1), f(0)
        y0 = min(y0, h - 1)
    r0 = plane[y0, x0] * a0 + plane[y0, x1] * a1
    r1 = plane[y1, x0] * a0 + plane[y1, x1] * a1
    return r0 * b0 + r1 * b1


def roi_align_reference(x, rois, pooled_h, pooled_w, scale, sampling_ratio=0, aligned=False,
                        version=0):
    _, channels, h, w = x.shape
    out = np.zeros((len(rois), channels, pooled_h, pooled_w), np.float64)
    for n, roi in enumerate(rois):
        plane_of = x[int(roi[0])]
        x1, y1, x2, y2 = (f(v) * f(scale) for v in roi[1:])
        if aligned:
            x1, y1, x2, y2 = x1 - f(0.5), y1 - f(0.5), x2 - f(0.5), y2 - f(0.5)
        roi_w, roi_h = x2 - x1, y2 - y1
        if not aligned:
            roi_w, roi_h = max(roi_w, f(1)), max(roi_h, f(1))
        bin_w, bin_h = roi_w / f(pooled_w), roi_h / f(pooled_h)
        for q in range(channels):
            plane = plane_of[q]
            for ph in range(pooled_h):
                for pw in range(pooled_w):
                    if version == 0:
                        hs = min(max(y1 + f(ph) * bin_h, f(0)), f(h))
                        ws = min(max(x1 + f(pw) * bin_w, f(0)), f(w))
                        he = min(max(y1 + f(ph + 1) * bin_h, f(0)), f(h))
                        we = min(max(x1 + f(pw + 1) * bin_w, f(0)), f(w))
                        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(he - hs))
                        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(we - ws))
                        if he <= hs or we <= ws:
                            continue
                        total = 0.0
                        for by in range(gh):
                            y = hs + (f(by) + f(0.5)) * bin_h / f(gh)
                            for bx in range(gw):
                                xx = ws + (f(bx) + f(0.5)) * bin_w / f(gw)
                                total += bilinear(plane, xx, y)
                        out[n, q, ph, pw] = total / (gh * gw)
                    else:
                        gh, gw = (sampling_ratio, sampling_ratio) if sampling_ratio > 0 else (
                            int(math.ceil(roi_h / pooled_h)), int(math.ceil(roi_w / pooled_w)))
                        count = max(gh * gw, 1)
                        total = 0.0
                        for by in range(gh):
                            y = y1 + f(ph) * bin_h + (f(by) + f(0.5)) * bin_h / f(gh)
                            for bx in range(gw):
                                xx = x1 + f(pw) * bin_w + (f(bx) + f(0.5)) * bin_w / f(gw)
                                if y < -1.0 or y > h or xx < -1.0 or xx > w:
                                    continue
                                total += bilinear(plane, max(xx, f(0)), max(y, f(0)))
                        out[n, q, ph, pw] = total / count
    return out


LAYER = ('layer {{ name: "align" type: "ROIAlign" bottom: "data" bottom: "rois" top: "align" '
         "roi_align_param {{ {params} }} }}\n")

ROIS = np.array([
    [0, 0, 0, 19, 15],            # the whole map (scale 0.5)
    [1, 2.3, 3.7, 9.5, 12.1],
    [1, 5, 5, 5.5, 5.2],          # under a pixel: 1 x 1 (unaligned)
    [0, -10, -6, 4, 3],           # partly outside
    [1, 40, 30, 60, 50],          # outside: empty bins (version 0)
    [0, 14, 10, 30, 22],          # past the last row and column
], np.float32)


@pytest.mark.layer_type("ROIAlign")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, args", [
    ("pooled_h: 2 pooled_w: 3 spatial_scale: 0.5", dict(pooled_h=2, pooled_w=3, scale=0.5)),
    ("pooled_h: 3 pooled_w: 3 spatial_scale: 0.5 sampling_ratio: 2",
     dict(pooled_h=3, pooled_w=3, scale=0.5, sampling_ratio=2)),
    ("pooled_h: 2 pooled_w: 2 spatial_scale: 0.5 aligned: true",
     dict(pooled_h=2, pooled_w=2, scale=0.5, aligned=True)),
    ("pooled_h: 3 pooled_w: 2 spatial_scale: 0.5 version: 1",
     dict(pooled_h=3, pooled_w=2, scale=0.5, version=1)),
    ("pooled_h: 2 pooled_w: 2 spatial_scale: 0.25 sampling_ratio: 3 aligned: true version: 1",
     dict(pooled_h=2, pooled_w=2, scale=0.25, sampling_ratio=3, aligned=True, version=1)),
])
def test_roi_align_matches_ncnn(data_format, params, args):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 8, 10)).astype(np.float32)
    got = run_layers(LAYER.format(params=params), {"data": x, "rois": ROIS},
                     data_format=data_format)["align"]
    args = dict(args)
    want = roi_align_reference(x, ROIS, args.pop("pooled_h"), args.pop("pooled_w"),
                               args.pop("scale"), **args)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.layer_type("ROIAlign")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("version", [0, 1])
def test_roi_align_gradient(data_format, version):
    """d(sum(w * top))/dx along a random direction: Keras's gradient against
    a central difference of the (linear) port."""
    
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 8, 10)).astype(np.float32)
    text = ('layer { name: "in" type: "Input" top: "data" top: "rois" input_param { '
            "shape { dim: 2 dim: 3 dim: 8 dim: 10 } shape { dim: 6 dim: 5 } } }\n"
            + LAYER.format(params=f"pooled_h: 2 pooled_w: 3 spatial_scale: 0.5 "
                                  f"version: {version}"))
    model = import_model(text, data_format=data_format)
    weights = rng.standard_normal((6, 3, 2, 3))
    direction = rng.standard_normal(x.shape)
    cotangent = to_keras_layout(weights, data_format).astype(np.float32)
    (grad, _), _ = gradients(lambda feed, rois: weighted_sum(model([feed, rois]), cotangent),
                             [to_keras_layout(x, data_format), ROIS])
    if data_format == "channels_last":
        grad = np.moveaxis(grad, -1, 1)
    eps = 1e-2
    ref = lambda v: (roi_align_reference(v, ROIS, 2, 3, 0.5, version=version) * weights).sum()
    numeric = (ref(x + eps * direction) - ref(x - eps * direction)) / (2 * eps)
    np.testing.assert_allclose((grad * direction).sum(), numeric, rtol=1e-3)


@pytest.mark.layer_type("ROIAlign")
def test_roi_align_shape_rule():
    text = ('layer { name: "in" type: "Input" top: "data" top: "rois" input_param { '
            "shape { dim: 1 dim: 256 dim: 50 dim: 68 } shape { dim: 100 dim: 5 } } }\n"
            + LAYER.format(params="pooled_h: 14 pooled_w: 14 spatial_scale: 0.0625"))
    row = analyze(text, batch=None).layers[-1]
    assert row.tops == (("align", (100, 256, 14, 14)),)
    assert row.weights == 0


@pytest.mark.layer_type("ROIAlign")
@pytest.mark.parametrize("params, shapes, message", [
    ("pooled_w: 2", ((1, 2, 4, 4), (3, 5)),
     "roi_align_param.pooled_h and pooled_w must be positive, got 0 and 2"),
    ("pooled_h: 2 pooled_w: 2 sampling_ratio: -1", ((1, 2, 4, 4), (3, 5)),
     "roi_align_param.sampling_ratio must be 0 (adaptive) or positive, got -1"),
    ("pooled_h: 2 pooled_w: 2 version: 2", ((1, 2, 4, 4), (3, 5)),
     "roi_align_param.version must be 0 (ncnn) or 1 (detectron2), got 2"),
    ("pooled_h: 2 pooled_w: 2", ((1, 2, 4, 4), (3, 4)),
     "bottom 1 must be the rois (R, 5), got (3, 4)"),
])
def test_roi_align_bad_parameters(params, shapes, message):
    inputs = {"data": np.zeros(shapes[0], np.float32), "rois": np.zeros(shapes[1], np.float32)}
    with pytest.raises(LayerError) as err:
        run_layers(LAYER.format(params=params), inputs)
    assert str(err.value) == f"layer 'align': (ROIAlign) {message}"

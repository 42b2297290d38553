"""Correlation against a numpy port of FlowNet 2.0's (lmb-freiburg/flownet2):
``CorrelationLayer::Reshape`` (src/caffe/layers/correlation_layer.cpp) for the
shape, and the CUDA kernels that are its only forward
(src/caffe/layers/correlation_layer.cu: ``blob_rearrange_kernel2`` pads,
``CorrelateData`` for MULTIPLY, ``CorrelateDataSubtract`` for SUBTRACT),
looped as the kernels loop; the gradient (MULTIPLY, the kernels
``CorrelateDataBackward0/1`` compute the exact derivative) against central
finite differences of the port."""

import math

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def correlation_reference(a, b, pad, k, md, s1=1, s2=1, subtract=False):
    """Reshape's sizes, then the kernels: the bottoms zero-padded, for each
    top (x, y) and channel tc the patch at (x * s1 + md, y * s1 + md) (its
    upper-left corner; SUBTRACT's kernel names its centre, the same place)
    against the second bottom displaced by ((tc % w - r) * s2,
    (tc / w - r) * s2), summed over the patch and the channels, / (k*k*C)."""
    n, c, h, w = a.shape
    pa = np.zeros((n, c, h + 2 * pad, w + 2 * pad), np.float64)
    pb = np.zeros_like(pa)
    pa[:, :, pad:pad + h, pad:pad + w] = a
    pb[:, :, pad:pad + h, pad:pad + w] = b
    kr = (k - 1) // 2
    border = md + kr
    top_w = math.ceil((w + 2 * pad - 2 * border) / s1)
    top_h = math.ceil((h + 2 * pad - 2 * border) / s1)
    r = md // s2
    gw = 2 * r + 1
    top = np.zeros((n, gw * gw, top_h, top_w))
    for item in range(n):
        for by in range(top_h):
            for bx in range(top_w):
                x1, y1 = bx * s1 + md, by * s1 + md
                patch = pa[item, :, y1:y1 + k, x1:x1 + k]
                for tc in range(gw * gw):
                    s2o = (tc % gw - r) * s2
                    s2p = (tc // gw - r) * s2
                    other = pb[item, :, y1 + s2p:y1 + s2p + k, x1 + s2o:x1 + s2o + k]
                    total = np.abs(patch - other).sum() if subtract else (patch * other).sum()
                    top[item, tc, by, bx] = total / (k * k * c)
    return top


def corr_text(params):
    return ('layer { name: "corr" type: "Correlation" bottom: "a" bottom: "b" top: "corr" '
            f"correlation_param {{ {params} }} }}\n")


CASES = {
    # params, input (c, h, w), (pad, k, md, s1, s2, subtract)
    "flownetc_like": ("pad: 4 kernel_size: 1 max_displacement: 4 stride_1: 1 stride_2: 2",
                      (4, 6, 7), (4, 1, 4, 1, 2, False)),
    "kernel_3": ("pad: 3 kernel_size: 3 max_displacement: 2", (3, 5, 6), (3, 3, 2, 1, 1, False)),
    # no padding: the displacements reach the input's border exactly
    "no_pad_border": ("kernel_size: 3 max_displacement: 2", (2, 7, 8), (0, 3, 2, 1, 1, False)),
    # stride_1 2 over odd sizes: ceil
    "stride_1_odd": ("pad: 2 kernel_size: 1 max_displacement: 2 stride_1: 2", (3, 7, 9),
                     (2, 1, 2, 2, 1, False)),
    "stride_2_not_dividing": ("pad: 3 kernel_size: 1 max_displacement: 3 stride_2: 2",
                              (2, 5, 5), (3, 1, 3, 1, 2, False)),
    "stride_2_over_displacement": ("pad: 1 kernel_size: 3 max_displacement: 1 stride_2: 2",
                                   (2, 4, 6), (1, 3, 1, 1, 2, False)),
    "pad_over_border": ("pad: 3 kernel_size: 1 max_displacement: 1", (2, 3, 4),
                        (3, 1, 1, 1, 1, False)),
    "subtract": ("pad: 2 kernel_size: 3 max_displacement: 1 stride_1: 2 "
                 "correlation_type: SUBTRACT", (3, 6, 5), (2, 3, 1, 2, 1, True)),
    # read by nothing in the 2-D layer
    "do_abs_single_direction": ("pad: 2 kernel_size: 1 max_displacement: 2 do_abs: true "
                                "single_direction: 1", (2, 5, 5), (2, 1, 2, 1, 1, False)),
}


@pytest.mark.layer_type("Correlation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_correlation_matches_the_fork(case, data_format):
    params, (c, h, w), args = CASES[case]
    rng = np.random.default_rng(0)
    a = rng.standard_normal((2, c, h, w)).astype(np.float32)
    b = rng.standard_normal((2, c, h, w)).astype(np.float32)
    got = run_layers(corr_text(params), {"a": a, "b": b}, data_format=data_format)["corr"]
    expected = correlation_reference(a, b, *args)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Correlation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_correlation_of_a_shifted_map_peaks_at_the_shift(data_format):
    """Channel order: x displacement fastest, y slower, as the kernels'."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal((1, 8, 9, 9)).astype(np.float32)
    b = np.roll(a, shift=(1, -2), axis=(2, 3))  # b[y + 1, x - 2] = a[y, x]
    got = run_layers(corr_text("pad: 3 kernel_size: 1 max_displacement: 3"), {"a": a, "b": b},
                     data_format=data_format)["corr"]
    peak = np.argmax(got[0, :, 4, 4])
    assert (peak % 7 - 3, peak // 7 - 3) == (-2, 1)


@pytest.mark.layer_type("Correlation")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_correlation_gradient(data_format):
    rng = np.random.default_rng(4)
    args = (2, 3, 1, 2, 1, False)
    a = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    b = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    text = ('layer { name: "in" type: "Input" top: "a" top: "b" input_param { '
            'shape { dim: 1 dim: 2 dim: 5 dim: 6 } shape { dim: 1 dim: 2 dim: 5 dim: 6 } } }\n'
            + corr_text("pad: 2 kernel_size: 3 max_displacement: 1 stride_1: 2"))
    model = import_model(text, data_format=data_format)
    cotangent = rng.standard_normal(correlation_reference(a, b, *args).shape)
    top = to_keras_layout(cotangent.astype(np.float32), data_format)
    grads, _ = gradients(lambda *feeds: weighted_sum(model(list(feeds)), top),
                         [to_keras_layout(v, data_format) for v in (a, b)])
    grads = [from_keras_layout(g, data_format) for g in grads]
    da, db = rng.standard_normal(a.shape), rng.standard_normal(b.shape)
    eps = 1e-3

    def value(x, y):
        return np.sum(correlation_reference(x, y, *args) * cotangent)

    numeric = (value(a + eps * da, b + eps * db) - value(a - eps * da, b - eps * db)) / (2 * eps)
    assert np.sum(grads[0] * da) + np.sum(grads[1] * db) == pytest.approx(numeric, rel=1e-4)


@pytest.mark.layer_type("Correlation")
def test_flownetc_correlation_in_analyze():
    """FlowNetC's corr layer (pad 20, kernel 1, displacement 20, stride_2 2)
    on conv3's (256, 48, 64): 441 channels, the spatial size kept."""
    text = ('layer { name: "in" type: "Input" top: "a" top: "b" input_param { '
            'shape { dim: 1 dim: 256 dim: 48 dim: 64 } shape { dim: 1 dim: 256 dim: 48 dim: 64 '
            '} } }\n' + corr_text("pad: 20 kernel_size: 1 max_displacement: 20 stride_1: 1 "
                                  "stride_2: 2"))
    row = analyze(text).layers[-1]
    assert row.tops == (("corr", (1, 441, 48, 64)),)
    assert row.weight_shapes == ()


def _refused(params, message, shapes=((1, 2, 5, 5), (1, 2, 5, 5)), bottoms=("a", "b")):
    inputs = {name: np.zeros(shape, np.float32) for name, shape in zip(bottoms, shapes)}
    text = ('layer { name: "corr" type: "Correlation" '
            + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "corr" correlation_param {{ {params} }} }}\n')
    with pytest.raises(LayerError, match="^layer 'corr': " + message + "$"):
        run_layers(text, inputs)


@pytest.mark.layer_type("Correlation")
@pytest.mark.parametrize("params, message", [
    ("max_displacement: 1", r"\(Correlation\) kernel_size is required"),
    ("kernel_size: 1", r"\(Correlation\) max_displacement is required"),
    ("kernel_size: 2 max_displacement: 1", r"\(Correlation\) kernel_size must be odd, got 2"),
    ("kernel_size: 1 max_displacement: 1 stride_1: 0",
     r"\(Correlation\) stride_1 must be positive, got 0"),
    ("kernel_size: 1 max_displacement: 1 stride_2: 0",
     r"\(Correlation\) stride_2 must be positive, got 0"),
    ("kernel_size: 3 max_displacement: 2", r"\(Correlation\) kernel_size 3 and max_displacement "
                                           r"2 do not fit in the input \(1, 2, 5, 5\) padded "
                                           r"by 0"),
])
def test_correlation_bad_parameters(params, message):
    _refused(params, message)


@pytest.mark.layer_type("Correlation")
def test_correlation_bottoms_must_match():
    _refused("kernel_size: 1 max_displacement: 1 pad: 1",
             r"\(Correlation\) both bottoms must have one shape, got \(1, 2, 5, 5\) and "
             r"\(1, 3, 5, 5\)", shapes=((1, 2, 5, 5), (1, 3, 5, 5)))
    _refused("kernel_size: 1 max_displacement: 1", r"\(Correlation\) takes 2 bottom\(s\), got 1",
             shapes=((1, 2, 5, 5),), bottoms=("a",))

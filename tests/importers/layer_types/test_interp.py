"""Interp against a numpy port of PSPNet's (hszhao/PSPNet, the same as
DeepLab v2's): ``InterpLayer::Reshape`` (src/caffe/layers/interp_layer.cpp)
for the output size, ``caffe_cpu_interp2`` (src/caffe/util/interp.cpp, the
unpacked case, float32 arithmetic) for the values, and
``caffe_cpu_interp2_backward`` for the gradient (the adjoint)."""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers
from support.layer_gradients import backward

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def _weights(size1, size2, o):
    """One axis of caffe_cpu_interp2's loop, in float32 as the fork's."""
    ratio = F(size1 - 1) / F(size2 - 1) if size2 > 1 else F(0)
    real = F(ratio * F(o))
    i = int(real)
    step = 1 if i < size1 - 1 else 0
    lam1 = F(real - F(i))
    return i, step, F(F(1) - lam1), lam1


def interp_forward(x, pad_beg, pad_end, height2, width2):
    """InterpLayer::Forward_cpu: caffe_cpu_interp2<float, false> over the
    N*C planes, reading the input cropped at (-pad_beg, -pad_beg) to
    (height1, width1) = (H, W) + pad_beg + pad_end."""
    n, c, h_in, w_in = x.shape
    height1, width1 = h_in + pad_beg + pad_end, w_in + pad_beg + pad_end
    x1 = y1 = -pad_beg
    top = np.zeros((n, c, height2, width2), F)
    if height1 == height2 and width1 == width2:
        return x[:, :, y1:y1 + height1, x1:x1 + width1].copy()
    for h2 in range(height2):
        h1, h1p, h0l, h1l = _weights(height1, height2, h2)
        for w2 in range(width2):
            w1, w1p, w0l, w1l = _weights(width1, width2, w2)
            a = x[:, :, y1 + h1, x1 + w1]
            b = x[:, :, y1 + h1, x1 + w1 + w1p]
            cc = x[:, :, y1 + h1 + h1p, x1 + w1]
            d = x[:, :, y1 + h1 + h1p, x1 + w1 + w1p]
            top[:, :, h2, w2] = h0l * (w0l * a + w1l * b) + h1l * (w0l * cc + w1l * d)
    return top


def interp_backward(top_diff, shape, pad_beg, pad_end):
    """caffe_cpu_interp2_backward: the bottom's diff (accumulated)."""
    n, c, h_in, w_in = shape
    height1, width1 = h_in + pad_beg + pad_end, w_in + pad_beg + pad_end
    height2, width2 = top_diff.shape[2:]
    x1 = y1 = -pad_beg
    diff = np.zeros(shape, np.float64)
    if height1 == height2 and width1 == width2:
        diff[:, :, y1:y1 + height1, x1:x1 + width1] += top_diff
        return diff
    for h2 in range(height2):
        h1, h1p, h0l, h1l = _weights(height1, height2, h2)
        for w2 in range(width2):
            w1, w1p, w0l, w1l = _weights(width1, width2, w2)
            g = top_diff[:, :, h2, w2]
            diff[:, :, y1 + h1, x1 + w1] += h0l * w0l * g
            diff[:, :, y1 + h1, x1 + w1 + w1p] += h0l * w1l * g
            diff[:, :, y1 + h1 + h1p, x1 + w1] += h1l * w0l * g
            diff[:, :, y1 + h1 + h1p, x1 + w1 + w1p] += h1l * w1l * g
    return diff


def interp_text(params, bottoms=("data",)):
    return ('layer { name: "interp" type: "Interp" ' + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "interp" interp_param {{ {params} }} }}\n')


CASES = {
    # params, input (h, w), pad_beg, pad_end, output (h, w)
    "zoom_8": ("zoom_factor: 8", (4, 5), 0, 0, (25, 33)),      # PSPNet's conv6_interp
    "shrink_2": ("shrink_factor: 2", (9, 8), 0, 0, (5, 4)),
    "shrink_then_zoom": ("shrink_factor: 2 zoom_factor: 3", (9, 8), 0, 0, (13, 10)),
    "height_width_up": ("height: 60 width: 45", (7, 6), 0, 0, (60, 45)),  # the pyramid pooling
    "height_width_down": ("height: 3 width: 5", (11, 7), 0, 0, (3, 5)),
    "one_row_out": ("height: 1 width: 4", (5, 6), 0, 0, (1, 4)),
    "one_row_in": ("zoom_factor: 3", (1, 4), 0, 0, (1, 10)),
    "crop": ("zoom_factor: 2 pad_beg: -1 pad_end: -2", (8, 9), -1, -2, (9, 11)),
    "crop_only": ("height: 5 width: 6 pad_beg: -1 pad_end: -2", (8, 9), -1, -2, (5, 6)),
    "same_height": ("height: 6 width: 11", (6, 4), 0, 0, (6, 11)),
    # height/width win over both factors (Reshape's third case comes first).
    "size_over_factors": ("shrink_factor: 2 zoom_factor: 2 height: 4 width: 4", (7, 7), 0, 0,
                          (4, 4)),
}


@pytest.mark.layer_type("Interp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_interp_matches_the_fork(case, data_format):
    params, (h, w), pad_beg, pad_end, size = CASES[case]
    x = np.random.default_rng(0).standard_normal((2, 3, h, w)).astype(F)
    got = run_layers(interp_text(params), {"data": x}, data_format=data_format)["interp"]
    expected = interp_forward(x, pad_beg, pad_end, *size)
    assert got.shape == expected.shape == (2, 3, *size)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Interp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_interp_second_bottom_gives_the_size(data_format):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 4, 6)).astype(F)
    ref = rng.standard_normal((2, 5, 9, 7)).astype(F)
    got = run_layers(interp_text("", ("data", "ref")), {"data": x, "ref": ref},
                     data_format=data_format)["interp"]
    np.testing.assert_allclose(got, interp_forward(x, 0, 0, 9, 7), rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Interp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_interp_keeps_the_forks_zero_weighted_neighbours(data_format):
    """The fork multiplies the next row by a 0 weight where the row falls
    exactly on an input row, so an inf there gives NaN, as here."""
    x = np.ones((1, 1, 3, 3), F)
    x[0, 0, 2, 1] = np.inf
    got = run_layers(interp_text("height: 5 width: 4"), {"data": x},
                     data_format=data_format)["interp"]
    with np.errstate(invalid="ignore"):
        expected = interp_forward(x, 0, 0, 5, 4)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(expected))
    finite = np.isfinite(expected)
    np.testing.assert_allclose(got[finite], expected[finite], rtol=1e-6)


@pytest.mark.layer_type("Interp")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["zoom_8", "shrink_2", "crop", "crop_only", "height_width_down"])
def test_interp_gradient_is_the_adjoint(case, data_format):
    """Keras's gradient against caffe_cpu_interp2_backward, and against
    central finite differences of the forward (the layer is linear)."""
    params, (h, w), pad_beg, pad_end, size = CASES[case]
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, h, w)).astype(F)
    cotangent = rng.standard_normal((1, 2, *size)).astype(F)
    model = import_model(
        'layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 '
        f'dim: {h} dim: {w} }} }} }}\n' + interp_text(params), data_format=data_format)
    grad, _ = backward(model, x, cotangent, data_format)
    adjoint = interp_backward(cotangent.astype(np.float64), x.shape, pad_beg, pad_end)
    np.testing.assert_allclose(grad, adjoint, rtol=1e-5, atol=1e-5)
    probe = rng.standard_normal(x.shape)
    eps = 1e-2
    plus = interp_forward((x + eps * probe).astype(F), pad_beg, pad_end, *size)
    minus = interp_forward((x - eps * probe).astype(F), pad_beg, pad_end, *size)
    numeric = np.sum((plus.astype(np.float64) - minus) * cotangent) / (2 * eps)
    assert np.sum(grad * probe) == pytest.approx(numeric, rel=1e-3, abs=1e-3)


@pytest.mark.layer_type("Interp")
def test_interp_in_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 21 '
            'dim: 60 dim: 60 } } }\n' + interp_text("zoom_factor: 8"))
    row = analyze(text).layers[-1]
    assert row.tops == (("interp", (1, 21, 473, 473)),)  # PSPNet's 473 x 473 output
    assert row.weight_shapes == ()


def _refused(params, message, shape=(1, 2, 5, 5), bottoms=None):
    inputs = bottoms or {"data": np.zeros(shape, F)}
    with pytest.raises(LayerError, match="^layer 'interp': " + message + "$"):
        run_layers(interp_text(params, tuple(inputs)), inputs)


@pytest.mark.layer_type("Interp")
@pytest.mark.parametrize("params, message", [
    ("zoom_factor: 2 pad_beg: 1", r"\(Interp\) pad_beg and pad_end must be 0 or negative \(the "
                                  r"fork only crops\), got 1 and 0"),
    ("zoom_factor: 2 pad_end: 2", r"\(Interp\) pad_beg and pad_end must be 0 or negative \(the "
                                  r"fork only crops\), got 0 and 2"),
    ("zoom_factor: 2 pad_beg: -3 pad_end: -2", r"\(Interp\) pad_beg -3 and pad_end -2 crop away "
                                               r"all of the input \(1, 2, 5, 5\)"),
    ("", r"\(Interp\) needs zoom_factor, shrink_factor \(or both\), or height and width"),
    ("height: 4", r"\(Interp\) needs zoom_factor, shrink_factor \(or both\), or height and width"),
    ("zoom_factor: 0", r"\(Interp\) zoom_factor must be positive, got 0"),
    ("shrink_factor: -1 zoom_factor: 2", r"\(Interp\) shrink_factor must be positive, got -1"),
    ("height: 0 width: 3", r"\(Interp\) the output size \(0, 3\) must be positive"),
])
def test_interp_bad_parameters(params, message):
    _refused(params, message)


@pytest.mark.layer_type("Interp")
def test_interp_second_bottom_takes_no_size_fields():
    bottoms = {"data": np.zeros((1, 2, 5, 5), F), "ref": np.zeros((1, 2, 7, 7), F)}
    _refused("zoom_factor: 2 height: 3", r"\(Interp\) with a second bottom \(which gives the "
                                         r"output size\) takes no zoom_factor, height",
             bottoms=bottoms)


@pytest.mark.layer_type("Interp")
def test_interp_second_bottom_must_match_the_batch():
    bottoms = {"data": np.zeros((2, 2, 5, 5), F), "ref": np.zeros((1, 7, 7), F)}
    _refused("", r"\(Interp\) the second bottom \(1, 7, 7\) must be 4-D with the input's batch 2",
             bottoms=bottoms)


@pytest.mark.layer_type("Interp")
def test_interp_needs_a_4d_input():
    _refused("zoom_factor: 2", r"\(Interp\) needs a 4-D input \(N, C, H, W\), got \(1, 2, 5\)",
             shape=(1, 2, 5))

"""Accum against a numpy port of FlowNet 2.0's (lmb-freiburg/flownet2,
src/caffe/layers/accum_layer.cpp): ``AccumLayer::Reshape`` for the size,
``Forward_cpu`` for the values (float32 positions, the flat source index
and its neighbours clamped to the blob's count as the fork reads them) and
``Backward_cpu`` for the gradient."""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def _taps(bottom_shape, top_h, top_w):
    """Forward_cpu's loop: per (n, c, h, w) the four flat indices and weights."""
    n, c, bh, bw = bottom_shape
    count = n * c * bh * bw
    for cn in range(n * c):
        for h in range(top_h):
            for w in range(top_w):
                xpos = F(F(w) / F(top_w - 1) * F(bw - 1))
                ypos = F(F(h) / F(top_h - 1) * F(bh - 1))
                tlx, tly = F(np.floor(xpos)), F(np.floor(ypos))
                off = int(bw * (bh * cn + tly) + tlx)
                xd, yd = F(xpos - tlx), F(ypos - tly)
                yield cn, h, w, (
                    (off, (F(1) - xd) * (F(1) - yd)),
                    (min(off + 1 + bw, count), xd * yd),
                    (min(off + bw, count), (F(1) - xd) * yd),
                    (min(off + 1, count), xd * (F(1) - yd)))


def accum_forward(bottoms, top_h, top_w):
    """Each bottom resized, the channels concatenated (the flat reads past
    the blob's end, which only a zero weight meets, read 0 here)."""
    parts = []
    for x in bottoms:
        n, c = x.shape[:2]
        flat = np.append(x.reshape(-1), F(0))
        top = np.zeros((n * c, top_h, top_w), F)
        for cn, h, w, taps in _taps(x.shape, top_h, top_w):
            top[cn, h, w] = sum(weight * flat[i] for i, weight in taps)
        parts.append(top.reshape(n, c, top_h, top_w))
    return np.concatenate(parts, axis=1)


def accum_backward(bottom_shapes, top_diff):
    """Backward_cpu: the adjoint, neighbours past the row or column skipped."""
    diffs, start = [], 0
    top_h, top_w = top_diff.shape[2:]
    for shape in bottom_shapes:
        n, c, bh, bw = shape
        diff = np.zeros(n * c * bh * bw)
        g = top_diff[:, start:start + c].reshape(n * c, top_h, top_w)
        for cn, h, w, taps in _taps(shape, top_h, top_w):
            (tl, w_tl), (br, w_br), (bl, w_bl), (tr, w_tr) = taps
            xpos = F(F(w) / F(top_w - 1) * F(bw - 1))
            ypos = F(F(h) / F(top_h - 1) * F(bh - 1))
            right, down = np.floor(xpos) + 1 < bw, np.floor(ypos) + 1 < bh
            diff[tl] += w_tl * g[cn, h, w]
            if right:
                diff[tr] += w_tr * g[cn, h, w]
            if down:
                diff[bl] += w_bl * g[cn, h, w]
            if right and down:
                diff[br] += w_br * g[cn, h, w]
        diffs.append(diff.reshape(shape))
        start += c
    return diffs


def accum_text(params, bottoms):
    return ('layer { name: "accum" type: "Accum" ' + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "accum" accum_param {{ {params} }} }}\n')


CASES = {
    # params, bottom shapes, reference?, top (h, w)
    "largest": ("", [(2, 2, 4, 5), (2, 3, 7, 6)], False, (7, 6)),
    "custom_larger": ("top_height: 9 top_width: 11", [(1, 2, 4, 5), (1, 1, 3, 3)], False, (9, 11)),
    # only one axis larger: the largest bottom's size (both must exceed)
    "custom_one_axis": ("top_height: 9 top_width: 4", [(1, 2, 4, 5)], False, (4, 5)),
    "divisible": ("size_divisible_by: 4", [(2, 2, 5, 6), (2, 1, 3, 3)], False, (8, 8)),
    "divisible_already": ("size_divisible_by: 3", [(1, 1, 6, 9)], False, (6, 9)),
    "reference": ("have_reference: true", [(2, 2, 3, 4), (2, 1, 5, 2), (2, 4, 6, 5)], True,
                  (6, 5)),
    "shrink_by_reference": ("have_reference: true", [(1, 2, 9, 7), (1, 1, 4, 3)], True, (4, 3)),
    "one_row_bottom": ("", [(1, 2, 1, 4), (1, 1, 5, 6)], False, (5, 6)),
}


@pytest.mark.layer_type("Accum")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_accum_matches_the_fork(case, data_format):
    params, shapes, reference, size = CASES[case]
    rng = np.random.default_rng(0)
    names = [f"b{i}" for i in range(len(shapes))]
    inputs = {n: rng.standard_normal(s).astype(F) for n, s in zip(names, shapes)}
    got = run_layers(accum_text(params, names), inputs, data_format=data_format)["accum"]
    given = list(inputs.values())[:-1] if reference else list(inputs.values())
    expected = accum_forward(given, *size)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Accum")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_accum_gradient_is_the_forks(data_format):
    rng = np.random.default_rng(1)
    shapes = [(1, 2, 3, 4), (1, 1, 5, 6)]
    xs = [rng.standard_normal(s).astype(F) for s in shapes]
    text = ('layer { name: "in" type: "Input" top: "b0" top: "b1" input_param { '
            'shape { dim: 1 dim: 2 dim: 3 dim: 4 } shape { dim: 1 dim: 1 dim: 5 dim: 6 } } }\n'
            + accum_text("top_height: 7 top_width: 9", ["b0", "b1"]))
    model = import_model(text, data_format=data_format)
    cotangent = rng.standard_normal((1, 3, 7, 9)).astype(F)
    top = to_keras_layout(cotangent, data_format)
    grads, _ = gradients(lambda *feeds: weighted_sum(model(list(feeds)), top),
                         [to_keras_layout(x, data_format) for x in xs])
    grads = [from_keras_layout(g, data_format) for g in grads]
    for got, want in zip(grads, accum_backward(shapes, cotangent)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Accum")
def test_accum_in_analyze():
    text = ('layer { name: "in" type: "Input" top: "a" top: "b" input_param { '
            'shape { dim: 1 dim: 2 dim: 5 dim: 6 } shape { dim: 1 dim: 3 dim: 2 dim: 2 } } }\n'
            + accum_text("size_divisible_by: 4", ["a", "b"]))
    row = analyze(text).layers[-1]
    assert row.tops == (("accum", (1, 5, 8, 8)),)


def _refused(params, message, shapes=((1, 2, 5, 5),)):
    names = [f"b{i}" for i in range(len(shapes))]
    inputs = {n: np.zeros(s, F) for n, s in zip(names, shapes)}
    with pytest.raises(LayerError, match="^layer 'accum': " + message + "$"):
        run_layers(accum_text(params, names), inputs)


@pytest.mark.layer_type("Accum")
@pytest.mark.parametrize("params, shapes, message", [
    ("have_reference: true", ((1, 2, 5, 5),), r"\(Accum\) takes 2 or more bottom\(s\), got 1"),
    ("size_divisible_by: 0", ((1, 2, 5, 5),),
     r"\(Accum\) size_divisible_by must be positive, got 0"),
    ("", ((1, 2, 1, 5),), r"\(Accum\) the output size \(1, 5\) must be at least 2 in each axis "
                          r"\(the fork divides by size - 1\)"),
    ("", ((1, 2, 5, 5), (2, 1, 5, 5)), r"\(Accum\) all bottoms must have one batch size, got "
                                       r"\(1, 2, 5, 5\), \(2, 1, 5, 5\)"),
    ("", ((1, 2, 5),), r"\(Accum\) needs 4-D bottoms \(N, C, H, W\), got \(1, 2, 5\)"),
])
def test_accum_bad_parameters(params, shapes, message):
    _refused(params, message, shapes)

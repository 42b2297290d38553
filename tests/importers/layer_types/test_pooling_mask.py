"""MAX Pooling's second top, the argmax mask (SegNet's Upsample reads it),
against a numpy port of Caffe's ``PoolingLayer::Forward_cpu`` (BVLC and
alexgkendall/caffe-segnet, src/caffe/layers/pooling_layer.cpp, the MAX case
with ``use_top_mask``): per window ``[max(hstart, 0), min(hstart + k, H))``
(likewise w), the top starts at -FLT_MAX and the mask at -1, and a cell
replaces them only if strictly greater, so the first maximum of the scan
(rows, then columns) wins; the mask holds ``h * W + w`` in the input plane."""

import math

import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers, to_keras_layout
from support.layer_gradients import gradients

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

FLT_MAX = np.finfo(np.float32).max


def pooled_size(size, k, s, p, ceil=True):
    """PoolingLayer::Reshape along one axis."""
    out = (math.ceil((size + 2 * p - k) / s) if ceil else (size + 2 * p - k) // s) + 1
    return out - 1 if p and (out - 1) * s >= size + p else out


def max_pool_with_mask(x, kernel, stride, pad, ceil=True):
    """Caffe's MAX Forward_cpu loops with a top mask: (top, mask)."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    oh, ow = pooled_size(h, kh, sh, ph, ceil), pooled_size(w, kw, sw, pw, ceil)
    top = np.full((n, c, oh, ow), -FLT_MAX, np.float32)
    mask = np.full((n, c, oh, ow), -1.0, np.float32)
    for b in range(n):
        for ch in range(c):
            plane = x[b, ch].reshape(-1)
            for i in range(oh):
                for j in range(ow):
                    hstart, wstart = i * sh - ph, j * sw - pw
                    hend, wend = min(hstart + kh, h), min(wstart + kw, w)
                    for hh in range(max(hstart, 0), hend):
                        for ww in range(max(wstart, 0), wend):
                            index = hh * w + ww
                            if plane[index] > top[b, ch, i, j]:
                                top[b, ch, i, j] = plane[index]
                                mask[b, ch, i, j] = index
    return top, mask


def pool_text(params, tops=("pool", "mask")):
    return ('layer { name: "pool" type: "Pooling" bottom: "data" '
            + "".join(f'top: "{t}" ' for t in tops) + f"pooling_param {{ {params} }} }}\n")


def run_pool(params, x, data_format):
    return run_layers(pool_text(params), {"data": x}, data_format=data_format,
                      outputs=["pool", "mask"])


CASES = {
    # params, kernel, stride, pad, ceil
    "segnet_2x2": ("pool: MAX kernel_size: 2 stride: 2", (2, 2), (2, 2), (0, 0), True),
    "overlap_pad": ("pool: MAX kernel_size: 3 stride: 2 pad: 1", (3, 3), (2, 2), (1, 1), True),
    "ceil_extra": ("pool: MAX kernel_size: 3 stride: 2", (3, 3), (2, 2), (0, 0), True),
    "rectangular": ("pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 0",
                    (3, 2), (1, 2), (1, 0), True),
    "floor": ("pool: MAX kernel_size: 2 stride: 2 round_mode: FLOOR", (2, 2), (2, 2), (0, 0),
              False),
    "pad_2": ("pool: MAX kernel_size: 4 stride: 3 pad: 2", (4, 4), (3, 3), (2, 2), True),
}


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(CASES))
def test_mask_matches_caffe(case, data_format):
    params, kernel, stride, pad, ceil = CASES[case]
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 11)).astype(np.float32)
    out = run_pool(params, x, data_format)
    top, mask = max_pool_with_mask(x, kernel, stride, pad, ceil)
    assert out["mask"].shape == mask.shape
    np.testing.assert_array_equal(out["mask"], mask)
    np.testing.assert_array_equal(out["pool"], top)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["segnet_2x2", "overlap_pad", "rectangular"])
def test_ties_keep_the_first_maximum(case, data_format):
    """Few distinct values: most windows hold their maximum more than once."""
    params, kernel, stride, pad, ceil = CASES[case]
    x = np.random.default_rng(1).integers(0, 3, (2, 2, 8, 7)).astype(np.float32)
    out = run_pool(params, x, data_format)
    top, mask = max_pool_with_mask(x, kernel, stride, pad, ceil)
    np.testing.assert_array_equal(out["mask"], mask)
    np.testing.assert_array_equal(out["pool"], top)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_padded_cells_are_never_the_maximum(data_format):
    """All values negative: a zero-padded pool would pick the pad."""
    x = -np.random.default_rng(2).uniform(1, 2, (1, 2, 5, 5)).astype(np.float32)
    out = run_pool("pool: MAX kernel_size: 3 stride: 2 pad: 2", x, data_format)
    top, mask = max_pool_with_mask(x, (3, 3), (2, 2), (2, 2))
    assert mask.min() >= 0
    np.testing.assert_array_equal(out["mask"], mask)
    np.testing.assert_array_equal(out["pool"], top)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_windows_at_minus_flt_max_have_mask_minus_one(data_format):
    """No value exceeds Caffe's initial -FLT_MAX: the mask keeps -1."""
    x = np.full((1, 1, 4, 4), -FLT_MAX, np.float32)
    x[0, 0, 0, 1] = 3.0
    out = run_pool("pool: MAX kernel_size: 2 stride: 2", x, data_format)
    top, mask = max_pool_with_mask(x, (2, 2), (2, 2), (0, 0))
    np.testing.assert_array_equal(mask[0, 0], [[1, -1], [-1, -1]])
    np.testing.assert_array_equal(out["mask"], mask)
    np.testing.assert_array_equal(out["pool"], top)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_global_max_pooling_mask(data_format):
    x = np.random.default_rng(3).integers(0, 4, (2, 3, 5, 6)).astype(np.float32)
    out = run_pool("pool: MAX global_pooling: true", x, data_format)
    top, mask = max_pool_with_mask(x, (5, 6), (1, 1), (0, 0))
    assert mask.shape == (2, 3, 1, 1)
    np.testing.assert_array_equal(out["mask"], mask)
    np.testing.assert_array_equal(out["pool"], top)


@pytest.mark.layer_type("Pooling")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_the_mask_carries_no_gradient(data_format):
    """Caffe's backward reads the mask, never its diff: the input's gradient
    is the pooled top's alone (to the first maximum of each window)."""
    x = np.random.default_rng(4).standard_normal((1, 2, 6, 6)).astype(np.float32)
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 '
            'dim: 6 dim: 6 } } }\n' + pool_text("pool: MAX kernel_size: 2 stride: 2"))
    model = import_model(text, data_format=data_format, outputs=["pool", "mask"])
    feed = to_keras_layout(x, data_format)
    (grad_mask,), _ = gradients(lambda t: ops.sum(model(t)["mask"] * 3.0), [feed])
    assert grad_mask is None or not np.any(grad_mask)
    (grad,), _ = gradients(lambda t: ops.sum(model(t)["pool"]), [feed])
    grad = np.moveaxis(grad, -1, 1) if data_format == "channels_last" else grad
    _, mask = max_pool_with_mask(x, (2, 2), (2, 2), (0, 0))
    expected = np.zeros_like(x).reshape(1, 2, -1)
    for c in range(2):
        expected[0, c, mask[0, c].astype(int).ravel()] = 1.0
    np.testing.assert_array_equal(grad, expected.reshape(x.shape))


@pytest.mark.layer_type("Pooling")
def test_mask_top_in_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 2 '
            'dim: 7 dim: 7 } } }\n' + pool_text("pool: MAX kernel_size: 2 stride: 2"))
    row = analyze(text).layers[-1]
    assert row.tops == (("pool", (1, 2, 4, 4)), ("mask", (1, 2, 4, 4)))
    assert row.weight_shapes == ()


@pytest.mark.layer_type("Pooling")
def test_ave_pooling_has_no_mask():
    with pytest.raises(LayerError, match=r"^layer 'pool': \(Pooling\) only MAX pooling has a "
                                         r"second \(mask\) top$"):
        run_layers(pool_text("pool: AVE kernel_size: 2"), {"data": np.zeros((1, 1, 4, 4))})


@pytest.mark.layer_type("Pooling")
def test_at_most_two_tops():
    with pytest.raises(LayerError, match=r"^layer 'pool': \(Pooling\) has at most 2 tops \(the "
                                         r"pooled blob and the MAX mask\), got 3$"):
        run_layers(pool_text("pool: MAX kernel_size: 2", tops=("a", "b", "c")),
                   {"data": np.zeros((1, 1, 4, 4))})

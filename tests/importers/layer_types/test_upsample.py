"""Upsample against numpy ports of the forks' loops.

- Two bottoms: SegNet's max-unpooling, alexgkendall/caffe-segnet
  src/caffe/layers/upsample_layer.cpp: ``Forward_cpu`` (per plane, top set
  to 0, then ``top[(int)mask[i]] = bottom[i]`` for i in order) and
  ``Backward_cpu`` (``bottom_diff[i] = top_diff[(int)mask[i]]``), with the
  sizes of its ``LayerSetUp``/``Reshape``.
- One bottom: the YOLO ports' nearest-neighbour upsampling (darknet2caffe's
  Caffe layer, e.g. ChenYingpeng/caffe-yolov3 upsample_layer): ``top[h][w] =
  bottom[h / s][w / s]``, its backward the sum over each s x s block.
"""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum
from importers.layer_types.test_pooling_mask import max_pool_with_mask

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def unpool_forward(x, mask, out_h, out_w):
    """UpsampleLayer::Forward_cpu (the last write to a place stays)."""
    n, c, h, w = x.shape
    top = np.zeros((n, c, out_h * out_w), np.float32)
    for b in range(n):
        for ch in range(c):
            values, index = x[b, ch].reshape(-1), mask[b, ch].reshape(-1)
            for i in range(h * w):
                idx = int(index[i])  # static_cast<int>: truncation
                assert 0 <= idx < out_h * out_w, "the fork aborts here"
                top[b, ch, idx] = values[i]
    return top.reshape(n, c, out_h, out_w)


def unpool_backward(top_diff, mask):
    """UpsampleLayer::Backward_cpu: a gather, for every i."""
    n, c = mask.shape[:2]
    flat = top_diff.reshape(n, c, -1)
    index = mask.reshape(n, c, -1).astype(np.int64)
    return np.take_along_axis(flat, index, axis=2).reshape(mask.shape)


def nearest_forward(x, s):
    return x.repeat(s, axis=2).repeat(s, axis=3)


def nearest_backward(top_diff, s):
    n, c, h, w = top_diff.shape
    return top_diff.reshape(n, c, h // s, s, w // s, s).sum(axis=(3, 5))


def upsample_text(params, bottoms=("data", "mask")):
    return ('layer { name: "up" type: "Upsample" '
            + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "up" upsample_param {{ {params} }} }}\n')


def unique_mask(rng, shape, out_h, out_w):
    """Distinct targets per plane, as a non-overlapping pool gives."""
    n, c, h, w = shape
    return np.stack([np.stack([rng.permutation(out_h * out_w)[:h * w].reshape(h, w)
                               for _ in range(c)]) for _ in range(n)]).astype(np.float32)


def gradient(text, inputs, data_format, cotangent, outputs=("up",)):
    """d sum(top * cotangent) / d first input, in Caffe's layout."""
    model = import_model(
        'layer { name: "in" type: "Input" ' + "".join(f'top: "{k}" ' for k in inputs)
        + "input_param { " + "".join("shape { " + " ".join(f"dim: {d}" for d in v.shape)
                                     + " } " for v in inputs.values()) + "} }\n" + text,
        data_format=data_format, outputs=list(outputs))
    feed = [to_keras_layout(v, data_format) for v in inputs.values()]
    top = to_keras_layout(cotangent, data_format)
    grads, _ = gradients(lambda *t: weighted_sum(model(list(t) if len(t) > 1 else t[0]), top),
                         feed)
    return from_keras_layout(grads[0], data_format)


UNPOOL_CASES = {
    # params, input (h, w), output (H, W)
    "scale": ("scale: 2", (4, 5), (8, 10)),
    "scale_hw": ("scale_h: 2 scale_w: 3", (3, 4), (6, 12)),
    "pad_out": ("scale: 2 pad_out_h: true pad_out_w: true", (4, 5), (7, 9)),
    "pad_out_h": ("scale_h: 2 scale_w: 4 pad_out_h: true", (3, 2), (5, 8)),
    "upsample_hw": ("upsample_h: 9 upsample_w: 7", (4, 3), (9, 7)),
    # upsample_h and upsample_w win over scale (LayerSetUp reads them first).
    "upsample_over_scale": ("scale: 4 upsample_h: 5 upsample_w: 6", (2, 3), (5, 6)),
    # upsample_h alone is ignored by the fork: scale decides.
    "upsample_h_alone": ("scale: 3 upsample_h: 100", (2, 2), (6, 6)),
}


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(UNPOOL_CASES))
def test_unpooling_matches_segnet(case, data_format):
    params, (h, w), (out_h, out_w) = UNPOOL_CASES[case]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, h, w)).astype(np.float32)
    mask = unique_mask(rng, x.shape, out_h, out_w)
    got = run_layers(upsample_text(params), {"data": x, "mask": mask},
                     data_format=data_format)["up"]
    expected = unpool_forward(x, mask, out_h, out_w)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_unpooling_repeated_targets_keep_the_last_value(data_format):
    """Overlapping pooling windows can share a maximum: the fork writes in
    order, so the last value stays; its backward still gathers for all."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    mask = rng.integers(0, 6, (2, 2, 4, 4)).astype(np.float32)  # many repeats in 8 x 8
    mask += rng.uniform(0, 0.9, mask.shape).astype(np.float32)  # truncated by the fork
    text = upsample_text("scale: 2")
    got = run_layers(text, {"data": x, "mask": mask}, data_format=data_format)["up"]
    np.testing.assert_array_equal(got, unpool_forward(x, mask, 8, 8))
    cotangent = rng.standard_normal((2, 2, 8, 8)).astype(np.float32)
    grad = gradient(text, {"data": x, "mask": mask}, data_format, cotangent)
    np.testing.assert_allclose(grad, unpool_backward(cotangent, mask), rtol=1e-6, atol=1e-6)


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_unpooling_gradient_is_the_forks(data_format):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 3, 4)).astype(np.float32)
    mask = unique_mask(rng, x.shape, 6, 8)
    cotangent = rng.standard_normal((2, 3, 6, 8)).astype(np.float32)
    grad = gradient(upsample_text("scale: 2"), {"data": x, "mask": mask}, data_format, cotangent)
    np.testing.assert_array_equal(grad, unpool_backward(cotangent, mask))


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_out_of_range_indices_write_nothing(data_format):
    """The fork aborts on an index at or past H*W (and writes out of bounds
    for a negative one); here such an entry writes nothing."""
    x = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    mask = np.array([[[[0, 16], [-1, 15]]]], np.float32)
    got = run_layers(upsample_text("scale: 2"), {"data": x, "mask": mask},
                     data_format=data_format)["up"]
    expected = np.zeros((1, 1, 16), np.float32)
    expected[0, 0, 0], expected[0, 0, 15] = 1, 4
    np.testing.assert_array_equal(got, expected.reshape(1, 1, 4, 4))


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("size, upsample", [
    ((8, 10), "scale: 2"),
    ((7, 9), "scale: 2 pad_out_h: true pad_out_w: true"),
    ((7, 9), "upsample_h: 7 upsample_w: 9"),
])
def test_segnet_pool_then_unpool(size, upsample, data_format):
    """SegNet's encoder/decoder pair: Pooling's mask top feeds Upsample."""
    h, w = size
    x = np.random.default_rng(3).standard_normal((2, 3, h, w)).astype(np.float32)
    text = ('layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" top: "mask" '
            'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n'
            + upsample_text(upsample, ("pool", "mask")))
    got = run_layers(text, {"data": x}, data_format=data_format, outputs=["up"])["up"]
    top, mask = max_pool_with_mask(x, (2, 2), (2, 2), (0, 0))
    expected = unpool_forward(top, mask, h, w)
    np.testing.assert_array_equal(got, expected)
    # Every pooled maximum is back at its place, the rest is 0.
    assert np.count_nonzero(expected) == top.size


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("scale", [1, 2, 3])
def test_nearest_neighbour_matches_the_yolo_ports(scale, data_format):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    text = upsample_text(f"scale: {scale}", ("data",))
    got = run_layers(text, {"data": x}, data_format=data_format)["up"]
    np.testing.assert_array_equal(got, nearest_forward(x, scale))
    cotangent = rng.standard_normal(got.shape).astype(np.float32)
    grad = gradient(text, {"data": x}, data_format, cotangent)
    np.testing.assert_allclose(grad, nearest_backward(cotangent, scale), rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Upsample")
def test_analyze_sizes_both_forms():
    text = ('layer { name: "in" type: "Input" top: "data" top: "mask" input_param { '
            'shape { dim: 1 dim: 4 dim: 5 dim: 6 } shape { dim: 1 dim: 4 dim: 5 dim: 6 } } }\n'
            + upsample_text("scale: 2 pad_out_h: true")
            + 'layer { name: "near" type: "Upsample" bottom: "data" top: "near" '
              'upsample_param { scale: 2 } }\n')
    rows = {r.name: r for r in analyze(text).layers}
    assert rows["up"].tops == (("up", (1, 4, 9, 12)),)
    assert rows["near"].tops == (("near", (1, 4, 10, 12)),)
    assert rows["up"].weight_shapes == rows["near"].weight_shapes == ()


def _refused(text, bottoms, message):
    inputs = {b: np.zeros((1, 2, 3, 3), np.float32) for b in bottoms}
    with pytest.raises(LayerError, match="^layer 'up': " + message + "$"):
        run_layers(text, inputs)


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("params, message", [
    ("scale: 2 scale_h: 2 scale_w: 2", r"\(Upsample\) needs upsample_h and upsample_w, else scale "
                                       r"or scale_h and scale_w \(not both\)"),
    ("scale_h: 2", r"\(Upsample\) needs upsample_h and upsample_w, else scale or scale_h and "
                   r"scale_w \(not both\)"),
    ("scale: 1", r"\(Upsample\) scale must exceed 1, got 1"),
    ("scale_h: 2 scale_w: 1", r"\(Upsample\) scale must exceed 1, got 1"),
    ("upsample_h: 1 upsample_w: 4", r"\(Upsample\) upsample_h and upsample_w must exceed 1, got 1 "
                                    r"and 4"),
    ("scale: 3 pad_out_w: true", r"\(Upsample\) pad_out_w needs scale 3 to be 2"),
])
def test_unpooling_bad_parameters(params, message):
    _refused(upsample_text(params), ("data", "mask"), message)


@pytest.mark.layer_type("Upsample")
def test_unpooling_mask_must_match_the_input():
    with pytest.raises(LayerError, match=r"^layer 'up': \(Upsample\) the mask \(1, 2, 2, 2\) must "
                                         r"have the input's shape \(1, 2, 3, 3\)$"):
        run_layers(upsample_text("scale: 2"), {"data": np.zeros((1, 2, 3, 3), np.float32),
                                               "mask": np.zeros((1, 2, 2, 2), np.float32)})


@pytest.mark.layer_type("Upsample")
@pytest.mark.parametrize("params, message", [
    ("scale: 2 upsample_h: 4 upsample_w: 4",
     r"\(Upsample\) with one bottom \(the YOLO ports' nearest-neighbour upsampling\) takes only "
     r"scale, got upsample_h, upsample_w; SegNet's unpooling needs the pooling mask as a second "
     r"bottom"),
    ("scale: 0", r"\(Upsample\) scale must be positive, got 0"),
])
def test_nearest_bad_parameters(params, message):
    _refused(upsample_text(params, ("data",)), ("data",), message)


@pytest.mark.layer_type("Upsample")
def test_upsample_needs_a_4d_input():
    with pytest.raises(LayerError, match=r"^layer 'up': \(Upsample\) needs a 4-D input \(N, C, H, "
                                         r"W\), got \(2, 6\)$"):
        run_layers(upsample_text("scale: 2", ("data",)), {"data": np.zeros((2, 6), np.float32)})

"""Reorg against a numpy port of the YOLO fork's C++ (eric612/MobileNet-YOLO:
src/caffe/layers/reorg_layer.cpp ``ReorgLayer::Forward_cpu``, which calls
``reorg_cpu(bottom, W, H, C, N, stride, reverse, top)`` of
include/caffe/layers/reorg_layer.hpp, the const overload: darknet's
``reorg_cpu`` with ``forward = reverse``), in both data formats, with the
refusals and the gradient (the permutation's transpose)."""

import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers
from support.layer_gradients import backward

pytestmark = pytest.mark.kernels


def reorg_cpu(bottom, stride, forward):
    """reorg_layer.hpp ``reorg_cpu(bottom_data, b_w, b_h, b_c, b_n, stride,
    forward, top_data)`` line by line, on the bottom's sizes; the result is
    the flat top."""
    b_n, b_c, b_h, b_w = bottom.shape
    flat = bottom.reshape(-1)
    top = np.full(flat.size, np.nan, np.float32)
    t_c = b_c // (stride * stride)
    t_w, t_h = b_w * stride, b_h * stride
    for n in range(b_n):
        for c in range(b_c):
            for h in range(b_h):
                for w in range(b_w):
                    bottom_index = w + b_w * (h + b_h * (c + b_c * n))
                    c2 = c % t_c
                    offset = c // t_c
                    w2 = w * stride + offset % stride
                    h2 = h * stride + offset // stride
                    top_index = w2 + t_w * (h2 + t_h * (c2 + t_c * n))
                    if forward:
                        top[top_index] = flat[bottom_index]
                    else:
                        top[bottom_index] = flat[top_index]
    return top


def reorg_reference(x, stride, reverse):
    """ReorgLayer::Forward_cpu: the top in its Caffe shape (Reshape's)."""
    n, c, h, w = x.shape
    if reverse:
        shape = (n, c // stride ** 2, h * stride, w * stride)
    else:
        shape = (n, c * stride ** 2, h // stride, w // stride)
    return reorg_cpu(x, stride, forward=reverse).reshape(shape)


def reorg_text(params, top="r"):
    return (f'layer {{ name: "r" type: "Reorg" bottom: "data" top: "{top}" '
            f"reorg_param {{ {params} }} }}\n")


@pytest.mark.layer_type("Reorg")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape, params", [
    ((2, 8, 4, 6), "stride: 2"),               # YOLOv2's passthrough, batch 2
    ((1, 64, 6, 6), "stride: 2"),              # many channels
    ((1, 9, 6, 3), "stride: 3"),
    ((2, 4, 2, 2), "stride: 1"),               # identity
    ((2, 8, 3, 5), "stride: 2 reverse: true"),  # depth-to-space, odd sizes fine
    ((1, 18, 2, 2), "stride: 3 reverse: true"),
])
def test_reorg_matches_the_fork(data_format, shape, params):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    stride = int(params.split()[1])
    got = run_layers(reorg_text(params), {"data": x}, data_format=data_format)["r"]
    want = reorg_reference(x, stride, "reverse: true" in params)
    assert not np.isnan(want).any()
    np.testing.assert_array_equal(got, want)


@pytest.mark.layer_type("Reorg")
def test_reorg_is_darknets_order_not_a_plain_space_to_depth():
    """Darknet's order reads the bottom's memory as (C/4, 2H, 2W) and the
    top's as (C, H, W): for a (4, 4, 4) bottom, the first H*W values of the
    top are the even rows and columns of the (1, 8, 8) view, not a plain
    space-to-depth (TensorFlow's, ncnn's modes)."""
    x = np.arange(4 * 4 * 4, dtype=np.float32).reshape(1, 4, 4, 4)
    got = run_layers(reorg_text("stride: 2"), {"data": x}, data_format="channels_first")["r"]
    view = x.reshape(1, 1, 8, 8)
    # top read as (C, H, W) = (4, 4, 4): channel 0 is view[0, 0, 2h, 2w] for h, w < 4.
    np.testing.assert_array_equal(got.reshape(1, 4, 4, 4)[0, 0], view[0, 0, ::2, ::2])
    # TensorFlow's space_to_depth (NHWC, block 2): out[h, w, (2 i + j) C + c] = x[2h + i, 2w + j, c]
    nhwc = np.moveaxis(x, 1, -1)
    plain = nhwc.reshape(1, 2, 2, 2, 2, 4).transpose(0, 1, 3, 2, 4, 5).reshape(1, 2, 2, 16)
    assert not np.array_equal(got, np.moveaxis(plain, -1, 1))


def gradient(text, x, data_format, cotangent):
    model = import_model('layer { name: "in" type: "Input" top: "data" input_param { shape { '
                         + " ".join(f"dim: {d}" for d in x.shape) + " } } }\n" + text,
                         data_format=data_format)
    return backward(model, x, cotangent, data_format)[0]


@pytest.mark.layer_type("Reorg")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params", ["stride: 2", "stride: 2 reverse: true"])
def test_reorg_gradient_is_the_permutations_transpose(data_format, params):
    """Darknet's backward: each bottom element gets the gradient of the top
    element it was copied to (the fork's own backward reads a blob nothing
    writes, a zero gradient, not reproduced)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 8, 4, 6)).astype(np.float32)
    reverse = "reverse" in params
    ids = np.arange(x.size, dtype=np.float32).reshape(x.shape)
    moved = reorg_reference(ids, 2, reverse).astype(np.int64)  # top element -> bottom index
    cotangent = rng.standard_normal(moved.shape).astype(np.float32)
    want = np.zeros(x.size, np.float32)
    want[moved.reshape(-1)] = cotangent.reshape(-1)
    got = gradient(reorg_text(params), x, data_format, cotangent)
    np.testing.assert_array_equal(got, want.reshape(x.shape))


@pytest.mark.layer_type("Reorg")
def test_reorg_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 64 '
            'dim: 26 dim: 26 } } }\n' + reorg_text("stride: 2")
            + 'layer { name: "back" type: "Reorg" bottom: "r" top: "back" '
              'reorg_param { stride: 2 reverse: true } }\n')
    rows = {r.name: r for r in analyze(text).layers}
    assert rows["r"].tops == (("r", (1, 256, 13, 13)),)
    assert rows["back"].tops == (("back", (1, 64, 26, 26)),)
    assert rows["r"].weight_shapes == () and rows["r"].forward_flops == 0


@pytest.mark.layer_type("Reorg")
@pytest.mark.parametrize("shape, params, top, message", [
    ((1, 8, 4, 4), "reverse: true", "r", r"\(Reorg\) reorg_param.stride is required"),
    ((1, 8, 4, 4), "stride: 0", "r", r"\(Reorg\) reorg_param.stride must be positive, got 0"),
    ((1, 6, 4, 4), "stride: 2", "r",
     r"\(Reorg\) the 6 channels are not a multiple of reorg_param.stride\^2 = 4"),
    ((1, 6, 4, 4), "stride: 2 reverse: true", "r",
     r"\(Reorg\) the 6 channels are not a multiple of reorg_param.stride\^2 = 4"),
    ((1, 4, 5, 4), "stride: 2", "r",
     r"\(Reorg\) height 5 and width 4 must be multiples of reorg_param.stride 2 \(the fork "
     r"writes past its top otherwise\)"),
    ((1, 4, 4, 13), "stride: 2", "r",
     r"\(Reorg\) height 4 and width 13 must be multiples of reorg_param.stride 2 \(the fork "
     r"writes past its top otherwise\)"),
    ((1, 4, 4, 4), "stride: 2", "data",
     r"\(Reorg\) does not compute in place \(the fork refuses it\); name another top"),
])
def test_reorg_refusals(shape, params, top, message):
    with pytest.raises(LayerError, match=f"^layer 'r': {message}$"):
        run_layers(reorg_text(params, top), {"data": np.zeros(shape, np.float32)})


@pytest.mark.layer_type("Reorg")
def test_reorg_needs_a_4d_input():
    with pytest.raises(LayerError, match=r"^layer 'r': \(Reorg\) needs a 4-D input \(N, C, H, "
                                         r"W\), got \(2, 8\)$"):
        run_layers(reorg_text("stride: 2"), {"data": np.zeros((2, 8), np.float32)})

"""keras-caffe's own backward for MAX pooling and undilated convolutions.

On Eigen's CPU kernels (oneDNN off, no GPU: ``keras_caffe.kernels.eigen_cpu``)
``Pooling`` MAX routes its gradient itself (``pooling.max_pool``) and
``Convolution`` without dilation computes its gradients with XLA's filter
gradient and, at stride 1, forward convolutions (``tensorflow_kernels.own_backward_conv``): TensorFlow's
``MaxPoolGrad`` and ``Conv2DBackpropFilter`` are slow there. Each case runs
with the own backward forced on and forced off (TensorFlow's), whichever
kernels the process has, against numpy ports of Caffe:

- MAX pooling's gradient equals ``PoolingLayer::Backward_cpu``
  (caffe/src/caffe/layers/pooling_layer.cpp) bit for bit, ties included:
  the mask is the first maximum of each window (rows, then columns), and
  ``bottom_diff[mask] += top_diff`` runs over the outputs in order (Eigen's
  ``MaxPoolGrad`` too; oneDNN's adds overlapping windows in another order,
  1 ulp apart);
- Convolution's input, kernel and bias gradients equal conv_layer.cpp's
  sums (im2col + GEMM, here in float64) within 1e-5.
"""

import collections
import numpy as np
import pytest
import tensorflow as tf

from keras_caffe import kernels
from keras_caffe.importers import import_model
from keras_caffe.importers.net.blobs import caffe_layers
from keras_caffe.layers import conv, pooling, tensorflow_kernels
from layers.test_kernel_families import gradients

pytestmark = pytest.mark.kernels

RNG = np.random.default_rng(11)


def input_net(shape, layer_type, params):
    dims = " ".join(f"dim: {d}" for d in shape)
    return (f'layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ {dims} }} }} }}\n'
            f'layer {{ name: "l" type: "{layer_type}" bottom: "data" top: "l" {params} }}')


@pytest.fixture(params=[True, False], ids=["own_backward", "tensorflow_backward"])
def own(request, monkeypatch):
    """Force the layers' choice, whatever kernels this process runs."""
    monkeypatch.setattr(pooling, "eigen_cpu", lambda: request.param)
    monkeypatch.setattr(conv, "takes_own_backward", lambda channels: request.param)
    return request.param


def nchw(a, data_format):
    return a if data_format == "channels_first" else np.moveaxis(a, -1, 1)


def nhwc_or_not(a, data_format):
    return a if data_format == "channels_first" else np.moveaxis(a, 1, -1)


# -- MAX pooling --------------------------------------------------------------------------

def caffe_max_pool_backward(x, kernel, stride, pad, top_diff):
    """pooling_layer.cpp, MAX: Forward_cpu's mask (a cell replaces the
    window's maximum only when strictly greater: the first maximum wins),
    then Backward_cpu's ``bottom_diff[mask] += top_diff`` in float32, over
    (n, c, ph, pw) in order. ``x`` and ``top_diff`` NCHW."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pad
    oh, ow = top_diff.shape[2:]
    bottom = np.zeros_like(x, dtype=np.float32)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - ph, j * sw - pw
            h1, w1 = min(h0 + kh, h), min(w0 + kw, w)
            h0, w0 = max(h0, 0), max(w0, 0)
            best = np.full((n, c), -np.finfo(np.float32).max, np.float32)
            mask = np.full((n, c), -1)
            for hh in range(h0, h1):
                for ww in range(w0, w1):
                    greater = x[:, :, hh, ww] > best
                    best = np.where(greater, x[:, :, hh, ww], best)
                    mask = np.where(greater, hh * w + ww, mask)
            flat = bottom.reshape(n, c, h * w)
            for a in range(n):
                for b in range(c):
                    if mask[a, b] >= 0:
                        flat[a, b, mask[a, b]] += top_diff[a, b, i, j]
    return bottom


POOLS = {  # params, (kernel, stride, pad), input (C, H, W)
    "lenet_2x2_s2": ("kernel_size: 2 stride: 2", ((2, 2), (2, 2), (0, 0)), (3, 8, 8)),
    "cifar_3x3_s2_ceil": ("kernel_size: 3 stride: 2", ((3, 3), (2, 2), (0, 0)), (3, 9, 10)),
    "3x3_s1_pad1": ("kernel_size: 3 stride: 1 pad: 1", ((3, 3), (1, 1), (1, 1)), (2, 6, 7)),
    "3x3_s2_pad1": ("kernel_size: 3 stride: 2 pad: 1", ((3, 3), (2, 2), (1, 1)), (2, 7, 8)),
    "1x1_s2": ("kernel_size: 1 stride: 2", ((1, 1), (2, 2), (0, 0)), (2, 7, 8)),
    "rectangular": ("kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 0",
                    ((3, 2), (1, 2), (1, 0)), (2, 6, 9)),
    "4x4_s3": ("kernel_size: 4 stride: 3", ((4, 4), (3, 3), (0, 0)), (2, 11, 10)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("values", ["ties", "distinct"])
@pytest.mark.parametrize("case", list(POOLS))
def test_max_pooling_gradient_is_caffes(own, case, values, data_format, compiled):
    params, geometry, (c, h, w) = POOLS[case]
    model = import_model(input_net((3, c, h, w), "Pooling", f"pooling_param {{ pool: MAX {params} }}"),
                         data_format=data_format)
    x = RNG.standard_normal((3, c, h, w)).astype(np.float32)
    if values == "ties":  # small integers: most windows hold their maximum twice or more
        x = np.round(x * 1.5).astype(np.float32)
    xin = nhwc_or_not(x, data_format)
    y = model(xin).numpy()
    r = RNG.standard_normal(y.shape).astype(np.float32)
    (gx,) = gradients(model, xin, r, [], compiled)
    expected = caffe_max_pool_backward(x, *geometry, nchw(r, data_format))
    if own or not kernels.onednn_enabled():
        np.testing.assert_array_equal(nchw(gx, data_format), expected)
    else:  # oneDNN's MaxPoolGrad adds overlapping windows' gradients in another order
        np.testing.assert_allclose(nchw(gx, data_format), expected, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kernel, stride", [((3, 3), (2, 2)), ((2, 2), (2, 2)), ((3, 2), (1, 3)),
                                            ((13, 10), (1, 1))])
def test_routing_by_offsets_matches_tensorflows_max_pool_grad(kernel, stride):
    """The mask and routing functions alone against TensorFlow's own
    ``MaxPool`` and ``MaxPoolGrad`` (the same first-maximum rule) on a
    tie-heavy batch with overlapping windows (so the sums where windows
    overlap are checked too), a kernel smaller than its stride (cells in no
    window get 0), and a 130-cell window (int32 offsets)."""
    x = tf.constant(np.round(RNG.standard_normal((4, 13, 11, 5)) * 2).astype(np.float32))
    y, offsets = tensorflow_kernels.max_pool_offsets(x, kernel, stride)
    expected = tf.nn.max_pool2d(x, kernel, stride, "VALID")
    np.testing.assert_array_equal(y.numpy(), expected.numpy())
    assert offsets.dtype == (tf.int8 if kernel[0] * kernel[1] <= 127 else tf.int32)
    dy = tf.constant(RNG.standard_normal(y.shape).astype(np.float32))
    ours = tensorflow_kernels.route_by_offsets(offsets, dy, 13, 11, kernel, stride)
    theirs = tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=y, grad=dy,
                                    ksize=[1, *kernel, 1], strides=[1, *stride, 1],
                                    padding="VALID")
    np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


# -- convolution --------------------------------------------------------------------------

def caffe_conv_gradients(x, weights, bias, pad, stride, top_diff):
    """conv_layer.cpp's Backward_cpu for one group: ``weight_diff += top_diff
    col^T``, ``bias_diff += top_diff 1``, ``bottom_diff = col2im(W^T
    top_diff)``, in float64. ``x`` NCHW, ``weights`` (M, C, kh, kw)."""
    n, c, h, w = x.shape
    m, _, kh, kw = weights.shape
    ph, pw = pad
    sh, sw = stride
    padded = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (ph, ph), (pw, pw)])
    oh, ow = top_diff.shape[2:]
    dy = top_diff.astype(np.float64)
    dw = np.zeros((m, c, kh, kw))
    dx = np.zeros_like(padded)
    for u in range(kh):
        for v in range(kw):
            rows, cols = slice(u, u + sh * (oh - 1) + 1, sh), slice(v, v + sw * (ow - 1) + 1, sw)
            dw[:, :, u, v] = np.einsum("nchw,nmhw->mc", padded[:, :, rows, cols], dy)
            dx[:, :, rows, cols] += np.einsum("mc,nmhw->nchw", weights[:, :, u, v], dy)
    db = dy.sum(axis=(0, 2, 3)) if bias else None
    return dx[:, :, ph:ph + h, pw:pw + w], dw, db


CONVS = {  # params, pad, stride, input (C, H, W)
    "one_channel_5x5": ("num_output: 4 kernel_size: 5", (0, 0), (1, 1), (1, 12, 11)),
    "one_channel_5x5_pad2": ("num_output: 4 kernel_size: 5 pad: 2", (2, 2), (1, 1), (1, 9, 10)),
    "5x5_pad2": ("num_output: 6 kernel_size: 5 pad: 2", (2, 2), (1, 1), (3, 9, 8)),
    "5x5_valid": ("num_output: 5 kernel_size: 5", (0, 0), (1, 1), (4, 10, 9)),
    "3x3_pad1": ("num_output: 6 kernel_size: 3 pad: 1", (1, 1), (1, 1), (4, 7, 6)),
    "1x1": ("num_output: 5 kernel_size: 1", (0, 0), (1, 1), (4, 5, 6)),
    "1x1_pad1": ("num_output: 5 kernel_size: 1 pad: 1", (1, 1), (1, 1), (3, 5, 6)),
    "rectangular": ("num_output: 3 kernel_h: 3 kernel_w: 1 pad_h: 1 pad_w: 0", (1, 0), (1, 1),
                    (4, 6, 7)),
    "no_bias": ("num_output: 4 kernel_size: 3 pad: 1 bias_term: false", (1, 1), (1, 1), (3, 6, 6)),
    "group": ("num_output: 6 kernel_size: 3 pad: 1 group: 2", (1, 1), (1, 1), (4, 6, 5)),
    # strides: the last rows and columns no window reaches get no gradient
    "one_channel_stride4": ("num_output: 4 kernel_size: 5 stride: 4", (0, 0), (4, 4), (1, 15, 14)),
    "11x11_stride4": ("num_output: 4 kernel_size: 11 stride: 4", (0, 0), (4, 4), (3, 23, 20)),
    "3x3_stride2_pad1": ("num_output: 5 kernel_size: 3 stride: 2 pad: 1", (1, 1), (2, 2),
                         (4, 8, 7)),
    "stride_hw": ("num_output: 3 kernel_size: 3 stride_h: 2 stride_w: 3 pad: 1", (1, 1), (2, 3),
                  (2, 9, 10)),
    "group_stride2": ("num_output: 6 kernel_size: 3 stride: 2 group: 2", (0, 0), (2, 2),
                      (4, 7, 9)),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("case", list(CONVS))
def test_convolution_gradients_are_caffes(own, case, data_format, compiled):
    params, pad, stride, (c, h, w) = CONVS[case]
    model = import_model(input_net((2, c, h, w), "Convolution",
                                   f"convolution_param {{ {params} }}"), data_format=data_format)
    layer = caffe_layers(model)["l"]
    blobs = [RNG.standard_normal(b.shape).astype(np.float32) for b in layer.caffe_blobs()]
    layer.set_caffe_blobs(blobs)
    x = RNG.standard_normal((2, c, h, w)).astype(np.float32)
    xin = nhwc_or_not(x, data_format)
    y = model(xin).numpy()
    r = RNG.standard_normal(y.shape).astype(np.float32)
    variables = [layer.kernel] + ([layer.bias] if layer.bias is not None else [])
    grads = gradients(model, xin, r, variables, compiled)
    group = layer.group
    dy = nchw(r, data_format)
    expected = [np.zeros((2, c, h, w)), np.zeros(blobs[0].shape), np.zeros(layer.num_output)]
    cg, mg = c // group, layer.num_output // group
    for g in range(group):
        dx, dw, db = caffe_conv_gradients(x[:, g * cg:(g + 1) * cg], blobs[0][g * mg:(g + 1) * mg],
                                          layer.bias is not None, pad, stride,
                                          dy[:, g * mg:(g + 1) * mg])
        expected[0][:, g * cg:(g + 1) * cg] = dx
        expected[1][g * mg:(g + 1) * mg] = dw
        if db is not None:
            expected[2][g * mg:(g + 1) * mg] = db
    np.testing.assert_allclose(nchw(grads[0], data_format), expected[0], rtol=1e-5, atol=1e-5)
    got_blobs = layer.caffe_from_keras_weights([g for g in grads[1:]])
    np.testing.assert_allclose(got_blobs[0], expected[1], rtol=1e-5, atol=1e-5)
    if layer.bias is not None:
        np.testing.assert_allclose(got_blobs[1], expected[2], rtol=1e-5, atol=1e-5)


def test_second_order_gradients_go_through_the_own_backward():
    """The own backwards are TensorFlow ops too, so a gradient of a gradient
    (a gradient penalty) exists and equals TensorFlow's."""
    x = tf.constant(RNG.standard_normal((2, 7, 6, 3)).astype(np.float32))
    kernel = tf.constant(RNG.standard_normal((3, 3, 3, 4)).astype(np.float32))

    def penalty(fn):
        with tf.GradientTape() as outer:
            outer.watch(kernel)
            with tf.GradientTape() as inner:
                inner.watch(x)
                energy = tf.reduce_sum(fn(x, kernel) ** 2)
            gx = inner.gradient(energy, x)
            loss = tf.reduce_sum(gx * gx)
        return outer.gradient(loss, kernel).numpy()

    ours = penalty(lambda x, k: tensorflow_kernels.own_backward_conv(x, k, None, (1, 1)))
    theirs = penalty(lambda x, k: tf.nn.conv2d(x, k, 1, [[0, 0], [1, 1], [1, 1], [0, 0]]))
    np.testing.assert_allclose(ours, theirs, rtol=1e-4)


# -- which backward runs ------------------------------------------------------------------

LENET_LIKE = (input_net((4, 1, 16, 16), "Convolution",
                        "convolution_param { num_output: 8 kernel_size: 5 }")
              + '\nlayer { name: "p" type: "Pooling" bottom: "l" top: "p" '
                'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }'
              + '\nlayer { name: "c2" type: "Convolution" bottom: "p" top: "c2" '
                'convolution_param { num_output: 4 kernel_size: 3 } }')


def traced_op_types(model):
    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(model(x, training=True))
        return tape.gradient(loss, [x, *model.trainable_variables])

    graph = step.get_concrete_function(tf.TensorSpec((4, 16, 16, 1))).graph
    return collections.Counter(op.type for op in graph.get_operations())


def test_eigen_cpu_follows_the_kernels_and_the_switch(monkeypatch):
    monkeypatch.delenv(kernels.CPU_TUNING, raising=False)
    no_gpu = not tf.config.list_logical_devices("GPU")
    assert kernels.cpu_only() == no_gpu
    assert kernels.eigen_cpu() == (not kernels.onednn_enabled() and no_gpu)
    monkeypatch.setenv(kernels.CPU_TUNING, "0")
    assert kernels.eigen_cpu() is False and kernels.cpu_only() is False
    assert not conv.takes_own_backward(1) and not conv.takes_own_backward(64)
    monkeypatch.setenv(kernels.CPU_TUNING, "1")
    assert kernels.cpu_only() == no_gpu
    # Eigen: every convolution; oneDNN: from 8 input channels per group on
    assert conv.takes_own_backward(1) == kernels.eigen_cpu()
    assert conv.takes_own_backward(7) == kernels.eigen_cpu()
    assert conv.takes_own_backward(8) == no_gpu


@pytest.mark.parametrize("switch", ["unset", "0"])
def test_the_gradient_ops_in_the_graph(monkeypatch, switch):
    """Where the own backward is on, the traced gradient has no
    ``Conv2DBackpropFilter`` and no ``MaxPoolGrad`` (they run inside the
    own backward's XLA calls); on oneDNN's kernels the convolution of 8
    channels takes the own backward and the one of a 1-channel input keeps
    oneDNN's, as pooling does; with ``KERAS_CAFFE_CPU_TUNING=0`` every layer
    keeps TensorFlow's."""
    if switch == "unset":
        monkeypatch.delenv(kernels.CPU_TUNING, raising=False)
    else:
        monkeypatch.setenv(kernels.CPU_TUNING, switch)
    model = import_model(LENET_LIKE)
    types = traced_op_types(model)
    no_gpu = not tf.config.list_logical_devices("GPU")
    if switch == "0" or not no_gpu:
        expected = {"Conv2DBackpropFilter": 2, "MaxPoolGrad": 1}
    elif kernels.eigen_cpu():
        expected = {"Conv2DBackpropFilter": 0, "MaxPoolGrad": 0}
    else:
        expected = {"Conv2DBackpropFilter": 1, "MaxPoolGrad": 1}
    assert {k: types[k] for k in expected} == expected, types

"""Training (forward and backward) of every convolution-family and pooling
configuration, whichever kernels TensorFlow picks.

TensorFlow runs oneDNN kernels on CPUs with AVX-512-class features and Eigen
kernels elsewhere (AMD AVX2 machines, or ``TF_ENABLE_ONEDNN_OPTS=0``). Some
ops exist in only one family: Eigen's ``Conv2DBackpropInput`` refuses
dilation > 1, which crashed dilated Deconvolution. The forward passes have
numpy references in tests/importers/layer_types/; here each configuration is
differentiated, eagerly and in a ``tf.function``, and the gradients are
checked by identities that need only the forward pass:

- a layer linear in its input and in its kernel (Convolution and
  Deconvolution without bias, AVE pooling): ``<dL/dx, x'> = <r, f(x')>``
  and ``<dL/dW, W'> = <r, f_W'(x)>`` for ``L = <r, f(x)>`` and random
  ``x'``, ``W'`` (the adjoint identity);
- MAX pooling, piecewise linear: with distinct inputs spaced 0.01 apart, a
  step of 1e-3 moves no maximum, so ``<dL/dx, x'> = <r, f(x + e x') - f(x)> / e``.

The suite runs this file with oneDNN on and off (``make test``).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_caffe.importers import import_model
from keras_caffe.importers.net.blobs import caffe_layers

pytestmark = pytest.mark.kernels

N, C, H, W = 2, 4, 7, 6
RNG = np.random.default_rng(7)


def net(layer_type, params):
    return (f'layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ '
            f'dim: {N} dim: {C} dim: {H} dim: {W} }} }} }}\n'
            f'layer {{ name: "l" type: "{layer_type}" bottom: "data" top: "l" {params} }}')


def conv_params(num_output, kernel, **extra):
    fields = " ".join(f"{k}: {v}" for k, v in extra.items())
    return f"convolution_param {{ num_output: {num_output} kernel_size: {kernel} {fields} }}"


CONVOLUTIONS = {
    "plain": conv_params(6, 3, pad=1),
    "stride": conv_params(6, 3, stride=2),
    "one_by_one": conv_params(5, 1),
    "group": conv_params(6, 3, group=2, pad=1),
    "depthwise": conv_params(4, 3, group=4, pad=1),
    "depthwise_multiplier": conv_params(8, 3, group=4),
    "dilation": conv_params(6, 3, dilation=2, pad=2),
    "dilation_stride": conv_params(6, 3, dilation=2, stride=2, pad=1),
    "group_dilation": conv_params(6, 3, group=2, dilation=2),
    "depthwise_dilation": conv_params(4, 3, group=4, dilation=2, pad=2),
    "rectangular": "convolution_param { num_output: 3 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 "
                   "pad_h: 0 pad_w: 1 dilation: 2 dilation: 1 }",
}
DECONVOLUTIONS = {
    "plain": conv_params(3, 3),
    "stride": conv_params(3, 4, stride=2, pad=1),
    "dilation": conv_params(3, 3, dilation=2),
    "dilation_stride": conv_params(3, 3, dilation=2, stride=2, pad=1),
    "group_dilation": conv_params(6, 3, group=2, dilation=3),
    "bilinear_group": conv_params(4, 4, group=4, stride=2, pad=1),
    "rectangular": "convolution_param { num_output: 2 kernel_h: 2 kernel_w: 3 stride_h: 2 stride_w: 1 "
                   "dilation: 1 dilation: 2 }",
}
POOLINGS = {
    "max_pad": "pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }",
    "max_ceil": "pooling_param { pool: MAX kernel_size: 2 stride: 2 }",
    "ave_pad": "pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }",
    "ave_ceil": "pooling_param { pool: AVE kernel_size: 3 stride: 3 }",
    "max_global": "pooling_param { pool: MAX global_pooling: true }",
    "ave_global": "pooling_param { pool: AVE global_pooling: true }",
}


def gradients(model, x, r, variables, compiled):
    def loss_grads(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(r * model(x, training=True))
        return tape.gradient(loss, [x, *variables])

    fn = tf.function(loss_grads) if compiled else loss_grads
    return [g.numpy() for g in fn(tf.constant(x))]


def dot(a, b):
    return float(np.sum(np.asarray(a, np.float64) * np.asarray(b, np.float64)))


def check_linear(layer_type, params, data_format, compiled):
    params = params.replace("convolution_param {", "convolution_param { bias_term: false", 1)
    model = import_model(net(layer_type, params), data_format=data_format)
    layer = caffe_layers(model)["l"]
    assert not layer.bias_term
    shape = (N, H, W, C) if data_format == "channels_last" else (N, C, H, W)
    x, x2 = (RNG.standard_normal(shape).astype(np.float32) for _ in range(2))
    kernel = RNG.standard_normal(layer.kernel.shape).astype(np.float32)
    kernel2 = RNG.standard_normal(layer.kernel.shape).astype(np.float32)
    layer.kernel.assign(kernel)
    y = model(x).numpy()
    r = RNG.standard_normal(y.shape).astype(np.float32)
    gx, gw = gradients(model, x, r, [layer.kernel], compiled)
    np.testing.assert_allclose(dot(gx, x2), dot(r, model(x2).numpy()), rtol=1e-4, atol=1e-3)
    layer.kernel.assign(kernel2)
    np.testing.assert_allclose(dot(gw, kernel2), dot(r, model(x).numpy()), rtol=1e-4, atol=1e-3)
    return y


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("case", list(CONVOLUTIONS))
def test_convolution_trains(case, data_format, compiled):
    check_linear("Convolution", CONVOLUTIONS[case], data_format, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("case", list(DECONVOLUTIONS))
def test_deconvolution_trains(case, data_format, compiled):
    check_linear("Deconvolution", DECONVOLUTIONS[case], data_format, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("case", list(POOLINGS))
def test_pooling_trains(case, data_format, compiled):
    model = import_model(net("Pooling", POOLINGS[case]), data_format=data_format)
    shape = (N, H, W, C) if data_format == "channels_last" else (N, C, H, W)
    size = int(np.prod(shape))
    # distinct values 0.01 apart: a 1e-3 step moves no maximum
    x = (RNG.permutation(size).reshape(shape) * 0.01).astype(np.float32)
    x2 = RNG.uniform(-1, 1, shape).astype(np.float32)
    y = model(x).numpy()
    r = RNG.standard_normal(y.shape).astype(np.float32)
    (gx,) = gradients(model, x, r, [], compiled)
    if case.startswith("ave"):
        expected = dot(r, model(x2).numpy())
    else:
        step = 1e-3
        moved = model((x + step * x2).astype(np.float32)).numpy()
        expected = dot(r, moved.astype(np.float64) - y) / step
    np.testing.assert_allclose(dot(gx, x2), expected, rtol=1e-3, atol=1e-3)
    assert np.isfinite(gx).all()


def test_dilated_deconvolution_kernel_spells_out_the_taps():
    """The explicit dilation behind dilated Deconvolution: tap (i, j) at
    (i d_h, j d_w), zeros elsewhere, gradients to the taps only."""
    from keras_caffe.layers.deconv import dilate_kernel

    kernel = tf.constant(np.arange(2 * 3 * 1 * 2, dtype=np.float32).reshape(2, 3, 1, 2) + 1)
    with tf.GradientTape() as tape:
        tape.watch(kernel)
        spread = dilate_kernel(kernel, (3, 2))
        loss = tf.reduce_sum(spread * np.arange(np.prod(spread.shape), dtype=np.float32)
                             .reshape(spread.shape))
    assert tuple(spread.shape) == (4, 5, 1, 2)
    expected = np.zeros((4, 5, 1, 2), np.float32)
    expected[::3, ::2] = kernel.numpy()
    np.testing.assert_array_equal(spread.numpy(), expected)
    weights = np.arange(4 * 5 * 2, dtype=np.float32).reshape(4, 5, 1, 2)
    np.testing.assert_array_equal(tape.gradient(loss, kernel).numpy(), weights[::3, ::2])
    assert dilate_kernel(kernel, (1, 1)) is kernel

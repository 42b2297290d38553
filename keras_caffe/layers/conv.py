"""Caffe's Convolution as a Keras layer: explicit pads, groups, dilation."""

import math

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from keras_caffe.kernels import cpu_only, eigen_cpu
from keras_caffe.layers.base import CaffeBlobs, Fillers, check_data_format, from_nhwc, pair, register, to_nhwc


class ConvolutionParameters(Fillers, CaffeBlobs, keras.layers.Layer):
    """What Convolution and Deconvolution share: Caffe's ConvolutionParameter."""

    per_sample = True  # no sample reads another (keras_caffe.lms.plan.Node.per_sample)

    def __init__(self, num_output, kernel_size, stride=1, pad=0, dilation=1, group=1,
                 bias_term=True, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.num_output = int(num_output)
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.pad = pair(pad)
        self.dilation = pair(dilation)
        self.group = int(group)
        self.bias_term = bool(bias_term)
        self.data_format = check_data_format(data_format)

    def get_config(self):
        config = super().get_config()
        config.update(num_output=self.num_output, kernel_size=self.kernel_size, stride=self.stride,
                      pad=self.pad, dilation=self.dilation, group=self.group,
                      bias_term=self.bias_term, data_format=self.data_format)
        return config


def own_backward_conv(x, kernel, bias, pad, stride=(1, 1)):
    """``conv(pad(x), kernel, stride) + bias`` for an NHWC ``x``, no dilation,
    ``pad = (ph, pw)`` zeros, ``bias`` None or (M,), with a backward made
    for TensorFlow's CPU kernels, whose gradient kernels are slow: on Eigen's
    ``Conv2DBackpropFilter`` ran 1.2-3.1x slower than XLA's,
    ``Conv2DBackpropInput`` up to 2.4x slower than the same sums as a
    ``Conv2D``; on oneDNN's up to 2.3x and 1.9x (TF 2.21, 2-core AMD EPYC;
    ``takes_own_backward`` says which layers take it).
    ``benchmarks/eigen_backward.py`` times the layers both ways.

    - The kernel's gradient ``dW[u, v, c, m] = sum_{n,i,j} pad(x)[n, s i+u,
      s j+v, c] dy[n, i, j, m]`` is XLA's (``_filter_gradient``; CaffeNet's
      conv1, 11x11 stride 4, batch 16: 34 against 46 ms); the bias's
      is ``sum_{n,i,j} dy``. Each is its own op, so TensorFlow skips the
      one a frozen blob (``lr_mult: 0``, a stopped gradient) does not use,
      as Caffe's ``param_propagate_down``.
    - With stride 1 the input's gradient is the convolution of ``dy``
      padded by ``k - 1 - pad`` with the kernel turned by 180 degrees and
      its channel axes swapped, where the convolution keeps or grows the
      image (``2 pad >= k - 1``, where it does no more multiplications than
      TensorFlow's column-scatter kernel); else TensorFlow's
      ``Conv2DBackpropInput`` (LeNet's unpadded 5x5: 1.8 ms against 4.9 ms
      as a convolution).
    - A one-channel input's forward at stride 1 is ``_one_channel_conv``.

    The sums run in another order than TensorFlow's or Caffe's: relative
    differences of about 1e-6."""
    (ph, pw) = pad
    stride = tuple(stride)
    strides = [1, stride[0], stride[1], 1]
    paddings = [[0, 0], [ph, ph], [pw, pw], [0, 0]]
    kh, kw = kernel.shape[0], kernel.shape[1]
    # Tensors, not variables: a custom gradient over a variable read inside
    # it would need the variables= form.
    kernel = tf.convert_to_tensor(kernel)
    bias = None if bias is None else tf.convert_to_tensor(bias)

    def forward(x, kernel, bias):
        if x.shape[3] == 1 and stride == (1, 1):
            return _one_channel_conv(x, kernel, bias, pad)
        y = tf.nn.conv2d(x, kernel, strides, paddings if ph or pw else "VALID")
        return y if bias is None else tf.nn.bias_add(y, bias)

    def input_gradient(dy, kernel):
        with tf.name_scope("conv_input_gradient"):
            return _input_gradient(dy, kernel)

    def _input_gradient(dy, kernel):
        qh, qw = kh - 1 - ph, kw - 1 - pw
        if stride == (1, 1) and 0 <= qh <= ph and 0 <= qw <= pw:
            turned = tf.transpose(tf.reverse(kernel, (0, 1)), (0, 1, 3, 2))
            return tf.nn.conv2d(dy, turned, 1, [[0, 0], [qh, qh], [qw, qw], [0, 0]])
        return tf.raw_ops.Conv2DBackpropInput(
            input_sizes=tf.shape(x), filter=kernel, out_backprop=dy, strides=strides,
            padding="EXPLICIT" if ph or pw else "VALID",
            explicit_paddings=sum(paddings, []) if ph or pw else [])

    def filter_gradient(dy):
        with tf.name_scope("conv_filter_gradient"):
            return _filter_gradient(x, dy, (kh, kw), pad, stride)

    if bias is None:
        @tf.custom_gradient
        def conv(x, kernel):
            def backward(dy):
                return input_gradient(dy, kernel), filter_gradient(dy)
            return forward(x, kernel, None), backward

        return conv(x, kernel)

    @tf.custom_gradient
    def biased_conv(x, kernel, bias):
        def backward(dy):
            return (input_gradient(dy, kernel), filter_gradient(dy),
                    tf.reduce_sum(dy, axis=(0, 1, 2)))
        return forward(x, kernel, bias), backward

    return biased_conv(x, kernel, bias)


#: On oneDNN's CPU kernels, convolutions with at least this many input
#: channels per group take ``own_backward_conv`` too (see ``takes_own_backward``).
ONEDNN_OWN_BACKWARD_CHANNELS = 8


def takes_own_backward(channels):
    """Whether an undilated, non-depthwise convolution with ``channels``
    input channels per group runs ``own_backward_conv``: on Eigen's CPU
    kernels always; on oneDNN's (no GPU visible) from
    ``ONEDNN_OWN_BACKWARD_CHANNELS`` input channels on, where oneDNN's
    gradient kernels lose to XLA's filter gradient and to the input
    gradient as a forward convolution (TF 2.21, 2-core AMD EPYC, ms,
    oneDNN's against the own): CaffeNet's conv3 (batch 16, 256 -> 384,
    3x3) input gradient 65 against 34, filter gradient 39 against 34;
    CIFAR-10 quick's conv2 forward + backward 27.2 against 24.1; LeNet's
    conv2 8.2 against 7.5. A net's first convolution (1 or 3 channels of
    data) keeps oneDNN's: LeNet's conv1 2.7 against 2.8, CIFAR-10 quick's
    conv1 11.3 against 13.1. ``KERAS_CAFFE_CPU_TUNING=0`` turns both off;
    GPUs never take it."""
    if eigen_cpu():
        return True
    return channels >= ONEDNN_OWN_BACKWARD_CHANNELS and cpu_only()


def _one_channel_conv_xla(x, kernel, bias, pad):
    """The convolution of a one-channel NHWC ``x`` as ``kh * kw`` shifted
    products, ``y = b + sum_{u,v} pad(x)[:, u:u+OH, v:v+OW, :] * W[u, v, 0, :]``,
    which XLA compiles into one loop: 0.81 ms for LeNet's conv1 (64x28x28x1,
    5x5, 20 outputs) against 2.29 ms for Eigen's ``Conv2D``, whose matrix
    product has only 25 columns there. With three channels Eigen's is the
    faster (CIFAR-10 quick's conv1: 6.6 against 9.7 ms)."""
    (ph, pw) = pad
    kh, kw = kernel.shape[0], kernel.shape[1]
    if ph or pw:
        x = tf.pad(x, [[0, 0], [ph, ph], [pw, pw], [0, 0]])
    oh, ow = x.shape[1] - kh + 1, x.shape[2] - kw + 1
    y = None
    for u in range(kh):
        for v in range(kw):
            term = x[:, u:u + oh, v:v + ow, :] * kernel[u, v, 0]
            y = term if y is None else y + term
    return y if bias is None else y + bias


def _filter_gradient_xla(x, dy, kernel_size, pad, stride):
    """dW of ``own_backward_conv``, as XLA compiles TensorFlow's filter gradient:
    a convolution of ``x`` with ``dy`` over the batch axis, without
    materialized transposes."""
    (ph, pw) = pad
    return tf.raw_ops.Conv2DBackpropFilter(
        input=x, filter_sizes=[kernel_size[0], kernel_size[1], x.shape[3], dy.shape[3]],
        out_backprop=dy, strides=[1, stride[0], stride[1], 1],
        padding="EXPLICIT" if ph or pw else "VALID",
        explicit_paddings=[0, 0, ph, ph, pw, pw, 0, 0] if ph or pw else [])


#: One XLA program per shape (``tf.function`` traces each once).
_one_channel_conv = tf.function(_one_channel_conv_xla, jit_compile=True)
_filter_gradient = tf.function(_filter_gradient_xla, jit_compile=True)


@register
class Convolution(ConvolutionParameters):
    """2-D convolution with Caffe's parameters.

    ``pad`` is Caffe's symmetric zero padding (any amount, per axis), so no
    ``"same"`` guessing. ``group`` splits input and output channels into
    groups; ``group == input channels`` runs as a depthwise convolution.
    ``stride`` with ``dilation`` (which Keras's Conv2D refuses) runs the
    dilated convolution at stride 1 and keeps every stride-th output.
    Caffe's blobs: weights (num_output, in/group, kh, kw), bias (num_output,).
    """

    caffe_type = "Convolution"


    def build(self, input_shape):
        channels = input_shape[1] if self.data_format == "channels_first" else input_shape[-1]
        self.in_channels = int(channels)
        self.depthwise = self.group > 1 and self.group == self.in_channels
        kh, kw = self.kernel_size
        if self.depthwise:
            shape = (kh, kw, self.in_channels, self.num_output // self.group)
        else:
            shape = (kh, kw, self.in_channels // self.group, self.num_output)
        self.kernel = self.add_weight(name="kernel", shape=shape, initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.num_output,),
                                    initializer=self.bias_initializer)
                     if self.bias_term else None)

    def _same_padding(self):
        """Stride 1 with pad (k-1)*d/2 on both sides: exactly Keras's "same"."""
        return self.stride == (1, 1) and all(
            2 * p == (k - 1) * d for p, k, d in zip(self.pad, self.kernel_size, self.dilation))

    def _strides(self):
        """(strides to run, every how many outputs to keep after) per axis.

        Keras's Conv2D refuses a stride with dilation: run at stride 1, keep
        every stride-th output. Eigen's depthwise kernel (TensorFlow without
        oneDNN) refuses unequal row and column strides: run at their greatest
        common divisor g and keep every (stride / g)-th output, which is the
        same set of windows (window i at stride s starts at i*s = (i*s/g)*g).
        """
        if max(self.dilation) > 1 and max(self.stride) > 1:
            return (1, 1), self.stride
        if self.depthwise and self.stride[0] != self.stride[1]:
            g = math.gcd(*self.stride)
            return (g, g), (self.stride[0] // g, self.stride[1] // g)
        return self.stride, (1, 1)

    def call(self, x):
        x = to_nhwc(x, self.data_format)
        if not self.depthwise and self.dilation == (1, 1) and None not in x.shape[1:] \
                and takes_own_backward(self.in_channels // self.group):
            kernel = self.blob(self.kernel)
            bias = self.blob(self.bias)
            if self.group == 1:
                return from_nhwc(own_backward_conv(x, kernel, bias, self.pad, self.stride),
                                 self.data_format)
            y = self._per_group(lambda xg, kg: own_backward_conv(xg, kg, None, self.pad, self.stride),
                                x, kernel)
            return from_nhwc(y if bias is None else y + bias, self.data_format)
        padding = "same" if any(self.pad) and self._same_padding() else "valid"
        if any(self.pad) and padding == "valid":
            ph, pw = self.pad
            x = ops.pad(x, [[0, 0], [ph, ph], [pw, pw], [0, 0]])
        strides, keep = self._strides()
        kernel = self.blob(self.kernel)
        if self.depthwise:
            y = ops.depthwise_conv(x, kernel, strides=strides, padding=padding,
                                   dilation_rate=self.dilation)
        elif self.group > 1:
            y = self._grouped(x, kernel, strides, padding)
        else:
            y = ops.conv(x, kernel, strides=strides, padding=padding,
                         dilation_rate=self.dilation)
        if keep != (1, 1):
            y = y[:, ::keep[0], ::keep[1], :]
        if self.bias is not None:
            y = y + self.blob(self.bias)
        return from_nhwc(y, self.data_format)

    def _grouped(self, x, kernel, strides, padding):
        """Caffe's grouped convolution as Caffe computes it (conv_layer.cpp's
        loop over ``group_``): group g's input channels ``[g*C/G, (g+1)*C/G)``
        convolved with output channels ``[g*M/G, (g+1)*M/G)`` of the kernel,
        the results concatenated. Not one grouped ``ops.conv``: TensorFlow has
        no grouped-convolution gradient on CPU, so Keras compiles that one
        with XLA, whose CPU backward ran 3-12x slower than this split
        (CaffeNet's conv2, batch 16: 1.4-3.3 s against 0.27-0.50 s, TF 2.21,
        oneDNN and Eigen)."""
        return self._per_group(lambda xg, kg: ops.conv(xg, kg, strides=strides, padding=padding,
                                                       dilation_rate=self.dilation), x, kernel)

    def _per_group(self, conv, x, kernel):
        """``conv(x, kernel)``, per group when ``group > 1``: see ``_grouped``."""
        if self.group == 1:
            return conv(x, kernel)
        parts = zip(ops.split(x, self.group, axis=-1), ops.split(kernel, self.group, axis=-1))
        return ops.concatenate([conv(xg, kg) for xg, kg in parts], axis=-1)

    def compute_output_shape(self, input_shape):
        """Caffe's output size: (in + 2 pad - dilation (k - 1) - 1) / stride + 1."""
        if self.data_format == "channels_first":
            n, _, h, w = input_shape
        else:
            n, h, w, _ = input_shape
        out = [None if size is None else (size + 2 * p - d * (k - 1) - 1) // s + 1
               for size, k, s, p, d in zip((h, w), self.kernel_size, self.stride, self.pad,
                                           self.dilation)]
        if self.data_format == "channels_first":
            return (n, self.num_output, *out)
        return (n, *out, self.num_output)

    def keras_weights_from_caffe(self, blobs):
        w = blobs[0]  # (out, in/group, kh, kw)
        if self.depthwise:
            kernel = w.reshape(self.in_channels, -1, *w.shape[2:]).transpose(2, 3, 0, 1)
        else:
            kernel = w.transpose(2, 3, 1, 0)
        return [kernel] + blobs[1:]

    def caffe_from_keras_weights(self, weights):
        kernel = weights[0]
        if self.depthwise:
            kh, kw, c, m = kernel.shape
            w = kernel.transpose(2, 3, 0, 1).reshape(c * m, 1, kh, kw)
        else:
            w = kernel.transpose(3, 2, 0, 1)
        return [np.ascontiguousarray(w)] + list(weights[1:])

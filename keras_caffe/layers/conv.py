"""Caffe's Convolution as a Keras layer: explicit pads, groups, dilation."""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.kernels import cpu_only, eigen_cpu
from keras_caffe.layers.base import CaffeBlobs, Fillers, check_data_format, from_nhwc, pair, register, to_nhwc
from keras_caffe.layers.base import on_tensorflow, tensorflow_kernels


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


#: On oneDNN's CPU kernels, convolutions with at least this many input
#: channels per group take ``tensorflow_kernels.own_backward_conv`` too (see ``takes_own_backward``).
ONEDNN_OWN_BACKWARD_CHANNELS = 8


def takes_own_backward(channels):
    """Whether an undilated, non-depthwise convolution with ``channels``
    input channels per group runs ``tensorflow_kernels.own_backward_conv``: on Eigen's CPU
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
    GPUs, and the other Keras backends, never take it."""
    if not on_tensorflow():
        return False
    if eigen_cpu():
        return True
    return channels >= ONEDNN_OWN_BACKWARD_CHANNELS and cpu_only()


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
                return from_nhwc(tensorflow_kernels.own_backward_conv(
                    x, kernel, bias, self.pad, self.stride), self.data_format)
            y = self._per_group(lambda xg, kg: tensorflow_kernels.own_backward_conv(
                xg, kg, None, self.pad, self.stride), x, kernel)
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

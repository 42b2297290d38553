"""Learned layers Keras lacks in Caffe's form: Deconvolution (grouped) and Embed."""

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import CaffeBlobs, Fillers, from_nhwc, register, to_nhwc
from keras_caffe.layers.conv import ConvolutionParameters


@register
class Deconvolution(ConvolutionParameters):
    """Caffe's Deconvolution: the transposed (backward) convolution, with groups.

    Each input pixel scatters ``x[i] * W[i, j]`` into output channel ``j`` of
    its group at ``y * stride + k * dilation - pad`` (no kernel flip); the
    output size is ``stride * (in - 1) + dilation * (kernel - 1) + 1 - 2 * pad``.
    Computes in NHWC as a full ("valid") transposed convolution, then crops
    ``pad`` from each side.

    ``group > 1`` (FCN's bilinear upsampling uses ``group == channels``) runs
    as one transposed convolution with a block-diagonal kernel built from the
    weights at each call (so training only ever updates in-group entries),
    or, when that kernel would be too large, one transposed convolution per
    group.

    Caffe's blobs: weights (in_channels, num_output / group, kh, kw),
    bias (num_output,). The Keras kernel is (kh, kw, num_output / group,
    in_channels).
    """

    caffe_type = "Deconvolution"

    #: Largest block-diagonal kernel (values) built for grouped layers;
    #: larger ones run one transposed convolution per group.
    dense_group_limit = 1 << 22

    def __init__(self, num_output, kernel_size, **kwargs):
        super().__init__(num_output, kernel_size, **kwargs)
        if self.num_output % self.group:
            raise ValueError(f"group {self.group} must divide num_output {self.num_output}")

    def build(self, input_shape):
        channels = input_shape[1] if self.data_format == "channels_first" else input_shape[-1]
        self.in_channels = int(channels)
        if self.in_channels % self.group:
            raise ValueError(f"group {self.group} must divide the {self.in_channels} "
                             "input channels")
        kh, kw = self.kernel_size
        self.kernel = self.add_weight(
            name="kernel", shape=(kh, kw, self.num_output // self.group, self.in_channels),
            initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.num_output,),
                                     initializer=self.bias_initializer)
                     if self.bias_term else None)

    def _transposed_conv(self, x, kernel):
        """Full transposed convolution: (in - 1) * stride + dilated kernel extent.

        A dilated kernel is spelled out (zeros between its taps) and run at
        dilation 1: TensorFlow's Eigen kernels (CPUs without oneDNN) refuse
        ``Conv2DBackpropInput`` with dilation > 1, and the zeros add exact
        zeros, so every backend gives the same numbers.
        """
        return ops.conv_transpose(x, dilate_kernel(kernel, self.dilation),
                                  strides=self.stride, padding="valid", output_padding=0)

    def _block_diagonal(self):
        """(kh, kw, num_output, in_channels), zero outside each group's block."""
        out_g, in_g = self.num_output // self.group, self.in_channels // self.group
        tiled = ops.tile(self.blob(self.kernel), (1, 1, self.group, 1))
        mask = (np.arange(self.num_output)[:, None] // out_g
                == np.arange(self.in_channels)[None, :] // in_g).astype(self.kernel.dtype)
        return tiled * ops.convert_to_tensor(mask, dtype=self.kernel.dtype)

    def _uses_dense_kernel(self):
        kh, kw = self.kernel_size
        return kh * kw * self.num_output * self.in_channels <= self.dense_group_limit

    def call(self, x):
        x = to_nhwc(x, self.data_format)
        kernel = self.blob(self.kernel)
        if self.group == 1:
            y = self._transposed_conv(x, kernel)
        elif self._uses_dense_kernel():
            y = self._transposed_conv(x, self._block_diagonal())
        else:
            in_g = self.in_channels // self.group
            y = ops.concatenate(
                [self._transposed_conv(x[..., g * in_g:(g + 1) * in_g],
                                       kernel[:, :, :, g * in_g:(g + 1) * in_g])
                 for g in range(self.group)], axis=-1)
        ph, pw = self.pad
        if ph or pw:
            y = y[:, ph:(-ph or None), pw:(-pw or None), :]
        if self.bias is not None:
            y = y + self.blob(self.bias)
        return from_nhwc(y, self.data_format)

    def compute_output_shape(self, input_shape):
        shape = list(input_shape)
        spatial = (2, 3) if self.data_format == "channels_first" else (1, 2)
        params = zip(spatial, self.kernel_size, self.stride, self.pad, self.dilation)
        for axis, k, s, p, d in params:
            if shape[axis] is not None:
                shape[axis] = s * (shape[axis] - 1) + d * (k - 1) + 1 - 2 * p
        shape[1 if self.data_format == "channels_first" else -1] = self.num_output
        return tuple(shape)

    def caffe_blob_shapes(self):
        kh, kw = self.kernel_size
        shapes = [(self.in_channels, self.num_output // self.group, kh, kw)]
        return shapes + ([(self.num_output,)] if self.bias_term else [])

    def keras_weights_from_caffe(self, blobs):
        return [blobs[0].transpose(2, 3, 1, 0)] + blobs[1:]

    def caffe_from_keras_weights(self, weights):
        return [np.ascontiguousarray(weights[0].transpose(3, 2, 0, 1))] + list(weights[1:])


def dilate_kernel(kernel, dilation):
    """``kernel`` (kh, kw, ...) with ``d - 1`` zeros between neighbouring taps
    along each spatial axis: shape (d_h (kh - 1) + 1, d_w (kw - 1) + 1, ...).
    Tap ``(i, j)`` lands at ``(i d_h, j d_w)``; the gradient flows back to the
    taps only."""
    if all(d == 1 for d in dilation):
        return kernel
    kernel = ops.convert_to_tensor(kernel)
    for axis, d in enumerate(dilation):
        if d == 1:
            continue
        k = kernel.shape[axis]
        moved = ops.moveaxis(kernel, axis, 0)
        rest = tuple(moved.shape[1:])
        padded = ops.concatenate([ops.expand_dims(moved, 1),
                                  ops.zeros((k, d - 1, *rest), dtype=moved.dtype)], axis=1)
        spread = ops.reshape(padded, (k * d, *rest))[:(k - 1) * d + 1]
        kernel = ops.moveaxis(spread, 0, axis)
    return kernel


@register
class Embed(Fillers, CaffeBlobs, keras.layers.Layer):
    """Caffe's Embed: a table lookup, ``y[..., :] = W[int(x[...]), :] (+ b)``.

    The input holds integer-valued floats (converted by truncation, as
    Caffe's ``static_cast<int>``); the output has the input's shape plus a
    last axis of ``num_output``. Caffe's blobs: W (input_dim, num_output)
    (the transpose of InnerProduct's) and bias (num_output,); the Keras
    weights are the same arrays.
    """

    caffe_type = "Embed"

    def __init__(self, num_output, input_dim, bias_term=True, **kwargs):
        super().__init__(**kwargs)
        self.num_output = int(num_output)
        self.input_dim = int(input_dim)
        self.bias_term = bool(bias_term)

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(self.input_dim, self.num_output),
                                      initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.num_output,),
                                     initializer=self.bias_initializer)
                     if self.bias_term else None)

    def call(self, x):
        index = ops.cast(x, "int32")
        y = ops.take(self.blob(self.kernel), index, axis=0)
        return y + self.blob(self.bias) if self.bias is not None else y

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.num_output)

    def caffe_blob_shapes(self):
        bias = [(self.num_output,)] if self.bias_term else []
        return [(self.input_dim, self.num_output)] + bias


    def get_config(self):
        config = super().get_config()
        config.update(num_output=self.num_output, input_dim=self.input_dim,
                      bias_term=self.bias_term)
        return config

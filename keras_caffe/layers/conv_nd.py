"""Caffe's Convolution and Deconvolution over 3 spatial axes (N, C, D, H, W):
BVLC's N-D ``base_conv_layer.cpp`` (``kernel_size`` / ``pad`` / ``stride`` /
``dilation`` per axis, ``group``), and C3D's Convolution3D /
Deconvolution3D, which are the same computations with their own blob shapes
and output-size rounding."""

import numpy as np
from keras import ops

from keras_caffe.layers.base import register
from keras_caffe.layers.conv import ConvolutionParameters
from keras_caffe.layers.deconv import dilate_kernel


def channels_last(x, data_format):
    """(N, C, *spatial) -> (N, *spatial, C): TensorFlow's CPU kernels compute
    3-D convolution and pooling channels-last only."""
    if data_format != "channels_first":
        return x
    rank = len(x.shape)
    return ops.transpose(x, (0, *range(2, rank), 1))


def channels_back(x, data_format):
    """The inverse of ``channels_last``."""
    if data_format != "channels_first":
        return x
    rank = len(x.shape)
    return ops.transpose(x, (0, rank - 1, *range(1, rank - 1)))


def spatial_of(shape, data_format):
    """(channels, spatial sizes) of a Keras input shape."""
    if data_format == "channels_first":
        return shape[1], tuple(shape[2:])
    return shape[-1], tuple(shape[1:-1])


def with_spatial(shape, data_format, channels, spatial):
    if data_format == "channels_first":
        return (shape[0], channels, *spatial)
    return (shape[0], *spatial, channels)


def _axes(value, n):
    if isinstance(value, (tuple, list)):
        if len(value) != n:
            raise ValueError(f"{value} has {len(value)} values for {n} spatial axes")
        return tuple(int(v) for v in value)
    return (int(value),) * n


class _NDParameters(ConvolutionParameters):
    """ConvolutionParameters with one value per spatial axis (the axes from
    ``kernel_size``, a tuple)."""

    def __init__(self, num_output, kernel_size, stride=1, pad=0, dilation=1, **kwargs):
        kernel = tuple(int(k) for k in kernel_size)
        n = len(kernel)
        super().__init__(num_output, kernel, stride=_axes(stride, n), pad=_axes(pad, n),
                         dilation=_axes(dilation, n), **kwargs)

    def _in_channels(self, input_shape):
        channels, spatial = spatial_of(input_shape, self.data_format)
        if len(spatial) != len(self.kernel_size):
            raise ValueError(f"a {len(self.kernel_size)}-D kernel on an input of "
                             f"{len(spatial)} spatial axes")
        return int(channels)

    def _bias_blob_shape(self):
        return (self.num_output,)

    def compute_output_shape(self, input_shape):
        _, sizes = spatial_of(input_shape, self.data_format)
        return with_spatial(input_shape, self.data_format, self.num_output,
                            self.output_sizes(sizes))

    # The blob (out, in/g, k...) for one, (in, out/g, k...) for the other:
    # either way Keras holds it as (k..., axis 1, axis 0).
    def keras_weights_from_caffe(self, blobs):
        n = len(self.kernel_size)
        kernel = blobs[0].transpose(*range(2, n + 2), 1, 0)
        return [kernel] + [b.reshape(self.num_output) for b in blobs[1:]]

    def caffe_from_keras_weights(self, weights):
        n = len(self.kernel_size)
        w = np.ascontiguousarray(weights[0].transpose(n + 1, n, *range(n)))
        return [w] + [np.reshape(b, self._bias_blob_shape()) for b in weights[1:]]


@register
class ConvolutionND(_NDParameters):
    """Caffe's Convolution over 3 (any number TensorFlow's conv supports)
    spatial axes: symmetric zero ``pad`` per axis, ``stride``, ``dilation``,
    ``group``. Computes channels-last (channels_first inputs are transposed
    there and back, as TensorFlow's CPU kernels have no NCDHW convolution);
    a stride with a dilation runs at stride 1 and keeps every stride-th
    output (TensorFlow refuses the two together).

    Caffe's blobs: weights (num_output, in / group, *kernel), bias
    (num_output,); the Keras kernel is (*kernel, in / group, num_output).
    ``output_sizes`` is BVLC's floor rounding; a subclass may round
    otherwise (C3D's truncation toward zero), the input then gets the zero
    padding on the far side that the windows it computes reach.
    """

    caffe_type = "Convolution"

    def build(self, input_shape):
        self.in_channels = self._in_channels(input_shape)
        if self.in_channels % self.group or self.num_output % self.group:
            raise ValueError(f"group {self.group} must divide the {self.in_channels} input "
                             f"channels and num_output {self.num_output}")
        shape = (*self.kernel_size, self.in_channels // self.group, self.num_output)
        self.kernel = self.add_weight(name="kernel", shape=shape,
                                      initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.num_output,),
                                     initializer=self.bias_initializer)
                     if self.bias_term else None)

    def output_sizes(self, sizes):
        """Caffe's (size + 2 pad - dilation (k - 1) - 1) / stride + 1, floored."""
        return [None if n is None else (n + 2 * p - d * (k - 1) - 1) // s + 1
                for n, k, s, p, d in zip(sizes, self.kernel_size, self.stride, self.pad,
                                         self.dilation)]

    def call(self, x):
        x = channels_last(x, self.data_format)
        sizes = tuple(x.shape[1:-1])
        out = self.output_sizes(sizes)
        extents = [d * (k - 1) + 1 for k, d in zip(self.kernel_size, self.dilation)]
        far = [max(p, (o - 1) * s + e - n - p)
               for n, o, s, p, e in zip(sizes, out, self.stride, self.pad, extents)]
        if any(self.pad) or any(f > p for f, p in zip(far, self.pad)):
            x = ops.pad(x, [[0, 0], *([p, f] for p, f in zip(self.pad, far)), [0, 0]])
        dilated = max(self.dilation) > 1
        strides = (1,) * len(sizes) if dilated else self.stride
        y = ops.conv(x, self.blob(self.kernel), strides=strides, padding="valid",
                     dilation_rate=self.dilation)
        index = (slice(None), *(slice(0, o * s if dilated else o, s if dilated else 1)
                                for o, s in zip(out, self.stride)), slice(None))
        y = y[index]
        if self.bias is not None:
            y = y + self.blob(self.bias)
        return channels_back(y, self.data_format)

    def caffe_blob_shapes(self):
        weights = [(self.num_output, self.in_channels // self.group, *self.kernel_size)]
        return weights + ([self._bias_blob_shape()] if self.bias_term else [])


@register
class DeconvolutionND(_NDParameters):
    """Caffe's Deconvolution over 3 spatial axes: each input cell scatters
    ``x[i] * W[i, j]`` into output channel ``j`` of its group at
    ``y * stride + k * dilation - pad`` (no kernel flip); output size
    ``stride (in - 1) + dilation (k - 1) + 1 - 2 pad``. A full transposed
    convolution (a dilated kernel spelled out with zeros), then ``pad``
    cropped from both sides; ``group > 1`` runs with a block-diagonal kernel.

    Caffe's blobs: weights (in_channels, num_output / group, *kernel), bias
    (num_output,); the Keras kernel is (*kernel, num_output / group,
    in_channels).
    """

    caffe_type = "Deconvolution"

    def build(self, input_shape):
        self.in_channels = self._in_channels(input_shape)
        if self.in_channels % self.group or self.num_output % self.group:
            raise ValueError(f"group {self.group} must divide the {self.in_channels} input "
                             f"channels and num_output {self.num_output}")
        shape = (*self.kernel_size, self.num_output // self.group, self.in_channels)
        self.kernel = self.add_weight(name="kernel", shape=shape,
                                      initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.num_output,),
                                     initializer=self.bias_initializer)
                     if self.bias_term else None)

    def _full_kernel(self):
        """The (*kernel, num_output, in_channels) kernel, zero outside each
        group's block (rebuilt from the weights at each call, so training
        only ever moves in-group entries)."""
        kernel = self.blob(self.kernel)
        if self.group == 1:
            return kernel
        n = len(self.kernel_size)
        out_g, in_g = self.num_output // self.group, self.in_channels // self.group
        tiled = ops.tile(kernel, (1,) * n + (self.group, 1))
        mask = (np.arange(self.num_output)[:, None] // out_g
                == np.arange(self.in_channels)[None, :] // in_g).astype(self.kernel.dtype)
        return tiled * ops.convert_to_tensor(mask, dtype=self.kernel.dtype)

    def output_sizes(self, sizes):
        return [None if n is None else s * (n - 1) + d * (k - 1) + 1 - 2 * p
                for n, k, s, p, d in zip(sizes, self.kernel_size, self.stride, self.pad,
                                         self.dilation)]

    def call(self, x):
        x = channels_last(x, self.data_format)
        kernel = dilate_kernel(self._full_kernel(), self.dilation)
        y = ops.conv_transpose(x, kernel, strides=self.stride, padding="valid",
                               output_padding=0)
        if any(self.pad):
            y = y[(slice(None), *(slice(p, -p or None) for p in self.pad), slice(None))]
        if self.bias is not None:
            y = y + self.blob(self.bias)
        return channels_back(y, self.data_format)

    def caffe_blob_shapes(self):
        weights = [(self.in_channels, self.num_output // self.group, *self.kernel_size)]
        return weights + ([self._bias_blob_shape()] if self.bias_term else [])

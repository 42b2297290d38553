"""C3D's (facebook/C3D) 3-D layers on (N, C, L, H, W) blobs: Convolution3D,
Deconvolution3D and Pooling3D, with the fork's output sizes and blob shapes
(C3D-v1.1/src/caffe/layers/convolution3d_layer.cpp, deconvolution3d_layer.cpp,
pool3d_layer.cpp; C3D-v1.0's are the same computations)."""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import check_data_format, register
from keras_caffe.layers.conv_nd import (
    ConvolutionND,
    DeconvolutionND,
    channels_back,
    channels_last,
    spatial_of,
    with_spatial,
)

#: Caffe's -FLT_MAX: where MAX pooling starts each window.
LOWEST = float(-np.finfo(np.float32).max)


def c3d_conv_size(size, kernel, stride, pad):
    """Convolution3D's output size: C++ ``int`` division, which truncates
    toward zero (a kernel up to ``stride - 1`` past the padded input still
    gives one window, its taps outside reading zeros, as vol2col does)."""
    return int((size + 2 * pad - kernel) / stride) + 1


def c3d_pooled_size(size, kernel, stride, pad):
    """Pooling3D's output size: ``ceil(float(size + 2 pad - kernel) / stride) + 1``
    (the temporal axis has no pad), with no clipping of a last window that
    starts past the input."""
    return math.ceil((size + 2 * pad - kernel) / stride) + 1


class _ForkBias:
    """C3D keeps the bias as a (1, 1, 1, 1, num_output) blob."""

    def _bias_blob_shape(self):
        return (1, 1, 1, 1, self.num_output)


@register
class C3DConvolution3D(_ForkBias, ConvolutionND):
    """C3D's Convolution3D: a 3-D convolution (no groups: ``filter_group``
    only splits the GEMM) with the fork's truncating output size. Blobs:
    weights (num_output, C, kernel_depth, k, k), bias (1, 1, 1, 1, num_output)."""

    caffe_type = "Convolution3D"

    def output_sizes(self, sizes):
        return [None if n is None else c3d_conv_size(n, k, s, p)
                for n, k, s, p in zip(sizes, self.kernel_size, self.stride, self.pad)]


@register
class C3DDeconvolution3D(_ForkBias, DeconvolutionND):
    """C3D's Deconvolution3D: the transposed 3-D convolution (col2vol), output
    ``(in - 1) stride - 2 pad + kernel``. Blobs: weights (C, num_output,
    kernel_depth, k, k), bias (1, 1, 1, 1, num_output)."""

    caffe_type = "Deconvolution3D"


@register
class C3DPooling3D(keras.layers.Layer):
    """C3D's Pooling3D, MAX or AVE, over (L, H, W): ``kernel`` and ``stride``
    per axis (the fork's kernel_depth, kernel_size, kernel_size), ``pad`` on
    H and W only (AVE only). Output sizes ``c3d_pooled_size``.

    MAX: each window's maximum of the input cells it covers, starting from
    -FLT_MAX (a window wholly past the input gives -FLT_MAX). AVE: the sum of
    the input cells in the window divided by the fork's ``pool_size``, the
    product over axes of ``min(start + k, size + pad) - start`` (the
    temporal axis: ``min(start + k, length) - start``), so H/W padding counts
    and the ceil-mode overhang does not.
    """

    def __init__(self, pool="MAX", kernel_size=(1, 1, 1), stride=(1, 1, 1), pad=0,
                 data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        if pool not in ("MAX", "AVE"):
            raise ValueError(f"pool must be 'MAX' or 'AVE', got {pool!r}")
        self.pool = pool
        self.kernel_size = tuple(int(k) for k in kernel_size)
        self.stride = tuple(int(s) for s in stride)
        self.pad = int(pad)
        if len(self.kernel_size) != 3 or len(self.stride) != 3:
            raise ValueError("kernel_size and stride take 3 values (L, H, W)")
        if self.pad and pool != "AVE":
            raise ValueError("pad is implemented only for AVE pooling")
        self.data_format = check_data_format(data_format)

    def _pads(self):
        return (0, self.pad, self.pad)

    def _output_sizes(self, sizes):
        return [None if n is None else c3d_pooled_size(n, k, s, p)
                for n, k, s, p in zip(sizes, self.kernel_size, self.stride, self._pads())]

    def call(self, x):
        x = channels_last(x, self.data_format)
        sizes = tuple(x.shape[1:4])
        out = self._output_sizes(sizes)
        pads = self._pads()
        # The far side reaches the last window's end (past the input with
        # ceil rounding): MAX pads with -FLT_MAX, AVE with zeros.
        far = [max(p, (o - 1) * s + k - n - p)
               for n, o, k, s, p in zip(sizes, out, self.kernel_size, self.stride, pads)]
        paddings = [[0, 0], *([p, f] for p, f in zip(pads, far)), [0, 0]]
        if self.pool == "MAX":
            if any(pads) or any(far):
                x = ops.pad(x, paddings, constant_values=LOWEST)
            y = ops.max_pool(x, self.kernel_size, self.stride, padding="valid")
            y = ops.maximum(y[:, :out[0], :out[1], :out[2], :], ops.cast(LOWEST, y.dtype))
        else:
            if any(pads) or any(far):
                x = ops.pad(x, paddings)
            y = ops.average_pool(x, self.kernel_size, self.stride, padding="valid")
            y = y[:, :out[0], :out[1], :out[2], :]
            scale = self._average_scale(sizes, out)
            if scale is not None:
                y = y * ops.cast(scale, y.dtype)
        return channels_back(y, self.data_format)

    def _average_scale(self, sizes, out):
        """(k_l k_h k_w) / the fork's pool_size per output cell (None where
        all windows are whole)."""
        factors = []
        for axis, (n, o, k, s, p) in enumerate(zip(sizes, out, self.kernel_size, self.stride,
                                                    self._pads())):
            start = np.arange(o) * s - p
            limit = n + p if axis else n  # the temporal axis has no pad
            with np.errstate(divide="ignore"):  # an empty window: 0 / 0, as in C++
                factors.append(k / (np.minimum(start + k, limit) - start).astype(np.float64))
        with np.errstate(invalid="ignore"):
            scale = np.einsum("i,j,k->ijk", *factors).astype("float32")
        return None if np.all(scale == 1.0) else scale[None, :, :, :, None]

    def compute_output_shape(self, input_shape):
        channels, sizes = spatial_of(input_shape, self.data_format)
        return with_spatial(input_shape, self.data_format, channels, self._output_sizes(sizes))

    def get_config(self):
        config = super().get_config()
        config.update(pool=self.pool, kernel_size=self.kernel_size, stride=self.stride,
                      pad=self.pad, data_format=self.data_format)
        return config

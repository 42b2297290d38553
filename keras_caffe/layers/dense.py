"""Caffe's InnerProduct: flatten from ``axis``, then a matrix product."""

import keras
import numpy as np
from keras import ops

from keras_caffe.kernels import cpu_only
from keras_caffe.layers.base import CaffeBlobs, Fillers, on_tensorflow, register
from keras_caffe.layers.base import tensorflow_kernels


#: Kernels of at least this many weights take ``tensorflow_kernels.large_kernel_matmul`` on TensorFlow's CPUs.
LARGE_KERNEL = 1 << 18


@register
class InnerProduct(Fillers, CaffeBlobs, keras.layers.Layer):
    """Caffe's InnerProduct.

    Flattens every axis from ``axis`` on, then ``y = x W^T + b`` (Caffe's W is
    (num_output, K); with ``transpose`` it is (K, num_output)).

    ``chw`` is set when the input is a channels-last image blob (N, H, W, C)
    whose Caffe twin is (N, C, H, W): Caffe flattens in C, H, W order, this
    layer flattens in H, W, C order, and the kernel's rows are permuted once
    when the blobs are loaded, so the graph needs no transpose.
    """

    caffe_type = "InnerProduct"

    def __init__(self, num_output, bias_term=True, axis=1, transpose=False, chw=None, **kwargs):
        super().__init__(**kwargs)
        self.num_output = int(num_output)
        self.bias_term = bool(bias_term)
        self.axis = int(axis)
        self.transpose = bool(transpose)
        self.chw = tuple(chw) if chw is not None else None

    def build(self, input_shape):
        k = int(np.prod(input_shape[self.axis:]))
        self.kernel = self.add_weight(name="kernel", shape=(k, self.num_output),
                                      initializer=self.kernel_initializer)
        self.bias = (self.add_weight(name="bias", shape=(self.num_output,),
                                    initializer=self.bias_initializer)
                     if self.bias_term else None)

    def call(self, x):
        if len(x.shape) != self.axis + 1:
            x = ops.reshape(x, (*ops.shape(x)[:self.axis], -1))
        kernel = self.blob(self.kernel)
        if len(x.shape) == 2 and int(np.prod(self.kernel.shape)) >= LARGE_KERNEL \
                and on_tensorflow() and cpu_only():
            y = tensorflow_kernels.large_kernel_matmul(x, kernel)
        else:
            y = ops.matmul(x, kernel)
        return y + self.blob(self.bias) if self.bias is not None else y

    def _rows_from_chw(self, rows_chw):
        """Reorder kernel rows from Caffe's (C, H, W) order to (H, W, C)."""
        if self.chw is None:
            return rows_chw
        c, h, w = self.chw
        return rows_chw.reshape(c, h, w, -1).transpose(1, 2, 0, 3).reshape(c * h * w, -1)

    def _rows_to_chw(self, rows_hwc):
        if self.chw is None:
            return rows_hwc
        c, h, w = self.chw
        return rows_hwc.reshape(h, w, c, -1).transpose(2, 0, 1, 3).reshape(c * h * w, -1)

    def caffe_blob_shapes(self):
        k = self.kernel.shape[0]
        shapes = [(k, self.num_output) if self.transpose else (self.num_output, k)]
        return shapes + ([(self.num_output,)] if self.bias_term else [])

    def keras_weights_from_caffe(self, blobs):
        rows = blobs[0] if self.transpose else blobs[0].T
        return [self._rows_from_chw(rows)] + blobs[1:]

    def caffe_from_keras_weights(self, weights):
        rows = self._rows_to_chw(weights[0])
        w = rows if self.transpose else rows.T
        return [np.ascontiguousarray(w)] + list(weights[1:])

    def get_config(self):
        config = super().get_config()
        config.update(num_output=self.num_output, bias_term=self.bias_term, axis=self.axis,
                      transpose=self.transpose, chw=self.chw)
        return config

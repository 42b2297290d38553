"""BVLC's layers that pick samples of a batch: BatchReindex
(batch_reindex_layer.cpp) and Filter (filter_layer.cpp)."""

import keras
from keras import ops

from keras_caffe.layers.base import on_tensorflow, register, tensorflow_kernels
from keras_caffe.layers.value_checks import check_batch_indices, values_known


@register
class BatchReindex(keras.layers.Layer):
    """``top[i] = x[permut[i]]``: inputs ``[x, permut]``, ``permut`` (K,)
    float indices as Caffe's blobs hold them (``BatchReindexLayer::Forward_cpu``);
    an index outside [0, N) is a ``LayerValueError``, as Caffe's CHECKs
    (``keras_caffe.layers.value_checks``)."""

    def call(self, inputs):
        x, permut = inputs
        index = ops.cast(permut, "int32")
        if on_tensorflow() and not values_known(index):  # the CHECKs as graph assertions
            return tensorflow_kernels.checked_take(x, index, self.name)
        check_batch_indices(self.name, index, ops.shape(x)[0])
        return ops.take(x, index, axis=0)

    def compute_output_shape(self, input_shapes):
        return (input_shapes[1][0], *input_shapes[0][1:])


@register
class Filter(keras.layers.Layer):
    """The samples whose selector is non-zero, of each input but the last
    (the selector, (N,) or (N, 1, ...)), in order (``FilterLayer::Forward_cpu``)."""

    def call(self, inputs):
        *blobs, selector = inputs
        keep = ops.reshape(selector, (-1,)) != 0
        if on_tensorflow():
            return tensorflow_kernels.boolean_mask(blobs, keep)
        # keras.ops has no boolean mask: the kept rows' indices (eager: the
        # count is data-dependent, which a compiled JAX function cannot hold)
        rows = ops.nonzero(keep)[0]
        return [ops.take(b, rows, axis=0) for b in blobs]

    def compute_output_shape(self, input_shapes):
        return [(None, *shape[1:]) for shape in input_shapes[:-1]]


@register
class Im2col(keras.layers.Layer):
    """Caffe's im2col of an image (im2col_layer.cpp, 2-D): each output
    position's (C, kh, kw) window as channels, channel ``(c * kh + i) * kw + j``,
    zero padding, stride and dilation per axis."""

    def __init__(self, kernel_size, stride=(1, 1), pad=(0, 0), dilation=(1, 1),
                 data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.kernel_size, self.stride = tuple(kernel_size), tuple(stride)
        self.pad, self.dilation = tuple(pad), tuple(dilation)
        self.data_format = data_format

    def call(self, x):
        if self.data_format == "channels_first":
            x = ops.transpose(x, (0, 2, 3, 1))
        (ph, pw), (kh, kw) = self.pad, self.kernel_size
        x = ops.pad(x, ((0, 0), (ph, ph), (pw, pw), (0, 0)))
        dilated = max(self.dilation) > 1
        # extract_patches takes a stride or a dilation, not both: dilate, then
        # keep every stride-th window.
        patches = keras.ops.image.extract_patches(
            x, (kh, kw), strides=(1, 1) if dilated else self.stride,
            dilation_rate=self.dilation, padding="valid", data_format="channels_last")
        if dilated:
            patches = patches[:, ::self.stride[0], ::self.stride[1]]
        n, oh, ow = ops.shape(patches)[0], patches.shape[1], patches.shape[2]
        channels = x.shape[-1]
        # (i, j, c) per position -> Caffe's (c, i, j)
        patches = ops.reshape(patches, (n, oh, ow, kh, kw, channels))
        patches = ops.reshape(ops.transpose(patches, (0, 1, 2, 5, 3, 4)),
                              (n, oh, ow, channels * kh * kw))
        if self.data_format == "channels_first":
            patches = ops.transpose(patches, (0, 3, 1, 2))
        return patches

    def get_config(self):
        config = super().get_config()
        config.update(kernel_size=self.kernel_size, stride=self.stride, pad=self.pad,
                      dilation=self.dilation, data_format=self.data_format)
        return config

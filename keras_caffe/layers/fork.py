"""Layers of well-known Caffe forks that Keras lacks: SSD's Normalize and
ShuffleNet's ShuffleChannel, computed as the forks' ``Forward_cpu`` does.
Axes are axes of the Keras tensor, so channels-last data needs no transpose.
"""

import keras
from keras import ops

from keras_caffe.layers.base import CaffeBlobs, register


@register
class Normalize(CaffeBlobs, keras.layers.Layer):
    """SSD's Normalize (weiliu89/caffe, src/caffe/layers/normalize_layer.cpp):
    L2 normalization, then a learned scale.

    ``across_spatial``: each sample divided by ``sqrt(sum(x^2) + eps)`` over
    all its values; otherwise each position by ``sqrt(eps + sum_c x^2)`` over
    the channels (``axis``). The scale is one value (``channel_shared``,
    Caffe's blob shape ``()``) or one per channel (``(C,)``); the fork's
    default initial value is 1, SSD's nets start it at 20.
    """

    caffe_type = "Normalize"

    def __init__(self, axis=-1, across_spatial=True, channel_shared=True, eps=1e-10,
                 scale_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.across_spatial = bool(across_spatial)
        self.channel_shared = bool(channel_shared)
        self.eps = float(eps)
        self.scale_initializer = keras.initializers.get(scale_initializer)

    def build(self, input_shape):
        self.ndim = len(input_shape)
        shape = () if self.channel_shared else (int(input_shape[self.axis]),)
        self.scale = self.add_weight(name="scale", shape=shape, initializer=self.scale_initializer)

    def call(self, x):
        axis = self.axis % self.ndim
        squares = ops.square(x)
        if self.across_spatial:
            total = ops.sum(squares, axis=tuple(range(1, self.ndim)), keepdims=True)
        else:
            total = ops.sum(squares, axis=axis, keepdims=True)
        y = x / ops.sqrt(total + self.eps)
        scale = ops.cast(self.blob(self.scale), x.dtype)
        if not self.channel_shared:
            shape = [1] * self.ndim
            shape[axis] = -1
            scale = ops.reshape(scale, shape)
        return y * scale

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis, across_spatial=self.across_spatial,
                      channel_shared=self.channel_shared, eps=self.eps,
                      scale_initializer=keras.initializers.serialize(self.scale_initializer))
        return config


@register
class ShuffleChannel(keras.layers.Layer):
    """ShuffleNet's ShuffleChannel: the channels (tensor ``axis``), seen as
    ``group`` rows of ``C / group``, are read column by column (Caffe's
    ``(N, g, C/g, H, W)`` -> ``(N, C/g, g, H, W)``)."""

    def __init__(self, group, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.group = int(group)
        self.axis = int(axis)

    def call(self, x):
        rank = len(x.shape)
        axis = self.axis % rank
        channels = x.shape[axis]
        shape = ops.shape(x)
        split = [shape[i] for i in range(axis)] + [self.group, channels // self.group] + [
            shape[i] for i in range(axis + 1, rank)]
        y = ops.reshape(x, split)
        perm = list(range(rank + 1))
        perm[axis], perm[axis + 1] = perm[axis + 1], perm[axis]
        return ops.reshape(ops.transpose(y, perm), shape)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(group=self.group, axis=self.axis)
        return config

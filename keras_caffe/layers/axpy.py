"""SENet's Axpy (hujie-frank/SENet, src/caffe/layers/axpy_layer.cpp)."""

import keras
from keras import ops

from keras_caffe.layers.base import register


@register
class Axpy(keras.layers.Layer):
    """``top = a * x + y`` with one scale ``a[n, c]`` per sample and channel
    (``AxpyLayer::Forward_cpu``: ``caffe_axpy`` over each (n, c) plane).

    Inputs ``[a, x, y]``: ``a`` is (N, C) (Caffe's (N, C) or (N, C, 1, 1),
    flattened), ``x`` and ``y`` one shape with the channels on ``axis`` of
    the Keras tensor.
    """

    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)

    def call(self, inputs):
        a, x, y = inputs
        rank = len(x.shape)
        shape = [1] * rank
        shape[0] = -1
        shape[self.axis % rank] = x.shape[self.axis]
        return ops.reshape(a, shape) * x + y

    def compute_output_shape(self, input_shapes):
        return input_shapes[1]

    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis)
        return config

"""Caffe's Swish (BVLC: src/caffe/layers/swish_layer.cpp)."""

import keras
from keras import ops

from keras_caffe.layers.base import register


@register
class Swish(keras.layers.Layer):
    """``x * sigmoid(beta * x)`` elementwise (``SwishLayer::Forward_cpu``)."""

    def __init__(self, beta=1.0, **kwargs):
        super().__init__(**kwargs)
        self.beta = float(beta)

    def call(self, x):
        return x * ops.sigmoid(self.beta * x)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(beta=self.beta)
        return config

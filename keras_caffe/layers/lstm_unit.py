"""BVLC's LSTMUnit (lstm_unit_layer.cpp): one step of an LSTM's cell."""

import keras
from keras import ops

from keras_caffe.layers.base import register


@register
class LSTMUnit(keras.layers.Layer):
    """Inputs ``[c_prev, x, cont]`` as Caffe's (1, N, H), (1, N, 4H), (1, N):
    gates i, f, o, g of x (in that order, H each), ``f`` times ``cont`` (0
    resets), ``c = f * c_prev + i * g``, ``h = o * tanh(c)``; outputs
    ``[c, h]`` (``LSTMUnitLayer::Forward_cpu``)."""

    def call(self, inputs):
        c_prev, x, cont = inputs
        hidden = c_prev.shape[-1]
        i = ops.sigmoid(x[..., :hidden])
        f = ops.sigmoid(x[..., hidden:2 * hidden]) * ops.expand_dims(cont, -1)
        o = ops.sigmoid(x[..., 2 * hidden:3 * hidden])
        g = ops.tanh(x[..., 3 * hidden:])
        c = f * c_prev + i * g
        return [c, o * ops.tanh(c)]

    def compute_output_shape(self, input_shapes):
        return [input_shapes[0], input_shapes[0]]

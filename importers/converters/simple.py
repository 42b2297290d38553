"""Elementwise layers that keep shape and order."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._legacy import converter
from keras_caffe.layers.elementwise import ReLU as CaffeReLU


@converter("ReLU")
def relu(layer, bottoms, ctx):
    """ReLU with negative_slope (leaky)."""
    slope = layer.relu_param.negative_slope
    name = ctx.keras_name(layer.name)
    # Keras's ReLU refuses a negative slope, which Caffe allows.
    relu = (keras.layers.ReLU(negative_slope=slope, name=name) if slope >= 0
            else CaffeReLU(negative_slope=slope, name=name))
    return [ctx.elementwise(relu, bottoms[0])]


@converter("Dropout")
def dropout(layer, bottoms, ctx):
    """Dropout: Caffe scales kept units by 1/(1-p) while training, as Keras does.

    In a TEST-phase net it is the identity even under ``training=True``
    (Caffe's TEST phase never drops).
    """
    p = layer.dropout_param
    if not 0.0 <= p.dropout_ratio < 1.0:
        raise LayerError(layer.name, f"dropout_ratio must be in [0, 1), got {p.dropout_ratio:g}")
    name = ctx.keras_name(layer.name)
    drop = (keras.layers.Identity(name=name) if ctx.phase == "TEST"
            else keras.layers.Dropout(p.dropout_ratio, name=name))
    return [ctx.elementwise(drop, bottoms[0])]

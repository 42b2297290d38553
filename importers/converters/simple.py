"""Elementwise layers that keep shape and order."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.registry import converter


@converter("ReLU")
def relu(layer, bottoms, ctx):
    """ReLU with negative_slope (leaky)."""
    slope = layer.relu_param.negative_slope
    return [ctx.elementwise(keras.layers.ReLU(negative_slope=slope, name=ctx.keras_name(layer.name)),
                            bottoms[0])]


@converter("Dropout")
def dropout(layer, bottoms, ctx):
    """Dropout: Caffe scales kept units by 1/(1-p) while training, as Keras does."""
    p = layer.dropout_param
    if not 0.0 <= p.dropout_ratio < 1.0:
        raise LayerError(layer.name, f"dropout_ratio must be in [0, 1), got {p.dropout_ratio:g}")
    return [ctx.elementwise(keras.layers.Dropout(p.dropout_ratio, name=ctx.keras_name(layer.name)),
                            bottoms[0])]

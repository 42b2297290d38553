"""Swish (BVLC: src/caffe/layers/swish_layer.cpp): ``x * sigmoid(beta x)``."""

from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.layers.swish import Swish as KerasSwish


@layer_type("Swish")
class Swish(LayerType):
    """``x * sigmoid(beta * x)`` elementwise (swish_param beta, default 1)."""

    examples = (Example("", [(2, 3, 4, 4)]), Example("swish_param { beta: 2.5 }", [(3, 5)]))

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        swish = KerasSwish(beta=layer.swish_param.beta, name=ctx.keras_name(layer.name))
        return [ctx.elementwise(swish, bottoms[0])]

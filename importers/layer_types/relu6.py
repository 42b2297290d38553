"""ReLU6 of the MobileNet-v2 forks: ``min(max(x, 0), 6)``, the type ncnn's
caffe2ncnn (as a Clip of 0 and 6) and OpenCV's Caffe importer (``ReLU6Layer``)
read; it has no parameters."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    MOBILENET_V2,
    Example,
    LayerType,
    layer_type,
    need_bottoms,
    same_shape,
)


@layer_type("ReLU6")
class ReLU6(LayerType):
    """``min(max(x, 0), 6)`` elementwise (no parameters; in place allowed)."""

    origin = MOBILENET_V2
    examples = (Example("", [(2, 3, 4, 4)]), Example("", [(3, 5)]))

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        if layer.HasField("relu_param"):
            raise LayerError(layer.name, "(ReLU6) takes no relu_param (its slope would be lost)")
        return same_shape(layer, bottoms)

    def build(self, layer, bottoms, ctx):
        relu6 = keras.layers.ReLU(max_value=6.0, name=ctx.keras_name(layer.name))
        return [ctx.elementwise(relu6, bottoms[0])]

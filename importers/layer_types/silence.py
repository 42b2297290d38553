"""Silence (BVLC: silence_layer.cpp): swallows blobs nothing else reads."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import Example, LayerType, Shapes, layer_type


@layer_type("Silence")
class Silence(LayerType):
    """Silence: consumes its bottoms (so they are no net outputs), has no tops.

    Where nothing else in the net is an output, the silenced blobs are the
    model's outputs (a net whose only result is silenced, e.g. colorization)."""

    examples = (
        Example("", [(2, 3, 4, 4)], tops=0),
        Example("", [(2, 3), (2, 5)], tops=0),
    )

    def shapes(self, layer, bottoms, state):
        if layer.top:
            raise LayerError(layer.name, f"(Silence) has no tops, but names {list(layer.top)}")
        return Shapes([])

    def build(self, layer, bottoms, ctx):
        return []

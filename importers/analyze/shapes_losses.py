"""Shape rules of the layers that end a net and have no unit yet: the losses
keras-caffe cannot import (InfogainLoss, MultinomialLogisticLoss; ``analyze``
sizes them), Silence and HDF5Output."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.analyze.shapes import _rule


@_rule("InfogainLoss", "MultinomialLogisticLoss")
def _loss(layer, bottoms, state):
    if len(bottoms) < 2:
        raise LayerError(layer.name, f"({layer.type}) takes at least 2 bottoms, got "
                                     f"{len(bottoms)}")
    tops = [()]
    if len(layer.top) > 1:
        tops.append(bottoms[0])  # InfogainLoss: the probabilities
    return tops, [], 0


@_rule("Silence", "HDF5Output")
def _sink(layer, bottoms, state):
    return [], [], 0

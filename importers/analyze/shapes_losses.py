"""Shape rules of the layers that end a net: the losses, Accuracy, Silence and HDF5Output."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.analyze.shapes import _axis, _bottoms, _rule


@_rule("SoftmaxWithLoss", "EuclideanLoss", "SigmoidCrossEntropyLoss", "HingeLoss",
       "InfogainLoss", "MultinomialLogisticLoss", "ContrastiveLoss")
def _loss(layer, bottoms, state):
    if len(bottoms) < 2:
        raise LayerError(layer.name, f"({layer.type}) takes at least 2 bottoms, got "
                                     f"{len(bottoms)}")
    tops = [()]
    if len(layer.top) > 1:
        tops.append(bottoms[0])  # SoftmaxWithLoss: the probabilities
    return tops, [], 0


@_rule("Accuracy")
def _accuracy(layer, bottoms, state):
    _bottoms(layer, bottoms, 2)
    tops = [()]
    if len(layer.top) > 1:
        shape = bottoms[0]
        tops.append((shape[_axis(layer.accuracy_param.axis, len(shape))],))
    return tops, [], 0


@_rule("Silence", "HDF5Output")
def _sink(layer, bottoms, state):
    return [], [], 0

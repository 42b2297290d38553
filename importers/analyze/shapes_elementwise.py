"""Shape rules of the layers whose output has their input's shape (the types
not yet moved into ``layer_types`` units)."""

from keras_caffe.importers.analyze.shapes import _bottoms, _rule, _same


@_rule("MVN", "Softmax", "Swish", "Split")
def _elementwise(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    return _same(layer, bottoms)

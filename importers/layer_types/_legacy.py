"""Transition: converters and shape rules not yet moved into units.

(Removed once every type has its unit.)"""

from keras_caffe.importers.layer_types import base

_OLD = {}


def converter(*types):
    def register(fn):
        for t in types:
            _OLD[t] = fn
        return fn
    return register


class LegacyUnit(base.LayerType):
    def __init__(self, fn, rule):
        self.fn, self.rule = fn, rule
        self.label_bottoms = tuple(getattr(fn, "label_bottoms", ()))
        if fn is None:
            self.build = None
        if rule is None:
            self.shapes = None

    def shapes(self, layer, bottoms, state):
        tops, weights, macs = self.rule(layer, bottoms, state)
        return base.Shapes(list(tops), list(weights), macs)

    def build(self, layer, bottoms, ctx):
        return self.fn(layer, bottoms, ctx)


def register_legacy():
    import keras_caffe.importers.converters  # noqa: F401
    from keras_caffe.importers.analyze import (  # noqa: F401
        shapes_elementwise, shapes_losses, shapes_structure)
    from keras_caffe.importers.analyze.shapes import _RULES

    for t in sorted(set(_OLD) | set(_RULES)):
        if t not in base._UNITS:
            unit = LegacyUnit(_OLD.get(t), _RULES.get(t))
            unit.types = (t,)
            base._UNITS[t] = unit

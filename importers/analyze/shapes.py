"""The shape-rule registry and the helpers the rules share.

A rule is ``(layer, bottom shapes, state) -> (top shapes, weight blob shapes,
MACs)``, registered for one or more Caffe layer types with ``@_rule``; the
rules themselves live in the ``shapes_*`` modules, by family.
"""

import math

from keras_caffe.errors import LayerError, UnknownLayerError

_RULES = {}


def _rule(*types):
    def register(fn):
        for t in types:
            _RULES[t] = fn
        return fn
    return register


def _bottoms(layer, bottoms, n):
    if len(bottoms) != n if isinstance(n, int) else len(bottoms) not in n:
        raise LayerError(layer.name, f"({layer.type}) takes {n} bottom(s), got {len(bottoms)}")


def _same(layer, bottoms, weights=()):
    if not bottoms:
        raise LayerError(layer.name, f"({layer.type}) needs a bottom")
    return [bottoms[0]] * len(layer.top), list(weights), 0


def _count(shape):
    return math.prod(shape)


def _fmt(shape):
    return "(" + ", ".join(str(d) for d in shape) + ")"


def _axis(axis, rank):
    """Caffe's CanonicalAxisIndex."""
    canonical = axis + rank if axis < 0 else axis
    if not 0 <= canonical < rank:
        raise ValueError(f"axis {axis} is out of range for a {rank}-D blob")
    return canonical


class UnknownLayerTypeError(UnknownLayerError):
    """Layer types ``analyze`` has no shape rule for; names the layers."""

    def __init__(self, source, layers, known):
        self.layers = dict(layers)  # layer name -> type
        types = sorted(set(self.layers.values()))
        named = ", ".join(f"{name!r} ({kind})" for name, kind in self.layers.items())
        super().__init__(source, types, known)
        self.args = (f"{source}: cannot analyze layer(s) {named}: no shape rule for type(s) "
                     f"{', '.join(types)}; known types: {', '.join(self.known)}",)


def _check_types(net, source):
    unknown = {layer.name: layer.type for layer in net.layer if layer.type not in _RULES}
    if unknown:
        raise UnknownLayerTypeError(source, unknown, sorted(_RULES))

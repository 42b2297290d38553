"""The shape-rule registry and the helpers the rules share.

A rule is ``(layer, bottom shapes, state) -> (top shapes, weight blob shapes,
MACs)``, registered for one or more Caffe layer types with ``@_rule``; the
rules themselves live in the ``shapes_*`` modules, by family.
"""

import math

from keras_caffe.errors import LayerError

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

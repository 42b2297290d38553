"""BatchReindex and Filter (BVLC: batch_reindex_layer.cpp, filter_layer.cpp):
tops made of chosen samples of the bottoms, so their batch sizes are the
data's (the rule gives the largest, for ``analyze``)."""

import math

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
    refuse_backend,
)
from keras_caffe.layers import batch_select as layers


@layer_type("BatchReindex")
class BatchReindex(LayerType):
    """``top[i] = bottom0[bottom1[i]]``: bottom 1 is a 1-D blob of K indices,
    the top (K, ...)."""

    examples = (Example("", [(4, 3, 2, 2), (6,)], integer_bottoms=(1,), integer_high=4),
                Example("", [(5, 3), (2,)], integer_bottoms=(1,), integer_high=5))

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 2)
        data, permut = (tuple(b) for b in bottoms)
        if len(permut) != 1:
            raise LayerError(layer.name, f"(BatchReindex) bottom 1 must be 1-D (the indices), got "
                                         f"{fmt(permut)}")
        return Shapes([(permut[0], *data[1:])])

    def build(self, layer, bottoms, ctx):
        data, permut = bottoms
        tensor = layers.BatchReindex(name=ctx.keras_name(layer.name))([data.tensor, permut.tensor])
        return [ctx.same_layout(tensor, data)]


@layer_type("Filter")
class Filter(LayerType):
    """The samples whose selector (the last bottom, (N,) or (N, 1, ...)) is
    non-zero, of every other bottom: one top per bottom but the selector."""

    data_dependent_batch = True
    unsupported_backends = {
        "jax": "its tops' batch size is the data's (the non-zero selectors), which a compiled "
               "JAX function (predict, fit) cannot hold"}

    examples = (Example("", [(4, 3, 2, 2), (4, 5), (4,)], tops=2, integer_bottoms=(2,),
                        integer_high=2),
                Example("", [(3, 2), (3, 1, 1, 1)], integer_bottoms=(1,), integer_high=2))

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 2, math.inf)
        selector = tuple(bottoms[-1])
        if any(d != 1 for d in selector[1:]):
            raise LayerError(layer.name, f"(Filter) the selector (last bottom) must be (N,) or "
                                         f"(N, 1, ...), got {fmt(selector)}")
        if len(layer.top) != len(bottoms) - 1:
            raise LayerError(layer.name, f"(Filter) needs one top per bottom but the selector: "
                                         f"{len(bottoms) - 1}, got {len(layer.top)}")
        for i, b in enumerate(bottoms[:-1]):
            if b[0] != selector[0]:
                raise LayerError(layer.name, f"(Filter) bottom {i} {fmt(tuple(b))} and the "
                                             f"selector {fmt(selector)} differ in batch size")
        return Shapes([tuple(b) for b in bottoms[:-1]])

    def build(self, layer, bottoms, ctx):
        refuse_backend(self, layer)
        tensors = layers.Filter(name=ctx.keras_name(layer.name))([b.tensor for b in bottoms])
        return [ctx.same_layout(t, b) for t, b in zip(tensors, bottoms)]

"""Permute (SSD's fork: weiliu89/caffe, src/caffe/layers/permute_layer.cpp).

``permute_param { order }`` lists the bottom's axes in the top's order; axes
it leaves out follow in increasing order (``PermuteLayer::LayerSetUp``). An
order that moves the batch axis (CRNN's ``3 0 1 2``: the width becomes the
T of a T x N x ... sequence) transposes every axis; the top's first axis is
then that one, as in Caffe. On a channels-last image, SSD's usual
``order: 0 2 3 1`` (N, C, H, W) -> (N, H, W, C) is the tensor as it is: no
transpose runs.
"""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    SSD,
    Example,
    LayerType,
    Shapes,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.shape import Transpose


def permute_order(layer, rank):
    """The full axis order of ``layer`` on a ``rank``-D bottom, as the fork
    computes it; refuses an axis out of range and a repeated one."""
    order = []
    for axis in layer.permute_param.order:
        if axis >= rank:
            raise LayerError(layer.name, f"(Permute) order {axis} is out of range for a {rank}-D "
                                         "input (the fork: order should be less than the input "
                                         "dimension)")
        if axis in order:
            raise LayerError(layer.name, f"(Permute) order repeats axis {axis}")
        order.append(int(axis))
    order += [axis for axis in range(rank) if axis not in order]
    return order


@layer_type("Permute")
class Permute(LayerType):
    """Permute: the top's Caffe axes are the bottom's in ``order`` (the batch
    axis too); SSD's channels-last ``0 2 3 1`` needs no transpose."""

    origin = SSD
    examples = (
        Example("permute_param { order: 0 order: 2 order: 3 order: 1 }", [(2, 3, 4, 5)]),
        Example("permute_param { order: 0 order: 3 }", [(2, 3, 4, 5)]),
        Example("permute_param { order: 0 order: 2 order: 1 }", [(2, 4, 3)]),
        Example("permute_param { order: 3 order: 0 order: 1 order: 2 }", [(2, 3, 4, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        return Shapes([tuple(shape[axis] for axis in permute_order(layer, len(shape)))])

    def build(self, layer, bottoms, ctx):
        bottom = bottoms[0]
        if bottom.layout == "flat":
            bottom = ctx.caffe_order(bottom, layer)
        rank = len(bottom.tensor.shape)
        order = permute_order(layer, rank)
        if order == list(range(rank)):
            return [bottom]
        # tensor axis of each Caffe axis of the bottom, then of each top axis
        where = [ctx.axis(bottom, caffe_axis) for caffe_axis in range(rank)]
        perm = [where[axis] for axis in order]
        if perm == list(range(rank)):
            return [Blob(bottom.tensor)]
        if perm[0] != 0:  # the batch axis moves: a plain Caffe-ordered blob
            return [Blob(Transpose(perm, name=ctx.keras_name(layer.name))(bottom.tensor))]
        moved = keras.layers.Permute(tuple(perm[1:]), name=ctx.keras_name(layer.name))(
            bottom.tensor)
        return [Blob(moved)]

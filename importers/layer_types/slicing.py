"""Slice, Concat and Split (BVLC: slice_layer.cpp, concat_layer.cpp,
split_layer.cpp): cutting a blob along one axis, joining blobs along one,
and handing one blob to several layers.

Slice and Concat work on the tensor axis of the Caffe axis, so an image
keeps its layout; a ``"flat"`` blob (flattened from channels-last) is put
in Caffe's order first where the axis is not the batch's.
"""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._axes import axis_index, show
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    canonical_axis,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers import shape as shape_layers


def slice_axis(layer, rank):
    """The Caffe axis Slice cuts: ``axis`` or the legacy ``slice_dim``."""
    p = layer.slice_param
    if p.HasField("axis") and p.HasField("slice_dim"):
        raise LayerError(layer.name, "(Slice) give either axis or slice_dim, not both")
    if p.HasField("slice_dim"):
        if p.slice_dim >= rank:
            raise LayerError(layer.name, f"(Slice) slice_dim {p.slice_dim} is out of range for a "
                                         f"{rank}-D input")
        return p.slice_dim
    return axis_index(layer, p.axis, rank)


def _slice_sizes(layer, size, where):
    """The tops' sizes along the sliced axis of ``size``."""
    tops = len(layer.top)
    if tops < 1:
        raise LayerError(layer.name, "(Slice) needs at least one top")
    points = [int(x) for x in layer.slice_param.slice_point]
    if not points:
        if size % tops:
            raise LayerError(layer.name, f"(Slice) {tops} tops do not evenly divide {where}")
        return [size // tops] * tops
    if len(points) != tops - 1:
        raise LayerError(layer.name, f"(Slice) {len(points)} slice points for {tops} tops; "
                                     f"give {tops - 1} (or none, to slice equally)")
    prev = 0
    for point in points:
        if point <= prev:
            raise LayerError(layer.name, f"(Slice) slice points {points} must be positive and "
                                         "increasing")
        prev = point
    if points[-1] >= size:
        raise LayerError(layer.name, f"(Slice) slice point {points[-1]} is not inside {where}")
    return [b - a for a, b in zip([0, *points], [*points, size])]


@layer_type("Slice")
class Slice(LayerType):
    """Slice along ``axis`` (or the legacy ``slice_dim``) at ``slice_point``s, or
    into equal parts; any axis, the batch's included (an equal split of the
    batch follows the batch fed)."""

    examples = (
        Example("slice_param { axis: 1 slice_point: 1 slice_point: 4 }", [(2, 6, 3, 4)], tops=3),
        Example("slice_param { axis: -1 }", [(2, 3, 4, 6)], tops=2),
        Example("slice_param { slice_dim: 1 slice_point: 3 }", [(2, 10)], tops=2),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        axis = slice_axis(layer, len(shape))
        sizes = _slice_sizes(layer, shape[axis], f"axis {axis} of the input {show(shape)}")
        return Shapes([(*shape[:axis], s, *shape[axis + 1:]) for s in sizes])

    def build(self, layer, bottoms, ctx):
        bottom = bottoms[0]
        if len(layer.top) == 1:
            return [bottom]
        axis = slice_axis(layer, len(ctx.bottom_shapes[0]))
        if bottom.layout == "flat" and axis != 0:
            bottom = ctx.caffe_order(bottom, layer)
        cut = shape_layers.Slice(ctx.axis(bottom, axis),
                                 slice_points=[int(x) for x in layer.slice_param.slice_point],
                                 num_slices=len(layer.top), name=ctx.keras_name(layer.name))
        return [ctx.same_layout(t, bottom) for t in cut(bottom.tensor)]


def concat_axis(layer):
    """The Caffe axis Concat joins along: ``axis`` or the legacy ``concat_dim``."""
    p = layer.concat_param
    if p.HasField("concat_dim") and p.HasField("axis"):
        raise LayerError(layer.name, "(Concat) give either axis or concat_dim, not both")
    return p.concat_dim if p.HasField("concat_dim") else p.axis


@layer_type("Concat")
class Concat(LayerType):
    """Concat along ``axis`` (or the legacy ``concat_dim``), the batch axis
    included; bottoms in different layouts are joined in Caffe's order."""

    examples = (
        Example("", [(2, 3, 4, 5), (2, 2, 4, 5)]),
        Example("concat_param { axis: -1 }", [(2, 3, 4, 5), (2, 3, 4, 2), (2, 3, 4, 1)]),
        Example("concat_param { concat_dim: 1 }", [(2, 3), (2, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        if not bottoms:
            raise LayerError(layer.name, "(Concat) needs bottoms")
        first = tuple(bottoms[0])
        axis = canonical_axis(concat_axis(layer), len(first))
        for b in bottoms[1:]:
            if len(b) != len(first) or any(x != y for i, (x, y) in enumerate(zip(b, first))
                                           if i != axis):
                raise LayerError(layer.name, f"(Concat) bottoms "
                                             f"{', '.join(fmt(x) for x in bottoms)} differ "
                                             f"outside axis {axis}")
        top = list(first)
        top[axis] = sum(b[axis] for b in bottoms)
        return Shapes([tuple(top)])

    def build(self, layer, bottoms, ctx):
        layouts = {b.layout for b in bottoms}
        if layouts - {"nhwc", "caffe"} or len(layouts) > 1:
            bottoms = [ctx.caffe_order(b, layer) for b in bottoms]
        axis = ctx.axis(bottoms[0], concat_axis(layer))
        tensor = keras.layers.Concatenate(axis=axis, name=ctx.keras_name(layer.name))(
            [b.tensor for b in bottoms])
        return [ctx.same_layout(tensor, bottoms[0])]


@layer_type("Split")
class Split(LayerType):
    """Split: every top is the bottom (Keras tensors can be reused)."""

    aliases_bottom = True

    examples = (
        Example("", [(2, 3, 4, 5)], tops=2),
        Example("", [(2, 7)], tops=3),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        return Shapes([tuple(bottoms[0])] * len(layer.top))

    def build(self, layer, bottoms, ctx):
        return [bottoms[0]] * len(layer.top)

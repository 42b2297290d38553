"""Reshape and Flatten (BVLC: reshape_layer.cpp, flatten_layer.cpp).

Layouts are kept without transposes where the element order allows it:

- a channels-last image flattened from axis 1 becomes a ``"flat"`` blob;
- reshapes that keep the batch and channel axes (``(N, C, H, W)`` to
  ``(N, C, H*W)``, a ``"flat"`` blob back to ``(N, C, H, W)``, ...) reshape
  the channels-last tensor directly.

Other reshapes go through Caffe's order; their image results (3-D and up)
come back channels-last under ``channels_last``, like every image blob.
Caffe's batch axis stays free: reshapes that would merge, split or move it
are refused.
"""

import math

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types._axes import axis_index, no_in_place, show
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    layer_type,
    need_bottoms,
)


def _reshape_range(layer, rank, axis, num_axes, shape):
    """(start, end): the bottom axes ``reshape_param`` replaces."""
    start = axis if axis >= 0 else rank + axis + 1
    if not 0 <= start <= rank:
        raise LayerError(layer.name, f"(Reshape) axis {axis} is out of range for a {rank}-D "
                                     "input")
    if num_axes < -1:
        raise LayerError(layer.name, f"(Reshape) num_axes must be >= 0, or -1 for all, got "
                                     f"{num_axes}")
    end = rank if num_axes == -1 else start + num_axes
    if end > rank:
        raise LayerError(layer.name, f"(Reshape) axis + num_axes = {end} is past the {rank} "
                                     f"axes of the input {show(shape)}")
    return start, end


def _check_dims(layer, dims, start, shape):
    if dims.count(-1) > 1:
        raise LayerError(layer.name, f"(Reshape) shape {dims} has several -1 dims; at most one "
                                     "may be inferred")
    if any(d < -1 for d in dims):
        raise LayerError(layer.name, f"(Reshape) shape {dims} has a negative dim other than -1")
    for i, d in enumerate(dims):
        if d == 0 and start + i >= len(shape):
            raise LayerError(layer.name, f"(Reshape) shape {dims} has a 0 (copy) at dim {i} but "
                                         f"the input {show(shape)} has no axis {start + i} to "
                                         "copy")


def _check_batch(layer, dims, start, end):
    """The new dims may replace the batch axis only if the first is the batch."""
    if start == 0 and end > 0:
        if not dims:
            raise LayerError(layer.name, "(Reshape) the reshape removes the batch axis; "
                                         "keras-caffe keeps the batch axis free")
        # 0 copies the batch; -1 infers it; a number is the batch size the
        # prototxt was written for (a deploy net's 1): it stays free here.
        # A number above 1 with a -1 after it could move samples into the
        # other axes, which the free batch cannot tell: refused.
        if dims[0] > 1 and -1 in dims[1:]:
            raise LayerError(layer.name, f"(Reshape) shape {dims} fixes the batch at {dims[0]} "
                                         "and infers another axis, which could move samples "
                                         "out of the batch axis; keras-caffe keeps the batch "
                                         "axis free: write dim: 0 to copy the batch")
    elif start == 0 and dims:
        raise LayerError(layer.name, f"(Reshape) the reshape inserts axes {dims} before the "
                                     "batch axis; keras-caffe keeps the batch axis first")


def reshape_top(layer, shape):
    """``ReshapeLayer::Reshape``'s top shape for a bottom of Caffe ``shape``
    (batch first), the batch axis kept free: the top's batch is the bottom's."""
    p = layer.reshape_param
    dims = [int(d) for d in p.shape.dim]
    rank = len(shape)
    start, end = _reshape_range(layer, rank, p.axis, p.num_axes, shape)
    _check_dims(layer, dims, start, shape)
    _check_batch(layer, dims, start, end)
    top = [*shape[:start], *(shape[start + i] if d == 0 else d for i, d in enumerate(dims)),
           *shape[end:]]
    count = math.prod(shape[1:])
    if -1 in dims and not (start == 0 and dims[0] == -1):
        inferred = start + dims.index(-1)
        known = math.prod(d for i, d in enumerate(top) if i not in (0, inferred))
        if count % known:
            raise LayerError(layer.name, f"(Reshape) the input count per sample ({count}) is not "
                                         "divisible by the product of the specified dims "
                                         f"({known})")
        top[inferred] = count // known
    if math.prod(top[1:]) != count:
        if start == 0 and end > 0 and dims[0] != 0:
            raise LayerError(layer.name, f"(Reshape) shape {dims} changes the batch axis of the "
                                         f"input {show(shape)} (its other dims hold "
                                         f"{math.prod(top[1:])} values, a sample has {count}); "
                                         "keras-caffe keeps the batch axis free")
        raise LayerError(layer.name, f"(Reshape) output shape {show(top)} does not hold the "
                                     f"input's {show(shape)} values")
    if top:
        top[0] = shape[0]
    return tuple(top)


def flatten_top(layer, shape):
    """``FlattenLayer::Reshape``'s top shape; the batch axis is never flattened."""
    p = layer.flatten_param
    rank = len(shape)
    start = axis_index(layer, p.axis, rank)
    end = axis_index(layer, p.end_axis, rank, "end_axis")
    if end + 1 < start:
        raise LayerError(layer.name, f"(Flatten) end_axis {p.end_axis} comes before axis "
                                     f"{p.axis}")
    if start == 0 and end > 0:
        raise LayerError(layer.name, "(Flatten) flattening the batch axis (axis 0) into others "
                                     "is not supported; keras-caffe keeps the batch axis free")
    if start == 0:
        return tuple(shape)  # axis 0 to end_axis 0: nothing to flatten
    return (*shape[:start], math.prod(shape[start:end + 1]), *shape[end + 1:])


def reshaped(bottom, top, layer, ctx):
    """``bottom`` reshaped (in Caffe's element order) to Caffe shape ``top``."""
    shape = ctx.caffe_shape(bottom)
    top = (shape[0], *top[1:])
    if top == tuple(shape):
        return bottom
    name = ctx.keras_name(layer.name)
    channels_last = ctx.data_format == "channels_last"
    if bottom.layout == "nhwc" and channels_last:
        channels, spatial = shape[1], shape[2:]
        if len(top) == 2 and top[1] == math.prod(shape[1:]) and math.prod(spatial) > 1:
            # Flattened from axis 1: keep the channels-last order ("flat").
            chw = (channels, math.prod(spatial[:-1]), spatial[-1])
            return Blob(keras.layers.Flatten(name=name)(bottom.tensor), "flat", chw)
        if len(top) >= 2 and top[1] == channels:
            # Batch and channels kept: only the spatial axes change.
            tensor = keras.layers.Reshape((*top[2:], channels), name=name)(bottom.tensor)
            return Blob(tensor, "nhwc" if len(top) >= 3 else "caffe")
    if bottom.layout == "flat" and channels_last and len(top) >= 3 and top[1] == bottom.chw[0]:
        # Back from a flattening to an image with the same channels.
        tensor = keras.layers.Reshape((*top[2:], bottom.chw[0]), name=name)(bottom.tensor)
        return Blob(tensor, "nhwc")
    tensor = ctx.caffe_order(bottom, layer).tensor
    return Blob(keras.layers.Reshape(tuple(top[1:]), name=name)(tensor))


@layer_type("Reshape")
class Reshape(LayerType):
    """Reshape: ``shape`` (0 copies a dim, -1 infers one) over ``axis``,
    ``num_axes``; the batch axis stays free (a written batch, e.g. a deploy
    net's 1, follows the batch fed). Not in place."""

    examples = (
        Example("reshape_param { shape { dim: 0 dim: -1 dim: 4 } }", [(2, 8, 3, 5)]),
        Example("reshape_param { shape { dim: 0 dim: 0 dim: -1 } }", [(2, 3, 4, 5)]),
        Example("reshape_param { shape { dim: 2 dim: 3 } axis: -2 num_axes: 1 }",
                [(2, 3, 4, 6)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        no_in_place(layer)
        return Shapes([reshape_top(layer, tuple(bottoms[0]))])

    def build(self, layer, bottoms, ctx):
        return [reshaped(bottoms[0], ctx.shapes.tops[0], layer, ctx)]


@layer_type("Flatten")
class Flatten(LayerType):
    """Flatten axes ``axis`` to ``end_axis`` (inclusive) into one; a channels-last
    image flattened from axis 1 stays in its order (a "flat" blob an
    InnerProduct reads without a transpose). Not in place."""

    examples = (
        Example("", [(2, 3, 4, 5)]),
        Example("flatten_param { axis: 2 }", [(2, 3, 4, 5)]),
        Example("flatten_param { axis: 1 end_axis: 2 }", [(2, 3, 2, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        no_in_place(layer)
        return Shapes([flatten_top(layer, tuple(bottoms[0]))])

    def build(self, layer, bottoms, ctx):
        return [reshaped(bottoms[0], ctx.shapes.tops[0], layer, ctx)]

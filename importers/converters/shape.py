"""Shape and routing layers: Slice, Flatten, Reshape, Crop, Tile, Silence.

Layouts are kept without transposes where the element order allows it:

- a channels-last image flattened from axis 1 becomes a ``"flat"`` blob;
- reshapes that keep the batch and channel axes (``(N, C, H, W)`` to
  ``(N, C, H*W)``, a ``"flat"`` blob back to ``(N, C, H, W)``, ...) reshape
  the channels-last tensor directly;
- Slice, Crop and Tile work on the tensor axis of the Caffe axis.

Other reshapes go through Caffe's order; their image results (3-D and up)
come back channels-last under ``channels_last``, like every image blob.
Caffe's batch axis stays free: layers that would merge, split or move it
are refused (Slice, Crop and Tile along the batch axis are supported).
"""

import math

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.layer_types._legacy import converter
from keras_caffe.layers import shape as shape_layers


def _canonical(layer, axis, rank, name="axis"):
    """Caffe's ``CanonicalAxisIndex``: ``axis`` in [-rank, rank)."""
    if not -rank <= axis < rank:
        raise LayerError(layer.name, f"{name} {axis} is out of range for a {rank}-D input "
                                     f"(valid: {-rank} to {rank - 1})")
    return axis % rank


def _show(shape):
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ")"


def _no_in_place(layer):
    if layer.top and layer.bottom and layer.top[0] == layer.bottom[0]:
        raise LayerError(layer.name, f"{layer.type} does not allow in-place computation "
                                     f"(top {layer.top[0]!r} is its bottom)")


# -- Reshape and Flatten -------------------------------------------------------


def _reshape_shape(layer, shape, dims, axis, num_axes):
    """Caffe's ReshapeLayer::Reshape top shape, batch (axis 0) as None."""
    rank = len(shape)
    start = axis if axis >= 0 else rank + axis + 1
    if not 0 <= start <= rank:
        raise LayerError(layer.name, f"axis {axis} is out of range for a {rank}-D input")
    if num_axes < -1:
        raise LayerError(layer.name, f"num_axes must be >= 0, or -1 for all, got {num_axes}")
    end = rank if num_axes == -1 else start + num_axes
    if end > rank:
        raise LayerError(layer.name, f"axis + num_axes = {end} is past the {rank} axes of the "
                                     f"input {_show(shape)}")
    if dims.count(-1) > 1:
        raise LayerError(layer.name, f"shape {dims} has several -1 dims; at most one may be "
                                     "inferred")
    if any(d < -1 for d in dims):
        raise LayerError(layer.name, f"shape {dims} has a negative dim other than -1")
    for i, d in enumerate(dims):
        if d == 0 and start + i >= rank:
            raise LayerError(layer.name, f"shape {dims} has a 0 (copy) at dim {i} but the "
                                         f"input {_show(shape)} has no axis {start + i} to copy")
    top = [*shape[:start], *(shape[start + i] if d == 0 else d for i, d in enumerate(dims)),
           *shape[end:]]
    count = math.prod(shape[1:])
    if start == 0 and end > 0:
        # The new dims replace the batch axis: the first must be the batch.
        if not dims:
            raise LayerError(layer.name, "the reshape removes the batch axis; keras-caffe keeps "
                                         "the batch axis free")
        # 0 copies the batch; -1 infers it; a number is the batch size the
        # prototxt was written for (a deploy net's 1): it stays free here.
        # A number above 1 with a -1 after it could move samples into the
        # other axes, which the free batch cannot tell: refused.
        if dims[0] > 1 and -1 in dims[1:]:
            raise LayerError(layer.name, f"shape {dims} fixes the batch at {dims[0]} and infers "
                                         "another axis, which could move samples out of the "
                                         "batch axis; keras-caffe keeps the batch axis free: "
                                         "write dim: 0 to copy the batch")
        top[0] = None
    elif start == 0 and dims:
        raise LayerError(layer.name, f"the reshape inserts axes {dims} before the batch axis; "
                                     "keras-caffe keeps the batch axis first")
    if -1 in dims and not (start == 0 and dims[0] == -1):
        inferred = start + dims.index(-1)
        known = math.prod(d for i, d in enumerate(top) if i not in (0, inferred))
        if count % known:
            raise LayerError(layer.name, f"the input count per sample ({count}) is not divisible "
                                         f"by the product of the specified dims ({known})")
        top[inferred] = count // known
    if math.prod(top[1:]) != count:
        if start == 0 and end > 0 and dims[0] != 0:
            raise LayerError(layer.name, f"shape {dims} changes the batch axis of the input "
                                         f"{_show(shape)} (its other dims hold "
                                         f"{math.prod(top[1:])} values, a sample has {count}); "
                                         "keras-caffe keeps the batch axis free")
        raise LayerError(layer.name, f"output shape {_show(top)} does not hold the input's "
                                     f"{_show(shape)} values")
    return tuple(top)


def _reshaped(bottom, top, layer, ctx):
    """``bottom`` reshaped (in Caffe's element order) to ``top`` (batch None)."""
    shape = ctx.caffe_shape(bottom)
    if tuple(top) == tuple(shape):
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


@converter("Reshape")
def reshape(layer, bottoms, ctx):
    """Reshape: ``shape`` (0 copies a dim, -1 infers one) over ``axis``, ``num_axes``."""
    _no_in_place(layer)
    p = layer.reshape_param
    bottom = bottoms[0]
    top = _reshape_shape(layer, ctx.caffe_shape(bottom), [int(d) for d in p.shape.dim],
                         p.axis, p.num_axes)
    return [_reshaped(bottom, top, layer, ctx)]


@converter("Flatten")
def flatten(layer, bottoms, ctx):
    """Flatten axes ``axis`` to ``end_axis`` (inclusive) into one."""
    _no_in_place(layer)
    p = layer.flatten_param
    bottom = bottoms[0]
    shape = ctx.caffe_shape(bottom)
    rank = len(shape)
    start = _canonical(layer, p.axis, rank)
    end = _canonical(layer, p.end_axis, rank, "end_axis")
    if end + 1 < start:
        raise LayerError(layer.name, f"end_axis {p.end_axis} comes before axis {p.axis}")
    if start == 0 and end > 0:
        raise LayerError(layer.name, "flattening the batch axis (axis 0) into others is not "
                                     "supported; keras-caffe keeps the batch axis free")
    if start == 0:
        top = shape  # axis 0 to end_axis 0: nothing to flatten
    else:
        top = (*shape[:start], math.prod(shape[start:end + 1]), *shape[end + 1:])
    return [_reshaped(bottom, top, layer, ctx)]


# -- Slice, Crop, Tile, Silence ------------------------------------------------


@converter("Slice")
def slice_layer(layer, bottoms, ctx):
    """Slice along ``axis`` (or legacy ``slice_dim``) at ``slice_point``s, or equally."""
    p = layer.slice_param
    bottom = bottoms[0]
    shape = ctx.caffe_shape(bottom)
    rank = len(shape)
    if p.HasField("axis") and p.HasField("slice_dim"):
        raise LayerError(layer.name, "give either axis or slice_dim, not both")
    if p.HasField("slice_dim"):
        axis = p.slice_dim
        if axis >= rank:
            raise LayerError(layer.name, f"slice_dim {axis} is out of range for a {rank}-D input")
    else:
        axis = _canonical(layer, p.axis, rank)
    tops = len(layer.top)
    if tops < 1:
        raise LayerError(layer.name, "Slice needs at least one top")
    size = shape[axis]
    points = [int(x) for x in p.slice_point]
    where = f"axis {axis} of the input {_show(shape)}"
    if points:
        if len(points) != tops - 1:
            raise LayerError(layer.name, f"{len(points)} slice points for {tops} tops; "
                                         f"give {tops - 1} (or none, to slice equally)")
        prev = 0
        for point in points:
            if point <= prev:
                raise LayerError(layer.name, f"slice points {points} must be positive and "
                                             "increasing")
            prev = point
        if size is not None and points[-1] >= size:
            raise LayerError(layer.name, f"slice point {points[-1]} is not inside {where}")
    elif size is not None and size % tops:
        raise LayerError(layer.name, f"{tops} tops do not evenly divide {where}")
    if tops == 1:
        return [bottom]
    if bottom.layout == "flat" and axis != 0:
        bottom = ctx.caffe_order(bottom, layer)
    cut = shape_layers.Slice(ctx.axis(bottom, axis), slice_points=points, num_slices=tops,
                             name=ctx.keras_name(layer.name))
    return [ctx.same_layout(t, bottom) for t in cut(bottom.tensor)]


@converter("Crop")
def crop(layer, bottoms, ctx):
    """Crop bottom 0 to bottom 1's shape from ``axis`` on, at ``offset``(s)."""
    if len(bottoms) != 2:
        raise LayerError(layer.name, f"Crop takes 2 bottoms (the data and the blob whose shape "
                                     f"it crops to), got {len(bottoms)}")
    p = layer.crop_param
    data, reference = bottoms
    shape, ref_shape = ctx.caffe_shape(data), ctx.caffe_shape(reference)
    rank = len(shape)
    start = _canonical(layer, p.axis, rank)
    offsets = [int(o) for o in p.offset]
    if len(offsets) > 1 and start + len(offsets) != rank:
        raise LayerError(layer.name, f"{len(offsets)} offsets for the {rank - start} axes from "
                                     f"axis {start} of the {rank}-D input; give one offset or "
                                     "one per axis")
    if len(ref_shape) < rank:
        raise LayerError(layer.name, f"the reference blob {_show(ref_shape)} has fewer axes than "
                                     f"the input {_show(shape)}")
    crops = {}  # Caffe axis -> (offset, size)
    for i in range(start, rank):
        offset = offsets[0] if len(offsets) == 1 else (offsets[i - start] if offsets else 0)
        size = ref_shape[i]
        if i > 0 and shape[i] - offset < size:
            raise LayerError(layer.name, f"the crop of axis {i} (size {size} at offset {offset}) "
                                         f"does not fit in the input {_show(shape)}")
        if i == 0 or offset or size != shape[i]:
            crops[i] = (offset, size)
    if not crops:
        return [data]
    if data.layout == "flat" and 1 in crops:
        data = ctx.caffe_order(data, layer)
    offsets_t, sizes_t = [0] * rank, [None] * rank
    for i, (offset, size) in crops.items():
        axis = ctx.axis(data, i)
        offsets_t[axis], sizes_t[axis] = offset, size
    cut = shape_layers.Crop(offsets_t, sizes_t, name=ctx.keras_name(layer.name))
    tensor = cut([data.tensor, reference.tensor] if 0 in crops else data.tensor)
    return [ctx.same_layout(tensor, data)]


@converter("Tile")
def tile(layer, bottoms, ctx):
    """Tile: ``tiles`` copies of the blob from ``axis`` on, one after another."""
    p = layer.tile_param
    bottom = bottoms[0]
    if not p.HasField("tiles"):
        raise LayerError(layer.name, "tile_param.tiles (the number of copies) is required")
    if p.tiles <= 0:
        raise LayerError(layer.name, f"tiles must be positive, got {p.tiles}")
    axis = _canonical(layer, p.axis, len(ctx.caffe_shape(bottom)))
    if p.tiles == 1:
        return [bottom]
    if bottom.layout == "flat" and axis != 0:
        bottom = ctx.caffe_order(bottom, layer)
    repeat = shape_layers.Tile(ctx.axis(bottom, axis), p.tiles, name=ctx.keras_name(layer.name))
    return [ctx.same_layout(repeat(bottom.tensor), bottom)]


@converter("Silence")
def silence(layer, bottoms, ctx):
    """Silence: consumes its bottoms (so they are no net outputs), has no tops."""
    if layer.top:
        raise LayerError(layer.name, f"Silence has no tops, but names {list(layer.top)}")
    return []

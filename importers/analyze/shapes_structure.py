"""Shape rules of the layers that rearrange blobs: Concat, Slice, Flatten, Reshape, Crop,
ArgMax, Reduction, Tile, Permute."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.analyze.shapes import _axis, _bottoms, _count, _fmt, _rule


@_rule("Concat")
def _concat(layer, bottoms, state):
    if not bottoms:
        raise LayerError(layer.name, "(Concat) needs bottoms")
    p = layer.concat_param
    first = bottoms[0]
    axis = _axis(p.concat_dim if p.HasField("concat_dim") else p.axis, len(first))
    for b in bottoms[1:]:
        if len(b) != len(first) or any(x != y for i, (x, y) in enumerate(zip(b, first))
                                       if i != axis):
            raise LayerError(layer.name, f"(Concat) bottoms {', '.join(_fmt(x) for x in bottoms)}"
                                         f" differ outside axis {axis}")
    top = list(first)
    top[axis] = sum(b[axis] for b in bottoms)
    return [tuple(top)], [], 0


@_rule("Slice")
def _slice(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    p = layer.slice_param
    shape = bottoms[0]
    axis = _axis(p.slice_dim if p.HasField("slice_dim") else p.axis, len(shape))
    n, size = len(layer.top), shape[axis]
    if p.slice_point:
        points = list(p.slice_point)
        if len(points) != n - 1 or points != sorted(points) or points[0] <= 0 or points[-1] >= size:
            raise LayerError(layer.name, f"(Slice) slice_point {points} does not split {size} "
                                         f"into {n} parts")
        sizes = [b - a for a, b in zip([0, *points], [*points, size])]
    else:
        if size % n:
            raise LayerError(layer.name, f"(Slice) {size} does not split into {n} equal parts")
        sizes = [size // n] * n
    return [(*shape[:axis], s, *shape[axis + 1:]) for s in sizes], [], 0


@_rule("Flatten")
def _flatten(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    start = _axis(layer.flatten_param.axis, len(shape))
    end = _axis(layer.flatten_param.end_axis, len(shape))
    return [(*shape[:start], _count(shape[start:end + 1]), *shape[end + 1:])], [], 0


@_rule("Reshape")
def _reshape(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    p = layer.reshape_param
    shape = bottoms[0]
    rank = len(shape)
    start = p.axis + rank + 1 if p.axis < 0 else p.axis
    if not 0 <= start <= rank:
        raise LayerError(layer.name, f"(Reshape) axis {p.axis} is out of range for "
                                     f"{_fmt(shape)}")
    end = rank if p.num_axes == -1 else start + p.num_axes
    if p.num_axes < -1 or end > rank:
        raise LayerError(layer.name, f"(Reshape) num_axes {p.num_axes} does not fit "
                                     f"{_fmt(shape)}")
    dims = list(p.shape.dim)
    new = []
    for i, d in enumerate(dims):
        if d == 0:
            if start + i >= rank:
                raise LayerError(layer.name, f"(Reshape) dim {i} copies axis {start + i}, which "
                                             f"{_fmt(shape)} lacks")
            new.append(shape[start + i])
        else:
            new.append(d)
    if new.count(-1) > 1:
        raise LayerError(layer.name, "(Reshape) at most one dim may be -1")
    replaced = _count(shape[start:end])
    known = _count([d for d in new if d != -1])
    if -1 in new:
        if known == 0 or replaced % known:
            raise LayerError(layer.name, f"(Reshape) cannot infer the -1 dim of {dims} from "
                                         f"{_fmt(shape)}")
        new[new.index(-1)] = replaced // known
    elif known != replaced:
        raise LayerError(layer.name, f"(Reshape) {dims} has {known} values where the input "
                                     f"{_fmt(shape)} has {replaced}")
    return [(*shape[:start], *new, *shape[end:])], [], 0


@_rule("Crop")
def _crop(layer, bottoms, state):
    _bottoms(layer, bottoms, 2)
    p = layer.crop_param
    shape, ref = bottoms
    if len(shape) != len(ref):
        raise LayerError(layer.name, f"(Crop) bottoms {_fmt(shape)} and {_fmt(ref)} differ in "
                                     "rank")
    axis = _axis(p.axis, len(shape))
    offsets = list(p.offset)
    if len(offsets) not in (0, 1, len(shape) - axis):
        raise LayerError(layer.name, f"(Crop) {len(offsets)} offsets for {len(shape) - axis} "
                                     "cropped axes")
    top = list(shape)
    for i in range(axis, len(shape)):
        offset = 0 if not offsets else offsets[0 if len(offsets) == 1 else i - axis]
        if offset + ref[i] > shape[i]:
            raise LayerError(layer.name, f"(Crop) cannot crop {ref[i]} from {shape[i]} at offset "
                                         f"{offset} on axis {i}")
        top[i] = ref[i]
    return [tuple(top)], [], 0


@_rule("ArgMax")
def _argmax(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    p = layer.argmax_param
    shape = bottoms[0]
    if p.HasField("axis"):
        axis = _axis(p.axis, len(shape))
        if p.top_k > shape[axis]:
            raise LayerError(layer.name, f"(ArgMax) top_k {p.top_k} exceeds {shape[axis]}")
        top = list(shape)
        top[axis] = p.top_k
    else:
        if p.top_k > _count(shape[1:]):
            raise LayerError(layer.name, f"(ArgMax) top_k {p.top_k} exceeds {_count(shape[1:])}")
        top = [1] * max(len(shape), 3)
        top[0] = shape[0]
        top[2] = p.top_k
        if p.out_max_val:
            top[1] = 2
    return [tuple(top)], [], 0


@_rule("Reduction")
def _reduction(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    axis = _axis(layer.reduction_param.axis, len(shape)) if shape else 0
    return [tuple(shape[:axis])], [], 0


@_rule("Tile")
def _tile(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    p = layer.tile_param
    if p.tiles <= 0:
        raise LayerError(layer.name, "(Tile) tiles must be positive")
    top = list(bottoms[0])
    axis = _axis(p.axis, len(top))
    top[axis] *= p.tiles
    return [tuple(top)], [], 0


@_rule("Permute")
def _permute(layer, bottoms, state):
    from keras_caffe.importers.converters.permute import permute_order

    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    return [tuple(shape[axis] for axis in permute_order(layer, len(shape)))], [], 0

"""Layers that cut or repeat blobs along one axis: Caffe's Slice, Crop, Tile.

Their axes are tensor axes (the converters map Caffe's axes to the tensor's
layout); all use only ``keras.ops`` and serialize with ``get_config``.
"""

import keras
from keras import ops

from keras_caffe.layers.base import register


def _axis(axis, rank):
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for a {rank}-D input")
    return axis % rank


def _take(x, axis, start, stop):
    """``x[..., start:stop, ...]`` along ``axis`` (``stop`` None: to the end)."""
    index = [slice(None)] * len(x.shape)
    index[axis] = slice(start, stop)
    return x[tuple(index)]


@register
class Slice(keras.layers.Layer):
    """Caffe's Slice: cut ``axis`` at ``slice_points``, or into ``num_slices`` equal parts.

    Returns a list of tensors (one per top). With ``slice_points`` ``[p1, ...,
    pk]`` the parts are ``[0, p1)``, ``[p1, p2)``, ..., ``[pk, end)``. Without,
    the axis (which may be the batch axis, sized at run time) is split into
    ``num_slices`` equal parts.
    """

    def __init__(self, axis, slice_points=(), num_slices=None, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.slice_points = [int(p) for p in slice_points]
        if self.slice_points:
            if num_slices not in (None, len(self.slice_points) + 1):
                raise ValueError(f"{len(self.slice_points)} slice points make "
                                 f"{len(self.slice_points) + 1} slices, not {num_slices}")
            num_slices = len(self.slice_points) + 1
        if num_slices is None or int(num_slices) < 1:
            raise ValueError("give slice_points or a positive num_slices")
        self.num_slices = int(num_slices)
        prev = 0
        for p in self.slice_points:
            if p <= prev:
                raise ValueError(f"slice points must be positive and increasing, got "
                                 f"{self.slice_points}")
            prev = p

    def _bounds(self, size):
        """[(start, stop)] for an axis of ``size`` (an int, a tensor or None)."""
        if self.slice_points:
            edges = [0, *self.slice_points, None]
            return list(zip(edges[:-1], edges[1:]))
        if size is None:
            return [(None, None)] * self.num_slices
        part = size // self.num_slices
        return [(i * part, (i + 1) * part) for i in range(self.num_slices)]

    def call(self, x):
        axis = _axis(self.axis, len(x.shape))
        size = x.shape[axis]
        if size is None:
            size = ops.shape(x)[axis]
        return [_take(x, axis, start, stop) for start, stop in self._bounds(size)]

    def compute_output_shape(self, input_shape):
        axis = _axis(self.axis, len(input_shape))
        size = input_shape[axis]
        shapes = []
        for start, stop in self._bounds(size):
            shape = list(input_shape)
            if size is None:
                shape[axis] = None if stop is None else stop - start
            else:
                shape[axis] = (size if stop is None else stop) - start
            shapes.append(tuple(shape))
        return shapes

    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis, slice_points=list(self.slice_points),
                      num_slices=self.num_slices)
        return config


@register
class Crop(keras.layers.Layer):
    """Caffe's Crop: ``x[offset:offset + size]`` on every tensor axis.

    ``offsets`` and ``sizes`` have one entry per axis of ``x``; a size of
    ``None`` keeps the axis from its offset to the end, unless the layer is
    called on ``[x, reference]``: then it takes the reference's size along
    that axis at run time (how the batch axis is cropped to another blob's).
    """

    def __init__(self, offsets, sizes, **kwargs):
        super().__init__(**kwargs)
        self.offsets = [int(o) for o in offsets]
        self.sizes = [None if s is None else int(s) for s in sizes]
        if len(self.offsets) != len(self.sizes):
            raise ValueError(f"{len(self.offsets)} offsets for {len(self.sizes)} sizes")
        if any(o < 0 for o in self.offsets) or any(s is not None and s <= 0 for s in self.sizes):
            raise ValueError(f"offsets must be >= 0 and sizes positive, got offsets "
                             f"{self.offsets} and sizes {self.sizes}")

    def _check_rank(self, rank):
        if rank != len(self.offsets):
            raise ValueError(f"Crop has {len(self.offsets)} offsets for a {rank}-D input")

    def call(self, inputs):
        if isinstance(inputs, (list, tuple)):
            x, reference = inputs
        else:
            x, reference = inputs, None
        self._check_rank(len(x.shape))
        index = []
        for axis, (offset, size) in enumerate(zip(self.offsets, self.sizes)):
            if size is None and reference is not None:
                size = ops.shape(reference)[axis]
            index.append(slice(offset, None if size is None else offset + size))
        return x[tuple(index)]

    def compute_output_shape(self, input_shape):
        if input_shape and isinstance(input_shape[0], (tuple, list)):
            shape, reference = input_shape
        else:
            shape, reference = input_shape, None
        self._check_rank(len(shape))
        out = []
        for axis, (dim, offset, size) in enumerate(zip(shape, self.offsets, self.sizes)):
            if size is not None:
                out.append(size)
            elif reference is not None:
                out.append(reference[axis])
            else:
                out.append(None if dim is None else dim - offset)
        return tuple(out)

    def get_config(self):
        config = super().get_config()
        config.update(offsets=list(self.offsets), sizes=list(self.sizes))
        return config


@register
class Tile(keras.layers.Layer):
    """Caffe's Tile: ``tiles`` copies of the input one after another along ``axis``."""

    def __init__(self, axis, tiles, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.tiles = int(tiles)
        if self.tiles < 1:
            raise ValueError(f"tiles must be positive, got {self.tiles}")

    def call(self, x):
        axis = _axis(self.axis, len(x.shape))
        repeats = [1] * len(x.shape)
        repeats[axis] = self.tiles
        return ops.tile(x, repeats)

    def compute_output_shape(self, input_shape):
        axis = _axis(self.axis, len(input_shape))
        shape = list(input_shape)
        shape[axis] = None if shape[axis] is None else shape[axis] * self.tiles
        return tuple(shape)

    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis, tiles=self.tiles)
        return config


@register
class Transpose(keras.layers.Layer):
    """Every axis of the tensor in ``perm``, the batch axis included: Caffe's
    Permute moving axis 0 (CRNN's ``order: 3 0 1 2`` makes an image's width
    the time axis of a T x N x ... sequence). The output's first axis is then
    the moved one, not the batch."""

    def __init__(self, perm, **kwargs):
        super().__init__(**kwargs)
        self.perm = tuple(int(p) for p in perm)

    def call(self, x):
        return ops.transpose(x, self.perm)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[p] for p in self.perm)

    def get_config(self):
        config = super().get_config()
        config.update(perm=self.perm)
        return config

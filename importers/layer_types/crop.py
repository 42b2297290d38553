"""Crop and Tile (BVLC: crop_layer.cpp, tile_layer.cpp).

Both work on the tensor axis of the Caffe axis, so an image keeps its
layout; a ``"flat"`` blob (flattened from channels-last) is put in Caffe's
order first where a non-batch axis is cropped or tiled. The batch axis can
be cropped (to the reference blob's batch, at run time) and tiled.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._axes import axis_index, show
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers import shape as shape_layers


def crop_offsets(layer, rank):
    """(start axis, the offset of each axis from it): ``CropLayer``'s one
    offset for all, one per axis, or none (0)."""
    p = layer.crop_param
    start = axis_index(layer, p.axis, rank)
    offsets = [int(o) for o in p.offset]
    if len(offsets) > 1 and start + len(offsets) != rank:
        raise LayerError(layer.name, f"(Crop) {len(offsets)} offsets for the {rank - start} axes "
                                     f"from axis {start} of the {rank}-D input; give one offset "
                                     "or one per axis")
    if len(offsets) <= 1:
        offsets = (offsets or [0]) * (rank - start)
    return start, offsets


@layer_type("Crop")
class Crop(LayerType):
    """Crop bottom 0 to bottom 1's shape from ``axis`` on, at ``offset``(s)
    (one for all axes, or one per axis); cropping to the same shape is the
    bottom itself."""

    examples = (
        Example("crop_param { axis: 2 offset: 1 }", [(2, 3, 8, 9), (2, 1, 5, 4)]),
        Example("crop_param { axis: 1 offset: 1 offset: 2 offset: 3 }",
                [(2, 5, 8, 9), (2, 2, 5, 4)]),
        Example("crop_param { axis: 1 offset: 3 }", [(2, 10), (2, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        if len(bottoms) != 2:
            raise LayerError(layer.name, f"(Crop) takes 2 bottoms (the data and the blob whose "
                                         f"shape it crops to), got {len(bottoms)}")
        shape, ref = (tuple(b) for b in bottoms)
        rank = len(shape)
        start, offsets = crop_offsets(layer, rank)
        if len(ref) != rank:
            relation = "fewer" if len(ref) < rank else "more"
            raise LayerError(layer.name, f"(Crop) the reference blob {show(ref)} has {relation} "
                                         f"axes than the input {show(shape)}")
        for i, offset in enumerate(offsets, start):
            if shape[i] - offset < ref[i]:
                raise LayerError(layer.name, f"(Crop) the crop of axis {i} (size {ref[i]} at "
                                             f"offset {offset}) does not fit in the input "
                                             f"{show(shape)}")
        return Shapes([(*shape[:start], *ref[start:])])

    def build(self, layer, bottoms, ctx):
        data, reference = bottoms
        shape, ref_shape = ctx.caffe_shape(data), ctx.caffe_shape(reference)
        rank = len(shape)
        start, offsets = crop_offsets(layer, rank)
        crops = {}  # Caffe axis -> (offset, size); the batch's size None: the reference's
        for i, offset in enumerate(offsets, start):
            if i == 0 or offset or ref_shape[i] != shape[i]:
                crops[i] = (offset, ref_shape[i])
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


def tile_axis(layer, rank):
    """The Caffe axis Tile repeats along, after checking ``tiles``."""
    p = layer.tile_param
    if not p.HasField("tiles"):
        raise LayerError(layer.name, "(Tile) tile_param.tiles (the number of copies) is "
                                     "required")
    if p.tiles <= 0:
        raise LayerError(layer.name, f"(Tile) tiles must be positive, got {p.tiles}")
    return axis_index(layer, p.axis, rank)


@layer_type("Tile")
class Tile(LayerType):
    """Tile: ``tiles`` copies of the blob from ``axis`` on, one after another
    (any axis, the batch's included)."""

    examples = (
        Example("tile_param { tiles: 2 }", [(2, 3, 2, 4)]),
        Example("tile_param { axis: -1 tiles: 3 }", [(2, 3, 2, 4)]),
        Example("tile_param { axis: 1 tiles: 4 }", [(2, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        top = list(bottoms[0])
        axis = tile_axis(layer, len(top))
        top[axis] *= layer.tile_param.tiles
        return Shapes([tuple(top)])

    def build(self, layer, bottoms, ctx):
        bottom = bottoms[0]
        axis = tile_axis(layer, len(ctx.bottom_shapes[0]))
        tiles = layer.tile_param.tiles
        if tiles == 1:
            return [bottom]
        if bottom.layout == "flat" and axis != 0:
            bottom = ctx.caffe_order(bottom, layer)
        repeat = shape_layers.Tile(ctx.axis(bottom, axis), tiles, name=ctx.keras_name(layer.name))
        return [ctx.same_layout(repeat(bottom.tensor), bottom)]

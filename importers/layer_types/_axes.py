"""Helpers of the units that rearrange blobs (Reshape, Flatten, Slice, Crop,
Tile, ...): Caffe's axis indices, shapes in messages, the in-place check."""

from keras_caffe.errors import LayerError


def show(shape):
    """A Caffe shape for a message, its batch axis (free in keras-caffe) as N."""
    return "(" + ", ".join("N" if i == 0 or d is None else str(d)
                           for i, d in enumerate(shape)) + ")"


def axis_index(layer, axis, rank, name="axis", noun="input"):
    """Caffe's ``CanonicalAxisIndex``: ``axis`` in [-rank, rank), as a LayerError."""
    if not -rank <= axis < rank:
        valid = f" (valid: {-rank} to {rank - 1})" if noun == "input" else ""
        raise LayerError(layer.name, f"({layer.type}) {name} {axis} is out of range for a "
                                     f"{rank}-D {noun}{valid}")
    return axis % rank


def no_in_place(layer):
    """Caffe's Reshape and Flatten refuse a top that is their bottom."""
    if layer.top and layer.bottom and layer.top[0] == layer.bottom[0]:
        raise LayerError(layer.name, f"({layer.type}) does not allow in-place computation "
                                     f"(top {layer.top[0]!r} is its bottom)")

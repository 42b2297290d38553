"""Interp (PSPNet: hszhao/PSPNet src/caffe/layers/interp_layer.cpp with
src/caffe/util/interp.cpp; DeepLab v2's is the same): bilinear resizing with
the corners aligned.

The output size, as ``InterpLayer::Reshape`` picks it from the input cropped
by ``pad_beg``/``pad_end`` (0 or negative: the fork only crops), ``in``:

1. ``shrink_factor`` alone: ``(in - 1) / shrink + 1``;
2. ``zoom_factor`` alone: ``in + (in - 1) * (zoom - 1)``;
3. ``height`` and ``width``;
4. both factors: shrink first, then zoom;
5. anything else is refused.

A second bottom (a later fork's form; PSPNet's layer takes one) gives the
output size by its own H, W, and then none of the four fields may be set.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    PSPNET,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.segmentation import Interp as KerasInterp


def output_size(layer, bottoms):
    """``InterpLayer::Reshape``'s output (H, W) for the bottoms' shapes."""
    p = layer.interp_param
    has = p.HasField
    shape = tuple(bottoms[0])
    if len(shape) != 4:
        raise LayerError(layer.name, f"(Interp) needs a 4-D input (N, C, H, W), got {fmt(shape)}")
    if p.pad_beg > 0 or p.pad_end > 0:
        raise LayerError(layer.name, f"(Interp) pad_beg and pad_end must be 0 or negative (the "
                                     f"fork only crops), got {p.pad_beg} and {p.pad_end}")
    size_in = [n + p.pad_beg + p.pad_end for n in shape[2:]]
    if min(size_in) <= 0:
        raise LayerError(layer.name, f"(Interp) pad_beg {p.pad_beg} and pad_end {p.pad_end} crop "
                                     f"away all of the input {fmt(shape)}")

    def factor(field):  # checked where the fork reads it
        if getattr(p, field) < 1:
            raise LayerError(layer.name, f"(Interp) {field} must be positive, got "
                                         f"{getattr(p, field)}")
        return getattr(p, field)

    def shrink(n):
        return (n - 1) // factor("shrink_factor") + 1

    def zoom(n):
        return n + (n - 1) * (factor("zoom_factor") - 1)

    if len(bottoms) == 2:
        given = [f for f in ("shrink_factor", "zoom_factor", "height", "width") if has(f)]
        if given:
            raise LayerError(layer.name, f"(Interp) with a second bottom (which gives the "
                                         f"output size) takes no {', '.join(given)}")
        other = tuple(bottoms[1])
        if len(other) != 4 or other[0] != shape[0]:
            raise LayerError(layer.name, f"(Interp) the second bottom {fmt(other)} must be 4-D "
                                         f"with the input's batch {shape[0]}")
        out = other[2:]
    elif has("shrink_factor") and not has("zoom_factor"):
        out = [shrink(n) for n in size_in]
    elif has("zoom_factor") and not has("shrink_factor"):
        out = [zoom(n) for n in size_in]
    elif has("height") and has("width"):
        out = [p.height, p.width]
    elif has("shrink_factor") and has("zoom_factor"):
        out = [zoom(shrink(n)) for n in size_in]
    else:
        raise LayerError(layer.name, "(Interp) needs zoom_factor, shrink_factor (or both), or "
                                     "height and width")
    if min(out) <= 0:
        raise LayerError(layer.name, f"(Interp) the output size {fmt(out)} must be positive")
    return tuple(out)


@layer_type("Interp")
class Interp(LayerType):
    """Bilinear resizing, corners aligned (caffe_cpu_interp2): zoom_factor,
    shrink_factor (shrink, then zoom), height/width, pad_beg/pad_end
    (cropping), or a second bottom giving the size."""

    origin = PSPNET
    examples = (
        Example("interp_param { zoom_factor: 8 }", [(2, 3, 4, 5)]),
        Example("interp_param { height: 7 width: 3 }", [(2, 2, 5, 6)]),
        Example("interp_param { shrink_factor: 2 zoom_factor: 3 pad_beg: -1 pad_end: -1 }",
                [(1, 2, 9, 8)]),
        Example("interp_param { shrink_factor: 3 }", [(2, 2, 7, 7)]),
        Example("", [(2, 3, 4, 4), (2, 1, 9, 6)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1, 2)
        shape = tuple(bottoms[0])
        return Shapes([(*shape[:2], *output_size(layer, bottoms))])

    def build(self, layer, bottoms, ctx):
        p = layer.interp_param
        interp = KerasInterp(output_size(layer, ctx.bottom_shapes), pad_beg=p.pad_beg,
                             pad_end=p.pad_end, data_format=ctx.data_format,
                             name=ctx.keras_name(layer.name))
        inputs = [ctx.as_image(b, layer) for b in bottoms]
        return [ctx.image_output(interp(inputs if len(inputs) > 1 else inputs[0]))]

"""Accum (FlowNet 2.0: lmb-freiburg/flownet2 src/caffe/layers/accum_layer.cpp):
each bottom resized bilinearly with the corners aligned, the results
concatenated along the channels.

``AccumLayer::Reshape``'s size: with ``have_reference`` the last bottom's
H, W (it is not concatenated); otherwise ``size_divisible_by`` (given: the
largest bottom H, W rounded up to a multiple), else ``top_height`` and
``top_width``, used only where both exceed the largest bottom's (else the
largest bottom's H and W).
"""

import math

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    FLOWNET2,
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.flownet import Accum as KerasAccum


def top_shape(layer, bottoms):
    """``AccumLayer::Reshape``'s top (N, C, H, W)."""
    p = layer.accum_param
    need_bottoms(layer, bottoms, 2 if p.have_reference else 1, math.inf)
    for shape in bottoms:
        if len(shape) != 4:
            raise LayerError(layer.name, f"(Accum) needs 4-D bottoms (N, C, H, W), got "
                                         f"{fmt(shape)}")
    batches = {s[0] for s in bottoms if s[0] is not None}
    if len(batches) > 1:
        raise LayerError(layer.name, f"(Accum) all bottoms must have one batch size, got "
                                     + ", ".join(fmt(s) for s in bottoms))
    if p.have_reference:
        given = [tuple(s) for s in bottoms[:-1]]
        size = tuple(bottoms[-1][2:])
    else:
        given = [tuple(s) for s in bottoms]
        largest = (max(s[2] for s in given), max(s[3] for s in given))
        if p.HasField("size_divisible_by"):
            if p.size_divisible_by < 1:
                raise LayerError(layer.name, "(Accum) size_divisible_by must be positive, got "
                                             f"{p.size_divisible_by}")
            d = p.size_divisible_by
            wanted = tuple(-(-n // d) * d for n in largest)
        else:
            wanted = (p.top_height, p.top_width)
        size = wanted if wanted[0] > largest[0] and wanted[1] > largest[1] else largest
    if min(size) < 2:
        # Forward_cpu divides by (top size - 1).
        raise LayerError(layer.name, f"(Accum) the output size {fmt(size)} must be at least 2 "
                                     "in each axis (the fork divides by size - 1)")
    return given, (bottoms[0][0], sum(s[1] for s in given), *size)


@layer_type("Accum")
class Accum(LayerType):
    """Resize (bilinear, corners aligned) and concatenate channels:
    top_height/top_width, size_divisible_by, have_reference (the last
    bottom gives the size)."""

    origin = FLOWNET2
    examples = (
        Example("accum_param { }", [(2, 2, 4, 5), (2, 3, 7, 6)]),
        Example("accum_param { size_divisible_by: 4 }", [(1, 2, 5, 6), (1, 1, 3, 3)]),
        Example("accum_param { have_reference: true }", [(2, 2, 3, 4), (2, 1, 6, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        given, top = top_shape(layer, bottoms)
        return Shapes([top], [], 2 * count((top[0] or 1, *top[1:])))

    def build(self, layer, bottoms, ctx):
        _, top = top_shape(layer, ctx.bottom_shapes)
        accum = KerasAccum(top[2:], reference=layer.accum_param.have_reference,
                           data_format=ctx.data_format, name=ctx.keras_name(layer.name))
        inputs = [ctx.as_image(b, layer) for b in bottoms]
        return [ctx.image_output(accum(inputs if len(inputs) > 1 else inputs[0]))]

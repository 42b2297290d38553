"""Resample (FlowNet 2.0: lmb-freiburg/flownet2 src/caffe/layers/
resample_layer.cpp for the shapes, resample_layer.cu ``NearestNeighborKernel``
and ``InterpolationKernel`` for the values; its CPU forward only aborts).

The top is (N, C, height, width) of ``resample_param``, or the second
bottom's H, W. ``f = in / out`` per axis; the source position of output
``o`` is ``o * f + f_other / 2 - 0.5`` (the kernel adds the other axis's
half factor). NEAREST reads the pixel at the rounded position; LINEAR and
CUBIC weigh the taps around it with the triangle or bicubic filter,
widened by ``f`` where ``antialias`` and either axis shrinks, and divide by
the weights' sum. AREA is refused as the fork's ``LayerSetUp`` refuses it;
``factor`` is read by nothing in the fork (OpenCV reads it as a zoom), so a
``factor`` other than 1 is refused rather than guessed.
"""

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
from keras_caffe.layers.flownet import Resample as KerasResample
from keras_caffe.layers.flownet import resample_nearest_index
from keras_caffe.proto import caffe_pb2

P = caffe_pb2.ResampleParameter
KINDS = {P.NEAREST: "nearest", P.LINEAR: "linear", P.CUBIC: "cubic"}


def geometry(layer, bottoms):
    """The kind and the top shape, checked."""
    need_bottoms(layer, bottoms, 1, 2)
    p = layer.resample_param
    if p.type not in KINDS:
        raise LayerError(layer.name, f"(Resample) type {P.ResampleType.Name(p.type)} is not "
                                     "supported (the fork has NEAREST, LINEAR and CUBIC)")
    if p.factor != 1:
        raise LayerError(layer.name, f"(Resample) factor {p.factor:g} is read by nothing in the "
                                     "fork; give width and height (or a second bottom)")
    shape = tuple(bottoms[0])
    if len(shape) != 4:
        raise LayerError(layer.name, f"(Resample) needs a 4-D bottom (N, C, H, W), got "
                                     f"{fmt(shape)}")
    if len(bottoms) == 2:
        if len(bottoms[1]) != 4:
            raise LayerError(layer.name, f"(Resample) the second bottom gives the size: it must "
                                         f"be 4-D, got {fmt(bottoms[1])}")
        size = tuple(bottoms[1][2:])
    else:
        size = (p.height, p.width)
    if min(size) < 1:
        raise LayerError(layer.name, f"(Resample) height and width must be positive, got "
                                     f"{size[0]} and {size[1]}")
    kind = KINDS[p.type]
    if kind == "nearest":
        index = resample_nearest_index(shape[2:], size)
        if index.min() < 0 or index.max() >= shape[2] * shape[3]:
            raise LayerError(layer.name, f"(Resample) NEAREST from {fmt(shape[2:])} to "
                                         f"{fmt(size)} reads outside the input in the fork "
                                         "(its x position uses the height's factor)")
    return kind, (*shape[:2], *size)


@layer_type("Resample")
class Resample(LayerType):
    """Resizing: resample_param width/height (or a second bottom's size),
    type NEAREST, LINEAR or CUBIC, antialias (when shrinking)."""

    origin = FLOWNET2
    examples = (
        Example("resample_param { width: 9 height: 7 type: LINEAR antialias: false }",
                [(2, 3, 4, 5)]),
        Example("resample_param { width: 3 height: 2 type: LINEAR }", [(1, 2, 7, 6)]),
        Example("resample_param { width: 8 height: 6 type: NEAREST }", [(2, 2, 3, 4)]),
        Example("resample_param { type: CUBIC antialias: false }", [(1, 2, 5, 5), (1, 1, 7, 9)]),
    )

    def shapes(self, layer, bottoms, state):
        kind, top = geometry(layer, bottoms)
        taps = 1 if kind == "nearest" else 4
        return Shapes([top], [], taps * count((top[0] or 1, *top[1:])))

    def build(self, layer, bottoms, ctx):
        kind, top = geometry(layer, ctx.bottom_shapes)
        resample = KerasResample(top[2:], kind=kind, antialias=layer.resample_param.antialias,
                                 data_format=ctx.data_format, name=ctx.keras_name(layer.name))
        inputs = [ctx.as_image(b, layer) for b in bottoms]
        return [ctx.image_output(resample(inputs if len(inputs) > 1 else inputs[0]))]

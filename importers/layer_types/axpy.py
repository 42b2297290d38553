"""SENet's Axpy (hujie-frank/SENet: src/caffe/layers/axpy_layer.cpp), the
fused ``scale * x + residual`` of SE-ResNet/SE-ResNeXt deploy files."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    SENET,
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.axpy import Axpy as KerasAxpy


@layer_type("Axpy")
class Axpy(LayerType):
    """``top = a * x + y`` over bottoms [a (N, C) or (N, C, 1, 1), x, y]:
    a per-channel scale of x added to y (AxpyLayer::Reshape's checks)."""

    origin = SENET
    examples = (
        Example("", [(2, 3, 1, 1), (2, 3, 4, 5), (2, 3, 4, 5)]),
        Example("", [(2, 4), (2, 4, 3), (2, 4, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 3)
        a, x, y = (tuple(b) for b in bottoms)
        if len(x) < 2 or a[:2] != x[:2] or (len(a) == 4 and a[2:] != (1, 1)) \
                or len(a) not in (2, 4):
            raise LayerError(layer.name, f"(Axpy) bottom 0 must be (N, C) or (N, C, 1, 1) with "
                                         f"bottom 1's N and C, got {fmt(a)} and {fmt(x)}")
        if x != y:
            raise LayerError(layer.name, f"(Axpy) bottoms 1 and 2 must have one shape, got "
                                         f"{fmt(x)} and {fmt(y)}")
        return Shapes([x], [], count(x))

    def build(self, layer, bottoms, ctx):
        a, x, y = bottoms
        if x.layout != y.layout:
            y = ctx.caffe_order(y, layer)
            x = ctx.caffe_order(x, layer)
        scale = ctx.caffe_order(a, layer).tensor
        if len(scale.shape) != 2:
            scale = keras.layers.Reshape((-1,), name=ctx.keras_name(layer.name, "_scale"))(scale)
        axis = ctx.axis(x, 1) if x.layout != "flat" else None
        if axis is None:
            x, y = ctx.caffe_order(x, layer), ctx.caffe_order(y, layer)
            axis = 1
        out = KerasAxpy(axis=axis, name=ctx.keras_name(layer.name))([scale, x.tensor, y.tensor])
        return [ctx.same_layout(out, x)]

"""Upsample: two layers under one type name, told apart by their bottoms.

- Two bottoms: SegNet's max-unpooling (alexgkendall/caffe-segnet,
  src/caffe/layers/upsample_layer.cpp): the second bottom is a MAX Pooling's
  mask top (indices into each H*W plane of the top); the top's size is
  ``upsample_h`` x ``upsample_w`` if both are given, else the bottom's times
  ``scale`` (or ``scale_h``/``scale_w``), less 1 where ``pad_out_h``/
  ``pad_out_w`` (scale 2 only), as its ``LayerSetUp``/``Reshape`` check.
- One bottom: the YOLO ports' nearest-neighbour upsampling (darknet2caffe
  and its Caffe forks, e.g. ChenYingpeng/caffe-yolov3 upsample_layer):
  ``upsample_param { scale: s }``, top (N, C, s*H, s*W),
  ``top[h][w] = bottom[h / s][w / s]``.
"""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    SEGNET,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.segmentation import MaxUnpool

_SEGNET_ONLY = ("scale_h", "scale_w", "pad_out_h", "pad_out_w", "upsample_h", "upsample_w")


def unpool_size(layer, shape):
    """SegNet's UpsampleLayer::LayerSetUp and Reshape: the top's (H, W)."""
    p = layer.upsample_param
    has = p.HasField
    if not ((has("upsample_h") and has("upsample_w"))
            or (not has("scale") and has("scale_h") and has("scale_w"))
            or (not has("scale_h") and not has("scale_w"))):
        raise LayerError(layer.name, "(Upsample) needs upsample_h and upsample_w, else scale or "
                                     "scale_h and scale_w (not both)")
    if has("upsample_h") and has("upsample_w"):
        if p.upsample_h <= 1 or p.upsample_w <= 1:
            raise LayerError(layer.name, f"(Upsample) upsample_h and upsample_w must exceed 1, "
                                         f"got {p.upsample_h} and {p.upsample_w}")
        return p.upsample_h, p.upsample_w
    scale = (p.scale, p.scale) if not has("scale_h") else (p.scale_h, p.scale_w)
    if min(scale) <= 1:
        raise LayerError(layer.name, f"(Upsample) scale must exceed 1, got {min(scale)}")
    size = []
    for axis, s, pad_out, n in zip("hw", scale, (p.pad_out_h, p.pad_out_w), shape[2:]):
        if pad_out and s != 2:
            raise LayerError(layer.name, f"(Upsample) pad_out_{axis} needs scale {s} to be 2")
        size.append(n * s - int(pad_out))
    return tuple(size)


@layer_type("Upsample")
class Upsample(LayerType):
    """Two bottoms: SegNet's max-unpooling by the pooling mask (scale,
    scale_h/scale_w, pad_out_h/pad_out_w, upsample_h/upsample_w); one
    bottom: the YOLO ports' nearest-neighbour upsampling by scale."""

    origin = SEGNET
    examples = (
        Example("upsample_param { scale: 2 }", [(2, 3, 4, 5), (2, 3, 4, 5)],
                integer_bottoms=(1,), integer_high=80),
        Example("upsample_param { upsample_h: 7 upsample_w: 9 }", [(1, 2, 4, 5), (1, 2, 4, 5)],
                integer_bottoms=(1,), integer_high=63),
        Example("upsample_param { scale_h: 2 scale_w: 3 pad_out_h: true }",
                [(2, 2, 3, 3), (2, 2, 3, 3)], integer_bottoms=(1,), integer_high=45),
        Example("upsample_param { scale: 2 }", [(2, 3, 4, 5)]),
        Example("upsample_param { scale: 3 }", [(1, 2, 2, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1, 2)
        shape = tuple(bottoms[0])
        if len(shape) != 4:
            raise LayerError(layer.name, f"(Upsample) needs a 4-D input (N, C, H, W), got "
                                         f"{fmt(shape)}")
        if len(bottoms) == 1:
            s = self._nearest_scale(layer)
            return Shapes([(*shape[:2], shape[2] * s, shape[3] * s)])
        if tuple(bottoms[1]) != shape:
            raise LayerError(layer.name, f"(Upsample) the mask {fmt(bottoms[1])} must have the "
                                         f"input's shape {fmt(shape)}")
        return Shapes([(*shape[:2], *unpool_size(layer, shape))])

    @staticmethod
    def _nearest_scale(layer):
        p = layer.upsample_param
        given = [f for f in _SEGNET_ONLY if p.HasField(f)]
        if given:
            raise LayerError(layer.name, f"(Upsample) with one bottom (the YOLO ports' "
                                         f"nearest-neighbour upsampling) takes only scale, got "
                                         f"{', '.join(given)}; SegNet's unpooling needs the "
                                         "pooling mask as a second bottom")
        if p.scale < 1:
            raise LayerError(layer.name, f"(Upsample) scale must be positive, got {p.scale}")
        return p.scale

    def build(self, layer, bottoms, ctx):
        shape = ctx.bottom_shapes[0]
        x = ctx.as_image(bottoms[0], layer)
        if len(bottoms) == 1:
            s = self._nearest_scale(layer)
            up = keras.layers.UpSampling2D((s, s), data_format=ctx.data_format,
                                           interpolation="nearest",
                                           name=ctx.keras_name(layer.name))
            return [ctx.image_output(up(x))]
        unpool = MaxUnpool(unpool_size(layer, shape), data_format=ctx.data_format,
                           name=ctx.keras_name(layer.name))
        return [ctx.image_output(unpool([x, ctx.as_image(bottoms[1], layer)]))]

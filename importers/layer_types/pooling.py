"""Pooling (BVLC: pooling_layer.cpp): MAX and AVE, global, Caffe's ceil
output size or ``round_mode: FLOOR`` (the forks' ``ceil_mode: false``), and
MAX pooling's second top, the argmax mask that SegNet's Upsample reads."""

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._params import spatial
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.proto import caffe_pb2


def window(layer, shape):
    """(kernel, stride, pad) of a Pooling layer on a 4-D ``shape``."""
    p = layer.pooling_param
    if len(shape) != 4:
        raise LayerError(layer.name, f"(Pooling) needs a 4-D input (N, C, H, W), got "
                                     f"{fmt(shape)}")
    if p.global_pooling:
        if p.HasField("kernel_size") or p.HasField("kernel_h"):
            raise LayerError(layer.name, "(Pooling) global_pooling takes no kernel size")
        return tuple(shape[2:]), (1, 1), (0, 0)
    kernel = spatial(layer, p, "kernel_size", repeated=False)
    stride = spatial(layer, p, "stride", default=1, repeated=False)
    pad = spatial(layer, p, "pad", default=0, repeated=False)
    if min(kernel) <= 0 or min(stride) <= 0:
        raise LayerError(layer.name, "(Pooling) kernel and stride must be positive")
    if pad[0] >= kernel[0] or pad[1] >= kernel[1]:
        raise LayerError(layer.name, f"(Pooling) pad {pad} must be smaller than the kernel "
                                     f"{kernel}")
    return kernel, stride, pad


@layer_type("Pooling")
class Pooling(LayerType):
    """MAX / AVE / global pooling with Caffe's pads and ceil (or FLOOR) output
    size; MAX with a second top gives the argmax mask (index h * W + w of
    each window's first maximum in the input plane; -1 where none)."""

    examples = (
        Example("pooling_param { pool: MAX kernel_size: 3 stride: 2 }", [(2, 3, 8, 8)]),
        Example("pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }", [(2, 3, 7, 6)]),
        Example("pooling_param { pool: MAX kernel_size: 2 stride: 2 round_mode: FLOOR }",
                [(1, 2, 5, 5)]),
        Example("pooling_param { pool: AVE global_pooling: true }", [(2, 4, 3, 5)]),
        Example("pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }", [(2, 3, 7, 6)],
                tops=2),
        Example("pooling_param { pool: MAX global_pooling: true }", [(1, 2, 3, 4)], tops=2),
    )

    def shapes(self, layer, bottoms, state):
        p = layer.pooling_param
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        kernel, stride, pad = window(layer, shape)
        if p.pool == caffe_pb2.PoolingParameter.STOCHASTIC:
            raise LayerError(layer.name, "STOCHASTIC pooling is not supported (MAX and AVE are)")
        ceil = p.round_mode == caffe_pb2.PoolingParameter.CEIL
        out = []
        for size, k, s, q in zip(shape[2:], kernel, stride, pad):
            span = size + 2 * q - k
            if span < 0:
                raise LayerError(layer.name, f"(Pooling) kernel {k} exceeds the padded input "
                                             f"size {size + 2 * q} (input shape {fmt(shape)})")
            o = (-(-span // s) if ceil else span // s) + 1
            if any(pad) and (o - 1) * s >= size + q:
                o -= 1  # the last window must start inside the image (Caffe)
            out.append(o)
        if len(layer.top) > 1 and p.pool != caffe_pb2.PoolingParameter.MAX:
            raise LayerError(layer.name, "(Pooling) only MAX pooling has a second (mask) top")
        if len(layer.top) > 2:
            raise LayerError(layer.name, f"(Pooling) has at most 2 tops (the pooled blob and "
                                         f"the MAX mask), got {len(layer.top)}")
        return Shapes([(shape[0], shape[1], *out)] * len(layer.top))

    def build(self, layer, bottoms, ctx):
        p = layer.pooling_param
        kernel, stride, pad = window(layer, ctx.bottom_shapes[0])
        if p.global_pooling:
            kernel = (1, 1)
        pool = layers.Pooling(
            "MAX" if p.pool == caffe_pb2.PoolingParameter.MAX else "AVE", kernel_size=kernel,
            stride=stride, pad=pad, global_pooling=p.global_pooling,
            ceil_mode=p.round_mode == caffe_pb2.PoolingParameter.CEIL,
            data_format=ctx.data_format, return_mask=len(layer.top) == 2,
            name=ctx.keras_name(layer.name),
        )
        tops = pool(ctx.as_image(bottoms[0], layer))
        tops = tops if len(layer.top) == 2 else [tops]
        return [ctx.image_output(top) for top in tops]

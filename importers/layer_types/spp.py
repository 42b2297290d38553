"""SPP, spatial pyramid pooling (BVLC: spp_layer.cpp).

Level ``l`` of ``pyramid_height`` pools each plane into 2^l x 2^l bins with
Caffe's PoolingLayer: kernel ``ceil(H / bins)``, stride the kernel, pad
``(kernel * bins - H + 1) / 2`` (``SPPLayer::GetPoolingParam``); each level
is flattened and the levels concatenated, (N, C * sum 4^l). With
``pyramid_height: 1`` the one pooling's (N, C, 1, 1) top is SPP's top, not
flattened (``SPPLayer::Reshape``).
"""

import keras

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.importers.layer_types.reshape import reshaped
from keras_caffe.proto import caffe_pb2


def level_window(layer, size, level):
    """(kernel, pad) on one spatial axis of ``size`` for pyramid ``level``."""
    bins = 2 ** level
    kernel = -(-size // bins)
    pad = (kernel * bins - size + 1) // 2
    if pad >= kernel:
        raise LayerError(layer.name, f"(SPP) level {level} pools {size} values into {bins} bins: "
                                     f"its pad {pad} is not smaller than its kernel {kernel} "
                                     "(Caffe's PoolingLayer refuses it); use a smaller "
                                     "pyramid_height")
    return kernel, pad


def pooled_size(size, kernel, pad):
    """PoolingLayer::Reshape's ceil output size, stride = kernel."""
    out = -(-(size + 2 * pad - kernel) // kernel) + 1
    if pad and (out - 1) * kernel >= size + pad:
        out -= 1
    return out


def levels(layer, shape):
    """[(kernel (h, w), pad (h, w), pooled (h, w))] per pyramid level."""
    p = layer.spp_param
    if len(shape) != 4:
        raise LayerError(layer.name, f"(SPP) needs a 4-D input (N, C, H, W), got {fmt(shape)}")
    if p.pyramid_height < 1:
        raise LayerError(layer.name, "(SPP) pyramid_height must be at least 1")
    if p.pool == caffe_pb2.SPPParameter.STOCHASTIC:
        raise LayerError(layer.name, "(SPP) STOCHASTIC pooling is not supported (MAX and AVE are)")
    out = []
    for level in range(p.pyramid_height):
        windows = [level_window(layer, size, level) for size in shape[2:]]
        kernel = tuple(k for k, _ in windows)
        pad = tuple(q for _, q in windows)
        out.append((kernel, pad, tuple(pooled_size(s, k, q) for s, (k, q) in zip(shape[2:], windows))))
    return out


@layer_type("SPP")
class SPP(LayerType):
    """Spatial pyramid pooling, MAX or AVE, ``pyramid_height`` levels."""

    examples = (
        Example("spp_param { pyramid_height: 3 pool: MAX }", [(2, 3, 9, 7)]),
        Example("spp_param { pyramid_height: 2 pool: AVE }", [(1, 2, 6, 5)]),
        Example("spp_param { pyramid_height: 1 }", [(2, 3, 4, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        pyramid = levels(layer, shape)
        if len(pyramid) == 1:
            return Shapes([(shape[0], shape[1], *pyramid[0][2])])
        width = sum(shape[1] * h * w for _, _, (h, w) in pyramid)
        return Shapes([(shape[0], width)])

    def build(self, layer, bottoms, ctx):
        shape = ctx.bottom_shapes[0]
        pool = "MAX" if layer.spp_param.pool == caffe_pb2.SPPParameter.MAX else "AVE"
        image = ctx.as_image(bottoms[0], layer)
        flat = []
        for level, (kernel, pad, pooled) in enumerate(levels(layer, shape)):
            tensor = layers.Pooling(pool, kernel_size=kernel, stride=kernel, pad=pad,
                                    ceil_mode=True, data_format=ctx.data_format,
                                    name=ctx.keras_name(layer.name, f"_level{level}"))(image)
            blob = ctx.image_output(tensor)
            if len(ctx.shapes.tops[0]) == 4:
                return [blob]
            top = (shape[0], shape[1] * pooled[0] * pooled[1])
            flat.append(ctx.caffe_order(reshaped(blob, top, layer, ctx), layer))
        tensor = keras.layers.Concatenate(axis=1, name=ctx.keras_name(layer.name))(
            [b.tensor for b in flat])
        return [ctx.same_layout(tensor, flat[0])]

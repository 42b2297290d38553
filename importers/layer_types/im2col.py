"""Im2col (BVLC: im2col_layer.cpp, util/im2col.cpp): an image's convolution
windows as channels, what a Convolution multiplies its kernel with."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._params import spatial
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    canonical_axis,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.batch_select import Im2col as KerasIm2col


def window(layer, shape):
    """(kernel, stride, pad, dilation), each (h, w), of an Im2col on ``shape``."""
    p = layer.convolution_param
    if len(shape) != 4 or canonical_axis(p.axis, len(shape)) != 1:
        raise LayerError(layer.name, f"(Im2col) needs a 4-D input (N, C, H, W) with channels on "
                                     f"axis 1, got {fmt(shape)} (axis {p.axis})")
    kernel = spatial(layer, p, "kernel_size", 2)
    stride = spatial(layer, p, "stride", 2, default=1)
    pad = spatial(layer, p, "pad", 2, default=0)
    dilation = spatial(layer, p, "dilation", 2, default=1)
    if min(kernel) <= 0 or min(stride) <= 0 or min(dilation) <= 0:
        raise LayerError(layer.name, "(Im2col) kernel, stride and dilation must be positive")
    return kernel, stride, pad, dilation


@layer_type("Im2col")
class Im2col(LayerType):
    """(N, C, H, W) -> (N, C * kh * kw, OH, OW), channel ``(c * kh + i) * kw + j``
    the input at window offset (i, j) of channel c; convolution_param's
    kernel, stride, pad and dilation (2-D)."""

    examples = (
        Example("convolution_param { kernel_size: 3 }", [(2, 2, 5, 4)]),
        Example("convolution_param { kernel_h: 2 kernel_w: 3 stride: 2 pad: 1 dilation: 2 }",
                [(1, 3, 7, 8)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        kernel, stride, pad, dilation = window(layer, shape)
        out = []
        for size, k, s, q, d in zip(shape[2:], kernel, stride, pad, dilation):
            extent = d * (k - 1) + 1
            if size + 2 * q < extent:
                raise LayerError(layer.name, f"(Im2col) the dilated kernel {extent} exceeds the "
                                             f"padded input {size + 2 * q} ({fmt(shape)})")
            out.append((size + 2 * q - extent) // s + 1)
        return Shapes([(shape[0], shape[1] * kernel[0] * kernel[1], *out)])

    def build(self, layer, bottoms, ctx):
        kernel, stride, pad, dilation = window(layer, ctx.bottom_shapes[0])
        tensor = KerasIm2col(kernel, stride, pad, dilation, data_format=ctx.data_format,
                             name=ctx.keras_name(layer.name))(ctx.as_image(bottoms[0], layer))
        return [ctx.image_output(tensor)]

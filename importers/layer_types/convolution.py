"""Convolution and Deconvolution (BVLC: conv_layer.cpp, deconv_layer.cpp,
base_conv_layer.cpp), over 2 spatial axes (N, C, H, W) or 3 (N, C, D, H, W):
BVLC's N-D convolution, ``kernel_size`` / ``pad`` / ``stride`` /
``dilation`` given once or once per spatial axis."""

from keras_caffe import layers
from keras_caffe.layers.conv_nd import ConvolutionND, DeconvolutionND
from keras_caffe.layers.deconv import Deconvolution as KerasDeconvolution
from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._params import fillers, spatial
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    canonical_axis,
    count,
    fmt,
    layer_type,
)


def geometry(layer, bottoms, depthwise=False):
    """``BaseConvolutionLayer::LayerSetUp``'s checks: (param, shape, axis,
    kernel, stride, pad, dilation, channels, group) for bottoms all of one
    shape; ``depthwise``: the group is the number of input channels,
    whatever ``group`` says (the depthwise forks' layers)."""
    p = layer.convolution_param
    if not bottoms or any(tuple(b) != tuple(bottoms[0]) for b in bottoms):
        raise LayerError(layer.name, f"({layer.type}) needs one or more bottoms of one shape, got "
                                     + (", ".join(fmt(b) for b in bottoms) or "none"))
    if len(layer.top) != len(bottoms):
        raise LayerError(layer.name, f"({layer.type}) needs a top for each of its "
                                     f"{len(bottoms)} bottom(s)")
    shape = tuple(bottoms[0])
    axis = canonical_axis(p.axis, len(shape))
    n = len(shape) - axis - 1
    if n < 1:
        raise LayerError(layer.name, f"({layer.type}) needs spatial axes after axis {axis}; "
                                     f"input shape {fmt(shape)}")
    kernel = spatial(layer, p, "kernel_size", n)
    stride = spatial(layer, p, "stride", n, default=1)
    pad = spatial(layer, p, "pad", n, default=0)
    dilation = spatial(layer, p, "dilation", n, default=1)
    if min(kernel) <= 0 or min(stride) <= 0 or min(dilation) <= 0 or min(pad) < 0:
        raise LayerError(layer.name, f"({layer.type}) kernel, stride and dilation must be "
                                     "positive, pad non-negative")
    channels = shape[axis]
    if p.num_output <= 0:
        raise LayerError(layer.name, f"({layer.type}) num_output must be positive")
    group = channels if depthwise else p.group
    if depthwise and p.num_output % channels:
        raise LayerError(layer.name, f"({layer.type}) num_output {p.num_output} must be a "
                                     f"multiple of the {channels} input channels (depthwise)")
    if group <= 0 or channels % group or p.num_output % group:
        raise LayerError(layer.name, f"({layer.type}) group {group} must divide the {channels} "
                                     f"input channels and num_output {p.num_output}")
    return p, shape, axis, kernel, stride, pad, dilation, channels, group


#: The Keras layers of Convolution and Deconvolution by number of spatial
#: axes: the 2-D ones (depthwise and same-padding fast paths) and the N-D ones.
_CONVOLUTION = {2: layers.Convolution, 3: ConvolutionND}
_DECONVOLUTION = {2: KerasDeconvolution, 3: DeconvolutionND}


def _keras_class(layer, shape, axis, classes):
    """The Keras layer class for the blob: 2-D (N, C, H, W) or 3-D
    (N, C, D, H, W) convolutions over axis 1."""
    n = len(shape) - axis - 1
    if axis != 1 or n not in classes:
        raise LayerError(layer.name, f"({layer.type}) over axis {axis} is not supported for a "
                                     f"{len(shape)}-D blob {fmt(shape)}: only 2-D "
                                     "(N, C, H, W) or 3-D (N, C, D, H, W) over axis 1")
    return classes[n]


@layer_type("Convolution")
class Convolution(LayerType):
    """Convolution with group, dilation, pad/kernel/stride (or _h/_w),
    bias_term; several bottoms (one top each) share the weights. 3 spatial
    axes: kernel_size/pad/stride/dilation once or once per axis (D, H, W),
    weights (num_output, C / group, kD, kH, kW)."""

    #: Whether the group is always the input channels (depthwise forks).
    depthwise = False

    examples = (
        Example("convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 2 }",
                [(2, 3, 9, 9)]),
        Example("convolution_param { num_output: 6 kernel_h: 3 kernel_w: 1 group: 3 "
                "dilation: 2 bias_term: false }", [(2, 3, 8, 7)]),
        Example("convolution_param { num_output: 2 kernel_size: 1 }", [(1, 2, 3, 3)] * 2,
                tops=2),
        Example("convolution_param { num_output: 4 kernel_size: 3 kernel_size: 2 "
                "kernel_size: 3 pad: 1 pad: 0 pad: 1 stride: 2 stride: 1 stride: 2 group: 2 }",
                [(2, 2, 5, 4, 6)]),
        Example("convolution_param { num_output: 3 kernel_size: 2 dilation: 2 "
                "bias_term: false }", [(1, 2, 5, 5, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        p, shape, axis, kernel, stride, pad, dilation, channels, group = geometry(
            layer, bottoms, self.depthwise)
        out = []
        for size, k, s, q, d in zip(shape[axis + 1:], kernel, stride, pad, dilation):
            extent = d * (k - 1) + 1
            if size + 2 * q < extent:
                raise LayerError(layer.name, f"(Convolution) kernel extent {extent} exceeds the "
                                             f"padded input size {size + 2 * q} (input shape "
                                             f"{fmt(shape)})")
            out.append((size + 2 * q - extent) // s + 1)
        top = (*shape[:axis], p.num_output, *out)
        weights = [(p.num_output, channels // group, *kernel)]
        if p.bias_term:
            weights.append((p.num_output,))
        macs = count(top) * (channels // group) * count(kernel)
        return Shapes([top] * len(layer.top), weights, macs * len(layer.top))

    def build(self, layer, bottoms, ctx):
        p, shape, axis, kernel, stride, pad, dilation, channels, group = geometry(
            layer, ctx.bottom_shapes, self.depthwise)
        keras_class = _keras_class(layer, shape, axis, _CONVOLUTION)
        conv = keras_class(
            p.num_output, kernel, stride=stride, pad=pad, dilation=dilation, group=group,
            bias_term=p.bias_term, data_format=ctx.data_format, name=ctx.keras_name(layer.name),
            caffe_name=layer.name,
            **fillers(p, (p.num_output, channels // group, *kernel), (p.num_output,)),
        )
        # Several bottoms share the weights, one top each (as in Caffe).
        return [ctx.image_output(ctx.apply(conv, ctx.as_image(b, layer))) for b in bottoms]


@layer_type("Deconvolution")
class Deconvolution(LayerType):
    """Deconvolution with group, dilation, pad/kernel/stride (or _h/_w),
    bias_term; several bottoms (all of one shape) share the weights. 3
    spatial axes as Convolution, weights (C, num_output / group, kD, kH, kW)."""

    examples = (
        Example("convolution_param { num_output: 4 kernel_size: 4 stride: 2 pad: 1 }",
                [(2, 3, 5, 5)]),
        Example("convolution_param { num_output: 4 kernel_size: 3 group: 2 dilation: 2 "
                "bias_term: false }", [(1, 2, 4, 3)]),
        Example("convolution_param { num_output: 2 kernel_size: 2 kernel_size: 3 "
                "kernel_size: 2 stride: 2 pad: 0 pad: 1 pad: 0 }", [(2, 3, 3, 4, 2)]),
    )

    def shapes(self, layer, bottoms, state):
        p, shape, axis, kernel, stride, pad, dilation, channels, group = geometry(layer, bottoms)
        out = [s * (size - 1) + d * (k - 1) + 1 - 2 * q
               for size, k, s, q, d in zip(shape[axis + 1:], kernel, stride, pad, dilation)]
        if min(out) <= 0:
            raise LayerError(layer.name, f"(Deconvolution) pad {pad} leaves no output for input "
                                         f"{fmt(shape[axis + 1:])} with kernel {kernel}, "
                                         f"stride {stride}, dilation {dilation}")
        top = (*shape[:axis], p.num_output, *out)
        weights = [(channels, p.num_output // group, *kernel)]
        if p.bias_term:
            weights.append((p.num_output,))
        macs = count(shape) * (p.num_output // group) * count(kernel)
        return Shapes([top] * len(layer.top), weights, macs * len(layer.top))

    def build(self, layer, bottoms, ctx):
        p, shape, axis, kernel, stride, pad, dilation, channels, group = geometry(
            layer, ctx.bottom_shapes)
        keras_class = _keras_class(layer, shape, axis, _DECONVOLUTION)
        deconv = keras_class(
            p.num_output, kernel, stride=stride, pad=pad, dilation=dilation, group=group,
            bias_term=p.bias_term, data_format=ctx.data_format, name=ctx.keras_name(layer.name),
            caffe_name=layer.name,
            **fillers(p, (channels, p.num_output // group, *kernel), (p.num_output,)),
        )
        return [ctx.image_output(ctx.apply(deconv, ctx.as_image(bottom, layer)))
                for bottom in bottoms]

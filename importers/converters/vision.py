"""Image layers: Convolution, Pooling, LRN."""

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.converters._params import conv_geometry, fillers, spatial
from keras_caffe.importers.registry import converter
from keras_caffe.proto import caffe_pb2


@converter("Convolution")
def convolution(layer, bottoms, ctx):
    """Convolution with group, dilation, pad/kernel/stride (or _h/_w), bias_term;
    several bottoms (one top each) share the weights."""
    p = layer.convolution_param
    kernel, stride, pad, dilation, channels = conv_geometry(layer, bottoms, ctx, "convolution")
    ctx.check_size(layer, p.num_output * (channels // p.group) * kernel[0] * kernel[1])
    conv = layers.Convolution(
        p.num_output, kernel, stride=stride, pad=pad, dilation=dilation, group=p.group,
        bias_term=p.bias_term, data_format=ctx.data_format, name=ctx.keras_name(layer.name),
        caffe_name=layer.name,
        **fillers(p, (p.num_output, channels // p.group, *kernel), (p.num_output,)),
    )
    # Several bottoms share the weights, one top each (as in Caffe).
    return [ctx.image_output(ctx.apply(conv, ctx.as_image(b, layer))) for b in bottoms]


@converter("Pooling")
def pooling(layer, bottoms, ctx):
    """MAX / AVE / global pooling with Caffe's pads, ceil (or FLOOR) output size."""
    p = layer.pooling_param
    if p.pool == caffe_pb2.PoolingParameter.STOCHASTIC:
        raise LayerError(layer.name, "STOCHASTIC pooling is not supported (MAX and AVE are)")
    x = ctx.as_image(bottoms[0], layer)
    if p.global_pooling:
        if p.HasField("kernel_size") or p.HasField("kernel_h"):
            raise LayerError(layer.name, "global_pooling takes no kernel size")
        kernel, stride, pad = (1, 1), (1, 1), (0, 0)
    else:
        kernel = spatial(layer, p, "kernel_size", repeated=False)
        stride = spatial(layer, p, "stride", default=1, repeated=False)
        pad = spatial(layer, p, "pad", default=0, repeated=False)
        if min(kernel) <= 0 or min(stride) <= 0:
            raise LayerError(layer.name, "kernel and stride must be positive")
        if pad[0] >= kernel[0] or pad[1] >= kernel[1]:
            raise LayerError(layer.name, f"pad {pad} must be smaller than the kernel {kernel}")
    pool = layers.Pooling(
        "MAX" if p.pool == caffe_pb2.PoolingParameter.MAX else "AVE", kernel_size=kernel,
        stride=stride, pad=pad, global_pooling=p.global_pooling,
        ceil_mode=p.round_mode == caffe_pb2.PoolingParameter.CEIL,
        data_format=ctx.data_format, name=ctx.keras_name(layer.name),
    )
    return [ctx.image_output(pool(x))]


@converter("LRN")
def lrn(layer, bottoms, ctx):
    """LRN, ACROSS_CHANNELS or WITHIN_CHANNEL."""
    p = layer.lrn_param
    if p.local_size % 2 != 1:
        raise LayerError(layer.name, f"local_size must be odd, got {p.local_size}")
    region = caffe_pb2.LRNParameter.NormRegion.Name(p.norm_region)
    norm = layers.LRN(p.local_size, alpha=p.alpha, beta=p.beta, k=p.k, norm_region=region,
                      data_format=ctx.data_format, name=ctx.keras_name(layer.name))
    return [ctx.image_output(norm(ctx.as_image(bottoms[0], layer)))]

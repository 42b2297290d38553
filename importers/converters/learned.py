"""Learned layers beyond Convolution/InnerProduct: Deconvolution, Embed."""


from keras_caffe.errors import LayerError
from keras_caffe.importers.converters._params import spatial
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.registry import converter
from keras_caffe.layers.deconv import Deconvolution, Embed


@converter("Deconvolution")
def deconvolution(layer, bottoms, ctx):
    """Deconvolution with group, dilation, pad/kernel/stride (or _h/_w), bias_term.

    Several bottoms (all of one shape, as Caffe requires) share the weights,
    one top each.
    """
    p = layer.convolution_param
    if p.axis != 1:
        raise LayerError(layer.name, f"deconvolution over axis {p.axis} is not supported (only 1)")
    kernel = spatial(layer, p, "kernel_size")
    stride = spatial(layer, p, "stride", default=1)
    pad = spatial(layer, p, "pad", default=0)
    dilation = spatial(layer, p, "dilation", default=1)
    shape = ctx.caffe_shape(bottoms[0])
    if len(shape) != 4:
        raise LayerError(layer.name, f"needs a 4-D blob (N, C, H, W), got shape {shape}")
    for i, bottom in enumerate(bottoms[1:], 1):
        if ctx.caffe_shape(bottom) != shape:
            raise LayerError(layer.name, f"bottom {i} has shape {ctx.caffe_shape(bottom)}, "
                                         f"bottom 0 has {shape}: all bottoms must match")
    channels = shape[1]
    if p.num_output <= 0:
        raise LayerError(layer.name, "num_output must be positive")
    if p.group <= 0 or channels % p.group or p.num_output % p.group:
        raise LayerError(layer.name, f"group {p.group} must divide the {channels} input channels "
                                     f"and num_output {p.num_output}")
    if min(kernel) <= 0 or min(stride) <= 0 or min(dilation) <= 0:
        raise LayerError(layer.name, "kernel, stride and dilation must be positive")
    for size, k, s, pd, d in zip(shape[2:], kernel, stride, pad, dilation):
        if size is not None and s * (size - 1) + d * (k - 1) + 1 - 2 * pd <= 0:
            raise LayerError(layer.name, f"pad {pad} leaves no output for input {shape[2:]} "
                                         f"with kernel {kernel}, stride {stride}, "
                                         f"dilation {dilation}")
    ctx.check_size(layer, channels * (p.num_output // p.group) * kernel[0] * kernel[1])
    deconv = Deconvolution(
        p.num_output, kernel, stride=stride, pad=pad, dilation=dilation, group=p.group,
        bias_term=p.bias_term, data_format=ctx.data_format, name=ctx.keras_name(layer.name),
        caffe_name=layer.name,
    )
    return [ctx.image_output(deconv(ctx.as_image(bottom, layer))) for bottom in bottoms]


@converter("Embed")
def embed(layer, bottoms, ctx):
    """Embed (num_output, input_dim, bias_term): a lookup of integer-valued inputs.

    The top is the bottom's Caffe shape plus a last axis of num_output
    (looked up in Caffe's order; a 3-D or larger top is then channels-last
    under channels_last, like every image blob).
    """
    p = layer.embed_param
    if p.num_output <= 0:
        raise LayerError(layer.name, "num_output must be positive")
    if p.input_dim <= 0:
        raise LayerError(layer.name, "input_dim must be positive")
    ctx.check_size(layer, p.input_dim * p.num_output)
    bottom = ctx.caffe_order(bottoms[0], layer)
    lookup = Embed(p.num_output, p.input_dim, bias_term=p.bias_term,
                   name=ctx.keras_name(layer.name), caffe_name=layer.name)
    return [Blob(lookup(bottom.tensor))]

"""Learned layers beyond Convolution/InnerProduct: Deconvolution, Embed."""


from keras_caffe.errors import LayerError
from keras_caffe.importers.converters._params import conv_geometry, fillers
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
    kernel, stride, pad, dilation, channels = conv_geometry(layer, bottoms, ctx, "deconvolution")
    shape = ctx.caffe_shape(bottoms[0])
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
        **fillers(p, (channels, p.num_output // p.group, *kernel), (p.num_output,)),
    )
    return [ctx.image_output(ctx.apply(deconv, ctx.as_image(bottom, layer)))
            for bottom in bottoms]


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
                   name=ctx.keras_name(layer.name), caffe_name=layer.name,
                   **fillers(p, (p.input_dim, p.num_output), (p.num_output,)))
    return [Blob(ctx.apply(lookup, bottom.tensor))]

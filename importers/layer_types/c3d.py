"""C3D's (facebook/C3D) 3-D layers on (N, C, L, H, W) blobs, as C3D-v1.1
names them (``layer { type: "Convolution3D" convolution3d_param { } }``):

- ``Convolution3D`` (convolution3d_layer.cpp with util/vol2col.cpp): one
  ``kernel_size`` / ``stride`` / ``pad`` for H and W, ``kernel_depth`` /
  ``temporal_stride`` / ``temporal_pad`` for L; zero padding; output size
  ``(size + 2 pad - k) / stride + 1`` in C++ ``int`` arithmetic (truncated
  toward zero). Every filter sees all input channels: ``filter_group`` only
  splits the GEMM into num_output / filter_group rows at a time (it must
  divide num_output), and ``group`` is never read. Blobs: weights
  (num_output, C, kernel_depth, k, k), bias (1, 1, 1, 1, num_output).
- ``Deconvolution3D`` (deconvolution3d_layer.cpp, col2vol): the transposed
  3-D convolution, output ``(in - 1) stride - 2 pad + k`` per axis. Its
  ``bias_term`` is read from ``convolution_param`` (the fork's
  ``LayerSetUp`` does so; ``convolution3d_param.bias_term`` is ignored),
  its fillers from ``convolution3d_param``. Blobs: weights (C, num_output,
  kernel_depth, k, k), bias (1, 1, 1, 1, num_output).
- ``Pooling3D`` (pool3d_layer.cpp): MAX or AVE; ``pad`` on H and W only and
  only for AVE (the fork CHECKs it); output ``ceil(float(size + 2 pad - k)
  / stride) + 1`` (the temporal axis with no pad), no clipping of the last
  window; AVE divides by the window clipped to ``size + pad`` (H, W) and
  ``length`` (L). STOCHASTIC is NOT_IMPLEMENTED in the fork's CPU code.

C3D-v1.0's V1 prototxts (``layers { type: CONVOLUTION3D convolution_param {
kernel_depth ... } }``) name the types in an enum that clashes with BVLC's V1
numbers; they are not read. Its binary caffemodels' 5-D blobs are (see
``keras_caffe.importers.net.weights``).
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._params import fillers
from keras_caffe.importers.layer_types.base import (
    C3D,
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.c3d import (
    C3DConvolution3D,
    C3DDeconvolution3D,
    C3DPooling3D,
    c3d_conv_size,
    c3d_pooled_size,
)
from keras_caffe.proto import caffe_pb2


def _volume(layer, bottoms):
    """The one bottom's 5-D shape (the fork reads shape(0) .. shape(4))."""
    need_bottoms(layer, bottoms, 1)
    if len(layer.top) != 1:
        raise LayerError(layer.name, f"({layer.type}) takes a single top, got "
                                     f"{len(layer.top)}")
    shape = tuple(bottoms[0])
    if len(shape) != 5:
        raise LayerError(layer.name, f"({layer.type}) needs a 5-D input (N, C, L, H, W), got "
                                     f"{fmt(shape)}")
    return shape


def _window(layer, p, pads=True):
    """(kernel, stride, pad) as (L, H, W) triples of a convolution3d_param or
    pooling3d_param."""
    kernel = (p.kernel_depth, p.kernel_size, p.kernel_size)
    stride = (p.temporal_stride, p.stride, p.stride)
    pad = (p.temporal_pad if pads else 0, p.pad, p.pad)
    if min(kernel) <= 0:
        raise LayerError(layer.name, f"({layer.type}) kernel_size and kernel_depth must be "
                                     f"positive, got kernel_size {p.kernel_size}, kernel_depth "
                                     f"{p.kernel_depth}")
    if min(stride) <= 0:
        raise LayerError(layer.name, f"({layer.type}) stride and temporal_stride must be "
                                     f"positive, got stride {p.stride}, temporal_stride "
                                     f"{p.temporal_stride}")
    return kernel, stride, pad


def _conv_geometry(layer, bottoms):
    p = layer.convolution3d_param
    shape = _volume(layer, bottoms)
    kernel, stride, pad = _window(layer, p)
    if p.num_output <= 0:
        raise LayerError(layer.name, f"({layer.type}) num_output must be positive")
    return p, shape, kernel, stride, pad


def _bias_shape(p):
    return (1, 1, 1, 1, p.num_output)


@layer_type("Convolution3D")
class Convolution3D(LayerType):
    """C3D's 3-D convolution (kernel_depth x kernel_size x kernel_size, the
    fork's truncating output size, filter_group a no-op), bias_term."""

    origin = C3D
    examples = (
        Example("convolution3d_param { num_output: 4 kernel_size: 3 kernel_depth: 3 pad: 1 "
                "temporal_pad: 1 }", [(2, 3, 4, 5, 5)]),
        Example("convolution3d_param { num_output: 4 kernel_size: 2 kernel_depth: 1 stride: 2 "
                "temporal_stride: 2 filter_group: 2 bias_term: false }", [(1, 2, 5, 4, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        p, shape, kernel, stride, pad = _conv_geometry(layer, bottoms)
        if p.filter_group <= 0 or p.num_output % p.filter_group:
            raise LayerError(layer.name, f"(Convolution3D) filter_group {p.filter_group} must "
                                         f"divide num_output {p.num_output}")
        out = [c3d_conv_size(n, k, s, q) for n, k, s, q in zip(shape[2:], kernel, stride, pad)]
        top = (shape[0], p.num_output, *out)
        weights = [(p.num_output, shape[1], *kernel)]
        if p.bias_term:
            weights.append(_bias_shape(p))
        return Shapes([top], weights, count(top) * shape[1] * count(kernel))

    def build(self, layer, bottoms, ctx):
        p, shape, kernel, stride, pad = _conv_geometry(layer, ctx.bottom_shapes)
        conv = C3DConvolution3D(
            p.num_output, kernel, stride=stride, pad=pad, bias_term=p.bias_term,
            data_format=ctx.data_format, name=ctx.keras_name(layer.name), caffe_name=layer.name,
            **fillers(p, (p.num_output, shape[1], *kernel), _bias_shape(p)),
        )
        return [ctx.image_output(ctx.apply(conv, ctx.as_image(bottoms[0], layer)))]


@layer_type("Deconvolution3D")
class Deconvolution3D(LayerType):
    """C3D's transposed 3-D convolution; bias_term from convolution_param, as
    the fork reads it."""

    origin = C3D
    examples = (
        Example("convolution3d_param { num_output: 3 kernel_size: 4 kernel_depth: 2 stride: 2 "
                "temporal_stride: 2 pad: 1 }", [(2, 2, 3, 4, 3)]),
        Example("convolution3d_param { num_output: 2 kernel_size: 3 kernel_depth: 3 "
                "temporal_pad: 1 } convolution_param { bias_term: false }", [(1, 3, 3, 2, 2)]),
    )

    def shapes(self, layer, bottoms, state):
        p, shape, kernel, stride, pad = _conv_geometry(layer, bottoms)
        out = [(n - 1) * s - 2 * q + k for n, k, s, q in zip(shape[2:], kernel, stride, pad)]
        if min(out) <= 0:
            raise LayerError(layer.name, f"(Deconvolution3D) pad (temporal_pad {p.temporal_pad}, "
                                         f"pad {p.pad}) leaves no output for input "
                                         f"{fmt(shape[2:])}")
        weights = [(shape[1], p.num_output, *kernel)]
        if layer.convolution_param.bias_term:
            weights.append(_bias_shape(p))
        return Shapes([(shape[0], p.num_output, *out)], weights,
                      count(shape) * p.num_output * count(kernel))

    def build(self, layer, bottoms, ctx):
        p, shape, kernel, stride, pad = _conv_geometry(layer, ctx.bottom_shapes)
        deconv = C3DDeconvolution3D(
            p.num_output, kernel, stride=stride, pad=pad,
            bias_term=layer.convolution_param.bias_term, data_format=ctx.data_format,
            name=ctx.keras_name(layer.name), caffe_name=layer.name,
            **fillers(p, (shape[1], p.num_output, *kernel), _bias_shape(p)),
        )
        return [ctx.image_output(ctx.apply(deconv, ctx.as_image(bottoms[0], layer)))]


def _pool_geometry(layer, bottoms):
    p = layer.pooling3d_param
    shape = _volume(layer, bottoms)
    kernel, stride, pad = _window(layer, p, pads=False)
    if p.pool == caffe_pb2.Pooling3DParameter.STOCHASTIC:
        raise LayerError(layer.name, "(Pooling3D) pool: STOCHASTIC is not implemented by the "
                                     "fork (MAX and AVE are)")
    if p.pad and p.pool != caffe_pb2.Pooling3DParameter.AVE:
        raise LayerError(layer.name, f"(Pooling3D) pad {p.pad} is implemented only for "
                                     "pool: AVE (the fork refuses it for MAX)")
    return p, shape, kernel, stride, pad


@layer_type("Pooling3D")
class Pooling3D(LayerType):
    """C3D's MAX / AVE 3-D pooling with the fork's ceil output size and
    window clipping (AVE pads H and W)."""

    origin = C3D
    examples = (
        Example("pooling3d_param { pool: MAX kernel_size: 2 kernel_depth: 2 stride: 2 "
                "temporal_stride: 2 }", [(2, 3, 5, 5, 4)]),
        Example("pooling3d_param { pool: MAX kernel_size: 3 kernel_depth: 1 stride: 2 }",
                [(1, 2, 3, 6, 7)]),
        Example("pooling3d_param { pool: AVE kernel_size: 3 kernel_depth: 2 stride: 2 "
                "temporal_stride: 2 pad: 1 }", [(2, 2, 5, 6, 5)]),
    )

    def shapes(self, layer, bottoms, state):
        p, shape, kernel, stride, pad = _pool_geometry(layer, bottoms)
        out = [c3d_pooled_size(n, k, s, q) for n, k, s, q in zip(shape[2:], kernel, stride, pad)]
        return Shapes([(shape[0], shape[1], *out)])

    def build(self, layer, bottoms, ctx):
        p, shape, kernel, stride, pad = _pool_geometry(layer, ctx.bottom_shapes)
        pool = C3DPooling3D(
            "MAX" if p.pool == caffe_pb2.Pooling3DParameter.MAX else "AVE", kernel_size=kernel,
            stride=stride, pad=p.pad, data_format=ctx.data_format,
            name=ctx.keras_name(layer.name),
        )
        return [ctx.image_output(pool(ctx.as_image(bottoms[0], layer)))]

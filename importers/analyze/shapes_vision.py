"""Shape rules of the layers with spatial geometry or learned matrices: Convolution,
Deconvolution, Pooling, InnerProduct, Embed."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.analyze.shapes import _axis, _bottoms, _count, _fmt, _rule
from keras_caffe.proto import caffe_pb2


def _spatial(layer, p, name, short, n, default, repeated=True):
    """Caffe's kernel/stride/pad/dilation: ``name`` (1 or n values) or ``short_h``/``short_w``."""
    fields = p.DESCRIPTOR.fields_by_name
    hw = f"{short}_h" in fields and (p.HasField(f"{short}_h") or p.HasField(f"{short}_w"))
    if repeated:
        values = list(getattr(p, name))
    else:
        values = [getattr(p, name)] if p.HasField(name) else []
    if hw:
        if n != 2:
            raise LayerError(layer.name, f"{short}_h/{short}_w are for 2 spatial axes, the input "
                                         f"has {n}")
        if values:
            raise LayerError(layer.name, f"give either {name} or {short}_h/{short}_w, not both")
        if not (p.HasField(f"{short}_h") and p.HasField(f"{short}_w")):
            raise LayerError(layer.name, f"{short}_h and {short}_w must be given together")
        return (getattr(p, f"{short}_h"), getattr(p, f"{short}_w"))
    if not values:
        if default is None:
            raise LayerError(layer.name, f"({layer.type}) {name} is required")
        return (default,) * n
    if len(values) == 1:
        return (values[0],) * n
    if len(values) == n:
        return tuple(values)
    raise LayerError(layer.name, f"{name} has {len(values)} values for {n} spatial axes")


def _conv_geometry(layer, bottoms):
    p = layer.convolution_param
    if not bottoms or any(b != bottoms[0] for b in bottoms):
        raise LayerError(layer.name, f"({layer.type}) needs one or more bottoms of one shape, got "
                                     + (", ".join(_fmt(b) for b in bottoms) or "none"))
    if len(layer.top) != len(bottoms):
        raise LayerError(layer.name, f"({layer.type}) needs a top for each of its "
                                     f"{len(bottoms)} bottom(s)")
    shape = bottoms[0]
    axis = _axis(p.axis, len(shape))
    n = len(shape) - axis - 1
    if n < 1:
        raise LayerError(layer.name, f"({layer.type}) needs spatial axes after axis {axis}; "
                                     f"input shape {_fmt(shape)}")
    kernel = _spatial(layer, p, "kernel_size", "kernel", n, None)
    stride = _spatial(layer, p, "stride", "stride", n, 1)
    pad = _spatial(layer, p, "pad", "pad", n, 0)
    dilation = _spatial(layer, p, "dilation", "dilation", n, 1)
    if min(kernel) <= 0 or min(stride) <= 0 or min(dilation) <= 0 or min(pad) < 0:
        raise LayerError(layer.name, f"({layer.type}) kernel, stride and dilation must be "
                                     "positive, pad non-negative")
    channels = shape[axis]
    if p.num_output <= 0:
        raise LayerError(layer.name, f"({layer.type}) num_output must be positive")
    if p.group <= 0 or channels % p.group or p.num_output % p.group:
        raise LayerError(layer.name, f"({layer.type}) group {p.group} must divide the {channels} "
                                     f"input channels and num_output {p.num_output}")
    return p, shape, axis, kernel, stride, pad, dilation, channels


@_rule("Convolution")
def _convolution(layer, bottoms, state):
    p, shape, axis, kernel, stride, pad, dilation, channels = _conv_geometry(layer, bottoms)
    out = []
    for size, k, s, q, d in zip(shape[axis + 1:], kernel, stride, pad, dilation):
        extent = d * (k - 1) + 1
        if size + 2 * q < extent:
            raise LayerError(layer.name, f"(Convolution) kernel extent {extent} exceeds the "
                                         f"padded input size {size + 2 * q} (input shape "
                                         f"{_fmt(shape)})")
        out.append((size + 2 * q - extent) // s + 1)
    top = (*shape[:axis], p.num_output, *out)
    weights = [(p.num_output, channels // p.group, *kernel)]
    if p.bias_term:
        weights.append((p.num_output,))
    macs = _count(top) * (channels // p.group) * _count(kernel)
    return [top] * len(layer.top), weights, macs * len(layer.top)


@_rule("Deconvolution")
def _deconvolution(layer, bottoms, state):
    p, shape, axis, kernel, stride, pad, dilation, channels = _conv_geometry(layer, bottoms)
    out = [s * (size - 1) + d * (k - 1) + 1 - 2 * q
           for size, k, s, q, d in zip(shape[axis + 1:], kernel, stride, pad, dilation)]
    top = (*shape[:axis], p.num_output, *out)
    weights = [(channels, p.num_output // p.group, *kernel)]
    if p.bias_term:
        weights.append((p.num_output,))
    macs = _count(shape) * (p.num_output // p.group) * _count(kernel)
    return [top] * len(layer.top), weights, macs * len(layer.top)


@_rule("Pooling")
def _pooling(layer, bottoms, state):
    p = layer.pooling_param
    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    if len(shape) != 4:
        raise LayerError(layer.name, f"(Pooling) needs a 4-D input (N, C, H, W), got "
                                     f"{_fmt(shape)}")
    height, width = shape[2:]
    if p.global_pooling:
        kernel, stride, pad = (height, width), (1, 1), (0, 0)
    else:
        kernel = _spatial(layer, p, "kernel_size", "kernel", 2, None, repeated=False)
        stride = _spatial(layer, p, "stride", "stride", 2, 1, repeated=False)
        pad = _spatial(layer, p, "pad", "pad", 2, 0, repeated=False)
        if min(kernel) <= 0 or min(stride) <= 0:
            raise LayerError(layer.name, "(Pooling) kernel and stride must be positive")
        if pad[0] >= kernel[0] or pad[1] >= kernel[1]:
            raise LayerError(layer.name, f"(Pooling) pad {pad} must be smaller than the kernel "
                                         f"{kernel}")
    ceil = p.round_mode == caffe_pb2.PoolingParameter.CEIL
    out = []
    for size, k, s, q in zip((height, width), kernel, stride, pad):
        span = size + 2 * q - k
        if span < 0:
            raise LayerError(layer.name, f"(Pooling) kernel {k} exceeds the padded input size "
                                         f"{size + 2 * q} (input shape {_fmt(shape)})")
        o = (-(-span // s) if ceil else span // s) + 1
        if any(pad) and (o - 1) * s >= size + q:
            o -= 1  # the last window must start inside the image (Caffe)
        out.append(o)
    top = (shape[0], shape[1], *out)
    if len(layer.top) > 1 and p.pool != caffe_pb2.PoolingParameter.MAX:
        raise LayerError(layer.name, "(Pooling) only MAX pooling has a second (mask) top")
    return [top] * len(layer.top), [], 0


@_rule("InnerProduct")
def _inner_product(layer, bottoms, state):
    p = layer.inner_product_param
    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    axis = _axis(p.axis, len(shape))
    if p.num_output <= 0:
        raise LayerError(layer.name, "(InnerProduct) num_output must be positive")
    k = _count(shape[axis:])
    weights = [(k, p.num_output) if p.transpose else (p.num_output, k)]
    if p.bias_term:
        weights.append((p.num_output,))
    return [(*shape[:axis], p.num_output)], weights, _count(shape[:axis]) * k * p.num_output


@_rule("Embed")
def _embed(layer, bottoms, state):
    p = layer.embed_param
    _bottoms(layer, bottoms, 1)
    if p.num_output <= 0 or p.input_dim <= 0:
        raise LayerError(layer.name, "(Embed) num_output and input_dim must be positive")
    weights = [(p.input_dim, p.num_output)] + ([(p.num_output,)] if p.bias_term else [])
    return [(*bottoms[0], p.num_output)], weights, 0

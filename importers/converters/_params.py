"""Reading Caffe's spatial parameters (``kernel_size`` or ``kernel_h``/``kernel_w``, ...)."""


from keras_caffe.errors import LayerError


def spatial(layer, param, name, default=None, repeated=True):
    """(h, w) of ``name`` from ``param``: ``name`` (once, or h and w) or ``name_h``/``name_w``."""
    short = {"kernel_size": "kernel", "stride": "stride", "pad": "pad"}.get(name, name)
    fields = param.DESCRIPTOR.fields_by_name
    has_hw = f"{short}_h" in fields and (param.HasField(f"{short}_h") or param.HasField(f"{short}_w"))
    values = list(getattr(param, name)) if repeated else (
        [getattr(param, name)] if param.HasField(name) else [])
    if has_hw:
        if values:
            raise LayerError(layer.name, f"give either {name} or {short}_h/{short}_w, not both")
        if not (param.HasField(f"{short}_h") and param.HasField(f"{short}_w")):
            raise LayerError(layer.name, f"{short}_h and {short}_w must be given together")
        return getattr(param, f"{short}_h"), getattr(param, f"{short}_w")
    if not values:
        if default is None:
            raise LayerError(layer.name, f"{name} is required")
        return default, default
    if len(values) == 1:
        return values[0], values[0]
    if len(values) == 2:
        return values[0], values[1]
    raise LayerError(layer.name, f"{name} has {len(values)} values: only 2-D layers are supported")


def conv_geometry(layer, bottoms, ctx, what):
    """Validated (kernel, stride, pad, dilation, channels) of a Convolution or
    Deconvolution layer; every bottom must have bottom 0's shape."""
    p = layer.convolution_param
    if p.axis != 1:
        raise LayerError(layer.name, f"{what} over axis {p.axis} is not supported (only 1)")
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
    return kernel, stride, pad, dilation, channels


def fillers(param, weight_shape, bias_shape):
    """Initializers for a layer's ``weight_filler`` / ``bias_filler`` (Caffe's
    default for both: constant 0), given the Caffe blob shapes they fill."""
    from keras_caffe.initializers import from_filler

    return {"kernel_initializer": from_filler(param.weight_filler, weight_shape),
            "bias_initializer": from_filler(param.bias_filler, bias_shape)}

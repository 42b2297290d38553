"""Reading Caffe's spatial parameters (``kernel_size`` or ``kernel_h``/``kernel_w``,
...) and fillers, shared by the units of Convolution, Deconvolution, Pooling."""

from keras_caffe.errors import LayerError
from keras_caffe.initializers import from_filler


def spatial(layer, param, name, n=2, default=None, repeated=True):
    """Caffe's kernel/stride/pad/dilation for ``n`` spatial axes: ``name`` (one
    value, or one per axis) or ``<short>_h``/``<short>_w`` (2 axes only)."""
    short = {"kernel_size": "kernel"}.get(name, name)
    fields = param.DESCRIPTOR.fields_by_name
    has_hw = f"{short}_h" in fields and (param.HasField(f"{short}_h")
                                         or param.HasField(f"{short}_w"))
    if repeated:
        values = list(getattr(param, name))
    else:
        values = [getattr(param, name)] if param.HasField(name) else []
    if has_hw:
        if n != 2:
            raise LayerError(layer.name, f"({layer.type}) {short}_h/{short}_w are for 2 "
                                         f"spatial axes, the input has {n}")
        if values:
            raise LayerError(layer.name, f"give either {name} or {short}_h/{short}_w, not both")
        if not (param.HasField(f"{short}_h") and param.HasField(f"{short}_w")):
            raise LayerError(layer.name, f"{short}_h and {short}_w must be given together")
        return (getattr(param, f"{short}_h"), getattr(param, f"{short}_w"))
    if not values:
        if default is None:
            raise LayerError(layer.name, f"({layer.type}) {name} is required")
        return (default,) * n
    if len(values) == 1:
        return (values[0],) * n
    if len(values) == n:
        return tuple(values)
    raise LayerError(layer.name, f"({layer.type}) {name} has {len(values)} values for {n} "
                                 "spatial axes")


def fillers(param, weight_shape, bias_shape):
    """Initializers for a layer's ``weight_filler`` / ``bias_filler`` (Caffe's
    default for both: constant 0), given the Caffe blob shapes they fill."""
    return {"kernel_initializer": from_filler(param.weight_filler, weight_shape),
            "bias_initializer": from_filler(param.bias_filler, bias_shape)}

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

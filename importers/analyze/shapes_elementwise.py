"""Shape rules of the layers whose output has their input's shape: activations, LRN,
BatchNorm, Scale, Bias, Eltwise, ..."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.analyze.shapes import _axis, _bottoms, _fmt, _rule, _same


@_rule("ReLU", "ELU", "Sigmoid", "TanH", "AbsVal", "BNLL", "Power", "Exp", "Log",
       "Threshold", "Dropout", "LRN", "MVN", "Softmax", "Clip", "Swish", "Split")
def _elementwise(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    if layer.type == "LRN" and len(bottoms[0]) != 4:
        raise LayerError(layer.name, f"(LRN) needs a 4-D input, got {_fmt(bottoms[0])}")
    return _same(layer, bottoms)


@_rule("ShuffleChannel")
def _shuffle_channel(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    return _same(layer, bottoms)


@_rule("PReLU", "Normalize")
def _per_channel(layer, bottoms, state):
    """One learned value per channel, or one for all (``channel_shared``)."""
    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    channels = shape[1] if len(shape) > 1 else 1
    p = layer.prelu_param if layer.type == "PReLU" else layer.norm_param
    return _same(layer, bottoms, [()] if p.channel_shared else [(channels,)])


@_rule("BatchNorm")
def _batch_norm(layer, bottoms, state):
    _bottoms(layer, bottoms, 1)
    shape = bottoms[0]
    channels = shape[1] if len(shape) > 1 else 1
    return _same(layer, bottoms, [(channels,), (channels,), (1,)])


def _scale_shape(layer, bottoms, p):
    shape = bottoms[0]
    if len(bottoms) == 2:
        factor = bottoms[1]
        axis = _axis(p.axis, len(shape)) if len(shape) else 0
        if tuple(shape[axis:axis + len(factor)]) != tuple(factor):
            raise LayerError(layer.name, f"({layer.type}) second bottom {_fmt(factor)} does not "
                                         f"match the input's axes from {axis}: {_fmt(shape)}")
        return tuple(factor)
    axis = _axis(p.axis, len(shape)) if len(shape) else 0
    num_axes = len(shape) - axis if p.num_axes == -1 else p.num_axes
    if num_axes < 0 or axis + num_axes > len(shape):
        raise LayerError(layer.name, f"({layer.type}) axis {p.axis} with num_axes {p.num_axes} "
                                     f"does not fit the input shape {_fmt(shape)}")
    return tuple(shape[axis:axis + num_axes])


@_rule("Scale")
def _scale(layer, bottoms, state):
    _bottoms(layer, bottoms, (1, 2))
    p = layer.scale_param
    blob = _scale_shape(layer, bottoms, p)
    weights = ([] if len(bottoms) == 2 else [blob]) + ([blob] if p.bias_term else [])
    return _same(layer, bottoms, weights)


@_rule("Bias")
def _bias(layer, bottoms, state):
    _bottoms(layer, bottoms, (1, 2))
    blob = _scale_shape(layer, bottoms, layer.bias_param)
    return _same(layer, bottoms, [] if len(bottoms) == 2 else [blob])


@_rule("Eltwise")
def _eltwise(layer, bottoms, state):
    if len(bottoms) < 2:
        raise LayerError(layer.name, f"(Eltwise) takes at least 2 bottoms, got {len(bottoms)}")
    if any(b != bottoms[0] for b in bottoms):
        raise LayerError(layer.name, "(Eltwise) bottoms differ in shape: "
                                     + ", ".join(_fmt(b) for b in bottoms))
    return [bottoms[0]] * len(layer.top), [], 0

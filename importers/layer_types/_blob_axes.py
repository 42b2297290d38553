"""Helpers shared by the units of elementwise layer types (neurons, PReLU,
Bias, Eltwise, Normalize, ...): fillers, and where Caffe's axes lie in a
blob's tensor (so channels-last blobs need no transposes)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import fmt
from keras_caffe.initializers import from_filler


def initializer(param, field, default, shape=(1,)):
    """The initializer for the Caffe ``FillerParameter`` ``param.<field>`` of
    a blob of ``shape``; ``default`` when the prototxt gives none."""
    if not param.HasField(field):
        return default
    return from_filler(getattr(param, field), shape)


def tensor_axes(ctx, blob, caffe_axes):
    """Tensor axes of ``caffe_axes`` if they keep Caffe's order there, else None."""
    if blob.layout == "flat" and any(a != 0 for a in caffe_axes):
        return None
    axes = [ctx.axis(blob, a) for a in caffe_axes]
    return axes if axes == sorted(axes) else None


def caffe_axes(ctx, blob):
    """For each tensor axis of ``blob``, the Caffe axis it holds."""
    rank = len(blob.tensor.shape)
    inverse = [0] * rank
    for caffe_axis in range(rank):
        inverse[ctx.axis(blob, caffe_axis)] = caffe_axis
    return inverse


def channel_axis(ctx, layer, bottom):
    """``(bottom, tensor axis of Caffe's channel axis 1)``; a flattened
    channels-last bottom is brought to Caffe's order first."""
    if bottom.layout == "flat":
        bottom = ctx.caffe_order(bottom, layer)
    return bottom, ctx.axis(bottom, 1)


def need_channels(layer, shape):
    """Refuse a bottom without Caffe's channel axis 1."""
    if len(shape) < 2:
        raise LayerError(layer.name, f"({layer.type}) needs a bottom with a channel axis, got "
                                     f"shape {fmt(shape)}")


"""BatchNorm and Scale (BVLC: batch_norm_layer.cpp, scale_layer.cpp).

The Caffe idiom BatchNorm -> per-channel Scale, where nothing but the Scale
reads the BatchNorm's output, becomes one ``BatchNormScale`` layer holding
both layers' blobs (the pairs are found by ``graph._batchnorm_scale_pairs``
into ``ctx.batchnorm_scale``).
"""

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    canonical_axis,
    fmt,
    layer_type,
    need_bottoms,
    same_shape,
)


@layer_type("BatchNorm")
class BatchNorm(LayerType):
    """BatchNorm (use_global_stats, moving_average_fraction, eps).

    Caffe's three blobs (mean and variance sums, their scale factor); fused
    with a per-channel Scale that alone reads its output."""

    examples = (
        Example("", [(2, 3, 4, 4)]),
        Example("batch_norm_param { use_global_stats: false moving_average_fraction: 0.9 "
                "eps: 0.001 }", [(4, 5)], phase="TRAIN"),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = bottoms[0]
        channels = shape[1] if len(shape) > 1 else 1
        return same_shape(layer, bottoms, [(channels,), (channels,), (1,)])

    def build(self, layer, bottoms, ctx):
        p = layer.batch_norm_param
        bottom = bottoms[0]
        if bottom.layout == "flat":
            bottom = ctx.caffe_order(bottom, layer)
        args = dict(
            eps=p.eps, moving_average_fraction=p.moving_average_fraction,
            use_global_stats=p.use_global_stats if p.HasField("use_global_stats") else None,
            axis=ctx.axis(bottom, 1), name=ctx.keras_name(layer.name), caffe_name=layer.name,
        )
        scale = ctx.batchnorm_scale.get(layer.name)
        if scale is not None and len(ctx.bottom_shapes[0]) >= 2:
            # The Caffe idiom BatchNorm -> Scale as one layer (see BatchNormScale).
            norm = layers.BatchNormScale(scale_name=scale.name,
                                         bias_term=scale.scale_param.bias_term, **args)
        else:
            ctx.batchnorm_scale.pop(layer.name, None)
            norm = layers.BatchNorm(**args)
        return [ctx.elementwise(norm, bottom)]


@layer_type("Scale")
class Scale(LayerType):
    """Scale (axis, num_axes, bias_term), learned or from a second bottom.

    The two-bottom form needs ``axis: 0``: every blob here carries the batch
    axis first, and Caffe lines the second bottom's axes up with the first's
    from ``axis`` on (the SE-block pattern, bottoms (N, C, H, W) and (N, C)).
    """

    examples = (
        Example("scale_param { bias_term: true }", [(2, 3, 4, 4)]),
        Example("scale_param { axis: 2 num_axes: -1 }", [(2, 3, 4, 5)]),
        Example("scale_param { axis: 0 }", [(2, 3, 4, 4), (2, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1, 2)
        axis, num_axes = _scale_axes(layer, bottoms)
        shape = bottoms[0]
        blob = tuple(shape[axis:axis + num_axes])
        learned = [] if len(bottoms) == 2 else [blob]
        return same_shape(layer, bottoms, learned + ([blob] if layer.scale_param.bias_term else []))

    def build(self, layer, bottoms, ctx):
        if any(scale is layer or scale.name == layer.name
               for scale in ctx.batchnorm_scale.values()):
            return [bottoms[0]]  # already applied by the BatchNorm before it (BatchNormScale)
        p = layer.scale_param
        axis, num_axes = _scale_axes(layer, ctx.bottom_shapes)
        x = bottoms[0]
        per_channel = axis == 1 and num_axes == 1 and len(bottoms) == 1
        if not (per_channel and x.layout == "nhwc"):
            x = ctx.caffe_order(x, layer)
        scale = layers.Scale(axis=ctx.axis(x, axis), num_axes=num_axes, bias_term=p.bias_term,
                             name=ctx.keras_name(layer.name), caffe_name=layer.name)
        if len(bottoms) == 2:
            factor = ctx.caffe_order(bottoms[1], layer)
            return [ctx.same_layout(ctx.apply(scale, [x.tensor, factor.tensor]), x)]
        return [ctx.elementwise(scale, x)]


def _scale_axes(layer, bottoms):
    """Caffe's ``ScaleLayer::LayerSetUp`` checks: (axis, num_axes) of the
    input the scale blob covers."""
    p = layer.scale_param
    shape = bottoms[0]
    axis = canonical_axis(p.axis, len(shape)) if shape else 0
    if len(bottoms) == 2:
        num_axes = _second_bottom_axes(layer, shape, axis, bottoms[1])
    else:
        num_axes = len(shape) - axis if p.num_axes == -1 else p.num_axes
    if num_axes < 0 or axis + num_axes > len(shape):
        # Unprefixed: tests/importers/layer_types/test_learned.py pins this wording.
        raise LayerError(layer.name, f"axis {p.axis} with num_axes {num_axes} does not fit "
                                     f"the input shape {fmt(shape)}")
    return axis, num_axes


def _second_bottom_axes(layer, shape, axis, factor):
    if axis != 0:
        # Unprefixed: tests/importers/layer_types/test_learned.py pins this wording.
        raise LayerError(layer.name, "two-bottom Scale needs axis: 0 (the scale blob "
                                     f"{fmt(factor)} starts with the batch axis)")
    if layer.scale_param.bias_term:
        raise LayerError(layer.name, "(Scale) two-bottom Scale with bias_term would learn a bias "
                                     "per sample of the batch; not supported")
    if tuple(factor) != tuple(shape[:len(factor)]):
        raise LayerError(layer.name, f"(Scale) scale blob shape {fmt(factor)} does not match the "
                                     f"input's leading axes {fmt(shape[:len(factor)])}")
    return len(factor)

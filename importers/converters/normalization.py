"""BatchNorm and Scale."""

from keras_caffe import layers
from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._legacy import converter


@converter("BatchNorm")
def batch_norm(layer, bottoms, ctx):
    """Caffe's BatchNorm (use_global_stats, moving_average_fraction, eps, scale factor).

    Followed by a per-channel Scale that alone reads its output, both become
    one ``BatchNormScale`` layer holding both layers' blobs.
    """
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
    if scale is not None and len(ctx.caffe_shape(bottom)) >= 2:
        # The Caffe idiom BatchNorm -> Scale as one layer (see BatchNormScale).
        norm = layers.BatchNormScale(scale_name=scale.name,
                                     bias_term=scale.scale_param.bias_term, **args)
    else:
        ctx.batchnorm_scale.pop(layer.name, None)
        norm = layers.BatchNorm(**args)
    return [ctx.elementwise(norm, bottom)]


@converter("Scale")
def scale(layer, bottoms, ctx):
    """Scale (axis, num_axes, bias_term), learned or from a second bottom.

    The two-bottom form needs ``axis: 0``: every blob here carries the batch
    axis first, and Caffe lines the second bottom's axes up with the first's
    from ``axis`` on (the SE-block pattern, bottoms (N, C, H, W) and (N, C)).
    """
    if any(scale is layer or scale.name == layer.name for scale in ctx.batchnorm_scale.values()):
        return [bottoms[0]]  # already applied by the BatchNorm before it (BatchNormScale)
    p = layer.scale_param
    x = bottoms[0]
    shape = ctx.caffe_shape(x)
    axis = p.axis + len(shape) if p.axis < 0 else p.axis
    if len(bottoms) == 2:
        factor_shape = ctx.caffe_shape(bottoms[1])
        if axis != 0:
            raise LayerError(layer.name, "two-bottom Scale needs axis: 0 (the scale blob "
                                         f"{factor_shape} starts with the batch axis)")
        num_axes = len(factor_shape)
        if p.bias_term:
            raise LayerError(layer.name, "two-bottom Scale with bias_term would learn a bias "
                                         "per sample of the batch; not supported")
        if tuple(factor_shape[1:]) != tuple(shape[1:num_axes]):
            raise LayerError(layer.name, f"scale blob shape {factor_shape} does not match the "
                                         f"input's leading axes {shape[:num_axes]}")
    else:
        num_axes = len(shape) - axis if p.num_axes == -1 else p.num_axes
    if num_axes < 0 or axis + num_axes > len(shape):
        raise LayerError(layer.name, f"axis {p.axis} with num_axes {num_axes} does not fit "
                                     f"the input shape {shape}")
    per_channel = axis == 1 and num_axes == 1 and len(bottoms) == 1
    if not (per_channel and x.layout == "nhwc"):
        x = ctx.caffe_order(x, layer)
    keras_axis = ctx.axis(x, axis) if axis < len(shape) else axis
    scale_layer = layers.Scale(axis=keras_axis, num_axes=num_axes, bias_term=p.bias_term,
                               name=ctx.keras_name(layer.name), caffe_name=layer.name)
    if len(bottoms) == 2:
        factor = ctx.caffe_order(bottoms[1], layer)
        return [ctx.same_layout(ctx.apply(scale_layer, [x.tensor, factor.tensor]), x)]
    return [ctx.elementwise(scale_layer, x)]

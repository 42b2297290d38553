"""Reducing layers: ArgMax, Reduction, MVN.

Results computed in Caffe's order that are 3-D or larger come back
channels-last under ``channels_last``, like every image blob.
"""


from keras_caffe.errors import LayerError
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.layer_types._legacy import converter
from keras_caffe.layers.reductions import MVN, ArgMax, Reduction
from keras_caffe.proto import caffe_pb2


def _canonical_axis(layer, axis, rank):
    """Caffe's CanonicalAxisIndex: -rank <= axis < rank."""
    if not -rank <= axis < rank:
        raise LayerError(layer.name, f"axis {axis} is out of range for a {rank}-D blob")
    return axis + rank if axis < 0 else axis


def _count(dims):
    total = 1
    for d in dims:
        if d is None:
            return None
        total *= d
    return total


@converter("ArgMax")
def argmax(layer, bottoms, ctx):
    """ArgMax (top_k, out_max_val, axis); without axis each sample is flattened in Caffe's order."""
    p = layer.argmax_param
    bottom = bottoms[0]
    shape = ctx.caffe_shape(bottom)
    if p.top_k < 1:
        raise LayerError(layer.name, "top_k must be at least 1")
    if p.HasField("axis"):
        axis = _canonical_axis(layer, p.axis, len(shape))
        if shape[axis] is not None and p.top_k > shape[axis]:
            raise LayerError(layer.name, f"top_k {p.top_k} exceeds axis {axis}'s size "
                                         f"{shape[axis]} (shape {shape})")
        if bottom.layout == "flat" and axis != 0:
            bottom = ctx.caffe_order(bottom, layer)
        op = ArgMax(p.top_k, out_max_val=p.out_max_val, axis=ctx.axis(bottom, axis),
                    name=ctx.keras_name(layer.name))
        return [ctx.elementwise(op, bottom)]  # the layout stays; one axis changes length
    count = _count(shape[1:])
    if count is not None and p.top_k > count:
        raise LayerError(layer.name, f"top_k {p.top_k} exceeds the {count} values per sample "
                                     f"(shape {shape})")
    bottom = ctx.caffe_order(bottom, layer)
    op = ArgMax(p.top_k, out_max_val=p.out_max_val, axis=None, name=ctx.keras_name(layer.name))
    return [Blob(op(bottom.tensor))]


@converter("Reduction")
def reduction(layer, bottoms, ctx):
    """Reduction (SUM, ASUM, SUMSQ, MEAN; coeff) of every axis from ``axis`` on.

    ``axis: 0`` (the default) reduces the whole blob, batch included, to a
    scalar. On a channels-last image the axes are reduced where they are.
    """
    p = layer.reduction_param
    bottom = bottoms[0]
    shape = ctx.caffe_shape(bottom)
    rank = len(shape)
    axis = _canonical_axis(layer, p.axis, rank)
    operation = caffe_pb2.ReductionParameter.ReductionOp.Name(p.operation)
    name = ctx.keras_name(layer.name)
    if axis <= 1:  # everything but (maybe) the batch: the element order does not matter
        return [Blob(Reduction(operation, axes=tuple(range(axis, rank)), coeff=p.coeff,
                               name=name)(bottom.tensor))]
    if bottom.layout == "nhwc":
        # Caffe's axes axis..rank-1 are spatial axes axis-1..rank-2 here; channels stay last.
        op = Reduction(operation, axes=tuple(range(axis - 1, rank - 1)), coeff=p.coeff, name=name)
        return [Blob(op(bottom.tensor), "nhwc" if axis >= 3 else "caffe")]
    bottom = ctx.caffe_order(bottom, layer)
    op = Reduction(operation, axes=tuple(range(axis, rank)), coeff=p.coeff, name=name)
    return [Blob(op(bottom.tensor))]


@converter("MVN")
def mvn(layer, bottoms, ctx):
    """MVN (normalize_variance, across_channels, eps): eps is added to the standard deviation.

    Statistics per sample and channel over the spatial axes, or per sample
    over everything with ``across_channels``. Caffe's MVN reads its blob
    through the legacy (num, channels, height, width) accessors, so at most
    4 axes.
    """
    p = layer.mvn_param
    bottom = bottoms[0]
    rank = len(bottom.tensor.shape)
    if len(ctx.caffe_shape(bottom)) > 4:
        raise LayerError(layer.name, f"needs at most 4 axes (Caffe's MVN reads num, channels, "
                                     f"height, width), got shape {ctx.caffe_shape(bottom)}")
    if p.across_channels:
        axes = tuple(range(1, rank))
    elif bottom.layout == "nhwc":
        axes = tuple(range(1, rank - 1))
    elif bottom.layout == "flat":
        axes = ()  # Caffe sees (N, C*H*W): one value per channel
    else:
        axes = tuple(range(2, rank))
    op = MVN(normalize_variance=p.normalize_variance, eps=p.eps, axes=axes,
             name=ctx.keras_name(layer.name))
    return [ctx.elementwise(op, bottom)]

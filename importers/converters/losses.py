"""Loss and metric layers (TRAIN phase): recorded for ``model.compile``.

They add nothing to the graph. Each records which blob it reads as the
prediction (that blob becomes a model output), which as the label (that
blob becomes a training target, not a model input), and the Keras loss or
metric with Caffe's semantics; ``keras_caffe.importers.training_args(model)``
turns the record into ``compile`` arguments.
"""

import keras

from keras_caffe import losses
from keras_caffe.errors import LayerError
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.layer_types._legacy import converter
from keras_caffe.proto import caffe_pb2

_NORM = caffe_pb2.LossParameter.NormalizationMode


def _normalization(layer, default):
    p = layer.loss_param
    if p.HasField("normalization"):
        return _NORM.Name(p.normalization)
    if p.HasField("normalize"):
        return "VALID" if p.normalize else "BATCH_SIZE"
    return default


def _ignore_label(layer):
    return layer.loss_param.ignore_label if layer.loss_param.HasField("ignore_label") else None


def _loss(layer, bottoms, ctx, loss):
    if len(bottoms) != 2:
        raise LayerError(layer.name, f"({layer.type}) takes a prediction and a label, got "
                                     f"{len(bottoms)} bottom(s)")
    weight = layer.loss_weight[0] if layer.loss_weight else 1.0
    ctx.training.add_loss(layer, prediction=layer.bottom[0], label=layer.bottom[1], loss=loss,
                          weight=weight)
    return [Blob(None, "loss")]


def _class_axis(layer, bottom, ctx, caffe_axis):
    if bottom.layout == "flat":
        raise LayerError(layer.name, "the class axis of a flattened blob is ambiguous")
    return ctx.axis(bottom, caffe_axis)


@converter("SoftmaxWithLoss")
def softmax_with_loss(layer, bottoms, ctx):
    """SoftmaxWithLoss: softmax axis, ignore_label, normalization (or legacy normalize)."""
    axis = _class_axis(layer, bottoms[0], ctx, layer.softmax_param.axis)
    return _loss(layer, bottoms, ctx, losses.SoftmaxWithLoss(
        axis=axis, ignore_label=_ignore_label(layer),
        normalization=_normalization(layer, "VALID"), name=layer.name.replace("/", "_")))


@converter("EuclideanLoss")
def euclidean_loss(layer, bottoms, ctx):
    """EuclideanLoss: sum of squared differences / 2N."""
    return _loss(layer, bottoms, ctx, losses.EuclideanLoss(name=layer.name.replace("/", "_")))


@converter("SigmoidCrossEntropyLoss")
def sigmoid_cross_entropy_loss(layer, bottoms, ctx):
    """SigmoidCrossEntropyLoss: ignore_label, normalization (default BATCH_SIZE)."""
    return _loss(layer, bottoms, ctx, losses.SigmoidCrossEntropyLoss(
        ignore_label=_ignore_label(layer), normalization=_normalization(layer, "BATCH_SIZE"),
        name=layer.name.replace("/", "_")))


@converter("HingeLoss")
def hinge_loss(layer, bottoms, ctx):
    """HingeLoss, norm L1 or L2."""
    norm = caffe_pb2.HingeLossParameter.Norm.Name(layer.hinge_loss_param.norm)
    return _loss(layer, bottoms, ctx, losses.HingeLoss(norm=norm, name=layer.name.replace("/", "_")))


@converter("ContrastiveLoss")
def contrastive_loss(layer, bottoms, ctx):
    """ContrastiveLoss (margin, legacy_version): bottoms a, b ((N, C) or
    (N, C, 1, 1)) and the similarity label. The two features are joined
    into one prediction blob, ``<layer>_pair`` (N, 2C): a then b, the loss's
    model output."""
    if len(bottoms) != 3:
        raise LayerError(layer.name, f"(ContrastiveLoss) takes two features and a similarity "
                                     f"label, got {len(bottoms)} bottom(s)")
    shapes = [ctx.caffe_shape(b) for b in bottoms[:2]]
    for shape in shapes:
        rest = [d for d in shape[2:] if d != 1]
        if len(shape) < 2 or rest:
            raise LayerError(layer.name, f"features must be (N, C) or (N, C, 1, 1), got {shape}")
    if shapes[0][1] != shapes[1][1]:
        raise LayerError(layer.name, f"the two features differ in size: {shapes[0]} and "
                                     f"{shapes[1]}")
    channels = shapes[0][1]
    rows = [keras.layers.Reshape((channels,), name=ctx.keras_name(layer.name, f"_feature{i}"))(
        ctx.caffe_order(b, layer).tensor) for i, b in enumerate(bottoms[:2])]
    pair = keras.layers.Concatenate(axis=1, name=ctx.keras_name(layer.name, "_pair"))(rows)
    name = f"{layer.name}_pair"
    ctx.add_blob(name, Blob(pair))
    p = layer.contrastive_loss_param
    weight = layer.loss_weight[0] if layer.loss_weight else 1.0
    ctx.training.add_loss(layer, prediction=name, label=layer.bottom[2], weight=weight,
                          loss=losses.ContrastiveLoss(margin=p.margin,
                                                      legacy_version=p.legacy_version,
                                                      name=layer.name.replace("/", "_")))
    return [Blob(None, "loss")]


contrastive_loss.label_bottoms = (2,)


@converter("Accuracy")
def accuracy(layer, bottoms, ctx):
    """Accuracy: top_k, axis, ignore_label; a Keras metric on the prediction."""
    p = layer.accuracy_param
    if len(bottoms) != 2:
        raise LayerError(layer.name, "Accuracy takes a prediction and a label")
    if p.top_k < 1:
        raise LayerError(layer.name, f"top_k must be >= 1, got {p.top_k}")
    axis = _class_axis(layer, bottoms[0], ctx, p.axis)
    ignore = p.ignore_label if p.HasField("ignore_label") else None
    metric = losses.Accuracy(top_k=p.top_k, axis=axis, ignore_label=ignore,
                             name=layer.name.replace("/", "_"))
    ctx.training.add_metric(layer, prediction=layer.bottom[0], label=layer.bottom[1], metric=metric)
    return [Blob(None, "loss")] * len(layer.top)


for _fn in (softmax_with_loss, euclidean_loss, sigmoid_cross_entropy_loss, hinge_loss, accuracy):
    _fn.label_bottoms = (1,)

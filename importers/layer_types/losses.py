"""Loss and metric layers (BVLC: loss_layer.cpp, softmax_loss_layer.cpp,
euclidean_loss_layer.cpp, sigmoid_cross_entropy_loss_layer.cpp,
hinge_loss_layer.cpp, contrastive_loss_layer.cpp, accuracy_layer.cpp),
recorded for ``model.compile``.

They add nothing to the graph: their top is Caffe's scalar loss or accuracy
(shape ()), a ``Blob`` without a tensor. Each records which blob it reads as
the prediction (that blob becomes a model output), which as the label (that
blob becomes a training target, not a model input), and the Keras loss or
metric with Caffe's semantics (``keras_caffe.losses``);
``keras_caffe.importers.training_args(model)`` turns the record into
``compile`` arguments.
"""

import keras

from keras_caffe import losses
from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    canonical_axis,
    fmt,
    layer_type,
)
from keras_caffe.proto import caffe_pb2

_NORM = caffe_pb2.LossParameter.NormalizationMode


def normalization(layer, default):
    """``loss_param``'s normalization (or the legacy ``normalize``), else ``default``."""
    p = layer.loss_param
    if p.HasField("normalization"):
        return _NORM.Name(p.normalization)
    if p.HasField("normalize"):
        return "VALID" if p.normalize else "BATCH_SIZE"
    return default


def ignore_label(layer):
    return layer.loss_param.ignore_label if layer.loss_param.HasField("ignore_label") else None


def keras_loss_name(layer):
    return layer.name.replace("/", "_")


def loss_weight(layer):
    return layer.loss_weight[0] if layer.loss_weight else 1.0


def need_prediction_and_label(layer, bottoms):
    if len(bottoms) != 2:
        raise LayerError(layer.name, f"({layer.type}) takes a prediction and a label, got "
                                     f"{len(bottoms)} bottom(s)")


def class_axis(layer, bottom, ctx, caffe_axis):
    """The tensor axis of the class axis ``caffe_axis`` of ``bottom``."""
    if bottom.layout == "flat":
        raise LayerError(layer.name, f"({layer.type}) the class axis of a flattened blob is "
                                     "ambiguous")
    return ctx.axis(bottom, caffe_axis)


class Loss(LayerType):
    """A loss on a prediction (bottom 0) and a label (bottom 1)."""

    label_bottoms = (1,)

    def shapes(self, layer, bottoms, state):
        need_prediction_and_label(layer, bottoms)
        return Shapes([()])

    def build(self, layer, bottoms, ctx):
        ctx.training.add_loss(layer, prediction=layer.bottom[0], label=layer.bottom[1],
                              loss=self.loss(layer, bottoms, ctx), weight=loss_weight(layer))
        return [Blob(None, "loss")]

    def loss(self, layer, bottoms, ctx):
        """The Keras loss."""
        raise NotImplementedError


@layer_type("SoftmaxWithLoss")
class SoftmaxWithLoss(Loss):
    """SoftmaxWithLoss: softmax axis, ignore_label, normalization (or legacy
    normalize). A second top (the probabilities) is sized by ``analyze``
    but not built."""

    examples = (
        Example("", [(2, 5), (2,)], integer_bottoms=(1,), integer_high=5),
        Example("softmax_param { axis: 1 } loss_param { ignore_label: 2 normalization: FULL }",
                [(2, 4, 3, 3), (2, 1, 3, 3)], integer_bottoms=(1,)),
        Example("loss_param { normalize: false }", [(3, 4), (3,)], integer_bottoms=(1,)),
    )

    def shapes(self, layer, bottoms, state):
        need_prediction_and_label(layer, bottoms)
        canonical_axis(layer.softmax_param.axis, len(bottoms[0]))
        if len(layer.top) > 1:
            return Shapes([(), tuple(bottoms[0])])  # the probabilities (analyze only)
        return Shapes([()])

    def loss(self, layer, bottoms, ctx):
        axis = class_axis(layer, bottoms[0], ctx, layer.softmax_param.axis)
        return losses.SoftmaxWithLoss(axis=axis, ignore_label=ignore_label(layer),
                                      normalization=normalization(layer, "VALID"),
                                      name=keras_loss_name(layer))


@layer_type("EuclideanLoss")
class EuclideanLoss(Loss):
    """EuclideanLoss: the sum of squared differences / 2N."""

    examples = (Example("", [(2, 3), (2, 3)]), Example("loss_weight: 0.5", [(3, 2), (3, 2)]))

    def loss(self, layer, bottoms, ctx):
        return losses.EuclideanLoss(name=keras_loss_name(layer))


@layer_type("MultinomialLogisticLoss")
class MultinomialLogisticLoss(Loss):
    """MultinomialLogisticLoss on probabilities (N, C) (or (N, C, 1, 1)):
    ``-log(max(p[label], 1e-20))`` averaged over the batch
    (multinomial_logistic_loss_layer.cpp)."""

    examples = (
        Example("", [(3, 4), (3,)], integer_bottoms=(1,)),
        Example("", [(2, 3, 1, 1), (2, 1, 1, 1)], integer_bottoms=(1,), integer_high=3),
    )

    def shapes(self, layer, bottoms, state):
        need_prediction_and_label(layer, bottoms)
        prediction, label = tuple(bottoms[0]), tuple(bottoms[1])
        if len(prediction) < 2 or any(d != 1 for d in prediction[2:]):
            raise LayerError(layer.name, f"(MultinomialLogisticLoss) the prediction must be "
                                         f"(N, C) or (N, C, 1, 1), got {fmt(prediction)}")
        if not label or label[0] != prediction[0] or any(d != 1 for d in label[1:]):
            raise LayerError(layer.name, f"(MultinomialLogisticLoss) the label must be (N,) or "
                                         f"(N, 1, 1, 1) with the prediction's N, got "
                                         f"{fmt(label)}")
        return Shapes([()])

    def loss(self, layer, bottoms, ctx):
        return losses.MultinomialLogisticLoss(name=keras_loss_name(layer))


@layer_type("SigmoidCrossEntropyLoss")
class SigmoidCrossEntropyLoss(Loss):
    """SigmoidCrossEntropyLoss: ignore_label, normalization (default BATCH_SIZE)."""

    examples = (
        Example("", [(2, 4), (2, 4)], integer_bottoms=(1,), integer_high=2),
        Example("loss_param { ignore_label: -1 normalization: VALID }", [(2, 3), (2, 3)],
                integer_bottoms=(1,), integer_high=2),
    )

    def loss(self, layer, bottoms, ctx):
        return losses.SigmoidCrossEntropyLoss(
            ignore_label=ignore_label(layer), normalization=normalization(layer, "BATCH_SIZE"),
            name=keras_loss_name(layer))


@layer_type("HingeLoss")
class HingeLoss(Loss):
    """HingeLoss, norm L1 or L2."""

    examples = (
        Example("", [(3, 4), (3,)], integer_bottoms=(1,)),
        Example("hinge_loss_param { norm: L2 }", [(3, 4), (3,)], integer_bottoms=(1,)),
    )

    def loss(self, layer, bottoms, ctx):
        norm = caffe_pb2.HingeLossParameter.Norm.Name(layer.hinge_loss_param.norm)
        return losses.HingeLoss(norm=norm, name=keras_loss_name(layer))


@layer_type("ContrastiveLoss")
class ContrastiveLoss(LayerType):
    """ContrastiveLoss (margin, legacy_version): bottoms a, b ((N, C) or
    (N, C, 1, 1)) and the similarity label. The two features are joined into
    one prediction blob, ``<layer>_pair`` (N, 2C): a then b, the loss's model
    output."""

    label_bottoms = (2,)
    examples = (
        Example("", [(3, 4), (3, 4), (3,)], integer_bottoms=(2,), integer_high=2),
        Example("contrastive_loss_param { margin: 2 legacy_version: true }",
                [(3, 2, 1, 1), (3, 2, 1, 1), (3, 1, 1, 1)], integer_bottoms=(2,), integer_high=2),
    )

    def shapes(self, layer, bottoms, state):
        if len(bottoms) != 3:
            raise LayerError(layer.name, f"(ContrastiveLoss) takes two features and a "
                                         f"similarity label, got {len(bottoms)} bottom(s)")
        features = [tuple(b) for b in bottoms[:2]]
        for shape in features:
            if len(shape) < 2 or any(d != 1 for d in shape[2:]):
                raise LayerError(layer.name, f"(ContrastiveLoss) features must be (N, C) or "
                                             f"(N, C, 1, 1), got {fmt(shape)}")
        if features[0][1] != features[1][1]:
            raise LayerError(layer.name, f"(ContrastiveLoss) the two features differ in size: "
                                         f"{fmt(features[0])} and {fmt(features[1])}")
        return Shapes([()])

    def build(self, layer, bottoms, ctx):
        channels = ctx.bottom_shapes[0][1]
        rows = [keras.layers.Reshape((channels,), name=ctx.keras_name(layer.name, f"_feature{i}"))(
            ctx.caffe_order(b, layer).tensor) for i, b in enumerate(bottoms[:2])]
        pair = keras.layers.Concatenate(axis=1, name=ctx.keras_name(layer.name, "_pair"))(rows)
        name = f"{layer.name}_pair"
        ctx.add_blob(name, Blob(pair))
        p = layer.contrastive_loss_param
        loss = losses.ContrastiveLoss(margin=p.margin, legacy_version=p.legacy_version,
                                      name=keras_loss_name(layer))
        ctx.training.add_loss(layer, prediction=name, label=layer.bottom[2], loss=loss,
                              weight=loss_weight(layer))
        return [Blob(None, "loss")]


@layer_type("Accuracy")
class Accuracy(LayerType):
    """Accuracy: top_k, axis, ignore_label; a Keras metric on the prediction.
    A second top (the per-class accuracies, shape (C,)) is sized by
    ``analyze`` and holds no tensor."""

    label_bottoms = (1,)
    examples = (
        Example("", [(3, 4), (3,)], integer_bottoms=(1,)),
        Example("accuracy_param { top_k: 2 ignore_label: 1 }", [(2, 4, 3, 3), (2, 1, 3, 3)],
                integer_bottoms=(1,)),
    )

    def shapes(self, layer, bottoms, state):
        p = layer.accuracy_param
        need_prediction_and_label(layer, bottoms)
        if p.top_k < 1:
            raise LayerError(layer.name, f"(Accuracy) top_k must be >= 1, got {p.top_k}")
        shape = tuple(bottoms[0])
        axis = canonical_axis(p.axis, len(shape))
        if len(layer.top) > 1:
            return Shapes([(), (shape[axis],)])
        return Shapes([()])

    def build(self, layer, bottoms, ctx):
        p = layer.accuracy_param
        axis = class_axis(layer, bottoms[0], ctx, p.axis)
        ignore = p.ignore_label if p.HasField("ignore_label") else None
        metric = losses.Accuracy(top_k=p.top_k, axis=axis, ignore_label=ignore,
                                 name=keras_loss_name(layer))
        ctx.training.add_metric(layer, prediction=layer.bottom[0], label=layer.bottom[1],
                                metric=metric)
        return [Blob(None, "loss")] * len(layer.top)

"""Caffe's loss layers as Keras losses, and its Accuracy layer as a metric.

Each returns Caffe's scalar loss for the batch: summed over the elements it
covers, divided by Caffe's normalizer (``FULL``: all positions, ``VALID``:
positions whose label is not ``ignore_label``, ``BATCH_SIZE``: N, ``NONE``:
1; never below 1). ``axis`` is the class axis of the Keras tensor (-1 for
channels-last image predictions, 1 for (N, C) ones).
"""

import keras
from keras import ops

from keras_caffe._serializable import register  # noqa: E402

NORMALIZATIONS = ("FULL", "VALID", "BATCH_SIZE", "NONE")


def _check_normalization(normalization):
    if normalization not in NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")
    return normalization


def _normalizer(normalization, count_all, count_valid, batch):
    value = {"FULL": count_all, "VALID": count_valid, "BATCH_SIZE": batch,
             "NONE": ops.ones_like(batch)}[normalization]
    return ops.maximum(value, 1.0)


def _replicas_in_sync():
    """The replicas of the ``tf.distribute`` strategy this runs in, inside one
    of its replicas; 1 elsewhere, and on the other Keras backends (their
    data parallelism reduces gradients after the loss)."""
    if keras.backend.backend() != "tensorflow":
        return 1
    import tensorflow as tf  # here, not at the top: TensorFlow optional (tf.distribute)

    if tf.distribute.in_cross_replica_context():
        return 1
    return tf.distribute.get_strategy().num_replicas_in_sync


class _CaffeLoss(keras.losses.Loss):
    def __init__(self, name=None, **kwargs):
        kwargs.pop("reduction", None)
        super().__init__(name=name, reduction="sum", **kwargs)

    def __call__(self, y_true, y_pred, sample_weight=None):
        """Caffe's loss; inside a replica of a ``tf.distribute`` strategy with
        ``R`` replicas, divided by ``R`` as Keras's mean losses are, so the sum
        of the replicas' gradients is the global batch's (Keras reports the
        loss multiplied back by ``R``)."""
        value = super().__call__(y_true, y_pred, sample_weight)
        replicas = _replicas_in_sync()
        if replicas > 1:
            value = value * ops.cast(1.0 / replicas, value.dtype)
        return value


@register
class SoftmaxWithLoss(_CaffeLoss):
    """Caffe's SoftmaxWithLoss: ``-log(max(softmax(x)[label], FLT_MIN))``.

    Labels hold class indices with the class axis removed (N,) or (N, H, W);
    ``ignore_label`` positions add nothing and (with VALID) do not count.
    """

    def __init__(self, axis=-1, ignore_label=None, normalization="VALID", name="softmax_with_loss",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.axis = int(axis)
        self.ignore_label = None if ignore_label is None else int(ignore_label)
        self.normalization = _check_normalization(normalization)

    def call(self, y_true, y_pred):
        logits = ops.moveaxis(y_pred, self.axis, -1)
        labels = ops.cast(ops.reshape(y_true, ops.shape(logits)[:-1]), "int32")
        log_prob = ops.log(ops.maximum(ops.softmax(logits, axis=-1), 1.1754943508222875e-38))
        valid = (ops.ones_like(labels, dtype="bool") if self.ignore_label is None
                 else ops.not_equal(labels, self.ignore_label))
        safe = ops.where(valid, labels, 0)
        picked = ops.take_along_axis(log_prob, ops.expand_dims(safe, -1), axis=-1)[..., 0]
        loss = -ops.sum(ops.where(valid, picked, 0.0))
        count_all = ops.cast(ops.size(labels), loss.dtype)
        count_valid = ops.sum(ops.cast(valid, loss.dtype))
        batch = ops.cast(ops.shape(labels)[0], loss.dtype)
        return loss / _normalizer(self.normalization, count_all, count_valid, batch)

    def get_config(self):
        return {"name": self.name, "axis": self.axis, "ignore_label": self.ignore_label,
                "normalization": self.normalization}


@register
class EuclideanLoss(_CaffeLoss):
    """Caffe's EuclideanLoss: ``sum((prediction - target)^2) / (2 N)``."""

    def __init__(self, name="euclidean_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        diff = y_pred - ops.reshape(ops.cast(y_true, y_pred.dtype), ops.shape(y_pred))
        return ops.sum(ops.square(diff)) / (2.0 * ops.cast(ops.shape(y_pred)[0], y_pred.dtype))

    def get_config(self):
        return {"name": self.name}


@register
class SigmoidCrossEntropyLoss(_CaffeLoss):
    """Caffe's SigmoidCrossEntropyLoss on logits, in its stable form.

    Per element ``-(x * (t - [x >= 0]) - log(1 + exp(x - 2 x [x >= 0])))``;
    targets equal to ``ignore_label`` are skipped. Caffe's default
    normalization here is BATCH_SIZE.
    """

    def __init__(self, ignore_label=None, normalization="BATCH_SIZE",
                 name="sigmoid_cross_entropy_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_label = None if ignore_label is None else int(ignore_label)
        self.normalization = _check_normalization(normalization)

    def call(self, y_true, y_pred):
        x = y_pred
        t = ops.reshape(ops.cast(y_true, x.dtype), ops.shape(x))
        positive = ops.cast(x >= 0, x.dtype)
        per_element = -(x * (t - positive) - ops.log(1.0 + ops.exp(x - 2.0 * x * positive)))
        valid = (ops.ones_like(x, dtype="bool") if self.ignore_label is None
                 else ops.not_equal(ops.cast(t, "int32"), self.ignore_label))
        loss = ops.sum(ops.where(valid, per_element, 0.0))
        count_all = ops.cast(ops.size(x), x.dtype)
        count_valid = ops.sum(ops.cast(valid, x.dtype))
        batch = ops.cast(ops.shape(x)[0], x.dtype)
        return loss / _normalizer(self.normalization, count_all, count_valid, batch)

    def get_config(self):
        return {"name": self.name, "ignore_label": self.ignore_label,
                "normalization": self.normalization}


@register
class HingeLoss(_CaffeLoss):
    """Caffe's HingeLoss (one-vs-all): ``sum_k max(0, 1 - s_k x_k)`` / N, ``s_k = +1``
    for the label's class and -1 otherwise; ``norm="L2"`` squares each term."""

    def __init__(self, norm="L1", name="hinge_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        if norm not in ("L1", "L2"):
            raise ValueError(f"norm must be 'L1' or 'L2', got {norm!r}")
        self.norm = norm

    def call(self, y_true, y_pred):
        x = ops.reshape(y_pred, (ops.shape(y_pred)[0], -1))
        labels = ops.cast(ops.reshape(y_true, (-1,)), "int32")
        sign = 2.0 * ops.one_hot(labels, ops.shape(x)[1], dtype=x.dtype) - 1.0
        margin = ops.maximum(0.0, 1.0 - sign * x)
        total = ops.sum(ops.square(margin)) if self.norm == "L2" else ops.sum(margin)
        return total / ops.cast(ops.shape(x)[0], x.dtype)

    def get_config(self):
        return {"name": self.name, "norm": self.norm}


@register
class ContrastiveLoss(_CaffeLoss):
    """Caffe's ContrastiveLoss (caffe/src/caffe/layers/contrastive_loss_layer.cpp).

    ``y_pred`` joins the two feature blobs, (N, 2C): a then b; ``y_true`` is the
    similarity label (non-zero: similar). With ``d`` the Euclidean distance
    of a pair, the loss is ``sum(similar ? d^2 : max(margin - d, 0)^2) / 2N``
    (``legacy_version``: ``max(margin - d^2, 0)`` for dissimilar pairs).
    The gradient is Caffe's, whose dissimilar-pair term divides by
    ``d + 1e-4`` rather than ``d``: finite at ``d = 0``.
    """

    def __init__(self, margin=1.0, legacy_version=False, name="contrastive_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.margin = float(margin)
        self.legacy_version = bool(legacy_version)

    def call(self, y_true, y_pred):
        channels = y_pred.shape[-1] // 2
        diff = y_pred[:, :channels] - y_pred[:, channels:]
        dist_sq = ops.sum(ops.square(diff), axis=-1)
        similar = ops.not_equal(ops.cast(ops.reshape(y_true, ops.shape(dist_sq)), "int32"), 0)
        if self.legacy_version:
            apart = ops.maximum(self.margin - dist_sq, 0.0)
        else:
            # value max(margin - d, 0)^2; its gradient in dist_sq is Caffe's
            # -(margin - d) / (d + 1e-4) where margin > d, else 0.
            dist = ops.sqrt(ops.stop_gradient(dist_sq))
            gap = ops.maximum(self.margin - dist, 0.0)
            slope = -gap / (dist + 1e-4)
            apart = ops.square(gap) + slope * (dist_sq - ops.stop_gradient(dist_sq))
        per_pair = ops.where(similar, dist_sq, apart)
        batch = ops.cast(ops.shape(dist_sq)[0], dist_sq.dtype)
        return ops.sum(per_pair) / (2.0 * batch)

    def get_config(self):
        return {"name": self.name, "margin": self.margin, "legacy_version": self.legacy_version}


@register
class Accuracy(keras.metrics.Metric):
    """Caffe's Accuracy: a position counts as right when fewer than ``top_k``
    classes score strictly higher than the label's (ties count as right);
    ``ignore_label`` positions are not counted. Accumulates over batches."""

    def __init__(self, top_k=1, axis=-1, ignore_label=None, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.top_k = int(top_k)
        self.axis = int(axis)
        self.ignore_label = None if ignore_label is None else int(ignore_label)
        self.correct = self.add_variable(shape=(), initializer="zeros", name="correct")
        self.count = self.add_variable(shape=(), initializer="zeros", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        scores = ops.moveaxis(y_pred, self.axis, -1)
        labels = ops.cast(ops.reshape(y_true, ops.shape(scores)[:-1]), "int32")
        valid = (ops.ones_like(labels, dtype="bool") if self.ignore_label is None
                 else ops.not_equal(labels, self.ignore_label))
        safe = ops.where(valid, labels, 0)
        own = ops.take_along_axis(scores, ops.expand_dims(safe, -1), axis=-1)
        better = ops.sum(ops.cast(scores > own, "int32"), axis=-1)
        right = ops.logical_and(valid, better < self.top_k)
        self.correct.assign_add(ops.sum(ops.cast(right, "float32")))
        self.count.assign_add(ops.sum(ops.cast(valid, "float32")))

    def result(self):
        return self.correct / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.correct.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {"name": self.name, "top_k": self.top_k, "axis": self.axis,
                "ignore_label": self.ignore_label}


@register
class MultinomialLogisticLoss(_CaffeLoss):
    """Caffe's MultinomialLogisticLoss on probabilities (multinomial_logistic_
    loss_layer.cpp): ``-sum_i log(max(p[i, label_i], 1e-20)) / N``; the
    prediction is (N, C) (any trailing axes of size 1 are dropped)."""

    def __init__(self, name="multinomial_logistic_loss", **kwargs):
        super().__init__(name=name, **kwargs)

    def call(self, y_true, y_pred):
        batch = ops.shape(y_pred)[0]
        prob = ops.reshape(y_pred, (batch, -1))
        labels = ops.cast(ops.reshape(y_true, (batch, 1)), "int32")
        picked = ops.take_along_axis(prob, labels, axis=1)[:, 0]
        loss = -ops.sum(ops.log(ops.maximum(picked, 1e-20)))
        return loss / ops.cast(batch, loss.dtype)

    def get_config(self):
        return {"name": self.name}

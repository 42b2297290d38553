"""Caffe's AdaDelta solver."""

from __future__ import annotations

from collections.abc import Mapping

from keras import ops
from keras.optimizers.schedules import LearningRateSchedule

from keras_caffe.optimizers.base import CaffeOptimizer, shared_arguments
from keras_caffe._serializable import register


@register
class AdaDelta(CaffeOptimizer):
    """Caffe's ``AdaDelta`` solver (Zeiler 2012), with Caffe's learning rate.

    With ``r = lr * lr_mult`` (Zeiler's method is ``lr = 1``)::

        h  <- momentum * h + (1 - momentum) * g^2
        u  <- g * sqrt((h2 + delta) / (h + delta))
        h2 <- momentum * h2 + (1 - momentum) * u^2
        w  <- w - r * u

    The defaults are Zeiler's (``momentum`` 0.95, ``delta`` 1e-6); a solver
    file's values (Caffe's proto default ``delta`` is 1e-8) are taken as
    written. Reference: ``AdaDeltaSolver::ComputeUpdateValue``,
    caffe/src/caffe/solvers/adadelta_solver.cpp.
    """

    caffe_type = "AdaDelta"
    solver_fields = ("momentum", "delta")
    slot_names = ("history", "update_history")

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 1.0,
        momentum: float = 0.95,
        delta: float = 1e-6,
        *,
        weight_decay: float = 0.0,
        regularization_type: str = "L2",
        clip_gradients: float | None = None,
        iter_size: int = 1,
        lr_mult: Mapping[str, float] | None = None,
        decay_mult: Mapping[str, float] | None = None,
        float32_fields: bool = False,
        **kwargs,
    ):
        super().__init__(learning_rate, **shared_arguments(locals()), **kwargs)
        self.momentum = self.caffe_float("momentum", momentum, high=1.0)
        self.delta = self.caffe_float("delta", delta)

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        h2 = self.slot(self.update_history, variable)
        rate = self.local_rate(learning_rate, variable)
        m = self.momentum
        h_new = ops.add(ops.multiply(1.0 - m, ops.square(gradient)), ops.multiply(m, h))
        self.assign(h, h_new)
        ratio = ops.divide(ops.add(h2, self.delta), ops.add(h_new, self.delta))
        u = ops.multiply(gradient, ops.sqrt(ratio))
        self.assign(h2, ops.add(ops.multiply(1.0 - m, ops.square(u)), ops.multiply(m, h2)))
        self.assign_sub(variable, ops.multiply(rate, u))

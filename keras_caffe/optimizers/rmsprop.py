"""Caffe's RMSProp solver."""

from __future__ import annotations

from collections.abc import Mapping

from keras import ops
from keras.optimizers.schedules import LearningRateSchedule

from keras_caffe.optimizers.base import CaffeOptimizer, shared_arguments
from keras_caffe._serializable import register


@register
class RMSProp(CaffeOptimizer):
    """Caffe's ``RMSProp`` solver (Tieleman & Hinton 2012).

    With ``r = lr * lr_mult``::

        h <- rms_decay * h + (1 - rms_decay) * g^2
        w <- w - r * g / (sqrt(h) + delta)

    Caffe refuses momentum with RMSProp; so does this class (it takes none).
    Reference: ``RMSPropSolver::ComputeUpdateValue``,
    caffe/src/caffe/solvers/rmsprop_solver.cpp.
    """

    caffe_type = "RMSProp"
    solver_fields = ("rms_decay", "delta")
    slot_names = ("history",)

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 0.01,
        rms_decay: float = 0.99,
        delta: float = 1e-8,
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
        self.rms_decay = self.caffe_float("rms_decay", rms_decay, high=1.0)
        self.delta = self.caffe_float("delta", delta)

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        rate = self.local_rate(learning_rate, variable)
        h_new = ops.add(
            ops.multiply(1.0 - self.rms_decay, ops.square(gradient)),
            ops.multiply(self.rms_decay, h),
        )
        self.assign(h, h_new)
        step = ops.divide(gradient, ops.add(ops.sqrt(h_new), self.delta))
        self.assign_sub(variable, ops.multiply(rate, step))

"""Caffe's AdaGrad solver."""

from __future__ import annotations

from collections.abc import Mapping

from keras import ops
from keras.optimizers.schedules import LearningRateSchedule

from keras_caffe.optimizers.base import CaffeOptimizer, shared_arguments
from keras_caffe._serializable import register


@register
class AdaGrad(CaffeOptimizer):
    """Caffe's ``AdaGrad`` solver (Duchi et al. 2011).

    With ``r = lr * lr_mult``::

        h <- h + g^2
        w <- w - r * g / (sqrt(h) + delta)

    Caffe refuses momentum with AdaGrad; so does this class (it takes none).
    Reference: ``AdaGradSolver::ComputeUpdateValue``,
    caffe/src/caffe/solvers/adagrad_solver.cpp.
    """

    caffe_type = "AdaGrad"
    solver_fields = ("delta",)
    slot_names = ("history",)

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 0.01,
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
        self.delta = self.caffe_float("delta", delta)

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        rate = self.local_rate(learning_rate, variable)
        h_new = ops.add(ops.square(gradient), h)
        self.assign(h, h_new)
        step = ops.divide(gradient, ops.add(ops.sqrt(h_new), self.delta))
        self.assign_sub(variable, ops.multiply(rate, step))

"""Caffe's SGD solver."""

from __future__ import annotations

from collections.abc import Mapping

from keras import ops
from keras.optimizers.schedules import LearningRateSchedule

from keras_caffe.optimizers.base import CaffeOptimizer, shared_arguments
from keras_caffe._serializable import register


@register
class SGD(CaffeOptimizer):
    """Caffe's ``SGD`` solver: momentum SGD whose history holds the step.

    With ``g`` the gradient after Caffe's clipping, normalization and
    regularization and ``r = lr * lr_mult``::

        h <- momentum * h + r * g
        w <- w - h

    Unlike ``keras.optimizers.SGD`` the rate is inside the history, so a
    change of rate takes effect gradually, as in Caffe.
    Reference: ``SGDSolver::ComputeUpdateValue``, caffe/src/caffe/solvers/sgd_solver.cpp.

    Args:
        learning_rate: float or ``LearningRateSchedule`` (Caffe's ``base_lr``
            and ``lr_policy``: ``keras_caffe.schedules``).
        momentum: in [0, 1].
        weight_decay, regularization_type, clip_gradients, iter_size,
        lr_mult, decay_mult, float32_fields: Caffe's, shared by every
            solver: see ``CaffeOptimizer``.
        **kwargs: Keras's ``name``, ``use_ema``, ... (see ``CaffeOptimizer``).
    """

    caffe_type = "SGD"
    solver_fields = ("momentum",)
    slot_names = ("history",)

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 0.01,
        momentum: float = 0.0,
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

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        rate = self.local_rate(learning_rate, variable)
        h_new = ops.add(ops.multiply(rate, gradient), ops.multiply(self.momentum, h))
        self.assign(h, h_new)
        self.assign_sub(variable, h_new)

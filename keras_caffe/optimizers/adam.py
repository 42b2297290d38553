"""Caffe's Adam solver."""

from __future__ import annotations

from collections.abc import Mapping

from keras import ops
from keras.optimizers.schedules import LearningRateSchedule

from keras_caffe.optimizers.base import CaffeOptimizer, shared_arguments
from keras_caffe._floats import widest_float
from keras_caffe._serializable import register


@register
class Adam(CaffeOptimizer):
    """Caffe's ``Adam`` solver (Kingma & Ba 2015), bias correction in the rate.

    ``momentum`` is beta1, ``momentum2`` beta2, ``delta`` epsilon. With
    ``r = lr * lr_mult`` and ``t = iter + 1``::

        m <- momentum * m + (1 - momentum) * g
        v <- momentum2 * v + (1 - momentum2) * g^2
        w <- w - r * sqrt(1 - momentum2^t) / (1 - momentum^t) * m / (sqrt(v) + delta)

    Weight decay is Caffe's, added to ``g`` (this is not AdamW).
    Reference: ``AdamSolver::ComputeUpdateValue``,
    caffe/src/caffe/solvers/adam_solver.cpp.
    """

    caffe_type = "Adam"
    solver_fields = ("momentum", "momentum2", "delta")
    slot_names = ("m", "v")

    def __init__(
        self,
        learning_rate: float | LearningRateSchedule = 0.001,
        momentum: float = 0.9,
        momentum2: float = 0.999,
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
        self.momentum = self.caffe_float("momentum", momentum, high=1.0, high_open=True)
        self.momentum2 = self.caffe_float("momentum2", momentum2, high=1.0, high_open=True)
        self.delta = self.caffe_float("delta", delta)

    def update_step(self, gradient, variable, learning_rate):
        m = self.slot(self.m, variable)
        v = self.slot(self.v, variable)
        rate = self.local_rate(learning_rate, variable)
        correction = ops.cast(_bias_correction(self.momentum, self.momentum2,
                                               self.iterations + 1), variable.dtype)
        m_new = ops.add(ops.multiply(1.0 - self.momentum, gradient), ops.multiply(self.momentum, m))
        v_new = ops.add(
            ops.multiply(1.0 - self.momentum2, ops.square(gradient)),
            ops.multiply(self.momentum2, v),
        )
        self.assign(m, m_new)
        self.assign(v, v_new)
        step = ops.divide(m_new, ops.add(ops.sqrt(v_new), self.delta))
        self.assign_sub(variable, ops.multiply(ops.multiply(rate, correction), step))


def _bias_correction(beta1, beta2, t):
    """Caffe's ``sqrt(1 - beta2^t) / (1 - beta1^t)`` at iteration ``t`` (from 1).

    In double, as Caffe computes it (``pow(float, int)`` is double in C++):
    ``1 - beta^t`` cancels most digits. Where the backend has no float64
    (JAX without x64), in float32 as ``-expm1(t * log1p(beta - 1))``, which
    keeps them: ``beta - 1`` is exact in float32 (Sterbenz), and expm1 and
    log1p lose no digits near 0.
    """
    if widest_float() == "float64":
        t = ops.cast(t, "float64")
        return (ops.sqrt(1.0 - ops.power(ops.cast(beta2, "float64"), t))
                / (1.0 - ops.power(ops.cast(beta1, "float64"), t)))
    t = ops.cast(t, "float32")

    def one_minus_power(beta):
        return -ops.expm1(t * ops.log1p(ops.cast(beta, "float32") - 1.0))

    return ops.sqrt(one_minus_power(beta2)) / one_minus_power(beta1)

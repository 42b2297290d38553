"""Caffe's RMSProp solver."""

import keras
from keras import ops

from keras_caffe._checks import check_number
from keras_caffe.optimizers.base import CaffeOptimizer
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

    def __init__(self, learning_rate=0.01, rms_decay=0.99, delta=1e-8, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        owner = type(self).__name__
        self.rms_decay = check_number(owner, "rms_decay", rms_decay, high=1.0)
        self.delta = check_number(owner, "delta", delta)

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

"""Caffe's AdaGrad solver."""

import keras
from keras import ops

from keras_caffe._checks import check_number
from keras_caffe.optimizers.base import CaffeOptimizer
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

    def __init__(self, learning_rate=0.01, delta=1e-8, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.delta = check_number(type(self).__name__, "delta", delta)

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        rate = self.local_rate(learning_rate, variable)
        h_new = ops.add(ops.square(gradient), h)
        self.assign(h, h_new)
        step = ops.divide(gradient, ops.add(ops.sqrt(h_new), self.delta))
        self.assign_sub(variable, ops.multiply(rate, step))

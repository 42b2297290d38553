"""Caffe's Nesterov solver."""

import keras
from keras import ops

from keras_caffe.optimizers.sgd import SGD
from keras_caffe._serializable import register


@register
class Nesterov(SGD):
    """Caffe's ``Nesterov`` solver (Sutskever et al. 2013, in Caffe's form).

    With ``r = lr * lr_mult``::

        h_new <- momentum * h + r * g
        w     <- w - ((1 + momentum) * h_new - momentum * h)

    Reference: ``NesterovSolver::ComputeUpdateValue``,
    caffe/src/caffe/solvers/nesterov_solver.cpp.
    """

    caffe_type = "Nesterov"

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        rate = self.local_rate(learning_rate, variable)
        h_new = ops.add(ops.multiply(rate, gradient), ops.multiply(self.momentum, h))
        # Both terms read h before it is assigned.
        step = ops.subtract(
            ops.multiply(1.0 + self.momentum, h_new), ops.multiply(self.momentum, h)
        )
        self.assign(h, h_new)
        self.assign_sub(variable, step)

"""Caffe's SGD solver."""

import keras
from keras import ops

from keras_caffe._checks import check_number
from keras_caffe.optimizers.base import CaffeOptimizer
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
        learning_rate: float or ``LearningRateSchedule``.
        momentum: in [0, 1].
        **kwargs: the shared Caffe arguments of ``CaffeOptimizer``.
    """

    caffe_type = "SGD"
    solver_fields = ("momentum",)
    slot_names = ("history",)

    def __init__(self, learning_rate=0.01, momentum=0.0, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.momentum = check_number(type(self).__name__, "momentum", momentum, high=1.0)

    def update_step(self, gradient, variable, learning_rate):
        h = self.slot(self.history, variable)
        rate = self.local_rate(learning_rate, variable)
        h_new = ops.add(ops.multiply(rate, gradient), ops.multiply(self.momentum, h))
        self.assign(h, h_new)
        self.assign_sub(variable, h_new)

"""The large-batch learning rate: scaled by the number of workers, warmed up.

``P`` workers of batch ``B`` train with batch ``P B``. Goyal et al.,
"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (2017), scale
the rate linearly with the batch and reach the scaled rate gradually, over
the first iterations (their Section 2.2, "gradual warmup"):

    lr(t) = base(t) * (1 + (P - 1) * min(1, t / warmup_steps))

``base`` is a float or any ``LearningRateSchedule`` (Caffe's lr policies in
``keras_caffe.schedules``), so ``step``/``poly``/... decay still applies.
FireCaffe scales the rate with the batch the same way. ``t`` is the
optimizer's iteration, so a resumed run continues the same curve.
"""

import keras
from keras import ops

from keras_caffe.distributed.context import size
from keras_caffe.errors import ArgumentError


@keras.saving.register_keras_serializable(package="keras_caffe")
class ScaledLearningRate(keras.optimizers.schedules.LearningRateSchedule):
    """``base`` times the number of workers, ramped up linearly over ``warmup_steps``.

    Args:
        base: the single-worker rate: a float or a ``LearningRateSchedule``.
        workers: the scale ``P``; default: Horovod's ``size()`` at construction.
        warmup_steps: iterations to go from ``base`` to ``P * base`` (0: at once).
    """

    def __init__(self, base, workers=None, warmup_steps=0):
        owner = "ScaledLearningRate"
        if isinstance(base, dict):
            base = keras.saving.deserialize_keras_object(base)
        if not isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            if isinstance(base, bool) or not isinstance(base, (int, float)) or base < 0:
                raise ArgumentError(owner, "base", "must be a non-negative float or a "
                                    f"LearningRateSchedule, got {base!r}")
            base = float(base)
        if workers is None:
            workers = size()
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
            raise ArgumentError(owner, "workers", f"must be a positive integer, got {workers!r}")
        if isinstance(warmup_steps, bool) or not isinstance(warmup_steps, int) or warmup_steps < 0:
            raise ArgumentError(owner, "warmup_steps", "must be a non-negative integer, got "
                                f"{warmup_steps!r}")
        self.base = base
        self.workers = workers
        self.warmup_steps = warmup_steps

    def _base(self, step):
        if isinstance(self.base, keras.optimizers.schedules.LearningRateSchedule):
            return ops.cast(self.base(step), "float32")
        return ops.convert_to_tensor(self.base, "float32")

    def __call__(self, step):
        base = self._base(step)  # the base schedule sees the step as given (Caffe: float64)
        if self.warmup_steps:
            ramp = ops.minimum(1.0, ops.cast(step, "float32") / float(self.warmup_steps))
        else:
            ramp = ops.convert_to_tensor(1.0, "float32")
        return base * (1.0 + (self.workers - 1) * ramp)

    def rate_at(self, iteration):
        """The rate at ``iteration`` as a Python float (for logs)."""
        return float(self(iteration))

    def get_config(self):
        base = self.base
        if isinstance(base, keras.optimizers.schedules.LearningRateSchedule):
            base = keras.saving.serialize_keras_object(base)
        return {"base": base, "workers": self.workers, "warmup_steps": self.warmup_steps}

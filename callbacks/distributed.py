"""Callbacks for data-parallel ``model.fit`` under Horovod.

- ``BroadcastGlobalState``: rank 0's weights, optimizer state and
  random-generator states to every worker when training starts (so also
  after ``restore_snapshot`` on rank 0), after checking every worker built
  the same model; and ``fit``'s train step without XLA (Horovod's
  all-reduce has no XLA kernel).
- ``MetricAverage``: each epoch's logged metrics averaged over the workers,
  so every worker (and rank 0's History, CSVLogger, checkpoints) sees the
  metrics of the whole global batch.

``CaffeSnapshot`` and ``CaffeLogger`` write on rank 0 only by themselves.
"""

import warnings

import keras
import numpy as np

from keras_caffe.distributed._hvd import loaded
from keras_caffe.distributed.optimizer import DistributedOptimizer
from keras_caffe.distributed.state import broadcast_state
from keras_caffe.errors import DistributedError


class BroadcastGlobalState(keras.callbacks.Callback):
    """Make every worker start from rank ``root_rank``'s state.

    Put it first in ``callbacks``. On ``set_model`` (before ``fit`` builds
    its train function) it turns ``model.jit_compile`` off when more than
    one worker runs, with a warning: Keras compiles the step with XLA by
    default on GPUs, and Horovod's collectives cannot run inside XLA.
    """

    def __init__(self, root_rank=0):
        super().__init__()
        self.root_rank = root_rank

    def set_model(self, model):
        super().set_model(model)
        outer = getattr(model, "optimizer", None)
        if isinstance(outer, keras.optimizers.LossScaleOptimizer) and isinstance(
                outer.inner_optimizer, DistributedOptimizer):
            raise DistributedError(
                "the model's optimizer is LossScaleOptimizer(DistributedOptimizer(...)) (Keras "
                "wraps it under mixed_float16): its overflow check would run on each worker's "
                "own gradients, and workers that disagree wait for each other forever; compile "
                "with optimizer=DistributedOptimizer(keras.optimizers.LossScaleOptimizer(opt)) "
                "and auto_scale_loss=False")
        hvd = loaded()
        if hvd is not None and hvd.size() > 1 and getattr(model, "jit_compile", False):
            warnings.warn(
                "keras_caffe.distributed: model.jit_compile turned off for the train step: "
                "Horovod's all-reduce has no XLA kernel (compile with jit_compile=False to "
                "silence this)", stacklevel=2)
            model.jit_compile = False
            model.train_function = None

    def on_train_begin(self, logs=None):
        broadcast_state(self.model, root_rank=self.root_rank)


class MetricAverage(keras.callbacks.Callback):
    """Average the epoch's numeric logs over the workers (one all-reduce)."""

    def on_epoch_end(self, epoch, logs=None):
        hvd = loaded()
        if logs is None or hvd is None or hvd.size() == 1:
            return
        keys = sorted(k for k, v in logs.items() if np.ndim(v) == 0 and
                      isinstance(np.asarray(v).item(), (int, float)))
        if not keys:
            return
        values = np.array([float(logs[k]) for k in keys], np.float64)
        mean = hvd.allreduce(values, op=hvd.Average, name="keras_caffe_metric_average").numpy()
        for key, value in zip(keys, mean):
            logs[key] = float(value)

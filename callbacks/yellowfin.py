"""YellowFin's tuned values in the training logs."""

import keras
from keras import ops

from keras_caffe.errors import KerasCaffeError
from keras_caffe.optimizers.yellowfin import YellowFin

#: Log key -> YellowFin property.
KEYS = {
    "yf_lr": "tuned_learning_rate",
    "yf_mu": "tuned_momentum",
    "yf_h_min": "h_min",
    "yf_h_max": "h_max",
    "yf_grad_var": "grad_var",
    "yf_dist_to_opt": "dist_to_opt",
    "yf_target_mu": "target_momentum",
    "yf_total_mu": "total_momentum",
}
#: The closed loop's keys, left out of the logs when it is off.
CLOSED_LOOP_KEYS = ("yf_target_mu", "yf_total_mu")


class YellowFinMonitor(keras.callbacks.Callback):
    """Adds YellowFin's state to the logs at each batch end and epoch end.

    ``yf_lr`` and ``yf_mu`` are the rate (before ``lr_factor``) and momentum
    of the last update; ``yf_h_min``, ``yf_h_max``, ``yf_grad_var`` (C) and
    ``yf_dist_to_opt`` (D) its statistics; ``yf_target_mu`` is SingleStep's
    momentum and ``yf_total_mu`` the measured total momentum of closed-loop
    YellowFin; these two are left out when the closed loop is off. The
    optimizer's ``learning_rate`` is the tuned rate (``yf_lr``), which is
    what TensorBoard logs as ``learning_rate``. Callbacks listed after this one
    see them: put it before ``CSVLogger`` and ``TensorBoard``; ``History``
    (added last by ``fit``) always records them. The model's optimizer must be
    a ``YellowFin``, possibly inside a ``LossScaleOptimizer``.

    Each batch end reads the values from the device (one transfer).
    """

    def on_train_begin(self, logs=None):
        self._optimizer()

    def on_train_batch_end(self, batch, logs=None):
        if logs is not None:
            logs.update(self.values())

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(self.values())

    def values(self):
        """``{log key: float}`` read from the optimizer now."""
        optimizer = self._optimizer()
        keys = [k for k in KEYS if optimizer.closed_loop or k not in CLOSED_LOOP_KEYS]
        stacked = ops.stack([ops.cast(getattr(optimizer, KEYS[k]), "float32") for k in keys])
        return dict(zip(keys, (float(v) for v in ops.convert_to_numpy(stacked))))

    def _optimizer(self):
        optimizer = getattr(self.model, "optimizer", None)
        inner = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
        if not isinstance(inner, YellowFin):
            raise KerasCaffeError(
                f"YellowFinMonitor: the model's optimizer is {type(optimizer).__name__}, "
                "not keras_caffe.YellowFin")
        return inner

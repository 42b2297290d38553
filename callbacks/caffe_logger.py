"""``CaffeLogger``: Caffe's training log lines from ``model.fit``."""

import time

import keras
import numpy as np

from keras_caffe._checks import check_int
from keras_caffe.caffe_log import CaffeLog, SmoothedLoss
from keras_caffe.callbacks.chief import is_chief


class BatchLosses:
    """Each batch's own loss from the running epoch mean ``fit`` logs.

    After batch ``n`` (0-based) ``fit`` logs ``m_n``, the mean loss of the
    epoch's batches 0..n; the batches since the previous call (several with
    ``steps_per_execution``) averaged ``((n + 1) m_n - (k + 1) m_k) / (n - k)``.
    Exact to float32 rounding of the mean. Call ``reset()`` at each epoch.
    """

    def __init__(self):
        self.reset()

    def reset(self):
        self._seen, self._mean = 0, 0.0

    def update(self, batch, mean):
        """The mean loss of the batches up to ``batch`` not yet reported."""
        seen, mean = batch + 1, float(mean)
        loss = (seen * mean - self._seen * self._mean) / max(seen - self._seen, 1)
        self._seen, self._mean = seen, mean
        return loss


class CaffeLogger(keras.callbacks.Callback):
    """Writes ``caffe train``'s log lines while ``model.fit`` runs, so Caffe's
    log parsers (``parse_log.py``, ``plot_training_log.py``) read Keras runs.

    Every ``display`` Caffe iterations (optimizer updates, so ``iter_size``
    micro-batches make one): ``Iteration N (x iter/s, ys/display iters), loss
    = L`` with ``L`` smoothed over ``average_loss`` iterations as Caffe does,
    ``Train net output #k: name = value`` for the loss and each metric, and
    ``Iteration N, lr = r``. After each validation: ``Iteration N, Testing net
    (#0)`` and ``Test net output #k`` for each ``val_`` value. At the end:
    ``Optimization Done.``

    The per-iteration loss is recovered from Keras's running epoch mean
    (``BatchLosses``), exact to float32 rounding of the mean;
    metrics other than the loss are Keras's running epoch means.
    ``keras_caffe.Solver`` (``keras-caffe train``) logs exact per-iteration
    values itself.

    Args:
        display: log every this many iterations (Caffe's ``display``), >= 1.
        average_loss: smooth the printed loss over this many iterations, >= 1.
        stream: where to write (default: stderr, as glog does). Under
            Horovod and JAX's multi-process runtime only rank 0 writes.
    """

    def __init__(self, display=1, average_loss=1, stream=None):
        super().__init__()
        self.display = check_int("CaffeLogger", "display", display, low=1)
        self.average_loss = check_int("CaffeLogger", "average_loss", average_loss, low=1)
        self.log = CaffeLog(stream)

    def on_train_begin(self, logs=None):
        self.log.enabled = is_chief()  # rank 0 logs under Horovod and JAX multi-process
        self._losses, self._batch_losses = [], BatchLosses()
        self._last_iteration = self._iteration()
        self._smoothed = SmoothedLoss(self.average_loss, self._last_iteration)
        self._timer, self._timer_iteration = time.perf_counter(), self._last_iteration
        self.log.line("solver.cpp:289", f"Solving {self.model.name}")

    def on_epoch_begin(self, epoch, logs=None):
        self._batch_losses.reset()

    def on_train_batch_end(self, batch, logs=None):
        logs = logs or {}
        if "loss" in logs:
            self._losses.append(self._batch_losses.update(batch, logs["loss"]))
        iteration = self._iteration()
        if iteration == self._last_iteration:
            return  # inside an iter_size accumulation
        done = iteration - 1  # Caffe numbers the iteration before its update
        loss = float(np.mean(self._losses)) if self._losses else float("nan")
        self._losses = []
        self._smoothed.update(loss, done)
        self._last_iteration = iteration
        if done % self.display == 0:
            now = time.perf_counter()
            lapse = now - self._timer
            self.log.iteration(done, (done - self._timer_iteration) / (lapse or 1.0), lapse,
                               self.display, self._smoothed.value)
            outputs = [("loss", loss, 1.0)] + [(k, float(v), 0.0) for k, v in logs.items()
                                               if k != "loss" and np.ndim(v) == 0]
            self.log.outputs("Train", outputs)
            self.log.rate(done, self._rate(done))
            self._timer, self._timer_iteration = now, done

    def on_epoch_end(self, epoch, logs=None):
        tests = [(k[4:], float(v), 1.0 if k == "val_loss" else 0.0)
                 for k, v in (logs or {}).items() if k.startswith("val_") and np.ndim(v) == 0]
        if tests:
            self.log.testing(self._iteration(), 0)
            self.log.outputs("Test", tests)

    def on_train_end(self, logs=None):
        self.log.finished(self._iteration())

    def _iteration(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def _rate(self, iteration):
        optimizer = self.model.optimizer
        if hasattr(optimizer, "rate_at"):
            return optimizer.rate_at(iteration)
        return float(keras.ops.convert_to_numpy(optimizer.learning_rate))

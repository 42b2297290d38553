"""YellowFin in Keras's logs: the optimizer's ``learning_rate`` is the tuned
rate, so TensorBoard's ``learning_rate`` is ``yf_lr`` (not the constant
first-update rate), and ``YellowFinMonitor`` leaves the closed loop's
``yf_target_mu`` / ``yf_total_mu`` out when the closed loop is off."""

import keras
import numpy as np
import pytest

from keras_caffe import YellowFin
from keras_caffe.callbacks import YellowFinMonitor
from support import tiny_mlp

OPEN_KEYS = {"yf_lr", "yf_mu", "yf_h_min", "yf_h_max", "yf_grad_var", "yf_dist_to_opt"}


class BatchLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(dict(logs))


def fit(optimizer, callbacks, epochs=3, steps=4):
    keras.utils.set_random_seed(3)
    model = tiny_mlp()
    model.compile(optimizer=optimizer, jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16 * steps, 20)).astype("float32")
    y = rng.integers(0, 5, size=16 * steps)
    history = model.fit(x, y, batch_size=16, epochs=epochs, verbose=0, shuffle=False,
                        callbacks=callbacks)
    return model, history


class RateAtEpochEnd(keras.callbacks.Callback):
    """What TensorBoard logs as ``learning_rate`` at each epoch's end (Keras
    3's ``TensorBoard._collect_learning_rate`` reads ``optimizer.learning_rate``;
    TensorBoard itself is not installed in the test environments)."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_epoch_end(self, epoch, logs=None):
        self.rates.append(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)))


def test_the_logged_learning_rate_is_the_tuned_rate():
    optimizer = YellowFin(1e-4, curv_win_width=3)
    assert float(optimizer.learning_rate) == pytest.approx(1e-4)  # before the first update
    rates = RateAtEpochEnd()
    _, history = fit(optimizer, [YellowFinMonitor(), rates])
    tuned = history.history["yf_lr"]
    assert rates.rates == pytest.approx(tuned, rel=1e-6)
    assert len(set(tuned)) == 3 and tuned[-1] != pytest.approx(1e-4)  # it moved
    assert float(optimizer.learning_rate) == pytest.approx(float(optimizer.tuned_learning_rate))
    assert optimizer.get_config()["learning_rate"] == pytest.approx(1e-4)  # the argument


def test_open_loop_logs_no_closed_loop_values():
    recorder = BatchLogs()
    _, history = fit(YellowFin(0.01, curv_win_width=3), [YellowFinMonitor(), recorder],
                     epochs=1)
    assert all(OPEN_KEYS <= set(b) and not {"yf_target_mu", "yf_total_mu"} & set(b)
               for b in recorder.batches)
    assert not {"yf_target_mu", "yf_total_mu"} & set(history.history)


def test_closed_loop_logs_its_values():
    recorder = BatchLogs()
    fit(YellowFin(0.01, curv_win_width=3, closed_loop=True), [YellowFinMonitor(), recorder],
        epochs=1)
    assert all(OPEN_KEYS | {"yf_target_mu", "yf_total_mu"} <= set(b) for b in recorder.batches)
    assert np.isfinite(recorder.batches[-1]["yf_target_mu"])


def test_setting_learning_rate_sets_the_first_update_rate():
    optimizer = YellowFin(0.01)
    optimizer.learning_rate = 0.02
    assert optimizer.get_config()["learning_rate"] == pytest.approx(0.02)
    assert float(optimizer.learning_rate) == pytest.approx(0.02)

"""CaffeLogger: Caffe's log lines from model.fit, readable by Caffe's parsers."""

import io

import keras
import numpy as np
import pytest

import keras_caffe
from support.caffe_log_parser import PREFIX, parse, rates
from keras_caffe.callbacks import CaffeLogger
from keras_caffe.errors import ArgumentError


def data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("int32")
    return x, y


def model(optimizer):
    keras.utils.set_random_seed(3)
    m = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8, activation="relu"),
                          keras.layers.Dense(2)])
    m.compile(optimizer=optimizer, metrics=["accuracy"],
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return m


def batch_losses(optimizer_factory, x, y, batch, steps):
    """Each batch's own loss, from train_on_batch on an identical model."""
    m = model(optimizer_factory())
    return [float(m.train_on_batch(x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch])[0])
            for i in range(steps)]


def test_per_iteration_losses_rates_and_tests():
    x, y = data()
    factory = lambda: keras_caffe.SGD(  # noqa: E731
        keras_caffe.schedules.Step(0.1, gamma=0.5, stepsize=3), momentum=0.9)
    stream = io.StringIO()
    m = model(factory())
    m.fit(x, y, batch_size=8, epochs=2, shuffle=False, validation_data=(x[:16], y[:16]),
          callbacks=[CaffeLogger(display=1, stream=stream)], verbose=0)
    log = stream.getvalue()
    assert all(PREFIX.match(line) for line in log.splitlines())
    train, test, smoothed = parse(log)
    assert [r["NumIters"] for r in train] == list(range(16))
    reference = batch_losses(factory, np.concatenate([x, x]), np.concatenate([y, y]), 8, 16)
    np.testing.assert_allclose([smoothed[i] for i in range(16)], reference, rtol=2e-5)
    np.testing.assert_allclose([r["loss"] for r in train], reference, rtol=2e-5)
    assert rates(log) == {i: 0.1 * 0.5 ** (i // 3) for i in range(16)}
    assert [t["NumIters"] for t in test] == [8, 16]
    assert all(set(t) == {"NumIters", "Seconds", "LearningRate", "loss", "accuracy"} for t in test)
    assert log.rstrip().endswith("Optimization Done.")


def test_display_average_loss_and_iter_size():
    x, y = data()
    factory = lambda: keras_caffe.SGD(0.05, momentum=0.9, iter_size=2)  # noqa: E731
    stream = io.StringIO()
    m = model(factory())
    m.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0,
          callbacks=[CaffeLogger(display=2, average_loss=2, stream=stream)])
    _, _, smoothed = parse(stream.getvalue())
    # 8 batches = 4 Caffe iterations; iterations 0 and 2 displayed.
    assert sorted(smoothed) == [0, 2]
    per_batch = batch_losses(factory, x, y, 8, 8)
    per_iteration = [np.mean(per_batch[2 * i:2 * i + 2]) for i in range(4)]
    np.testing.assert_allclose(smoothed[0], per_iteration[0], rtol=2e-5)
    # Caffe's window of 2 at iteration 2: iterations 1 and 2.
    np.testing.assert_allclose(smoothed[2], np.mean(per_iteration[1:3]), rtol=2e-5)


@pytest.mark.parametrize("kwargs, argument", [({"display": 0}, "display"),
                                              ({"average_loss": 0}, "average_loss")])
def test_bad_arguments(kwargs, argument):
    with pytest.raises(ArgumentError, match=argument):
        CaffeLogger(**kwargs)

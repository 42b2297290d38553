"""YellowFin's repr: the rate and momentum are tuned, so before the optimizer
is built it says so (with the values the first update uses), and once built
it shows the values the optimizer holds, read from its variables."""

import keras
import numpy as np

from keras_caffe._floats import shortest
from keras_caffe.optimizers.yellowfin import YellowFin


def _variables():
    return [keras.Variable(np.ones((3, 2), "float32"), name="w"),
            keras.Variable(np.zeros((2,), "float32"), name="b")]


def _gradients(step, variables):
    rng = np.random.default_rng(step)
    return [(rng.normal(1.0, 0.5, v.shape).astype("float32"), v) for v in variables]


def test_repr_before_build_says_tuned_from_the_first_values():
    """Nothing is tuned yet: the repr names the first update's rate and momentum."""
    assert repr(YellowFin()) == (
        "YellowFin(learning_rate=<tuned from 0.0001>, momentum=<tuned from 0.0>, "
        "weight_decay=0.0)")
    assert repr(YellowFin(learning_rate=0.01, momentum=0.5, lr_factor=0.5,
                          closed_loop=True)) == (
        "YellowFin(learning_rate=<tuned from 0.01>, lr_factor=0.5, momentum=<tuned from 0.5>, "
        "weight_decay=0.0, closed_loop=True)")


def test_repr_after_build_shows_the_values_held():
    """Built, before any step: the values the first update will use, marked tuned."""
    optimizer = YellowFin(learning_rate=0.01, momentum=0.5, beta=0.99)
    optimizer.build(_variables())
    assert repr(optimizer) == (
        "YellowFin(learning_rate=0.01 (tuned), momentum=0.5 (tuned), beta=0.99, "
        "weight_decay=0.0)")


def test_repr_after_steps_shows_the_tuned_values():
    """After updates: the tuned rate and momentum, as the optimizer's variables
    hold them (shortest float32 decimals), not the constructor's arguments."""
    variables = _variables()
    optimizer = YellowFin(learning_rate=0.01, momentum=0.0, beta=0.9, curv_win_width=3)
    for step in range(8):
        optimizer.apply_gradients(_gradients(step, variables))
    rate = shortest(float(optimizer._yf_lr.numpy()))
    momentum = shortest(float(optimizer._yf_mu.numpy()))
    assert 0.0 < momentum < 1.0 and rate not in (0.0, 0.01)  # tuned, not the arguments
    assert rate == shortest(float(optimizer.tuned_learning_rate))
    assert momentum == shortest(float(optimizer.tuned_momentum))
    assert repr(optimizer) == (
        f"YellowFin(learning_rate={rate!r} (tuned), momentum={momentum!r} (tuned), "
        "beta=0.9, curv_win_width=3, weight_decay=0.0)")

"""Caffe's lr policies: formulas, golden lr logs, serialization, bad input."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from keras_caffe import schedules
from keras_caffe._floats import widest_float
from keras_caffe.errors import ArgumentError, ProtoParseError, SolverError

ITERS = np.arange(0, 2000, 7)


def lr_at(schedule, iterations):
    return np.array([float(schedule(i)) for i in iterations])


# Caffe's GetLearningRate, written out in numpy (float64) per policy.
REFERENCE = {
    schedules.Fixed(0.1): lambda it: np.full_like(it, 0.1, dtype=float),
    schedules.Step(0.1, gamma=0.5, stepsize=300): lambda it: 0.1 * 0.5 ** np.floor(it / 300),
    schedules.Exp(0.1, gamma=0.999): lambda it: 0.1 * 0.999**it,
    schedules.Inv(0.01, gamma=1e-4, power=0.75): lambda it: 0.01 * (1 + 1e-4 * it) ** -0.75,
    schedules.MultiStep(0.1, gamma=0.1, stepvalue=[500, 1000, 1500]):
        lambda it: 0.1 * 0.1 ** np.searchsorted([500, 1000, 1500], it, side="right"),
    schedules.Poly(0.1, power=2.0, max_iter=2000): lambda it: 0.1 * (1 - it / 2000) ** 2,
    schedules.Sigmoid(0.1, gamma=0.01, stepsize=1000):
        lambda it: 0.1 / (1 + np.exp(-0.01 * (it - 1000))),
}


@pytest.mark.parametrize("schedule", list(REFERENCE), ids=lambda s: type(s).__name__)
def test_formula(schedule):
    """float64 references; inv, poly and sigmoid run in float32 as in Caffe.
    On JAX without x64 the double policies run in float32 too, through
    ``caffe_pow`` (log in double, exact partial products): a few ulps."""
    expected = REFERENCE[schedule](ITERS.astype(float))
    double = widest_float() == "float64"
    rtol = (2e-7 if double else 5e-7) if schedule.compute_dtype == "float64" else 2e-5
    np.testing.assert_allclose(lr_at(schedule, ITERS), expected, rtol=rtol, atol=1e-12)


def test_every_policy_has_a_reference():
    assert {type(s).policy for s in REFERENCE} == set(schedules.POLICIES)


@pytest.mark.parametrize("policy", ["step", "multistep", "exp", "inv", "poly", "sigmoid"])
def test_golden_lr_log(golden, policy):
    """The lr at every iteration equals Caffe's printed lr to 6 digits."""
    folder = golden / "solvers" / f"sgd_lr_{policy}"
    schedule = schedules.from_solver(folder / "solver.prototxt")
    assert type(schedule).policy == policy
    printed = np.load(folder / "trajectory.npz")["lr_log"]
    ours = [float(f"{lr:.6g}") for lr in lr_at(schedule, range(len(printed)))]
    np.testing.assert_array_equal(ours, printed)


def test_multistep_steps_at_the_stepvalues():
    s = schedules.MultiStep(1.0, gamma=0.5, stepvalue=[8, 20])
    assert lr_at(s, [0, 7, 8, 19, 20, 1000]).tolist() == [1, 1, 0.5, 0.5, 0.25, 0.25]


def test_poly_is_zero_past_max_iter():
    s = schedules.Poly(0.1, power=0.5, max_iter=100)
    values = lr_at(s, [99, 100, 101, 10_000])
    assert values[0] > 0 and values[1:].tolist() == [0, 0, 0]


def test_warmup_ramps_linearly_then_follows():
    base = schedules.Step(0.8, gamma=0.1, stepsize=1000)
    w = schedules.Warmup(base, warmup_iter=100, start_factor=0.25)
    np.testing.assert_allclose(
        lr_at(w, [0, 50, 100, 500, 1000]), [0.2, 0.5, 0.8, 0.8, 0.08], rtol=1e-6
    )
    assert float(schedules.Warmup(0.5, warmup_iter=10, start_factor=1.0)(3)) == 0.5


ALL = list(REFERENCE) + [schedules.Warmup(schedules.Exp(0.1, gamma=0.99), warmup_iter=50)]


@pytest.mark.parametrize("schedule", ALL, ids=lambda s: type(s).__name__)
def test_serialization_round_trip(schedule):
    config = keras.saving.serialize_keras_object(schedule)
    assert config["registered_name"].startswith("keras_caffe>")
    restored = keras.saving.deserialize_keras_object(config)
    assert type(restored) is type(schedule)
    assert restored.get_config() == schedule.get_config()
    np.testing.assert_array_equal(lr_at(restored, ITERS), lr_at(schedule, ITERS))


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: schedules.Fixed(-0.1), "base_lr"),
        (lambda: schedules.Fixed(float("nan")), "base_lr"),
        (lambda: schedules.Step(0.1, gamma=-0.5, stepsize=10), "gamma"),
        (lambda: schedules.Step(0.1, gamma=0.5, stepsize=0), "stepsize"),
        (lambda: schedules.Exp(0.1, gamma=float("inf")), "gamma"),
        (lambda: schedules.Inv(0.1, gamma=0.1, power=-1), "power"),
        (lambda: schedules.MultiStep(0.1, gamma=0.1, stepvalue=[]), "stepvalue"),
        (lambda: schedules.MultiStep(0.1, gamma=0.1, stepvalue=[20, 8]), "stepvalue"),
        (lambda: schedules.MultiStep(0.1, gamma=0.1, stepvalue=[5, 5]), "stepvalue"),
        (lambda: schedules.Poly(0.1, power=1.0, max_iter=0), "max_iter"),
        (lambda: schedules.Sigmoid(0.1, gamma=-0.2, stepsize=15), "gamma"),
        (lambda: schedules.Warmup(schedules.Fixed(0.1), warmup_iter=0), "warmup_iter"),
        (lambda: schedules.Warmup(schedules.Fixed(0.1), 10, start_factor=1.5), "start_factor"),
        (lambda: schedules.Warmup("fast", 10), "schedule"),
    ],
)
def test_bad_arguments_name_the_argument(make, argument):
    with pytest.raises(ArgumentError) as info:
        make()
    assert info.value.argument == argument
    assert f"`{argument}`" in str(info.value)


SOLVER = "base_lr: 0.1\nmax_iter: 100\n"


@pytest.mark.parametrize(
    "text, message",
    [
        ("base_lr: 0.1", "`lr_policy` is not set; valid policies: fixed, step, exp, inv, "
                         "multistep, poly, sigmoid"),
        ('base_lr: 0.1 lr_policy: "cosine"', "unknown lr_policy 'cosine'; valid policies: "
                                             "fixed, step, exp, inv, multistep, poly, sigmoid"),
        ('lr_policy: "fixed"', "`base_lr` is not set"),
        (SOLVER + 'lr_policy: "step" gamma: 0.1', "lr_policy 'step' needs `stepsize`; it is not set"),
        (SOLVER + 'lr_policy: "step"', "lr_policy 'step' needs `gamma`, `stepsize`; they are not set"),
        (SOLVER + 'lr_policy: "multistep" gamma: 0.1', "needs `stepvalue`"),
        ('base_lr: 0.1 lr_policy: "poly" power: 1', "lr_policy 'poly' needs `max_iter`"),
        (SOLVER + 'lr_policy: "poly"', "lr_policy 'poly' needs `power`; it is not set"),
        (SOLVER + 'lr_policy: "inv" gamma: 0.1', "lr_policy 'inv' needs `power`"),
        (SOLVER + 'lr_policy: "exp"', "lr_policy 'exp' needs `gamma`"),
        (SOLVER + 'lr_policy: "sigmoid" stepsize: 5', "lr_policy 'sigmoid' needs `gamma`"),
        (SOLVER + 'lr_policy: "sigmoid" gamma: -0.2 stepsize: 15',
         "Sigmoid: `gamma` must be in [0, inf), got -0.2"),
    ],
)
def test_solver_policy_errors(text, message):
    with pytest.raises(SolverError) as info:
        schedules.from_solver(text)
    assert message in str(info.value)
    assert str(info.value).startswith("<solver text>: ")


def test_solver_file_errors_name_the_file(tmp_path):
    path = tmp_path / "solver.prototxt"
    path.write_text('base_lr: 0.1\nlr_policy: "step"\ngamma: 0.1\n')
    with pytest.raises(SolverError, match=rf"^{path}: lr_policy 'step' needs `stepsize`"):
        schedules.from_solver(path)


@given(
    base_lr=st.floats(1e-6, 10), gamma=st.floats(0.01, 1.0), stepsize=st.integers(1, 10_000),
    iteration=st.integers(0, 10**6),
)
@settings(max_examples=50, deadline=None)
def test_step_property(base_lr, gamma, stepsize, iteration):
    value = float(schedules.Step(base_lr, gamma=gamma, stepsize=stepsize)(iteration))
    expected = base_lr * gamma ** (iteration // stepsize)
    assert math.isclose(value, expected, rel_tol=2e-5, abs_tol=1e-30) or expected < 1e-30


def test_parse_error_is_not_a_policy_error():
    with pytest.raises(ProtoParseError):
        schedules.from_solver("base_lr: 0.1\nlr_policy: step\n")


def test_caffe_pow_keeps_doubles_digits_in_float32():
    """caffe_pow in float32 (JAX's default precision) against double pow, up to
    iteration 200000: a few ulps, where rounding the base to float32 first
    is off by 9e-4 relative (0.999) and 2.7e-3 (0.99999)."""
    t = keras.ops.convert_to_tensor(np.arange(0, 200000, 7).astype("float32"))
    for base in (0.999, 0.99999, 0.5, 0.1):
        got = keras.ops.convert_to_numpy(schedules.caffe_pow(base, t)).astype(float)
        want = base ** np.arange(0, 200000, 7).astype(float)
        kept = want > 1e-30
        np.testing.assert_allclose(got[kept], want[kept], rtol=4e-7, err_msg=str(base))

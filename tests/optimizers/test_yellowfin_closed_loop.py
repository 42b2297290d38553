"""Closed-loop YellowFin (closed_loop=True): the measurement and the feedback
against their float64 equations (tests/support/yellowfin_async.py), the synchronous
sanity check (no staleness: the measured total momentum is the algorithmic
momentum), a smoke test of asynchronous training (where it must beat the open
loop: that claim is benchmarks/yellowfin_closed_loop.py --check, run by make
verify-claims), skipped steps, XLA, arguments, serialization and save/load.

On every Keras backend (tests/support/tiers.py BACKENDS), with the same
tolerances: the replays run the update as the backend's trainer does
(support/traced.py). The asynchronous smoke test is TensorFlow's: the
claim's harness runs the optimizer inside one XLA while loop (tf.function)."""

import copy
import functools
import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import ArgumentError
from keras_caffe.optimizers import yellowfin_feedback as feedback
from keras_caffe.optimizers.yellowfin import YellowFin
from support import caffe_weights, linear_batches, sparse_softmax_loss, tiny_mlp
from support.traced import JIT, TRACED_STEP, traced_apply
from support.yellowfin_async import ClosedLoop, YellowFinTuner, async_runs, quadratic
from support.yellowfin_async import claim_failures as closed_loop_claim


# -- the equations ------------------------------------------------------------------------


def gradient_sequence(steps=80, size=12, seed=3):
    """Gradients along a fixed path to the minimum (x_t = 0.93^t x_0) of a
    quadratic, plus noise; fed to the optimizer whatever its weights, so the
    optimizer and the equations see the same sequence. Shrinking gradients
    read as extra momentum once they are taken as ``staleness`` updates old
    (``(g_(t-1-tau) - g_(t-1)) / v`` adds to mu), so the feedback acts."""
    rng = np.random.default_rng(seed)
    h, x0 = np.logspace(-1, 1, size), rng.normal(size=size) * 3
    return [(h * x0 * 0.93 ** t + 0.05 * rng.normal(size=size)).astype("float32")
            for t in range(steps)]


def test_closed_loop_matches_the_equations():
    """Replay one gradient sequence into the optimizer and into the float64
    equations. Three variables: lr_mult 1, 2 (it cancels in the ratios) and
    0 (frozen: no gradient, as in Caffe, so left out of the statistics and of
    the measurement)."""
    sequence = gradient_sequence()
    sizes, staleness = (4, 5, 3), 4
    bounds = np.cumsum((0,) + sizes)
    start = np.linspace(-1, 2, 12).astype("float32")
    variables = [keras.Variable(start[a:b], name=n)
                 for a, b, n in zip(bounds, bounds[1:], "abc")]
    optimizer = YellowFin(closed_loop=True, staleness=staleness, feedback_gain=0.05,
                          lr_mult={"b": 2.0, "c": 0.0})
    apply = traced_apply(optimizer, variables)
    mults = np.repeat([1.0, 2.0, 0.0], sizes)
    live = mults != 0
    tuner, loop = YellowFinTuner(1, 12), ClosedLoop(1, int(live.sum()), staleness, gain=0.05)
    w, v = start.astype("float64")[None], np.zeros((1, 12))
    offsets = []
    for t, g in enumerate(sequence):
        apply([ops.convert_to_tensor(g[a:b]) for a, b in zip(bounds, bounds[1:])])
        g = np.where(live, g.astype("float64"), 0.0)[None]
        g = g * tuner.tune(g)[:, None]
        mu = loop.momentum(t, tuner.target, v[:, live])
        v = mu[:, None] * v + g
        w = w - tuner.rate[:, None] * mults * v
        loop.record(g[:, live])
        tuner.t += 1
        np.testing.assert_allclose(float(optimizer.target_momentum), tuner.target[0], rtol=1e-4,
                                   err_msg=f"target at {t}")
        np.testing.assert_allclose(float(optimizer.tuned_momentum), mu[0], rtol=1e-4,
                                   atol=1e-5, err_msg=f"mu at {t}")
        if t >= staleness + 2:
            np.testing.assert_allclose(float(optimizer.total_momentum), loop.total[0],
                                       rtol=1e-3, err_msg=f"total momentum at {t}")
        else:
            assert math.isnan(float(optimizer.total_momentum))
        offsets.append(loop.offset[0])
    got = np.concatenate([var.numpy() for var in variables])
    np.testing.assert_allclose(got, w[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(variables[2].numpy(), start[9:])
    assert min(offsets) < -0.05  # the feedback lowered the momentum


@pytest.mark.parametrize("smoothing", [{}, dict(use_unsmoothed_lr_mu=False, beta=0.9,
                                                  momentum=0.5)], ids=["unsmoothed", "smoothed"])
def test_target_is_the_open_loop_momentum(smoothing):
    """The gradients alone make SingleStep's mu: on one replayed sequence the
    closed loop's target is the open loop's momentum, update by update (with
    use_unsmoothed_lr_mu=False too, whose average runs over the targets, not
    the fed-back momentum), while the momentum it uses is lower."""
    sequence = gradient_sequence()
    runs = []
    for closed in (False, True):
        w = keras.Variable(np.ones(12, "float32"))
        optimizer = YellowFin(closed_loop=closed, staleness=4, feedback_gain=0.05, **smoothing)
        apply = traced_apply(optimizer, [w])
        trace = []
        for g in sequence:
            apply([g])
            trace.append((float(optimizer.target_momentum), float(optimizer.tuned_momentum),
                          float(optimizer.tuned_learning_rate)))
        runs.append(np.array(trace))
    (open_target, open_mu, open_rate), (target, mu, rate) = runs[0].T, runs[1].T
    np.testing.assert_array_equal(open_target, open_mu)
    np.testing.assert_allclose(target, open_mu, rtol=1e-6)
    np.testing.assert_allclose(rate, open_rate, rtol=1e-6)
    assert np.all(mu <= target) and np.min(mu - target) < -0.05


def test_masked_median_and_sample_plan():
    def vector(values):
        return ops.convert_to_tensor(values, "float32")

    x = vector([3.0, np.nan, 1.0, np.inf, 2.0, -np.inf, 10.0])
    assert float(feedback.masked_median(x)) == 2.5  # median of 3, 1, 2, 10
    assert float(feedback.masked_median(vector([5.0]))) == 5.0
    assert math.isnan(float(feedback.masked_median(vector([np.nan, np.inf]))))
    small = feedback.sample_plan([3, 4], size=10)
    assert [p.tolist() for p in small] == [[0, 1, 2], [0, 1, 2, 3]]
    big = feedback.sample_plan([5000, 3, 20000], size=4096)
    assert sum(len(p) for p in big) == 4096 and all(np.all(np.diff(p) > 0) for p in big)
    assert all(p.min() >= 0 and p.max() < n for p, n in zip(big, [5000, 3, 20000]) if len(p))
    again = feedback.sample_plan([5000, 3, 20000], size=4096)
    assert all(np.array_equal(a, b) for a, b in zip(big, again))  # a function of the sizes


# -- synchronous: nothing to correct ---------------------------------------------------------


def test_synchronous_total_momentum_is_the_algorithmic_momentum():
    """No staleness: each coordinate's ratio is mu_(t-1), so the measured total
    momentum is mu averaged over the last ~10 updates (MEASURE_DECAY; a ratio
    of averages, hence not to the last digit). Here mu* only grows, the
    measurement stays below it, the feedback at 0, and the closed loop trains
    as the open loop."""
    x0, _, _ = quadratic(1, 0)
    h = np.logspace(-3, 0, 100).astype("float32")
    noise = (0.003 * np.random.default_rng(0).normal(size=(400, 100))).astype("float32")
    runs = {}
    for closed in (False, True):
        w = keras.Variable(x0[0].astype("float32"))
        optimizer = YellowFin(closed_loop=closed, staleness=0)
        step = traced_apply(optimizer, [w])
        trace = []
        for t in range(400):
            step([h * w.numpy() + noise[t]])
            trace.append((float(optimizer.tuned_momentum), float(optimizer.target_momentum),
                          float(optimizer.total_momentum)))
        runs[closed] = np.array(trace), w.numpy()
    mu, target, total = runs[True][0].T
    expected, decay = np.full(400, np.nan), feedback.MEASURE_DECAY
    for t in range(2, 400):  # the average of mu_(t-1)
        expected[t] = mu[1] if t == 2 else decay * expected[t - 1] + (1 - decay) * mu[t - 1]
    assert np.all(np.isnan(total[:2]))
    assert np.max(np.abs(total - expected)[50:]) < 0.006
    assert np.max(np.abs(total - mu)[300:]) < 0.015 and 0.85 < mu[-1] < 1.0
    np.testing.assert_array_equal(mu, target)  # no feedback
    np.testing.assert_allclose(runs[True][1], runs[False][1], rtol=1e-4, atol=1e-6)


# -- asynchronous: the claim is a benchmark; here, its smoke test ---------------------------------
#
# The claim (the closed loop beats the open loop with 9 asynchronous workers:
# 20 seeds of 2000 updates, median below 0.8 x, faster on 80% of seeds, ...)
# is benchmarks/yellowfin_closed_loop.py --check (make verify-claims,
# docs/claims.md). Below: the same code (yellowfin_async.async_runs and
# claim_failures) at a tiny size, and the claim's rules on made-up results.


@pytest.mark.tensorflow_only  # yellowfin_async's harness: one tf.function XLA while loop
def test_asynchronous_workers_smoke():
    """The claim's pipeline at 2 seeds of 300 updates to 0.1 x the initial
    loss: both loops of the real optimizer and the float64 equations run,
    reach the target, end finite, the closed loop is removing momentum, and
    the claim's rules read the results."""
    steps = 300
    results = async_runs(workers=9, steps=steps, seeds=2, target=0.1)
    for key in ("open", "closed"):
        assert results[key].shape == (2, 2)
        hits, last = results[key].T
        assert np.all((hits > 10) & (hits < steps)), results[key]
        assert np.all(np.isfinite(last)) and np.all(last < 0.1), results[key]
    assert results["reference"].shape == (2,) and np.all(results["reference"] < steps)
    assert results["momentum"] < results["target_momentum"]
    failures = closed_loop_claim(results, steps)
    assert isinstance(failures, list) and all(isinstance(line, str) for line in failures)


def made_up(open_hits, closed_hits, reference, momentum=0.5, last=0.01):
    closed = np.array([closed_hits, [last] * len(closed_hits)], float).T
    return {"open": np.array([open_hits, [0.01] * len(open_hits)], float).T, "closed": closed,
            "reference": np.array(reference, float), "momentum": momentum,
            "target_momentum": 0.6}


def test_closed_loop_claim_rules():
    holds = made_up([1000] * 5, [700, 700, 700, 700, 1200], [700] * 5)
    assert closed_loop_claim(holds, 2000) == []
    # each rule on its own: the boundary of each threshold fails
    assert len(closed_loop_claim(made_up([1000] * 5, [800] * 5, [800] * 5), 2000)) == 1
    assert "faster on 0.60" in closed_loop_claim(
        made_up([1000] * 5, [500, 500, 500, 1000, 1000], [500] * 5), 2000)[0]
    [missed] = closed_loop_claim(made_up([1000] * 4 + [1900], [500] * 4 + [2000], [500] * 5), 2000)
    assert "seeds [4]" in missed
    [far] = closed_loop_claim(made_up([1000] * 5, [500] * 5, [600] * 5), 2000)
    assert "within 15%" in far
    [momentum] = closed_loop_claim(made_up([1000] * 5, [500] * 5, [500] * 5, momentum=0.6), 2000)
    assert "not removing momentum" in momentum
    [nan] = closed_loop_claim(made_up([1000] * 5, [500] * 5, [500] * 5, last=np.nan), 2000)
    assert "non-finite" in nan


# -- skipped steps, XLA -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["graph", "xla"][:len(JIT)])
def test_non_finite_gradient_leaves_the_loop_unchanged(mode):
    """A NaN gradient skips the update and leaves every closed-loop variable;
    graph and XLA agree on the run around it (as the backend's trainer runs
    the update, support/traced.py; PyTorch: op by op)."""
    sequence = gradient_sequence(steps=30, size=6)
    sequence[20] = sequence[20].copy()
    sequence[20][3] = np.nan
    w = keras.Variable(np.ones(6, "float32"))
    optimizer = YellowFin(closed_loop=True, staleness=2, feedback_gain=0.05)
    apply = traced_apply(optimizer, [w], jit_compile=mode == "xla")
    for t, g in enumerate(sequence):
        if t == 20:
            before = {v.path: v.numpy().copy() for v in optimizer.variables}
        apply([g])
        if t == 20:
            for v in optimizer.variables:
                if not v.path.endswith("skipped_steps"):
                    np.testing.assert_array_equal(v.numpy(), before[v.path], err_msg=v.path)
    assert int(optimizer.skipped_steps) == 1 and int(optimizer.iterations) == 29
    # The same as never having seen the NaN gradient.
    w_ref, total_ref = without_the_nan()
    np.testing.assert_allclose(w.numpy(), w_ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(float(optimizer.total_momentum), total_ref, rtol=1e-4)
    assert float(optimizer.tuned_momentum) < float(optimizer.target_momentum)


@functools.lru_cache(maxsize=1)
def without_the_nan():
    """The weights and the total momentum after the sequence of
    ``test_non_finite_gradient_leaves_the_loop_unchanged`` less its NaN step
    (eager): the same for graph and XLA, run once."""
    sequence = gradient_sequence(steps=30, size=6)
    w_ref = keras.Variable(np.ones(6, "float32"))
    reference = YellowFin(closed_loop=True, staleness=2, feedback_gain=0.05)
    for t, g in enumerate(sequence):
        if t != 20:
            reference.apply([ops.convert_to_tensor(g)], [w_ref])
    return w_ref.numpy(), float(reference.total_momentum)


# -- arguments, state, serialization -------------------------------------------------------------


@pytest.mark.parametrize("argument, value", [
    ("closed_loop", 1), ("closed_loop", "yes"), ("staleness", -1), ("staleness", 2.5),
    ("staleness", "3"), ("feedback_gain", 0.0), ("feedback_gain", -0.01),
    ("feedback_gain", 1.5), ("feedback_gain", float("nan")),
])
def test_bad_argument_is_refused_with_its_name(argument, value):
    kwargs = {"closed_loop": True, argument: value}
    with pytest.raises(ArgumentError) as info:
        YellowFin(**kwargs)
    assert info.value.argument == argument
    assert str(info.value).startswith(f"YellowFin: `{argument}`")


def test_nesterov_is_refused():
    with pytest.raises(ArgumentError, match="`closed_loop` cannot be used with use_nesterov"):
        YellowFin(closed_loop=True, use_nesterov=True)
    YellowFin(closed_loop=False, use_nesterov=True, staleness=3)  # unused: fine


def test_state_exists_only_with_the_closed_loop():
    model = tiny_mlp()  # 421 parameters: all sampled
    open_loop, default = YellowFin(name="yf", staleness=5), YellowFin(name="yf")
    for optimizer in (open_loop, default):
        optimizer.build(model.trainable_variables)
    assert [v.path for v in open_loop.variables] == [v.path for v in default.variables]
    assert not [v for v in default.variables if "cl_" in v.path]
    assert math.isnan(default.total_momentum)
    closed = YellowFin(name="yf", closed_loop=True, staleness=5)
    closed.build(model.trainable_variables)
    shapes = {v.path.split("/")[-1]: tuple(v.shape) for v in closed.variables if "cl_" in v.path}
    assert shapes == {"cl_velocities": (7, 421), "cl_grad": (421,), "cl_numerator": (421,),
                      "cl_denominator": (421,), "cl_offset": (), "cl_total": (),
                      "cl_target": ()}
    big = keras.Variable(np.zeros((100, 100), "float32"))
    sampled = YellowFin(closed_loop=True, staleness=1)
    sampled.build([big])
    assert tuple(sampled._cl_velocities.shape) == (3, feedback.SAMPLE_SIZE)
    frozen = YellowFin(closed_loop=True, lr_mult={"*": 0.0})
    with pytest.raises(ArgumentError, match="`closed_loop` needs a variable whose lr_mult"):
        frozen.build([big])


def test_config_round_trip():
    optimizer = YellowFin(closed_loop=True, staleness=15, feedback_gain=0.05, beta=0.99)
    config = optimizer.get_config()
    assert (config["closed_loop"], config["staleness"], config["feedback_gain"]) == \
        (True, 15, 0.05)
    restored = YellowFin.from_config(copy.deepcopy(config))
    assert restored.get_config() == config
    again = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert type(again) is YellowFin and again.get_config() == config
    plain = YellowFin().get_config()
    assert (plain["closed_loop"], plain["staleness"], plain["feedback_gain"]) == (False, 0, 0.01)


def dataset(seed=0, n=256, skip=0):
    """The seeded linear problem's batches (``support.linear_batches``)."""
    return linear_batches(seed, n, skip)


def fit(model, optimizer, batches, skip=0, jit_compile=TRACED_STEP):
    model.compile(optimizer=optimizer, loss=sparse_softmax_loss(), jit_compile=jit_compile)
    model.fit(dataset(skip=skip), steps_per_epoch=batches, epochs=1, verbose=0, shuffle=False)
    return model


def test_save_load_resumes_exactly(tmp_path):
    """N + N batches through model.save/load_model equal 2N, with the ring
    wrapped and the feedback acting (staleness 4 assumed of synchronous
    minibatch gradients: they are fresher than assumed, and shrinking, which
    reads as extra momentum)."""
    keras.utils.set_random_seed(0)
    init = caffe_weights(tiny_mlp())
    config = dict(closed_loop=True, staleness=4, feedback_gain=0.1)
    reference = fit(tiny_mlp(init), YellowFin(**config), 40)
    first = fit(tiny_mlp(init), YellowFin(**config), 20)
    path = tmp_path / "model.keras"
    first.save(path)
    resumed = keras.models.load_model(path)
    restored = resumed.optimizer
    assert restored.closed_loop and restored.staleness == 4 and restored.feedback_gain == 0.1
    assert len(restored.variables) == len(first.optimizer.variables)
    for ours, theirs in zip(restored.variables, first.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=ours.path)
    resumed.fit(dataset(skip=20), steps_per_epoch=20, epochs=1, verbose=0, shuffle=False)
    for name, value in caffe_weights(resumed).items():
        np.testing.assert_allclose(value, caffe_weights(reference)[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    for name in ("tuned_momentum", "target_momentum", "total_momentum"):
        assert float(getattr(restored, name)) == pytest.approx(
            float(getattr(reference.optimizer, name)), rel=1e-6)
    assert float(restored.tuned_momentum) < float(restored.target_momentum) - 0.01

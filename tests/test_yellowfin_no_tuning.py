"""YellowFin's "no tuning" claim (issue 4), at the default size of
tests/yellowfin_tasks.py: on a small CNN and a small LSTM, YellowFin() with its
defaults reaches, in the same 1000 steps of 32 (one pass over fresh data), a
training loss (mean of the last 100 steps) within 10% of the best of momentum
SGD (mu 0.9, lr 0.001, 0.01, 0.1, 1) and within 10% of the best of Adam (lr
1e-4, 1e-3, 1e-2), on each of three seeds.

Measured here (2-core CPU, TF 2.21, XLA; benchmarks/yellowfin_no_tuning.py
prints the tables), seeds 0-9: CNN, YellowFin / best SGD 0.75-0.98 and / best
Adam 0.67-0.90; LSTM, 1.009-1.016 and 1.025-1.030. The earlier design (2048
samples repeated, 300 steps) failed on the CNN against SGD on some seeds (1.22
at seed 0): see yellowfin_tasks.py for why it was a poor measure.
"""

import math

import keras
import numpy as np
import pytest

import yellowfin_tasks as experiment
from keras_caffe.errors import ArgumentError

TASKS = {"cnn": experiment.cnn_task, "lstm": experiment.lstm_task}
CHANCE = {"cnn": math.log(8), "lstm": math.log(16)}  # loss of a uniform prediction
_RUNS = {}


def runs_of(name, seed=0):
    """The default-size runs of task ``name`` with ``seed`` (trained once per session)."""
    if (name, seed) not in _RUNS:
        task = TASKS[name](seed=seed)
        _RUNS[name, seed] = (task, experiment.run_task(task))
    return _RUNS[name, seed]


def table(runs):
    return "\n".join(f"  {r.candidate.label:22s} {r.loss:.4f}" for r in runs)


def ratio_line(name, seed, family):
    _, runs = runs_of(name, seed)
    verdict = experiment.verdict(runs)
    best = verdict.best[family]
    assert best is not None, f"every {family} run diverged on {name}:\n{table(runs)}"
    ratio = verdict.yellowfin.loss / best.loss
    return ratio, (f"{name} seed {seed}: YellowFin {verdict.yellowfin.loss:.4f} vs "
                   f"{best.candidate.label} {best.loss:.4f} (ratio {ratio:.3f})\n{table(runs)}")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(TASKS))
def test_yellowfin_defaults_within_10_percent_of_best(name, seed):
    for family in ("SGD", "Adam"):
        ratio, report = ratio_line(name, seed, family)
        assert ratio <= experiment.TOLERANCE, report


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TASKS))
def test_tasks_need_tuning_and_are_learned(name):
    """The tasks are real: the best run gets far below chance, and the grids
    span rates that barely learn, so picking a rate matters."""
    task, runs = runs_of(name)
    assert len(runs) == 8 and [r.candidate.family for r in runs].count("SGD") == 4
    assert all(len(r.curve) == experiment.WINDOWS for r in runs)
    finite = [r.loss for r in runs if not r.diverged]
    assert min(finite) < 0.6 * CHANCE[name]
    assert max(finite) > 0.95 * CHANCE[name]
    if name == "lstm":  # the floor: the true chain's loss on the same targets
        assert 1.0 < task.floor < min(finite)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TASKS))
def test_yellowfin_tuned_its_rate_and_momentum(name):
    _, runs = runs_of(name)
    yellowfin = experiment.verdict(runs).yellowfin
    lr, mu = np.array(yellowfin.yf_lr), np.array(yellowfin.yf_mu)
    assert lr.shape == mu.shape == (experiment.WINDOWS,)
    assert np.all(np.isfinite(lr)) and np.all(lr > 1e-3)  # far from learning_rate=1e-4
    assert np.all(mu > 0.05) and np.all(mu < 1.0)


def test_restart_is_a_fresh_optimizer():
    """A rate sweep reuses one compiled model: each restarted run equals a run
    with a newly built optimizer and model, to the bit."""
    task = experiment.cnn_task(steps=20, samples=256)
    keras.utils.set_random_seed(0)
    initial = task.make_model().get_weights()
    swept = experiment.train_family(task, "Adam", initial)
    assert len({tuple(r.curve) for r in swept}) == 3
    model = task.make_model()
    model.set_weights(initial)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    fresh = model.fit(task.dataset(), epochs=10, steps_per_epoch=2, shuffle=False,
                      verbose=0).history["loss"]
    assert swept[-1].candidate.rate == 1e-2
    assert swept[-1].curve == fresh


def fake(family, loss, rate=0.1):
    candidate = experiment.Candidate(family, math.nan if family == "YellowFin" else rate, None)
    return experiment.Run(candidate, loss, [loss] * experiment.WINDOWS, 0.0)


def test_verdict_rules():
    runs = [fake("SGD", math.nan), fake("SGD", 0.5, 0.01), fake("SGD", 0.4, 0.1),
            fake("Adam", math.inf), fake("Adam", 0.3), fake("YellowFin", 0.44)]
    verdict = experiment.verdict(runs)
    assert verdict.best["SGD"].loss == 0.4 and verdict.best["Adam"].loss == 0.3
    assert verdict.ratio("SGD") == pytest.approx(1.1) and verdict.holds("SGD")  # boundary
    assert verdict.ratio("Adam") == pytest.approx(0.44 / 0.3) and not verdict.holds("Adam")
    assert not verdict.passed
    # a family whose runs all diverged cannot beat a finite YellowFin
    verdict = experiment.verdict([fake("SGD", math.nan), fake("Adam", 0.5),
                                  fake("YellowFin", 0.5)])
    assert verdict.best["SGD"] is None and verdict.ratio("SGD") == 0.0 and verdict.passed
    # a diverged YellowFin fails against everything
    verdict = experiment.verdict([fake("SGD", 2.0), fake("Adam", 2.0),
                                  fake("YellowFin", math.nan)])
    assert math.isnan(verdict.ratio("SGD")) and not verdict.holds("Adam")


def test_candidates_are_the_issues_grid():
    labels = [c.label for c in experiment.candidates()]
    assert labels == ["SGD lr=0.001", "SGD lr=0.01", "SGD lr=0.1", "SGD lr=1",
                      "Adam lr=0.0001", "Adam lr=0.001", "Adam lr=0.01", "YellowFin (defaults)"]
    sgd, adam, yellowfin = (experiment.candidates()[i].make() for i in (2, 4, 7))
    assert isinstance(sgd, keras.optimizers.SGD) and float(sgd.momentum) == 0.9
    assert float(sgd.learning_rate) == pytest.approx(0.1)
    assert isinstance(adam, keras.optimizers.Adam)
    assert yellowfin.tuned_learning_rate == pytest.approx(1e-4) and yellowfin.tuned_momentum == 0
    assert experiment.candidates({"lr_factor": 2.0})[-1].label == "YellowFin (lr_factor=2.0)"


def test_data_is_seeded_and_structured():
    x, y = experiment.gabor_images(64, seed=3)
    x2, y2 = experiment.gabor_images(64, seed=3)
    assert x.shape == (64, 16, 16, 1) and x.dtype == np.float32
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert set(y) == set(range(8))
    inputs, targets, floor = experiment.markov_sequences(200, length=10, seed=3)
    assert inputs.shape == targets.shape == (200, 9)
    np.testing.assert_array_equal(inputs[:, 1:], targets[:, :-1])  # targets: the next token
    assert 0.5 < floor < math.log(16)  # Dirichlet(0.1) rows: far below uniform's log 16


def test_steps_must_be_a_multiple_of_ten():
    with pytest.raises(ArgumentError,
                       match=r"yellowfin_tasks: `steps` must be a positive multiple of 10, got 25"):
        experiment.run_task(experiment.cnn_task(steps=25, samples=64))

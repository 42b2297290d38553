"""YellowFin: an independent float64 transcription of the paper's equations
fed the optimizer's gradient sequence (open loop: the gradients do not depend
on the weights), also on big tensors under XLA (summed in rows), the cubic
against numpy.roots, the one-pass gradient sums, no parameter-sized copies in
the compiled update, NaN/inf skipping (with Keras's use_ema too), arguments,
serialization, save/load resume, model.fit with and without XLA and under
mixed_float16, the update compiling itself (or not), Caffe's weight decay and
lr_mult, and YellowFinMonitor.

On every Keras backend (tests/support/tiers.py BACKENDS), with the same
tolerances: "traced"/"xla" run the update as the backend's trainer does
(support/traced.py: tf.function, jax.jit of stateless_apply, PyTorch op by
op). TensorFlow's own paths (the update compiling itself with XLA, its HLO,
IndexedSlices, plain TensorFlow ops) are ``tensorflow_only``; PyTorch's
compiled step (torch.compile, minutes per case) is left out."""

import copy
import functools
import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_caffe import schedules
from keras_caffe.callbacks import YellowFinMonitor
from keras_caffe.errors import ArgumentError, KerasCaffeError
from keras_caffe.optimizers import yellowfin_tuner
from keras_caffe.optimizers.yellowfin import YellowFin
from support import caffe_weights, linear_batches, sparse_softmax_loss, tiny_mlp
from support.autodiff import gradients
from support.traced import BACKEND, JIT, TRACED_STEP, compiled, traced_apply

EPS = 1e-6
STATS = ("h_min", "h_max", "C", "D", "mu", "alpha")


# -- the independent reference ------------------------------------------------------


def real_root(p):
    """The root in (0, 1) of p x = (1 - x)^3, by numpy.roots."""
    roots = np.roots([-1.0, 3.0, -(3.0 + p), 1.0])
    root = roots[np.argmin(np.abs(roots.imag))]
    assert abs(root.imag) < 1e-9 and 0.0 < root.real < 1.0
    return root.real


class Reference:
    """YellowFin in float64, literally: biased EMAs from zero divided by
    1 - beta^t, the curvature window as a list, C = avg(||g||^2) - ||avg(g)||^2,
    the cubic by numpy.roots, clipping by explicit global norms."""

    def __init__(self, weights, learning_rate=1e-4, momentum=0.0, lr_factor=1.0,
                 clip_thresh=None, beta=0.999, curv_win_width=20, zero_debias=True,
                 sparsity_debias=False, use_unsmoothed_lr_mu=True, h_min_log_smooth=True,
                 h_max_log_smooth=True, use_adaptive_clip=True, stat_protect_fac=100.0,
                 use_nesterov=False, lr_mult=None):
        self.cfg = dict(locals())
        self.w = [np.array(w, np.float64) for w in weights]
        self.v = [np.zeros_like(w) for w in self.w]
        self.lr_mult = lr_mult or [1.0] * len(self.w)
        self.lr, self.mu = learning_rate, momentum
        self.t, self.biased, self.window, self.h_max_prev = 0, {}, [], None
        self.clipped = {"clip_thresh": 0, "protect": 0, "h_max": 0}  # steps each clip bit

    def avg(self, key, x):
        beta = self.cfg["beta"]
        self.biased[key] = beta * self.biased.get(key, 0.0) + (1 - beta) * x
        debias = 1 - beta ** (self.t + 1) if self.cfg["zero_debias"] else 1.0
        return self.biased[key] / debias

    def step(self, grads):
        c, t = self.cfg, self.t
        norm = lambda gs: math.sqrt(sum(float(np.sum(x * x)) for x in gs))  # noqa: E731
        g = [np.array(x, np.float64) for x in grads]
        if c["clip_thresh"] is not None:
            self.clipped["clip_thresh"] += norm(g) > c["clip_thresh"]
            g = [x * c["clip_thresh"] / max(norm(g), c["clip_thresh"]) for x in g]
        if c["use_adaptive_clip"] and t > 0:
            limit = math.sqrt(c["stat_protect_fac"] * self.h_max_prev)
            self.clipped["protect"] += norm(g) > limit
            g = [x * limit / max(norm(g), limit) for x in g]
        h = norm(g) ** 2
        self.window = (self.window + [h + EPS])[-c["curv_win_width"]:]
        lo, hi = min(self.window), max(self.window)
        h_min = math.exp(self.avg("lo", math.log(lo))) if c["h_min_log_smooth"] \
            else self.avg("lo", lo)
        h_max = math.exp(self.avg("hi", math.log(hi))) if c["h_max_log_smooth"] \
            else self.avg("hi", hi)
        sq = self.avg("sq", h)
        mean = [self.avg(("g", i), x) for i, x in enumerate(g)]
        C = max(sq - sum(float(np.sum(m * m)) for m in mean), EPS)
        D = self.avg("d", self.avg("n", math.sqrt(h)) / (sq + EPS))
        if c["sparsity_debias"]:
            density = sum(np.count_nonzero(x) for x in g) / sum(x.size for x in g)
            density = max(self.avg("s", density), EPS)
            h_min, h_max, C = h_min * density, h_max * density, C * density
            D = D / math.sqrt(density)
        if t > 0:
            x = real_root(D ** 2 * h_min ** 2 / (2 * C))
            r = math.sqrt(max(h_max / h_min, 1.0))
            mu = max(x ** 2, ((r - 1) / (r + 1)) ** 2)
            alpha = (1 - math.sqrt(mu)) ** 2 / h_min
            alpha = min(alpha, alpha * (t + 1) / (10 * c["curv_win_width"]))
        else:
            mu, alpha = self.mu, self.lr
        if not c["use_unsmoothed_lr_mu"]:
            mu = c["beta"] * self.mu + (1 - c["beta"]) * mu
            alpha = c["beta"] * self.lr + (1 - c["beta"]) * alpha
        self.mu, self.lr = mu, alpha
        if c["use_adaptive_clip"] and t > 0:
            limit = math.sqrt(self.h_max_prev)
            self.clipped["h_max"] += norm(g) > limit
            g = [x * limit / max(norm(g), limit) for x in g]
        factor = c["lr_factor"](t) if callable(c["lr_factor"]) else c["lr_factor"]
        for i, x in enumerate(g):
            self.v[i] = mu * self.v[i] + x
            step = x + mu * self.v[i] if c["use_nesterov"] else self.v[i]
            self.w[i] = self.w[i] - alpha * factor * self.lr_mult[i] * step
        self.h_max_prev, self.t = h_max, t + 1
        return dict(h_min=h_min, h_max=h_max, C=C, D=D, mu=mu, alpha=alpha)


def observed(optimizer):
    return {key: float(getattr(optimizer, name)) for key, name in zip(STATS, (
        "h_min", "h_max", "grad_var", "dist_to_opt", "tuned_momentum", "tuned_learning_rate"))}


# -- gradient sequences -----------------------------------------------------------------


def quadratic_gradients(steps=32, seed=0, sparse=False, shapes=((6,), (3, 2))):
    """Noisy quadratic: g = H * x_t + noise along an open-loop path x_t -> 0,
    curvatures over two decades, one exploding gradient (step 12)."""
    rng = np.random.default_rng(seed)
    curv = [np.logspace(-1, 1, int(np.prod(s))).reshape(s) for s in shapes]
    x0 = [rng.normal(size=s) * 3 for s in shapes]
    out = []
    for t in range(steps):
        g = [c * x * 0.95 ** t + 0.3 * rng.normal(size=c.shape) for c, x in zip(curv, x0)]
        if t == 12:
            g = [50 * x for x in g]
        if sparse:
            g = [x * (rng.random(x.shape) < 0.6) for x in g]
        out.append([x.astype("float32") for x in g])
    return [np.zeros(s, "float32") + 0.5 for s in shapes], out


@functools.lru_cache(maxsize=None)
def mlp_gradients(steps=30, seed=0):
    """The tiny MLP's minibatch gradients along a plain-SGD trajectory, with
    one spike (x40 at step 15). Computed once per (steps, seed) for the
    module (eager, 30 tape steps; the 8 cases that replay it only read it)."""
    rng = np.random.default_rng(seed)
    keras.utils.set_random_seed(seed)
    model = tiny_mlp()
    x = rng.normal(size=(steps, 16, 20)).astype("float32")
    y = rng.integers(0, 5, size=(steps, 16))
    loss_fn = sparse_softmax_loss()
    start = [v.numpy() for v in model.trainable_variables]
    out = []
    for t in range(steps):
        grads = gradients(lambda: loss_fn(y[t], model(x[t])), model.trainable_variables)
        out.append([ops.convert_to_numpy(g) * (40 if t == 15 else 1) for g in grads])
        for v, g in zip(model.trainable_variables, grads):
            v.assign_sub(0.5 * g)
    return start, out


def tensors(arrays):
    return [ops.convert_to_tensor(a) for a in arrays]


def run_open_loop(start, sequence, config, traced=False, jit_compile=False):
    """``traced``/``jit_compile``: the update as the backend's trainer runs it
    (``support.traced``); otherwise ``apply`` called directly."""
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer = YellowFin(**config)
    reference = Reference(start, **{k: v for k, v in config.items() if k != "jit_compile"})
    apply = traced_apply(optimizer, variables, jit_compile or None) if traced or jit_compile \
        else (lambda grads: optimizer.apply(grads, variables))
    for t, grads in enumerate(sequence):
        apply(tensors(grads))
        expected, got = reference.step(grads), observed(optimizer)
        for key in STATS:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-4,
                                       err_msg=f"{key} at step {t}")
    for var, w in zip(variables, reference.w):
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-4, atol=1e-6)
    assert int(optimizer.iterations) == len(sequence)
    if config.get("use_adaptive_clip", True) and config.get("clip_thresh"):
        assert min(reference.clipped.values()) > 0, reference.clipped  # each clip bit
    return optimizer, apply


# "on": the spike (x50 at step 12 of the quadratic, x40 at step 15 of the MLP)
# exceeds clip_thresh, then 10 sqrt(h_max), then sqrt(h_max).
CLIPPING = {"off": dict(use_adaptive_clip=False),
            "on": dict(clip_thresh=200.0, use_adaptive_clip=True)}
SMOOTHING = {"unsmoothed": dict(),
             "smoothed": dict(use_unsmoothed_lr_mu=False, beta=0.9, momentum=0.5,
                              learning_rate=0.01)}


# The update compiled by itself (YellowFin's default on TensorFlow), or in
# plain ops (on JAX and PyTorch the only update: ``jit_compile`` changes nothing there).
UPDATES = {"xla-update": dict(jit_compile=True), "ops": dict(jit_compile=False)}
UPDATE_CASES = [pytest.param("xla-update", marks=pytest.mark.tensorflow_only), "ops"]


@pytest.mark.parametrize("update", UPDATE_CASES)
@pytest.mark.parametrize("smoothing", SMOOTHING)
@pytest.mark.parametrize("clipping", CLIPPING)
def test_noisy_quadratic_matches_the_equations(clipping, smoothing, update):
    start, sequence = quadratic_gradients()
    config = dict(curv_win_width=5, **CLIPPING[clipping], **SMOOTHING[smoothing],
                  **UPDATES[update])
    optimizer, _ = run_open_loop(start, sequence, config)
    assert 0.0 < float(optimizer.tuned_momentum) < 1.0


@pytest.mark.parametrize("update", UPDATE_CASES)
@pytest.mark.parametrize("smoothing", SMOOTHING)
@pytest.mark.parametrize("clipping", CLIPPING)
def test_mlp_gradients_match_the_equations(clipping, smoothing, update):
    start, sequence = mlp_gradients()
    clip = dict(CLIPPING[clipping], clip_thresh=20.0) if clipping == "on" else CLIPPING[clipping]
    optimizer, apply = run_open_loop(
        start, sequence, dict(curv_win_width=8, **clip, **SMOOTHING[smoothing], **UPDATES[update]),
        traced=True)
    # One traced function of device ops: no host callbacks (TensorFlow's
    # py_func, JAX's callbacks) anywhere. (PyTorch runs it op by op: no program.)
    names = apply.op_names(tensors(sequence[0]))
    if BACKEND != "torch":
        assert len(names) > 100
        assert not [n for n in names if "PyFunc" in n or "callback" in n]


@pytest.mark.parametrize("variant", [
    dict(zero_debias=False, beta=0.9, h_min_log_smooth=False, h_max_log_smooth=False),
    dict(sparsity_debias=True, use_nesterov=True, lr_factor=0.5, stat_protect_fac=4.0),
    dict(lr_factor=schedules.Step(1.0, gamma=0.5, stepsize=10), curv_win_width=1, beta=0.99),
], ids=["no-debias-linear", "sparse-nesterov", "factor-schedule"])
def test_options_match_the_equations(variant):
    start, sequence = quadratic_gradients(sparse=variant.get("sparsity_debias", False))
    ref_variant = dict(variant)
    if "lr_factor" in variant and not isinstance(variant["lr_factor"], float):
        ref_variant["lr_factor"] = lambda t: float(variant["lr_factor"](t))
    variables = [keras.Variable(w) for w in start]
    optimizer, reference = YellowFin(**variant), Reference(start, **ref_variant)
    for t, grads in enumerate(sequence):
        optimizer.apply(tensors(grads), variables)
        expected, got = reference.step(grads), observed(optimizer)
        for key in STATS:
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-4, err_msg=f"{key} at {t}")
    for var, w in zip(variables, reference.w):
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-4, atol=1e-6)


# -- big tensors: the row sums, and no copies under XLA ---------------------------------

# 76800 elements: summed in rows of 1024 on the CPU (yellowfin_tuner._sums).
BIG = ((300, 256), (256,))


@pytest.mark.parametrize("clipping", CLIPPING)
def test_big_tensors_match_the_equations_under_xla(clipping):
    """The quadratic at 6400x the size, through XLA (TensorFlow, JAX; op by
    op on PyTorch) ("on": ||g|| is about 2000, 74000 at the spike:
    clip_thresh, then the protection, then sqrt(h_max) clip it)."""
    start, sequence = quadratic_gradients(steps=16, shapes=BIG)
    config = dict(curv_win_width=5, **CLIPPING[clipping])
    if "clip_thresh" in config:
        config["clip_thresh"] = 30000.0
    run_open_loop(start, sequence, config, jit_compile=True)


def test_gradient_sums_in_rows_and_flat():
    rng = np.random.default_rng(3)
    assert yellowfin_tuner._row_width(1 << 20) == 1024
    assert yellowfin_tuner._row_width(100000) == 1000
    assert yellowfin_tuner._row_width(65537) is None  # a prime: summed flat
    shapes = [(1 << 10, 1 << 7), (100, 1000), (65537,), (7,)]
    grads = [rng.normal(size=s).astype("float32") * (rng.random(s) < 0.7) for s in shapes]
    grads[2][5] = 0.0
    averages = [rng.normal(size=s).astype("float32") for s in shapes]
    for jit_compile in (False, True):
        sums = compiled(lambda g, a: yellowfin_tuner.gradient_sums(g, a, count_nonzero=True),
                        jit_compile)(tensors(grads), tensors(averages))
        g64 = [x.astype(np.float64) for x in grads]
        np.testing.assert_allclose(float(sums.sq_norm), sum(np.sum(x * x) for x in g64),
                                   rtol=1e-6)
        np.testing.assert_allclose(
            float(sums.deviation), sum(np.sum((x - a) ** 2) for x, a in zip(g64, averages)),
            rtol=1e-6)
        assert float(sums.nonzero) == sum(np.count_nonzero(x) for x in grads)


@pytest.mark.tensorflow_only  # the HLO of TensorFlow's XLA-compiled update
@pytest.mark.parametrize("config", [dict(), dict(clip_thresh=1.0, use_nesterov=True),
                                    dict(sparsity_debias=True, use_adaptive_clip=False)],
                         ids=["defaults", "clip-nesterov", "sparse"])
def test_xla_update_copies_no_parameter_tensor(config):
    """The compiled update writes the weights and slots in place: no copy of a
    parameter-sized tensor (an XLA conditional around the writes made one of
    each per step)."""
    import tensorflow as tf  # here: a TensorFlow-only test (the other backends lack it)

    variables = [keras.Variable(np.ones(s, "float32")) for s in BIG]
    optimizer = YellowFin(**config)
    optimizer.build(variables)
    step = tf.function(lambda grads: optimizer.apply(grads, variables), jit_compile=True)
    grads = [tf.ones(s) for s in BIG]
    hlo = step.experimental_get_compiler_ir(grads)(stage="optimized_hlo")
    for shape in BIG:
        text = "f32[" + ",".join(map(str, shape)) + "]"
        copies = [line for line in hlo.splitlines()
                  if f"= {text}" in line and " copy(" in line]
        assert not copies, copies
    step(grads)
    assert int(optimizer.iterations) == 1


SMALL, HALF_BIG = ((4, 3), (3,)), ((1024, 1024), (1024, 1023), (1024,))


@pytest.mark.tensorflow_only  # jit_compile: TensorFlow's self-compiled update
@pytest.mark.parametrize("jit_compile, shapes, compiled", [
    (True, SMALL, True), (False, HALF_BIG, False), ("auto", SMALL, False),
    ("auto", HALF_BIG, True),  # 2^20 of 2^21 elements in a variable of 2^20
    ("auto", HALF_BIG[1:], False),  # no variable of 2^20 elements
])
def test_update_compiles_itself_in_an_uncompiled_step(jit_compile, shapes, compiled):
    """In a step that is not compiled (Keras's default on CPU), the whole
    update is one XLA call or plain ops; the compiled function is traced once
    and reused."""
    import tensorflow as tf  # here: a TensorFlow-only test (the other backends lack it)

    variables = [keras.Variable(np.ones(s, "float32")) for s in shapes]
    optimizer = YellowFin(jit_compile=jit_compile)
    assert optimizer.compiles_update(variables) is compiled
    step = tf.function(lambda grads: optimizer.apply(grads, variables))
    grads = [tf.ones(v.shape) for v in variables]
    graph = step.get_concrete_function(grads).graph.as_graph_def()
    calls = [n for n in graph.node if "_XlaMustCompile" in n.attr and n.attr["_XlaMustCompile"].b]
    assert len(calls) == (1 if compiled else 0)
    outer = {n.op for n in graph.node}
    assert ("ResourceApplyMomentum" in outer) is not compiled
    for _ in range(3):
        step(grads)
    assert int(optimizer.iterations) == 3
    assert len(optimizer._compiled_updates) == (1 if compiled else 0)


@pytest.mark.tensorflow_only  # IndexedSlices and the self-compiled update: TensorFlow's
def test_sparse_embedding_gradient_compiled_and_not():
    """An Embedding's gradient arrives as IndexedSlices: the compiled update
    densifies it and trains as the plain one does."""
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 16, (64, 5)), rng.integers(0, 3, 64)
    weights = {}
    for jit_compile in (True, False):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((5,), dtype="int32"), keras.layers.Embedding(16, 4),
                                  keras.layers.Flatten(), keras.layers.Dense(3)])
        model.compile(optimizer=YellowFin(jit_compile=jit_compile, sparsity_debias=True),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        assert int(model.optimizer.iterations) == 8
        weights[jit_compile] = model.get_weights()
    for compiled, plain in zip(weights[True], weights[False]):
        np.testing.assert_allclose(compiled, plain, rtol=1e-5, atol=1e-7)


# -- the cubic ----------------------------------------------------------------------------


#: The dtypes the cubic is solved in: float64 on TensorFlow only. Keras's
#: promotion rules (``keras.backend.result_type``) give float32 for float64
#: operands on the other backends, as JAX does without x64.
CUBIC_DTYPES = (("float64", 1e-8), ("float32", 2e-6))[BACKEND != "tensorflow":]


def test_cubic_matches_numpy_roots():
    rng = np.random.default_rng(7)
    C = 10.0 ** rng.uniform(-4, 3, 500)
    D = 10.0 ** rng.uniform(-3, 2, 500)
    h_min = 10.0 ** rng.uniform(-3, 3, 500)
    p = D ** 2 * h_min ** 2 / (2 * C)
    keep = (p > 1e-9) & (p < 1e9)  # where numpy.roots itself is accurate
    expected = np.array([real_root(q) for q in p[keep]])
    for dtype, rtol in CUBIC_DTYPES:
        got = ops.convert_to_numpy(yellowfin_tuner.solve_sqrt_mu(
            ops.convert_to_tensor(p[keep], dtype)))
        np.testing.assert_allclose(got, expected, rtol=rtol)
    # It is the minimiser of x^2 D^2 + (1 - x)^4 C / h_min^2 on [0, 1].
    x = ops.convert_to_numpy(yellowfin_tuner.solve_sqrt_mu(
        ops.convert_to_tensor(p, CUBIC_DTYPES[0][0])))
    grid = np.linspace(0, 1, 20001)[:, None]
    f = grid ** 2 * D ** 2 + (1 - grid) ** 4 * C / h_min ** 2
    best = grid[np.argmin(f, axis=0), 0]
    assert np.max(np.abs(x - best)) <= 1e-4
    # Extremes stay finite and in (0, 1].
    extreme = ops.convert_to_numpy(yellowfin_tuner.solve_sqrt_mu(
        ops.convert_to_tensor([1e-30, 1e-12, 1e12, 1e30], "float32")))
    assert np.all(np.isfinite(extreme)) and np.all((extreme > 0) & (extreme <= 1))
    np.testing.assert_allclose(extreme[2:], [1e-12, 1e-30], rtol=1e-5)


# -- NaN and inf ----------------------------------------------------------------------------


#: (bad value, mode): "eager" calls ``apply``; "graph" and "xla" run the
#: update as the backend's trainer does, uncompiled and compiled
#: (``support.traced``; "xla" not on PyTorch, whose compiled step is left
#: out); "ops-": TensorFlow's update in plain ops (``jit_compile=False``)
#: instead of compiling itself.
NON_FINITE = [(np.nan, "eager"), (np.inf, "graph"), (np.nan, "xla"),
              (3e19, "graph"),  # 3e19: ||g||^2 overflows float32
              pytest.param(np.inf, "ops-eager", marks=pytest.mark.tensorflow_only),
              pytest.param(3e19, "ops-graph", marks=pytest.mark.tensorflow_only)]


@pytest.mark.parametrize("bad, mode", [c for c in NON_FINITE if True in JIT or "xla" not in c])
def test_non_finite_gradient_skips_the_step(bad, mode):
    """Modes: where the step runs (the update compiles itself on TensorFlow),
    or "ops-": the update in plain TensorFlow ops (``jit_compile=False``)."""
    start, sequence = quadratic_gradients(steps=8)
    variables = [keras.Variable(w) for w in start]
    optimizer = YellowFin(curv_win_width=3, jit_compile=not mode.startswith("ops-"))
    optimizer.build(variables)
    apply = lambda grads: optimizer.apply(grads, variables)  # noqa: E731
    if not mode.endswith("eager"):
        apply = traced_apply(optimizer, variables, jit_compile=mode == "xla")
    for grads in sequence[:4]:
        apply(tensors(grads))
    before = [v.numpy().copy() for v in optimizer.variables + variables]
    poisoned = [g.copy() for g in sequence[4]]
    poisoned[1][0, 1] = bad
    apply(tensors(poisoned))
    assert int(optimizer.skipped_steps) == 1 and int(optimizer.iterations) == 4
    for value, var in zip(before, optimizer.variables + variables):
        if var is not optimizer._skipped_steps:
            np.testing.assert_array_equal(var.numpy(), value, err_msg=var.path)
    for grads in sequence[4:]:
        apply(tensors(grads))
    # The same as never having seen the bad gradient.
    reference = Reference(start, curv_win_width=3)
    for grads in sequence:
        reference.step(grads)
    for var, w in zip(variables, reference.w):
        np.testing.assert_allclose(var.numpy(), w, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("jit_compile", JIT, ids=["graph", "xla"][:len(JIT)])
def test_non_finite_gradient_leaves_keras_ema_alone(jit_compile):
    """With use_ema, Keras's moving averages of the weights stay too (on
    JAX: kept through ``run_if``'s selected values, not a cond)."""
    start, sequence = quadratic_gradients(steps=5)
    variables = [keras.Variable(w) for w in start]
    optimizer = YellowFin(curv_win_width=3, use_ema=True)
    optimizer.build(variables)
    apply = traced_apply(optimizer, variables, jit_compile)
    for grads in sequence[:4]:
        apply(tensors(grads))
    before = [v.numpy().copy() for v in optimizer.variables + variables]
    apply(tensors([np.full_like(g, np.inf) for g in sequence[4]]))
    assert int(optimizer.skipped_steps) == 1 and int(optimizer.iterations) == 4
    changed = [var.path for value, var in zip(before, optimizer.variables + variables)
               if not np.array_equal(var.numpy(), value) and var is not optimizer._skipped_steps]
    assert not changed


@pytest.mark.parametrize("jit_compile", JIT, ids=["eager", "xla"][:len(JIT)])
def test_ema_weights_start_the_variance_at_zero(jit_compile):
    """k_0 = 1 and 1 - k_0 = 0 exactly (1 - k_0 by subtraction can be -1 ulp,
    which started C at -1e-7 ||g||^2; the quotient for k_0 rounds to 1 + 2
    ulp with XLA's expm1); later k_t to float32 accuracy. "xla": compiled
    (TensorFlow, JAX; PyTorch runs it as it is)."""
    def weights(beta, t, zero_debias=True):
        return compiled(lambda step: yellowfin_tuner.ema_weights(beta, step, zero_debias),
                        jit_compile)(ops.convert_to_tensor(t, "float32"))

    k, keep = weights(0.999, 0.0)
    assert float(keep) == 0.0 and float(k) == 1.0
    for beta in (0.99, 0.9, 0.5):
        assert [float(x) for x in weights(beta, 0.0)] == [1.0, 0.0]
    for t in (1.0, 7.0, 1000.0, 1e5):
        k, keep = weights(0.999, t)
        exact = 0.001 / (1.0 - 0.999 ** (t + 1))
        assert float(k) == pytest.approx(exact, rel=1e-6)
        assert float(keep) == pytest.approx(1.0 - exact, rel=1e-6)
    k, keep = weights(0.9, 3.0, zero_debias=False)
    assert (float(k), float(keep)) == pytest.approx((0.1, 0.9), rel=1e-7)


# -- arguments and state ------------------------------------------------------------------------


@pytest.mark.parametrize("argument, value", [
    ("beta", 0.0), ("beta", 1.0), ("beta", 1.5), ("beta", -0.1), ("beta", float("nan")),
    ("curv_win_width", 0), ("curv_win_width", 2.5), ("clip_thresh", -1.0), ("clip_thresh", 0.0),
    ("learning_rate", -0.1), ("learning_rate", schedules.Fixed(0.1)), ("momentum", -0.5),
    ("momentum", 1.0), ("lr_factor", -1.0), ("lr_factor", "x"), ("stat_protect_fac", 0.0),
    ("zero_debias", "yes"), ("use_nesterov", 1), ("weight_decay", -1.0), ("clipnorm", 1.0),
    ("jit_compile", "yes"), ("jit_compile", None),
])
def test_bad_argument_is_refused_with_its_name(argument, value):
    with pytest.raises(ArgumentError) as info:
        YellowFin(**{argument: value})
    assert info.value.argument == argument
    assert str(info.value).startswith(f"YellowFin: `{argument}`")


def test_state_is_optimizer_variables():
    model = tiny_mlp()
    optimizer = YellowFin(name="yf", sparsity_debias=True, curv_win_width=7)
    optimizer.build(model.trainable_variables)
    paths = {v.path for v in optimizer.variables}
    for name in ("iteration", "yf_lr", "yf_mu", "lr_factor", "skipped_steps", "curv_win",
                 "h_min_avg", "h_max_avg", "grad_norm_sq_avg", "grad_norm_avg", "dist_avg",
                 "grad_var_avg", "sparsity_avg"):
        assert f"yf/{name}" in paths
    for v in model.trainable_variables:
        for slot in ("velocity", "grad_avg"):
            assert f"yf/{v.path.replace('/', '_')}_{slot}" in paths
    assert optimizer._curv_win.shape == (7,)
    assert math.isnan(float(optimizer.h_min))
    assert float(optimizer.tuned_learning_rate) == pytest.approx(1e-4)


def test_config_round_trip():
    optimizer = YellowFin(
        0.01, 0.3, lr_factor=schedules.Step(1.0, gamma=0.5, stepsize=3), clip_thresh=2.0,
        beta=0.99, curv_win_width=5, zero_debias=False, sparsity_debias=True,
        use_unsmoothed_lr_mu=False, h_min_log_smooth=False, h_max_log_smooth=False,
        use_adaptive_clip=False, stat_protect_fac=10.0, use_nesterov=True, weight_decay=1e-3,
        regularization_type="L1", clip_gradients=5.0, iter_size=2, lr_mult={"*/bias": 2.0},
        decay_mult={"*/bias": 0.0}, jit_compile=False)
    config = optimizer.get_config()
    assert config["jit_compile"] is False
    restored = YellowFin.from_config(copy.deepcopy(config))
    assert restored.get_config() == config
    serialized = keras.optimizers.serialize(optimizer)
    assert serialized["registered_name"] == "keras_caffe>YellowFin"
    again = keras.optimizers.deserialize(serialized)
    assert type(again) is YellowFin and again.get_config() == config
    plain = YellowFin(lr_factor=0.25)
    assert YellowFin.from_config(plain.get_config()).lr_factor == 0.25


# -- model.fit -------------------------------------------------------------------------------------


def dataset(seed=0, n=256, skip=0):
    """The seeded linear problem's batches (``support.linear_batches``)."""
    return linear_batches(seed, n, skip)


def initial_weights(seed=0):
    keras.utils.set_random_seed(seed)
    return caffe_weights(tiny_mlp())


def fit(optimizer, batches, init, jit_compile=TRACED_STEP, callbacks=(), model=None, skip=0,
        epochs=1):
    model = model or tiny_mlp(init)
    model.compile(optimizer=optimizer, loss=sparse_softmax_loss(), jit_compile=jit_compile)
    history = model.fit(dataset(skip=skip), steps_per_epoch=batches, epochs=epochs, verbose=0,
                        shuffle=False, callbacks=list(callbacks))
    return model, history


FULL = dict(learning_rate=0.05, momentum=0.5, curv_win_width=4, clip_thresh=3.0, weight_decay=1e-3,
            iter_size=2, lr_mult={"ip1/bias": 2.0}, decay_mult={"*/bias": 0.0},
            lr_factor=schedules.Step(1.0, gamma=0.5, stepsize=3), use_unsmoothed_lr_mu=False,
            beta=0.9)


@pytest.mark.skipif(BACKEND == "torch", reason="compares a compiled step with uncompiled ones; "
                    "PyTorch's compiled step (torch.compile) is left out: minutes per case")
def test_fit_graph_and_xla_agree():
    """A compiled step, an uncompiled one (on TensorFlow the update compiles
    itself) and, on TensorFlow, an update in plain ops
    (``jit_compile=False``) train alike."""
    init = initial_weights()
    graph, history = fit(YellowFin(**FULL, jit_compile=True), 24, init, jit_compile=False)
    xla, _ = fit(YellowFin(**FULL), 24, init, jit_compile=True)
    others = [graph]
    if BACKEND == "tensorflow":  # elsewhere jit_compile=False is the same update as graph's
        others.append(fit(YellowFin(**FULL, jit_compile=False), 24, init, jit_compile=False)[0])
    assert int(xla.optimizer.iterations) == 12
    assert np.isfinite(history.history["loss"][0])
    for other in others:
        for name, value in caffe_weights(xla).items():
            np.testing.assert_allclose(value, caffe_weights(other)[name], rtol=1e-4, atol=1e-5,
                                       err_msg=name)
    assert np.abs(caffe_weights(xla)["ip1_w"] - init["ip1_w"]).max() > 1e-3


def test_defaults_train_the_mlp():
    """Closed loop, defaults: the tuned rate grows out of the slow start and
    the loss falls (1.8 -> 0.6 in 120 updates)."""
    model, history = fit(YellowFin(), 20, initial_weights(), epochs=6)
    loss = history.history["loss"]
    assert loss[-1] < 0.5 * loss[0] and all(b < a for a, b in zip(loss, loss[1:]))
    optimizer = model.optimizer
    assert float(optimizer.tuned_learning_rate) > 0.1
    assert 0.1 < float(optimizer.tuned_momentum) < 0.5
    assert int(optimizer.skipped_steps) == 0


MIXED = [pytest.param(False, "auto", id="graph"), pytest.param(True, "auto", id="xla"),
         pytest.param(False, True, id="graph-xla-update", marks=pytest.mark.tensorflow_only)]


@pytest.mark.parametrize("jit_compile, update", [c for c in MIXED if c.values[0] in JIT])
def test_mixed_float16(jit_compile, update):
    """Under the LossScaleOptimizer; "graph-xla-update": the compiled update
    called from the loss scaler's cond in an uncompiled step."""
    init = initial_weights()
    config = dict(FULL, clip_thresh=None, jit_compile=update)
    reference, _ = fit(YellowFin(**config), 8, init, jit_compile=jit_compile)
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    model, history = fit(YellowFin(**config), 8, init, jit_compile=jit_compile,
                         callbacks=[YellowFinMonitor()])
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    inner = model.optimizer.inner_optimizer
    assert type(inner) is YellowFin and int(inner.iterations) == 4
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    assert history.history["yf_lr"][0] == pytest.approx(float(inner.tuned_learning_rate))
    for name, value in caffe_weights(model).items():
        ref = caffe_weights(reference)[name]
        np.testing.assert_allclose(value, ref, rtol=0, atol=2e-3 * (1 + np.abs(ref).max()),
                                   err_msg=name)


def test_save_load_resumes_exactly(tmp_path):
    """N + N batches through model.save/load_model equal 2N; saved mid
    iter_size accumulation and after the curvature window has wrapped."""
    init = initial_weights()
    reference, _ = fit(YellowFin(**FULL), 22, init)
    first, _ = fit(YellowFin(**FULL), 11, init)
    optimizer = first.optimizer
    assert int(optimizer.iterations) == 5
    path = tmp_path / "model.keras"
    first.save(path)
    resumed = keras.models.load_model(path)
    restored = resumed.optimizer
    assert type(restored) is YellowFin and int(restored.iterations) == 5
    assert len(restored.variables) == len(optimizer.variables)
    for ours, theirs in zip(restored.variables, optimizer.variables):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=ours.path)
    resumed.fit(dataset(skip=11), steps_per_epoch=11, epochs=1, verbose=0, shuffle=False)
    assert int(restored.iterations) == 11
    for name, value in caffe_weights(resumed).items():
        np.testing.assert_allclose(value, caffe_weights(reference)[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)
    for name in ("tuned_learning_rate", "tuned_momentum", "h_min", "h_max", "grad_var"):
        assert float(getattr(restored, name)) == pytest.approx(
            float(getattr(reference.optimizer, name)), rel=1e-6)


def test_gradient_without_a_static_shape_trains():
    """Traced on TensorFlow, a Dense layer on sequences of an unknown batch
    size (a generator's batches) has a kernel gradient of static shape
    (None, units): YellowFin reads the sizes from the variable (it failed
    there), and trains as on the same batches of known size (train_on_batch)."""
    rng = np.random.default_rng(5)
    x = rng.normal(size=(64, 6, 4)).astype("float32")
    y = rng.integers(0, 3, (64, 6)).astype("int32")
    weights = []
    for known in (False, True):
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((6, 4)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(3)])
        start = model.get_weights()
        model.compile(optimizer=YellowFin(0.01, curv_win_width=3), loss=sparse_softmax_loss(),
                      jit_compile=TRACED_STEP)
        batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
        if known:
            for batch in batches:
                model.train_on_batch(*batch)
        else:
            model.fit((b for b in batches), steps_per_epoch=4, epochs=1, verbose=0, shuffle=False)
        assert int(model.optimizer.iterations) == 4
        weights.append(model.get_weights())
    for unknown, known in zip(*weights):
        np.testing.assert_allclose(unknown, known, rtol=1e-6, atol=1e-7)
    assert np.abs(weights[0][0] - start[0]).max() > 1e-3  # it trained


# -- Caffe's weight decay and lr_mult ------------------------------------------------------


@pytest.mark.parametrize("kind", ["L2", "L1"])
def test_weight_decay_is_the_gradient_of_a_penalty(kind):
    """weight_decay equals weight_decay=0 plus the penalty in the loss."""
    init = initial_weights()
    decay = 0.05
    ours, _ = fit(YellowFin(0.05, weight_decay=decay, regularization_type=kind,
                            decay_mult={"*/bias": 0.0}), 10, init)
    regularizer = keras.regularizers.L2(decay / 2) if kind == "L2" else keras.regularizers.L1(decay)
    inputs = keras.Input((20,), name="data")
    x = keras.layers.Dense(16, name="ip1", kernel_regularizer=regularizer)(inputs)
    x = keras.layers.ReLU(name="relu1")(x)
    outputs = keras.layers.Dense(5, name="ip2", kernel_regularizer=regularizer)(x)
    manual = keras.Model(inputs, outputs)
    for layer in ("ip1", "ip2"):
        manual.get_layer(layer).set_weights([init[f"{layer}_w"].T, init[f"{layer}_b"]])
    manual, _ = fit(YellowFin(0.05), 10, init, model=manual)
    for name, value in caffe_weights(ours).items():
        np.testing.assert_allclose(value, caffe_weights(manual)[name], rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    assert np.abs(caffe_weights(ours)["ip1_w"] - without_weight_decay()["ip1_w"]).max() > 1e-5


@functools.lru_cache(maxsize=1)
def without_weight_decay():
    """The weights after YellowFin(0.05) without weight decay, 10 batches
    from ``initial_weights()``: the same for L2 and L1, trained once."""
    plain, _ = fit(YellowFin(0.05), 10, initial_weights())
    return caffe_weights(plain)


def test_lr_mult_scales_the_step_not_the_statistics():
    start, sequence = quadratic_gradients(steps=10)
    runs = []
    for lr_mult in (None, {"a": 0.5, "b": 2.0}):
        variables = [keras.Variable(start[0], name="a"), keras.Variable(start[1], name="b")]
        optimizer = YellowFin(lr_mult=lr_mult, curv_win_width=4)
        for grads in sequence:
            optimizer.apply(tensors(grads), variables)
        runs.append(([v.numpy() for v in variables], observed(optimizer)))
    (plain, plain_stats), (scaled, scaled_stats) = runs
    assert plain_stats == scaled_stats
    for i, mult in enumerate((0.5, 2.0)):
        np.testing.assert_allclose(scaled[i] - start[i], mult * (plain[i] - start[i]),
                                   rtol=1e-5, atol=1e-6)


def test_a_frozen_variable_has_no_gradient_for_the_statistics_either():
    """lr_mult 0 is Caffe's frozen parameter, which gets no gradient (issue
    14): YellowFin then tunes on the other variables' gradients alone, as if
    the frozen one were not there, and never moves it."""
    start, sequence = quadratic_gradients(steps=10)
    frozen = [keras.Variable(start[0], name="a"), keras.Variable(start[1], name="b")]
    optimizer = YellowFin(lr_mult={"a": 0.0}, curv_win_width=4)
    alone = keras.Variable(start[1], name="b")
    reference = YellowFin(curv_win_width=4)
    for grads in sequence:
        optimizer.apply(tensors(grads), frozen)
        reference.apply(tensors(grads[1:]), [alone])
    np.testing.assert_array_equal(frozen[0].numpy(), start[0])
    np.testing.assert_allclose(frozen[1].numpy(), alone.numpy(), rtol=1e-6, atol=1e-7)
    assert observed(optimizer) == pytest.approx(observed(reference), rel=1e-5, abs=1e-7)


# -- the monitor -------------------------------------------------------------------------


class BatchRecorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.batches = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append(dict(logs))


def test_monitor_puts_the_tuner_in_the_logs(tmp_path):
    init = initial_weights()
    recorder = BatchRecorder()
    csv = tmp_path / "log.csv"
    model, history = fit(YellowFin(0.01, curv_win_width=3), 3, init, epochs=2,
                         callbacks=[YellowFinMonitor(), keras.callbacks.CSVLogger(str(csv)),
                                    recorder])
    optimizer = model.optimizer
    keys = ("yf_lr", "yf_mu", "yf_h_min", "yf_h_max", "yf_grad_var", "yf_dist_to_opt")
    assert len(recorder.batches) == 6 and all(set(keys) <= set(b) for b in recorder.batches)
    assert recorder.batches[0]["yf_lr"] == pytest.approx(0.01)  # the first update's rate
    assert recorder.batches[0]["yf_mu"] == 0.0
    final = {"yf_lr": optimizer.tuned_learning_rate, "yf_mu": optimizer.tuned_momentum,
             "yf_h_min": optimizer.h_min, "yf_h_max": optimizer.h_max,
             "yf_grad_var": optimizer.grad_var, "yf_dist_to_opt": optimizer.dist_to_opt}
    for key, value in final.items():
        assert len(history.history[key]) == 2
        assert history.history[key][-1] == pytest.approx(float(value), rel=1e-6)
        assert recorder.batches[-1][key] == pytest.approx(float(value), rel=1e-6)
    header = csv.read_text().splitlines()[0].split(",")
    assert set(keys) <= set(header)
    assert len({b["yf_lr"] for b in recorder.batches}) > 3  # tuned at every update


def test_monitor_refuses_another_optimizer():
    model = tiny_mlp()
    with pytest.raises(KerasCaffeError, match="YellowFinMonitor: the model's optimizer is SGD"):
        fit(keras.optimizers.SGD(), 1, None, model=model, callbacks=[YellowFinMonitor()])

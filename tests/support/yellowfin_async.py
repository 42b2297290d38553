"""A simulator of asynchronous (stale-gradient) training for YellowFin, in
float64 numpy, vectorised over seeds: open- and closed-loop YellowFin as
equations, on problems whose gradients are computed at stale weights.

Used by tests/optimizers/test_yellowfin_closed_loop.py (the equations of the closed loop
against the optimizer; a smoke test of the asynchronous-workers claim), by
benchmarks/yellowfin_closed_loop.py (the claim itself, ``AsyncQuadratic``
and ``claim_failures`` below: ``make verify-claims``) and, run as a script,
prints the open- vs closed-loop study over many seeds:

    .venv/bin/python tests/support/yellowfin_async.py [quadratic|logistic|mlp|ablation|fixed|staleness|implicit]

Asynchrony (the setting of Mitliagkas et al. 2016 and of the paper's
experiments with 16 asynchronous workers): ``M`` workers each read the
weights, compute a gradient for an exponentially distributed time (mean 1)
and push it; the server applies gradients in the order they arrive, one
update each. A gradient's staleness is the number of updates between its
read and its application: random, mean ``M - 1``. ``fixed`` staleness is a
round-robin of equal workers (every gradient exactly ``M - 1`` updates old).
"""

import sys

import numpy as np

EPS = 1e-6


# -- YellowFin (defaults) ---------------------------------------------------------------


def solve_sqrt_mu(p):
    """The root in (0, 1) of p x = (1 - x)^3 (as yellowfin_tuner.solve_sqrt_mu)."""
    p = np.maximum(p, 1e-30)
    root = np.sqrt(1 + p * 4 / 27)
    a = np.cbrt(p) * np.cbrt((1 + root) / 2)
    b = p / (3 * a)
    s = p / (a * a + p / 3 + b * b)
    return np.where(s < 0.5, 1 - s, s ** 3 / p)


class YellowFinTuner:
    """YellowFin's statistics and SingleStep with its default options
    (beta 0.999, window 20, zero-debiased log-smoothed curvatures, adaptive
    clipping, unsmoothed mu and rate), for S independent runs at once."""

    def __init__(self, runs, size, learning_rate=1e-4, momentum=0.0, beta=0.999, width=20):
        self.beta, self.width, self.t = beta, width, 0
        self.rate, self.target = np.full(runs, learning_rate), np.full(runs, momentum)
        self.grad_avg = np.zeros((runs, size))
        self.window = np.zeros((runs, width))
        self.avg = {key: np.zeros(runs) for key in ("lo", "hi", "sq", "norm", "dist", "var")}
        self.h_max = None

    def tune(self, g):
        """Update the statistics with ``g``; set ``target`` (mu) and ``rate``;
        return the factor that clips the step's gradient."""
        t, avg = self.t, self.avg
        k = (1 - self.beta) / (1 - self.beta ** (t + 1))
        raw = np.sum(g * g, 1)
        scale = np.ones(len(raw))
        if t > 0:
            limit = np.sqrt(100.0 * self.h_max)
            scale = limit / np.maximum(np.sqrt(raw), limit)
        h = raw * scale ** 2
        self.window[:, t % self.width] = h + EPS
        filled = self.window[:, :min(t + 1, self.width)]

        def average(key, x):
            avg[key] = avg[key] + k * (x - avg[key])
            return avg[key]

        diff = g * scale[:, None] - self.grad_avg
        avg["var"] = (1 - k) * avg["var"] + k * (1 - k) * np.sum(diff * diff, 1)
        self.grad_avg = self.grad_avg + k * diff
        h_min = np.exp(average("lo", np.log(filled.min(1))))
        h_max = np.exp(average("hi", np.log(filled.max(1))))
        sq = average("sq", h)
        dist = average("dist", average("norm", np.sqrt(h)) / (sq + EPS))
        if t > 0:
            x = solve_sqrt_mu((dist * h_min) ** 2 / (2 * np.maximum(avg["var"], EPS)))
            ratio = np.sqrt(np.maximum(h_max / h_min, 1))
            sqrt_mu = np.maximum(x, (ratio - 1) / (ratio + 1))
            alpha = (1 - sqrt_mu) ** 2 / h_min
            self.target = sqrt_mu ** 2
            self.rate = np.minimum(alpha, alpha * (t + 1) / (10 * self.width))
            scale = scale * np.sqrt(self.h_max) / np.maximum(np.sqrt(h), np.sqrt(self.h_max))
        self.h_max = h_max
        return scale


class ClosedLoop:
    """keras_caffe.optimizers.yellowfin_feedback as equations (every
    coordinate sampled): a ring of the last tau + 2 velocities, averaged
    ratios (v_(t-tau) - g_(t-1)) / v_(t-tau-1), their median, integral
    feedback on an offset <= 0.

    ``decay``, ``floor``, ``gain`` default to the module's constants;
    ``average=False`` (the per-update median of the paper) and
    ``feed_forward=False`` (the paper's ``mu <- mu + gain (mu* - mu_T)``,
    kept in [floor, mu*]) are the ablations."""

    def __init__(self, runs, size, staleness, gain=0.01, decay=0.9, floor=-0.5,
                 average=True, feed_forward=True):
        self.tau, self.gain, self.decay, self.floor = staleness, gain, decay, floor
        self.average, self.feed_forward = average, feed_forward
        self.velocities = np.zeros((staleness + 2, runs, size))
        self.grad = np.zeros((runs, size))
        self.num, self.den = np.zeros((runs, size)), np.zeros((runs, size))
        self.offset, self.total, self.mu = np.zeros(runs), np.full(runs, np.nan), None

    def momentum(self, t, target, velocity):
        """The algorithmic momentum of update ``t`` (``velocity``: v_t)."""
        n, tau = self.tau + 2, self.tau
        self.velocities[t % n] = velocity
        if self.mu is None:
            self.mu = target.copy()
        if t >= tau + 2:
            num = self.velocities[(t - tau) % n] - self.grad
            den = self.velocities[(t - tau - 1) % n]
            if self.average:
                self.num = self.decay * self.num + (1 - self.decay) * num
                self.den = self.decay * self.den + (1 - self.decay) * den
                num, den = self.num, self.den
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = num / den
            measured = np.nanmedian(np.where(np.isfinite(ratio), ratio, np.nan), 1)
            ok = np.isfinite(measured)
            self.total = np.where(ok, measured, self.total)
            step = np.where(ok, self.gain * (target - np.where(ok, measured, 0)), 0.0)
            if self.feed_forward:
                self.offset = np.minimum(np.maximum(self.offset + step, self.floor - target), 0.0)
            else:
                self.mu = np.clip(self.mu + step, self.floor, target)
        return target + self.offset if self.feed_forward else np.minimum(self.mu, target)

    def record(self, grad):
        """This update's clipped gradient, for the next measurement."""
        self.grad = grad


# -- asynchrony --------------------------------------------------------------------------


def worker_staleness(runs, steps, workers, seed, fixed=False):
    """(steps, runs) staleness of the gradient applied at each update."""
    if fixed:
        return np.full((steps, runs), workers - 1, int)
    rng = np.random.default_rng(seed)
    out = np.zeros((steps, runs), int)
    for s in range(runs):
        finish, read = rng.exponential(size=workers), np.zeros(workers, int)
        for t in range(steps):
            i = int(np.argmin(finish))
            out[t, s] = t - read[i]
            read[i], finish[i] = t + 1, finish[i] + rng.exponential()
    return out


# -- problems: (x0 (runs, d), gradient(x, rng), loss(x)) -------------------------------


def quadratic(runs, seed, size=100, condition=1000.0, noise=0.003):
    """0.5 sum h_i x_i^2, h log-spaced in [1/condition, 1]; gradient noise
    N(0, noise^2) per coordinate."""
    h = np.logspace(-np.log10(condition), 0, size)
    x0 = np.random.default_rng(seed).normal(size=(runs, size))
    return (x0, lambda x, rng: h * x + noise * rng.normal(size=x.shape),
            lambda x: 0.5 * np.sum(h * x * x, 1))


def logistic(runs, seed, n=2000, size=50, batch=32, spread=1.0, data_seed=123):
    """Logistic regression, features scaled over ``spread`` decades,
    minibatches of ``batch``."""
    data = np.random.default_rng(data_seed)
    scales = np.logspace(0, spread, size)
    X = data.normal(size=(n, size)) * scales
    y = (data.random(n) < 1 / (1 + np.exp(-3 * X @ (data.normal(size=size) / scales)))) * 1.0
    x0 = 0.1 * np.random.default_rng(seed).normal(size=(runs, size))

    def gradient(w, rng):
        idx = rng.integers(0, n, size=(len(w), batch))
        p = 1 / (1 + np.exp(-np.einsum("sbd,sd->sb", X[idx], w)))
        return np.einsum("sb,sbd->sd", p - y[idx], X[idx]) / batch

    def loss(w):
        z = w @ X.T
        return np.mean(np.logaddexp(0, z) - y * z, 1)

    return x0, gradient, loss


def mlp(runs, seed, n=512, din=20, hidden=16, dout=5, batch=16, data_seed=7):
    """A ReLU MLP (20-16-5) with softmax cross-entropy, minibatches of ``batch``."""
    data = np.random.default_rng(data_seed)
    X = data.normal(size=(n, din))
    y = np.argmax(X @ data.normal(size=(din, dout)) + 0.5 * data.normal(size=(n, dout)), 1)
    shapes = [(din, hidden), (hidden,), (hidden, dout), (dout,)]
    sizes = [int(np.prod(s)) for s in shapes]
    rng0 = np.random.default_rng(seed)
    x0 = np.concatenate([rng0.normal(size=(runs, din * hidden)) * np.sqrt(2 / din),
                         np.zeros((runs, hidden)),
                         rng0.normal(size=(runs, hidden * dout)) * np.sqrt(1 / hidden),
                         np.zeros((runs, dout))], 1)

    def unpack(p):
        bounds = np.cumsum([0] + sizes)
        return [p[:, a:b].reshape((len(p),) + s) for a, b, s in zip(bounds, bounds[1:], shapes)]

    def forward(p, xb):
        w1, b1, w2, b2 = unpack(p)
        pre = np.einsum("sbi,sih->sbh", xb, w1) + b1[:, None]
        act = np.maximum(pre, 0)
        return pre, act, np.einsum("sbh,sho->sbo", act, w2) + b2[:, None]

    def gradient(p, rng):
        runs_ = len(p)
        idx = rng.integers(0, n, size=(runs_, batch))
        pre, act, z = forward(p, X[idx])
        e = np.exp(z - z.max(-1, keepdims=True))
        dz = e / e.sum(-1, keepdims=True)
        dz[np.arange(runs_)[:, None], np.arange(batch)[None], y[idx]] -= 1
        dz /= batch
        dh = np.einsum("sbo,sho->sbh", dz, unpack(p)[2]) * (pre > 0)
        parts = (np.einsum("sbi,sbh->sih", X[idx], dh), dh.sum(1),
                 np.einsum("sbh,sbo->sho", act, dz), dz.sum(1))
        return np.concatenate([g.reshape(runs_, -1) for g in parts], 1)

    def loss(p):
        _, _, z = forward(p, np.broadcast_to(X, (len(p),) + X.shape))
        z = z - z.max(-1, keepdims=True)
        return np.mean(np.log(np.exp(z).sum(-1)) - z[:, np.arange(n), y], 1)

    return x0, gradient, loss


PROBLEMS = {"quadratic": quadratic, "logistic": logistic, "mlp": mlp}


# -- the simulation ------------------------------------------------------------------------


def simulate(problem, runs, steps, workers, target, seed=0, closed=None, fixed=False,
             staleness=None):
    """Train ``runs`` seeds asynchronously with ``workers`` workers.

    ``target``: a loss relative to the initial loss; ``closed``: None (open
    loop) or ClosedLoop's keyword arguments, with ``staleness`` (default
    ``workers - 1``). Returns (updates to reach the target, ``steps`` when
    never; diverged; the last loss / initial loss).
    """
    x, gradient, loss = problem(runs, seed)
    rng = np.random.default_rng(seed + 1)
    delays = worker_staleness(runs, steps, workers, seed + 2, fixed)
    tuner = YellowFinTuner(runs, x.shape[1])
    loop = None if closed is None else ClosedLoop(
        runs, x.shape[1], workers - 1 if staleness is None else staleness, **closed)
    velocity, history = np.zeros_like(x), [x.copy()]
    start, hit = loss(x), np.full(runs, steps)
    for t in range(steps):
        stale = np.stack([history[max(len(history) - 1 - d, 0)][s]
                          for s, d in enumerate(delays[t])])
        g = gradient(stale, rng)
        g = g * tuner.tune(g)[:, None]
        mu = tuner.target if loop is None else loop.momentum(t, tuner.target, velocity)
        velocity = mu[:, None] * velocity + g
        x = x - tuner.rate[:, None] * velocity
        if loop is not None:
            loop.record(g)
        tuner.t += 1
        history = (history + [x.copy()])[-(delays.max() + 2):]
        now = loss(x) / start
        now = np.where(np.isfinite(now) & (now < 1e3), now, np.inf)
        hit = np.where((hit == steps) & (now < target), t + 1, hit)
    return hit, ~np.isfinite(now), now


def implicit_momentum(problem, runs, steps, workers, seed=0, skip=200):
    """The open loop's excess momentum: quartiles over updates >= ``skip`` and
    seeds of (measured total momentum - mu*), measured by the closed loop's
    estimator with the feedback off."""
    x, gradient, _ = problem(runs, seed)
    rng = np.random.default_rng(seed + 1)
    delays = worker_staleness(runs, steps, workers, seed + 2)
    tuner = YellowFinTuner(runs, x.shape[1])
    loop = ClosedLoop(runs, x.shape[1], workers - 1, gain=0.0)
    velocity, history, excess = np.zeros_like(x), [x.copy()], []
    for t in range(steps):
        stale = np.stack([history[max(len(history) - 1 - d, 0)][s]
                          for s, d in enumerate(delays[t])])
        g = gradient(stale, rng)
        g = g * tuner.tune(g)[:, None]
        mu = loop.momentum(t, tuner.target, velocity)
        velocity = mu[:, None] * velocity + g
        x = x - tuner.rate[:, None] * velocity
        loop.record(g)
        tuner.t += 1
        history = (history + [x.copy()])[-(delays.max() + 2):]
        if t >= skip:
            excess.append(loop.total - tuner.target)
    return np.percentile(excess, [25, 50, 75])


def describe(hits):
    q = np.percentile(hits, [25, 50, 75])
    return f"{q[1]:5.0f} [{q[0]:5.0f}, {q[2]:5.0f}]"


def compare(problem, runs, steps, workers, target, variants, fixed=False, seed=0):
    """One row per variant: quartiles of updates to target, wins/losses vs open."""
    rows, base = [], None
    for name, closed in variants.items():
        closed = None if closed is None else dict(closed)
        staleness = None if closed is None else closed.pop("staleness", None)
        hits, diverged, final = simulate(problem, runs, steps, workers, target, seed, closed,
                                         fixed, staleness)
        base = hits if base is None else base
        rows.append(f"{name:>14}: {describe(hits)}  closed<open {np.mean(hits < base):.2f}"
                    f"  closed>open {np.mean(hits > base):.2f}  diverged {np.mean(diverged):.2f}"
                    f"  final loss {np.median(final):.1e}")
    return rows


VARIANTS = {"open": None, "closed": {},
            "paper (as is)": dict(average=False, feed_forward=False),
            "no average": dict(average=False), "no feed-fwd": dict(feed_forward=False)}

SETTINGS = {  # name: (problem, steps, target, runs)
    "quadratic": (quadratic, 2000, 1e-3, 20),
    "logistic": (logistic, 1500, 0.1, 20),
    "mlp": (mlp, 1500, 0.1, 20),
}


# -- the claim: the real optimizer with asynchronous workers ------------------------------

#: The claim's size (benchmarks/yellowfin_closed_loop.py's defaults).
CLAIM = dict(workers=9, steps=2000, seeds=20, target=1e-3)
FASTER = 0.8  # closed loop's median updates to target < 0.8 x the open loop's
WINS = 0.8  # closed faster than open on at least this fraction of the seeds
AGREE = 0.15  # the optimizer's closed-loop median within 15% of the float64 equations'


class AsyncQuadratic:
    """The real optimizer (``keras_caffe``'s YellowFin, float32, XLA) trained
    by ``workers`` asynchronous workers on the 100-dimensional quadratic of
    ``quadratic`` (curvatures 1e-3 .. 1, gradient noise 0.003): the gradient
    applied at update t is computed at the weights of update t - staleness_t,
    ``worker_staleness``'s delays. One XLA-compiled loop per run; the
    optimizer's state is reset between seeds."""

    DEPTH = 256  # weights kept; a longer delay never occurs in these runs

    def __init__(self, closed_loop, workers, steps):
        import keras
        import tensorflow as tf

        from keras_caffe.optimizers.yellowfin import YellowFin

        self.workers, self.steps = workers, steps
        self.h = tf.constant(np.logspace(-3, 0, 100), tf.float32)
        self.w = keras.Variable(np.zeros(100, "float32"), name="w")
        self.optimizer = YellowFin(closed_loop=closed_loop, staleness=workers - 1)
        self.optimizer.build([self.w])
        self.initial = [v.numpy() for v in self.optimizer.variables]
        self.loop = tf.function(self._loop, jit_compile=True)

    def _loop(self, x0, delays, noise, target):
        import tensorflow as tf

        depth, h = self.DEPTH, self.h
        weights = tf.zeros((depth, 100)) + x0[None]
        self.w.assign(x0)
        start = 0.5 * tf.reduce_sum(h * x0 * x0)
        hit = tf.constant(self.steps)
        for t in tf.range(self.steps):
            stale = tf.gather(weights, (t - tf.minimum(delays[t], t)) % depth)
            self.optimizer.apply([h * stale + noise[t]], [self.w])
            now = tf.convert_to_tensor(self.w)
            weights = tf.tensor_scatter_nd_update(weights, [[(t + 1) % depth]], now[None])
            loss = 0.5 * tf.reduce_sum(h * now * now)
            hit = tf.where((hit == self.steps) & (loss < target * start), t + 1, hit)
        return hit, loss / start

    def run(self, seed, target):
        """Updates to reach ``target`` x the initial loss (``steps``: never),
        and the last loss / initial loss."""
        import tensorflow as tf

        for variable, value in zip(self.optimizer.variables, self.initial):
            variable.assign(value)
        x0, _, _ = quadratic(1, seed)
        delays = worker_staleness(1, self.steps, self.workers, seed + 2)[:, 0]
        assert delays.max() < self.DEPTH
        noise = 0.003 * np.random.default_rng(seed + 1).normal(size=(self.steps, 100))
        hit, last = self.loop(tf.constant(x0[0], tf.float32), tf.constant(delays, tf.int32),
                              tf.constant(noise, tf.float32), tf.constant(target, tf.float32))
        return int(hit), float(last)


def async_runs(workers, steps, seeds, target):
    """The open and the closed loop (the real optimizer) on seeds ``0 ..
    seeds - 1``, and the float64 equations' closed loop on the same: a dict
    with ``open`` and ``closed`` ((seeds, 2) arrays of updates to ``target``
    and last loss / initial loss), ``momentum`` and ``target_momentum`` (the
    closed-loop optimizer's at the end of its last run) and ``reference``
    (the equations' updates to target)."""
    out = {}
    for closed in (False, True):
        trainer = AsyncQuadratic(closed, workers=workers, steps=steps)
        out["closed" if closed else "open"] = np.array(
            [trainer.run(seed, target) for seed in range(seeds)])
        if closed:
            out["momentum"] = float(trainer.optimizer.tuned_momentum)
            out["target_momentum"] = float(trainer.optimizer.target_momentum)
    out["reference"], _, _ = simulate(quadratic, seeds, steps, workers, target, closed={})
    return out


def claim_failures(results, steps):
    """What fails of the closed-loop claim on ``async_runs``'s ``results``
    (``[]``: it holds): at the end the loop is removing momentum (mu < mu*);
    every closed-loop run ends finite; the closed loop's median updates to
    target is below ``FASTER`` x the open loop's; it is faster on at least
    ``WINS`` of the seeds; it reaches the target (in ``steps``) wherever the
    open loop does; and its median is within ``AGREE`` of the float64
    equations'."""
    out = []
    open_hits, closed_hits = results["open"][:, 0], results["closed"][:, 0]
    reference = np.median(results["reference"])
    if not results["momentum"] < results["target_momentum"]:
        out.append(f"the loop is not removing momentum at the end: mu {results['momentum']:.4f}"
                   f" >= mu* {results['target_momentum']:.4f}")
    if not np.all(np.isfinite(results["closed"][:, 1])):
        out.append(f"closed loop ended non-finite: {results['closed'][:, 1].tolist()}")
    if not np.median(closed_hits) < FASTER * np.median(open_hits):
        out.append(f"closed-loop median {np.median(closed_hits):.0f} >= {FASTER} x open-loop "
                   f"median {np.median(open_hits):.0f}")
    if not np.mean(closed_hits < open_hits) >= WINS:
        out.append(f"closed loop faster on {np.mean(closed_hits < open_hits):.2f} of the seeds "
                   f"< {WINS}")
    missed = (open_hits < steps) & (closed_hits >= steps)
    if np.any(missed):
        out.append(f"closed loop never reaches the target where the open loop does: seeds "
                   f"{np.flatnonzero(missed).tolist()}")
    if not abs(reference - np.median(closed_hits)) < AGREE * reference:
        out.append(f"closed-loop median {np.median(closed_hits):.0f} not within {AGREE:.0%} of "
                   f"the float64 equations' {reference:.0f}")
    return out


def main(which):
    if which == "ablation":
        variants = {"open": None, "closed": {}}
        for key, values in (("decay", (0.8, 0.95, 0.99)), ("floor", (0.0, -0.9)),
                            ("gain", (0.003, 0.03))):
            variants.update({f"{key}={v}": {key: v} for v in values})
        for workers in (5, 9, 17):
            print(f"quadratic, {workers} workers")
            print(*compare(quadratic, 20, 2000, workers, 1e-3, variants), sep="\n")
        return
    if which == "implicit":
        for name in ("quadratic", "mlp"):
            problem, steps, _, _ = SETTINGS[name]
            for workers in (1, 5, 9, 17):
                q = implicit_momentum(problem, 8, steps, workers)
                print(f"{name}, {workers} workers, open loop: total momentum - mu* = "
                      f"{q[1]:.3f} [{q[0]:.3f}, {q[2]:.3f}]", flush=True)
        return
    if which == "staleness":  # the optimizer told a wrong staleness
        for workers, assumed in ((1, (2, 8)), (9, (0, 2, 4, 16, 32))):
            print(f"quadratic, {workers} workers, closed loop told staleness s")
            print(*compare(quadratic, 20, 2000, workers, 1e-3, {"open": None, **{
                f"s={s}": {"staleness": s} for s in assumed}}), sep="\n", flush=True)
        return
    problem, steps, target, runs = SETTINGS.get(which, SETTINGS["quadratic"])
    fixed = which == "fixed"
    for workers in (1, 5, 9, 17):
        print(f"{which}, {workers} {'round-robin' if fixed else 'asynchronous'} workers, "
              f"updates to {target:g} x initial loss, {runs} seeds")
        print(*compare(problem, runs, steps, workers, target,
                       {"open": None, "closed": {}} if workers == 1 else VARIANTS, fixed),
              sep="\n", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quadratic")

"""keras_caffe.YellowFin against the authors' TensorFlow 1 YFOptimizer, step by step.

    git clone https://github.com/JianGoForIt/YellowFin   # or any checkout of it
    python benchmarks/yellowfin_vs_authors.py --authors YellowFin [--steps 30] [--every 1]

Both optimizers get the SAME fixed sequence of gradients (open loop: a noisy
quadratic's gradients along a path x_t -> 0, computed beforehand, with one
exploding gradient at step 12), fed to theirs through placeholders and to
ours as constants. After every step the script compares the rate and
momentum each optimizer assigned, its h_min, h_max, gradient variance C,
distance D, and the weights, and prints the maximum relative difference
|ours - theirs| / |theirs| (weights: over all entries, relative to the
largest |weight|), for the four combinations of smoothing
(``use_unsmoothed_lr_mu``) and clipping (off; ``clip_thresh`` + adaptive
clipping on). The C columns also compare both with C computed in float64
from the same gradients where that needs no clipping decision (clipping off).

Their code is run as it is, under ``tensorflow.compat.v1`` in graph mode,
with two shims applied from outside (nothing in their file is edited or
copied):

1. ``tuner_utils/yellowfin.py`` is imported from the checkout (through
   ``sys.path``) while ``sys.modules["tensorflow"]`` is ``tf.compat.v1``, so
   its ``import tensorflow as tf`` gets the TF1 API
   (``tf.train.MomentumOptimizer``, ``tf.log``, ``tf.assign``,
   ``tf.scatter_update``, ``tf.to_float``, ...) that TensorFlow 2 keeps there;
2. its global ``ops`` (``tensorflow.python.framework.ops``) is replaced by a
   proxy that adds ``IndexedSlices``, which that module no longer has
   (``AttributeError`` in ``grad_variance`` without it).

What the comparison shows (TensorFlow 2.21, 30 steps): every statistic agrees to about 1e-4 relative or
better, except where their float32 arithmetic loses digits, and the weights
differ because their momentum step does not use the rate and momentum it
has just computed:

- their ``MomentumOptimizer`` gets ``YF_lr * lr_factor`` and ``YF_mu +
  delta_mu`` as tensors built in ``__init__``, outside the control
  dependency on the hyperparameter assignment, so each step reads the
  variables before or after that assignment as the executor happens to
  order it (a race). A float64 replay of heavy-ball momentum with the
  previous step's lr and mu reproduces their weights (to 2e-7 .. 1e-3, the
  race deciding), one with the same step's misses by 35% (unsmoothed, where
  the rate drops from 0.01 to 1e-7 at the first tuned step). Ours steps with
  the values of the same update, as the paper's Algorithm 1 does;
- their C is ``avg(||g||^2) - ||avg(g)||^2`` in float32, which cancels when
  the gradient's noise is small next to its mean (here C ~ 1e-3 ||g||^2):
  6e-3 off the float64 value at step 1; ours, the same quantity in the
  incremental form ``C <- (1 - k) C + k (1 - k) ||g - avg(g)||^2``, is within
  3e-6 of it;
- ``tf.train.ExponentialMovingAverage`` debiases with ``1 - pow(1 - (1 -
  beta), t)`` in float32, 1e-5 relative off at small t; in the log-smoothed
  h_min/h_max (log h ~ 11) that is the 8e-5 of the first steps;
- their SingleStep adds EPS = 1e-6 to D, h_min and C inside the cubic and
  to h_min in the rate; with D ~ 2e-3 here that moves mu by ~1e-4, and the
  rate ``(1 - sqrt(mu))^2 / h_min`` amplifies it 1 / (1 - sqrt(mu)) times;
- their log-smoothed curvatures take ``log(h + EPS)`` of samples that
  already hold ``||g||^2 + EPS``, and their cubic root (Vieta, ``y = w - p /
  3 / (w + EPS)``) cancels for large ``p``: invisible here.
"""

import argparse
import contextlib
import importlib
import math
import os
import sys
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tensorflow.python.framework import ops as tf_ops  # noqa: E402

import keras_caffe  # noqa: E402

SHAPES = [(64, 32), (32,)]
STATS = ("lr", "mu", "h_min", "h_max", "grad_var", "dist_to_opt")
CONFIGS = {
    "unsmoothed, clipping off": dict(use_unsmoothed_lr_mu=True, clip=False),
    "unsmoothed, clipping on": dict(use_unsmoothed_lr_mu=True, clip=True),
    "smoothed, clipping off": dict(use_unsmoothed_lr_mu=False, clip=False),
    "smoothed, clipping on": dict(use_unsmoothed_lr_mu=False, clip=True),
}
# ||g|| falls from 470 to 240 over the first 13 steps and is 10100 at the
# spike (step 12), where clip_thresh, the protection at 10 sqrt(h_max) and
# the clip to sqrt(h_max) all act.
CLIP_THRESH = 8000.0


def gradient_sequence(steps, seed=0):
    """The noisy quadratic's gradients g_t = H x0 0.95^t + noise (float32),
    curvatures over two decades, x40 at step 12; and the starting weights."""
    rng = np.random.default_rng(seed)
    curv = [np.logspace(-1, 1, math.prod(s)).reshape(s) for s in SHAPES]
    x0 = [rng.normal(size=s) * 3 for s in SHAPES]
    out = []
    for t in range(steps):
        g = [c * x * 0.95 ** t + 0.3 * rng.normal(size=c.shape) for c, x in zip(curv, x0)]
        out.append([(x * (40.0 if t == 12 else 1.0)).astype("float32") for x in g])
    start = [np.full(s, 0.5, "float32") for s in SHAPES]
    return start, out


@contextlib.contextmanager
def tf1_as_tensorflow():
    """While their module is imported, ``import tensorflow`` gives
    ``tensorflow.compat.v1`` (the shim; their file stays untouched)."""
    saved = sys.modules["tensorflow"]
    sys.modules["tensorflow"] = tf.compat.v1
    try:
        yield
    finally:
        sys.modules["tensorflow"] = saved


class _OpsWithIndexedSlices(types.ModuleType):
    """``tensorflow.python.framework.ops`` plus the ``IndexedSlices`` it had in
    TF 1 (their ``grad_variance`` tests ``isinstance(g, ops.IndexedSlices)``;
    TensorFlow 2.21 keeps the class in ``framework.indexed_slices`` only)."""

    IndexedSlices = tf.IndexedSlices

    def __getattr__(self, name):
        return getattr(tf_ops, name)


def load_authors(checkout):
    """Their ``YFOptimizer`` class, from ``checkout/tuner_utils/yellowfin.py``,
    with the two shims: TF1 as ``tensorflow`` during the import, and ``ops``
    with ``IndexedSlices`` in the module's globals."""
    folder = Path(checkout) / "tuner_utils"
    if not (folder / "yellowfin.py").is_file():
        raise SystemExit(f"--authors: {folder / 'yellowfin.py'} not found (give the root of "
                         "a JianGoForIt/YellowFin checkout)")
    sys.path.insert(0, str(folder))
    try:
        with tf1_as_tensorflow():
            module = importlib.import_module("yellowfin")
    finally:
        sys.path.remove(str(folder))
    module.ops = _OpsWithIndexedSlices("ops")
    return module.YFOptimizer


def run_authors(yf_class, start, sequence, options):
    """Their optimizer in a TF1 graph: per step, the fetched statistics and the weights."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        variables = [v1.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
        feeds = [v1.placeholder(tf.float32, w.shape) for w in start]
        optimizer = yf_class(**options)
        train = optimizer.apply_gradients(zip(feeds, variables))
        # The tensors the step computes (their _lr/_mu are what it assigns).
        fetch = dict(lr=optimizer._lr, mu=optimizer._mu, h_min=optimizer._h_min,
                     h_max=optimizer._h_max, grad_var=optimizer._grad_var,
                     dist_to_opt=optimizer._dist_to_opt_avg)
        init = v1.global_variables_initializer()
    records = []
    with v1.Session(graph=graph) as session:
        session.run(init)
        for grads in sequence:
            _, stats = session.run([train, fetch], dict(zip(feeds, grads)))
            records.append(({k: float(v) for k, v in stats.items()}, session.run(variables)))
    return records


def run_ours(start, sequence, options):
    """keras_caffe.YellowFin on the same gradients: per step, its state and the weights."""
    variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
    optimizer = keras_caffe.YellowFin(**options)
    step = tf.function(lambda grads: optimizer.apply(grads, variables))
    records = []
    for grads in sequence:
        step([tf.constant(g) for g in grads])
        stats = dict(lr=optimizer.tuned_learning_rate, mu=optimizer.tuned_momentum,
                     h_min=optimizer.h_min, h_max=optimizer.h_max, grad_var=optimizer.grad_var,
                     dist_to_opt=optimizer.dist_to_opt)
        records.append(({k: float(v) for k, v in stats.items()}, [v.numpy() for v in variables]))
    return records


def exact_variance(sequence, beta=0.999):
    """C per step in float64 for unclipped gradients: the zero-debiased
    averages' avg(||g||^2) - ||avg(g)||^2, floored at 1e-6 as both do."""
    out, sq, mean = [], 0.0, [np.zeros(s) for s in SHAPES]
    for t, grads in enumerate(sequence):
        g = [x.astype(np.float64) for x in grads]
        sq = beta * sq + (1 - beta) * sum(float(np.sum(x * x)) for x in g)
        mean = [beta * m + (1 - beta) * x for m, x in zip(mean, g)]
        debias = 1 - beta ** (t + 1)
        var = sq / debias - sum(float(np.sum((m / debias) ** 2)) for m in mean)
        out.append(max(var, 1e-6))
    return out


def replay(start, sequence, rates, momenta, lag, initial):
    """Heavy-ball momentum in float64 on the (unclipped) gradients with the
    given per-step rates and momenta, or with the previous step's (``lag``;
    ``initial`` at step 0): the weights after each step."""
    w = [x.astype(np.float64) for x in start]
    v = [np.zeros_like(x) for x in w]
    out = []
    for t, grads in enumerate(sequence):
        lr, mu = (rates[t - 1], momenta[t - 1]) if lag and t else \
            (initial if lag else (rates[t], momenta[t]))
        v = [mu * a + g for a, g in zip(v, grads)]
        w = [x - lr * a for x, a in zip(w, v)]
        out.append(w)
    return out


def relative(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def weights_difference(ours, theirs):
    scale = max(float(np.max(np.abs(w))) for w in theirs)
    return max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs)) / scale


def compare(yf_class, name, config, start, sequence, every):
    common = dict(learning_rate=0.01, momentum=0.0, beta=0.999, curv_win_width=5,
                  use_unsmoothed_lr_mu=config["use_unsmoothed_lr_mu"])
    clip = dict(clip_thresh=CLIP_THRESH) if config["clip"] else dict(clip_thresh=None)
    theirs = run_authors(yf_class, start, sequence, dict(
        common, **clip, use_adapt_grad_clip=config["clip"]))
    ours = run_ours(start, sequence, dict(common, **clip, use_adaptive_clip=config["clip"]))
    exact = None if config["clip"] else exact_variance(sequence)
    columns = list(STATS) + ["weights"] + (["C ours/f64", "C theirs/f64"] if exact else [])
    print(f"\n{name}: max relative difference, ours vs the authors'")
    print(f"{'step':>5} " + " ".join(f"{c:>12}" for c in columns))
    worst = dict.fromkeys(columns, 0.0)
    for t, ((mine, w_mine), (ref, w_ref)) in enumerate(zip(ours, theirs)):
        row = {k: relative(mine[k], ref[k]) for k in STATS}
        row["weights"] = weights_difference(w_mine, w_ref)
        if exact:
            row["C ours/f64"] = relative(mine["grad_var"], exact[t])
            row["C theirs/f64"] = relative(ref["grad_var"], exact[t])
        worst = {k: max(worst[k], row[k]) for k in columns}
        if t % every == 0 or t == len(sequence) - 1:
            print(f"{t:>5} " + " ".join(f"{row[c]:12.2e}" for c in columns))
    print(f"{'max':>5} " + " ".join(f"{worst[c]:12.2e}" for c in columns))
    if not config["clip"]:
        # Which rate and momentum did their MomentumOptimizer step with?
        rates = [stats["lr"] for stats, _ in theirs]
        momenta = [stats["mu"] for stats, _ in theirs]
        for lag, label in ((False, "this step's"), (True, "the previous step's")):
            replayed = replay(start, sequence, rates, momenta, lag,
                              (common["learning_rate"], common["momentum"]))
            gap = max(weights_difference(a, w) for a, (_, w) in zip(replayed, theirs))
            print(f"  their weights vs momentum SGD replayed (float64) with {label} "
                  f"lr and mu they computed: max relative difference {gap:.2e}")
    last_mine, last_ref = ours[-1][0], theirs[-1][0]
    print("  after the last step: lr {:.4g} / {:.4g}, mu {:.4g} / {:.4g} (ours / theirs)".format(
        last_mine["lr"], last_ref["lr"], last_mine["mu"], last_ref["mu"]))
    return worst


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--authors", required=True, metavar="DIR",
                        help="root of a JianGoForIt/YellowFin checkout")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--every", type=int, default=1, help="print every N-th step")
    args = parser.parse_args()
    yf_class = load_authors(args.authors)
    start, sequence = gradient_sequence(args.steps)
    print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}; {args.steps} steps, "
          f"{sum(math.prod(s) for s in SHAPES)} parameters, the same gradients fed to both")
    summary = {name: compare(yf_class, name, config, start, sequence, args.every)
               for name, config in CONFIGS.items()}
    print("\nsummary: max over the steps")
    columns = list(STATS) + ["weights"]
    print(f"{'':26} " + " ".join(f"{c:>11}" for c in columns))
    for name, worst in summary.items():
        print(f"{name:26} " + " ".join(f"{worst[c]:11.2e}" for c in columns))


if __name__ == "__main__":
    main()

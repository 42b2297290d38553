"""YellowFin's "no tuning" experiment: two seeded learning problems, each
trained with YellowFin's defaults and with hand-tuned baselines.

The one home of the experiment: benchmarks/yellowfin_no_tuning.py runs it at
the claim's size and checks the claim (``claim_failures``; ``make
verify-claims`` runs it over seeds 0, 1, 2 and fails when the claim does),
tests/optimizers/test_yellowfin_no_tuning.py runs the same code path at a tiny size (a
smoke test: the pipeline, the verdict and the checks, not the claim).

The claim (keras-caffe issue 4): in the same number of steps, YellowFin with
its defaults reaches a training loss within 10% of the best of momentum SGD
(mu = 0.9, lr in {0.001, 0.01, 0.1, 1.0}) and within 10% of the best of Adam
(lr in {1e-4, 1e-3, 1e-2}): ``yf <= 1.1 * best`` for each family.

- Training loss: the mean loss of the batches of the last tenth of the steps,
  as ``fit`` measured them (the loss each batch had before its update); that
  is the loss ``fit`` logs for the last of its ten epochs.
- Every optimizer of a task starts from the same weights (one
  ``keras.utils.set_random_seed``, one model) and sees the same batches in
  the same order. XLA (``jit_compile=True`` on TensorFlow and JAX; PyTorch
  runs op by op, its torch.compile taking minutes), 10 steps per execution (1
  on PyTorch, the one value it takes); the
  baselines are Keras's own ``keras.optimizers.SGD(momentum=0.9)`` and
  ``keras.optimizers.Adam``. A family's rates share one compiled model:
  ``restart`` puts weights and optimizer state back to step 0 between rates
  (the test checks that this equals a new optimizer to the bit).
- A run whose loss ends NaN or inf has diverged; it cannot be a family's best.
- One pass over fresh data: by default a task draws ``steps x batch`` samples,
  so no batch is seen twice and the training loss estimates the expected
  loss. (With 2048 samples seen 16 times, every good run memorised them and
  the claim compared ratios of losses near 0, 0.04 against 0.07: who
  memorises faster, not who learns the structure better.)
- 1000 steps: YellowFin's slow start (its rate times (t + 1) / 200 for the
  first 200 updates, the authors' default) is a fifth of a run, not the two
  thirds it is of 300 steps.

Tasks (the data is seeded; its structure is what has to be learned):

- ``cnn``: 16x16 grey images of a noisy Gabor patch (an oriented grating under
  a Gaussian window at a random place, random phase and contrast, plus pixel
  noise); the class is orientation (4) x spatial frequency band (2) = 8.
  Three 3x3 convolutions (16, 32, 32 filters, ReLU, two max-pools), global
  average pooling, a dense softmax layer.
- ``lstm``: next-token prediction on sequences of a seeded order-2 Markov
  chain over 16 tokens (each context's successor distribution drawn from a
  Dirichlet(0.1), so a few successors dominate). Embedding (16 -> 32), one
  LSTM of 64 units, a dense softmax layer over the 16 tokens. The true
  chain's loss on the same targets (the floor no model can beat on average)
  is reported with the table.
"""

import math
import time
from dataclasses import dataclass, field

import keras
import numpy as np

import keras_caffe
from keras_caffe.callbacks import YellowFinMonitor
from keras_caffe.errors import ArgumentError

SGD_RATES = (0.001, 0.01, 0.1, 1.0)
SGD_MOMENTUM = 0.9
ADAM_RATES = (1e-4, 1e-3, 1e-2)
FAMILIES = ("SGD", "Adam", "YellowFin")
TOLERANCE = 1.1  # "within 10%": yf <= 1.1 * best
STEPS = 1000  # per run: the slow start (10 x curv_win_width = 200 updates) is a fifth
WINDOWS = 10  # fit epochs per run; the last one is the measured tenth
#: Fewer Python round trips; the numbers are the same as with 1 (the one
#: value Keras's PyTorch trainer takes).
STEPS_PER_EXECUTION = 1 if keras.backend.backend() == "torch" else 10
#: The training step compiled with XLA (TensorFlow, JAX); PyTorch's compiled
#: step (torch.compile) takes minutes, so it runs op by op there.
JIT_COMPILE = keras.backend.backend() != "torch"
CHANCE = {"cnn": math.log(8), "lstm": math.log(16)}  # loss of a uniform prediction
LEARNED = 0.6  # the tasks are learned: the best run ends below 0.6 x chance
BARELY = 0.95  # the grids need tuning: some finite run ends above 0.95 x chance
TUNED_LR = 1e-3  # YellowFin tuned its rate: above 1e-3 (its learning_rate=1e-4) all along
TUNED_MU = (0.05, 1.0)  # and its momentum: in (0.05, 1) at the end of each tenth


# -- data -------------------------------------------------------------------------------


def gabor_images(n, size=16, noise=0.5, seed=0):
    """``n`` images (n, size, size, 1) and labels in [0, 8).

    Label ``k``: orientation ``(k % 4) * 45`` degrees, spatial frequency
    0.12-0.17 cycles/pixel for ``k < 4``, 0.27-0.35 for ``k >= 4``. Image:
    ``c * cos(2 pi f (x cos t + y sin t) + phase) * exp(-r^2 / (2 s^2))``, with
    a centre uniform in the middle half, ``s`` in [2.5, 4] pixels, contrast
    ``c`` in [0.5, 1.5], plus N(0, noise^2) per pixel.
    """
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 8, n)
    theta = (labels % 4) * (np.pi / 4) + rng.uniform(-0.1, 0.1, n)
    freq = np.where(labels < 4, rng.uniform(0.12, 0.17, n), rng.uniform(0.27, 0.35, n))
    phase = rng.uniform(0, 2 * np.pi, n)
    centre = rng.uniform(size * 0.25, size * 0.75, (n, 2))
    sigma = rng.uniform(2.5, 4.0, n)
    contrast = rng.uniform(0.5, 1.5, n)
    yy, xx = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    dx = xx[None] - centre[:, 0, None, None]
    dy = yy[None] - centre[:, 1, None, None]
    along = dx * np.cos(theta)[:, None, None] + dy * np.sin(theta)[:, None, None]
    wave = np.cos(2 * np.pi * freq[:, None, None] * along + phase[:, None, None])
    window = np.exp(-(dx ** 2 + dy ** 2) / (2 * sigma[:, None, None] ** 2))
    images = contrast[:, None, None] * wave * window + rng.normal(0, noise, (n, size, size))
    return images[..., None].astype("float32"), labels.astype("int32")


def markov_sequences(n, length=24, vocab=16, concentration=0.1, seed=0):
    """``n`` token sequences of an order-2 Markov chain, as (inputs, targets, floor).

    The first two tokens are uniform; token ``t >= 2`` follows ``P[x_{t-2},
    x_{t-1}]``, each row drawn from ``Dirichlet(concentration)``. ``inputs``
    are tokens ``0..length-2``, ``targets`` tokens ``1..length-1``. ``floor``
    is the true chain's mean cross-entropy on these targets (nats): ``log
    vocab`` for the second token, ``-log P[x_{t-2}, x_{t-1}, x_t]`` after.
    """
    rng = np.random.RandomState(seed)
    table = rng.dirichlet(np.full(vocab, concentration), size=(vocab, vocab))
    cumulative = np.cumsum(table, axis=-1)
    seqs = np.empty((n, length), np.int64)
    seqs[:, :2] = rng.randint(0, vocab, (n, 2))
    nll = np.empty((n, length - 1))
    nll[:, 0] = math.log(vocab)
    for t in range(2, length):
        rows = cumulative[seqs[:, t - 2], seqs[:, t - 1]]
        seqs[:, t] = np.minimum((rng.uniform(size=(n, 1)) > rows).sum(-1), vocab - 1)
        nll[:, t - 1] = -np.log(table[seqs[:, t - 2], seqs[:, t - 1], seqs[:, t]])
    return seqs[:, :-1].astype("int32"), seqs[:, 1:].astype("int32"), float(nll.mean())


# -- models -----------------------------------------------------------------------------


def small_cnn(size=16, classes=8):
    inputs = keras.Input((size, size, 1))
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(32, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name="small_cnn")


def small_lstm(vocab=16, length=23):
    inputs = keras.Input((length,), dtype="int32")
    x = keras.layers.Embedding(vocab, 32)(inputs)
    x = keras.layers.LSTM(64, return_sequences=True)(x)
    return keras.Model(inputs, keras.layers.Dense(vocab)(x), name="small_lstm")


# -- tasks ------------------------------------------------------------------------------


@dataclass
class Task:
    """A seeded learning problem: its data, a model factory and its run length."""

    name: str
    description: str
    x: np.ndarray
    y: np.ndarray
    make_model: object
    steps: int
    batch: int
    floor: float = math.nan  # the best achievable loss, where known
    seed: int = 0

    def dataset(self):
        """The run's batches: seeded permutations of the data, one per epoch,
        so that every optimizer sees the same batches in the same order (a
        generator of ``steps`` batches, which any backend's ``fit`` takes)."""
        rng = np.random.RandomState(self.seed + 1)
        needed = self.steps * self.batch
        order = np.concatenate([rng.permutation(len(self.x))
                                for _ in range(-(-needed // len(self.x)))])[:needed]
        x, y = self.x[order], self.y[order]
        return ((x[i:i + self.batch], y[i:i + self.batch])
                for i in range(0, needed, self.batch))


def cnn_task(steps=STEPS, batch=32, samples=None, size=16, seed=0):
    samples = samples or steps * batch
    x, y = gabor_images(samples, size=size, seed=seed)
    return Task("cnn", f"small CNN, {samples} Gabor images {size}x{size}, 8 classes",
                x, y, lambda: small_cnn(size), steps, batch, seed=seed)


def lstm_task(steps=STEPS, batch=32, samples=None, length=24, seed=0):
    samples = samples or steps * batch
    x, y, floor = markov_sequences(samples, length=length, seed=seed)
    return Task("lstm", f"small LSTM, {samples} order-2 Markov sequences of {length} tokens",
                x, y, lambda: small_lstm(length=length - 1), steps, batch, floor, seed=seed)


# -- optimizers -------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    family: str  # "SGD", "Adam" or "YellowFin"
    rate: float  # math.nan for YellowFin (it tunes its own)
    make: object
    options: tuple = ()  # YellowFin's non-default arguments, as (name, value) pairs

    @property
    def label(self):
        if self.family == "YellowFin":
            return "YellowFin (" + (", ".join(f"{k}={v}" for k, v in self.options)
                                    or "defaults") + ")"
        return f"{self.family} lr={self.rate:g}"


def candidates(yellowfin=None):
    """Momentum SGD and Adam at each of the issue's rates, then YellowFin: with
    its defaults, or with the arguments in the dict ``yellowfin`` (benchmark
    only: the claim is about the defaults)."""
    out = [Candidate("SGD", lr, lambda lr=lr: keras.optimizers.SGD(lr, momentum=SGD_MOMENTUM))
           for lr in SGD_RATES]
    out += [Candidate("Adam", lr, lambda lr=lr: keras.optimizers.Adam(lr)) for lr in ADAM_RATES]
    options = dict(yellowfin or {})
    out.append(Candidate("YellowFin", math.nan, lambda: keras_caffe.YellowFin(**options),
                         tuple(sorted(options.items()))))
    return out


# -- training ---------------------------------------------------------------------------


@dataclass
class Run:
    """One optimizer on one task."""

    candidate: Candidate
    loss: float  # mean training loss over the last tenth of the steps
    curve: list  # mean training loss of each tenth
    seconds: float  # fit's wall time (the first run of a family includes XLA compilation)
    yf_lr: list = field(default_factory=list)  # at the end of each tenth (YellowFin only)
    yf_mu: list = field(default_factory=list)

    @property
    def diverged(self):
        return not math.isfinite(self.loss)


def restart(model, optimizer, initial_weights, rate):
    """Put ``model`` and its built Keras ``optimizer`` back to step 0 at ``rate``.

    Every optimizer variable (``iterations``, the slots) goes back to 0, as a
    new Keras SGD or Adam starts, and the rate variable is set: the compiled
    train function is kept, so a learning-rate sweep compiles once per family.
    (Not for YellowFin, whose state does not all start at 0: it has one run.)
    """
    model.set_weights(initial_weights)
    for variable in optimizer.variables:
        variable.assign(np.zeros(variable.shape, variable.dtype))
    optimizer.learning_rate = rate


def train_family(task, family, initial_weights, progress=None, yellowfin=None):
    """Every candidate of ``family`` on ``task`` from ``initial_weights``: Runs.

    One model and one optimizer per family, compiled with XLA once; before each
    rate, ``restart`` resets weights and optimizer state.
    """
    chosen = [c for c in candidates(yellowfin) if c.family == family]
    keras.utils.set_random_seed(task.seed)
    model = task.make_model()
    optimizer = chosen[0].make()
    model.compile(optimizer=optimizer, jit_compile=JIT_COMPILE, steps_per_execution=math.gcd(
                      STEPS_PER_EXECUTION, task.steps // WINDOWS),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    callbacks = [YellowFinMonitor()] if family == "YellowFin" else []
    runs = []
    for index, candidate in enumerate(chosen):
        if index == 0:
            model.set_weights(initial_weights)
        else:
            restart(model, optimizer, initial_weights, candidate.rate)
        start = time.perf_counter()
        history = model.fit(task.dataset(), epochs=WINDOWS,
                            steps_per_epoch=task.steps // WINDOWS, callbacks=callbacks,
                            shuffle=False, verbose=0).history
        runs.append(Run(candidate, float(history["loss"][-1]),
                        [float(v) for v in history["loss"]], time.perf_counter() - start,
                        history.get("yf_lr", []), history.get("yf_mu", [])))
        if progress:
            progress(task, runs[-1])
    return runs


def run_task(task, progress=None, yellowfin=None):
    """Every candidate on ``task`` from the same initial weights: a list of Runs
    (``progress(task, run)`` is called after each; ``yellowfin``: see
    ``candidates``)."""
    if task.steps % WINDOWS or task.steps <= 0:
        raise ArgumentError("yellowfin_tasks", "steps",
                            f"must be a positive multiple of {WINDOWS}, got {task.steps}")
    keras.utils.set_random_seed(task.seed)
    initial = task.make_model().get_weights()
    runs = []
    for family in FAMILIES:
        runs += train_family(task, family, initial, progress, yellowfin)
    return runs


@dataclass
class Verdict:
    """The claim on one task: YellowFin against each family's best."""

    yellowfin: Run
    best: dict  # family -> its best Run (None if every run diverged)

    def ratio(self, family):
        """YellowFin's loss over the family's best: NaN if YellowFin diverged,
        0 if it did not and every run of the family did."""
        best = self.best[family]
        if self.yellowfin.diverged:
            return math.nan
        return 0.0 if best is None else self.yellowfin.loss / best.loss

    def holds(self, family):
        """``yf <= 1.1 * best`` (False when YellowFin diverged)."""
        return self.ratio(family) <= TOLERANCE

    @property
    def passed(self):
        return all(self.holds(family) for family in self.best)


def verdict(runs):
    """The ``Verdict`` of one task's runs."""
    best = {}
    for family in ("SGD", "Adam"):
        finite = [r for r in runs if r.candidate.family == family and not r.diverged]
        best[family] = min(finite, key=lambda r: r.loss) if finite else None
    (yellowfin,) = [r for r in runs if r.candidate.family == "YellowFin"]
    return Verdict(yellowfin, best)


# -- the claim ----------------------------------------------------------------------------


def claim_failures(task, runs):
    """What fails of the claim on one task's runs (``[]``: it holds).

    - YellowFin (defaults) within 10% of the best of each family:
      ``Verdict.holds``;
    - the task is learned and needs tuning: the best finite run ends below
      ``LEARNED`` x chance, some finite run above ``BARELY`` x chance (a rate
      of the grid barely learns) and, on the LSTM, above the true chain's
      loss ``floor``, itself above 1 nat;
    - YellowFin tuned its rate and momentum: at the end of every tenth its
      rate is finite and above ``TUNED_LR`` and its momentum in ``TUNED_MU``.
    """
    where = f"{task.name} seed {task.seed}"
    out = []
    verdict_ = verdict(runs)
    yellowfin = verdict_.yellowfin
    for family, best in verdict_.best.items():
        if not verdict_.holds(family):
            against = "every run diverged" if best is None else \
                f"{best.candidate.label} {best.loss:.4f}"
            out.append(f"{where}: YellowFin {yellowfin.loss:.4f} vs best {family} ({against}): "
                       f"ratio {verdict_.ratio(family):.3f} > {TOLERANCE}")
    finite = [r.loss for r in runs if not r.diverged]
    chance = CHANCE[task.name]
    if not finite or min(finite) >= LEARNED * chance:
        out.append(f"{where}: not learned: best loss {min(finite, default=math.nan):.4f} "
                   f">= {LEARNED} x chance ({LEARNED * chance:.4f})")
    if not finite or max(finite) <= BARELY * chance:
        out.append(f"{where}: needs no tuning: every run ends at or below {BARELY} x chance "
                   f"({BARELY * chance:.4f}); worst {max(finite, default=math.nan):.4f}")
    if math.isfinite(task.floor) and not (1.0 < task.floor < min(finite, default=math.nan)):
        out.append(f"{where}: the floor {task.floor:.4f} is not in (1, best loss "
                   f"{min(finite, default=math.nan):.4f})")
    lr, mu = np.array(yellowfin.yf_lr, float), np.array(yellowfin.yf_mu, float)
    if lr.shape != (WINDOWS,) or mu.shape != (WINDOWS,):
        out.append(f"{where}: YellowFin's rate and momentum were not logged for each tenth")
    else:
        if not (np.all(np.isfinite(lr)) and np.all(lr > TUNED_LR)):
            out.append(f"{where}: YellowFin's rate not tuned above {TUNED_LR:g}: "
                       + " ".join(f"{v:.3g}" for v in lr))
        if not np.all((mu > TUNED_MU[0]) & (mu < TUNED_MU[1])):
            out.append(f"{where}: YellowFin's momentum not in {TUNED_MU}: "
                       + " ".join(f"{v:.3g}" for v in mu))
    return out


# -- where it ran --------------------------------------------------------------------------


def machine(cpuinfo="/proc/cpuinfo"):
    """One line for a claim's record: CPU model, its SIMD flags, logical CPUs,
    the CPU kernel family TensorFlow uses here, TensorFlow's and Keras's
    versions, the load average (the claim benchmarks print it first)."""
    import os
    import re
    from pathlib import Path

    import tensorflow as tf  # here: TensorFlow optional (the claim benchmarks run on it)

    from keras_caffe.kernels import onednn_enabled

    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        text = ""
    found = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    wanted = ("avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile")
    simd = sorted(set(flags.group(1).split()) & set(wanted)) if flags else []
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    return (f"{found.group(1).strip() if found else 'unknown CPU'} ({' '.join(simd) or 'no AVX2'}"
            f"), {os.cpu_count()} CPUs, {'oneDNN' if onednn_enabled() else 'Eigen'} kernels; "
            f"TensorFlow {tf.__version__}, Keras {keras.__version__}; load average {load}")

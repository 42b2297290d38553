"""A small ResNet trained with YellowFin; its tuned lr and momentum, plotted.

    python examples/yellowfin_cifar.py [--data cifar-10-batches-py] [--steps 500] [--batch 64]
                                       [--depth 20] [--out yellowfin_cifar.png] [--csv]
                                       [--no-xla] [--samples 10000] [--width 16] [--seed 0]

Trains a CIFAR ResNet (He et al. 2016: depth 6n+2, three stages of n basic
blocks with 16/32/64 filters, BatchNorm, global average pooling) with
``keras_caffe.YellowFin()`` at its defaults, XLA (unless ``--no-xla``), one
``model.fit``.

Data: CIFAR-10's training batches when ``--data`` names the python version's
folder (``data_batch_1`` ... ``data_batch_5``; nothing is downloaded).
Otherwise seeded synthetic CIFAR-shaped data: 32x32x3 images of a coloured
oriented grating under a Gaussian window at a random place, on a noisy
coloured background; the class is the orientation (5 angles) x the colour
(warm or cool), 10 classes.

``keras_caffe.callbacks.YellowFinMonitor`` puts the tuned rate ``yf_lr`` and
momentum ``yf_mu`` into the logs at every batch. Each step's loss is recovered
from the epoch's running mean that ``fit`` logs: ``loss_k = k m_k - (k - 1)
m_(k-1)`` (float32 means: about 1e-7 x k relative error). With matplotlib
(``pip install 'keras-caffe[plots]'``) the script writes a PNG with three panels
(loss, lr on a log scale, mu over steps) and the series as JSON in the PNG's
``yellowfin`` text chunk; without it, or with ``--csv``, a CSV of step, loss,
yf_lr, yf_mu. Both are written atomically. The defaults take about 5 minutes on
two busy CPU cores.
"""

import argparse
import io
import json
import math
import os
import pickle
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_caffe  # noqa: E402
from keras_caffe import KerasCaffeError  # noqa: E402
from keras_caffe.callbacks import YellowFinMonitor  # noqa: E402

CIFAR_BATCHES = [f"data_batch_{i}" for i in range(1, 6)]


# -- data ---------------------------------------------------------------------------------


class _ArrayUnpickler(pickle.Unpickler):
    """Unpickles CIFAR's batches (dicts of bytes, lists and numpy arrays) and
    refuses every other class, so a hostile file cannot run code."""

    ALLOWED = {("numpy", "ndarray"), ("numpy", "dtype"),
               ("numpy.core.multiarray", "_reconstruct"),
               ("numpy._core.multiarray", "_reconstruct")}

    def find_class(self, module, name):
        if (module, name) not in self.ALLOWED:
            raise pickle.UnpicklingError(f"refused class {module}.{name}")
        return super().find_class(module, name)


def load_cifar(folder, limit):
    """CIFAR-10's training images (N, 32, 32, 3) float32 (per-channel
    standardised) and labels, at most ``limit`` of them."""
    images, labels = [], []
    for name in CIFAR_BATCHES:
        path = Path(folder) / name
        try:
            with open(path, "rb") as f:
                batch = _ArrayUnpickler(f, encoding="bytes").load()
            data = np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32)
            label = np.asarray(batch[b"labels"], np.int32)
        except (OSError, pickle.UnpicklingError, EOFError, KeyError, TypeError,
                ValueError) as err:
            raise KerasCaffeError(
                f"{path}: not a CIFAR-10 python batch ({type(err).__name__}: {err}); --data "
                "names the folder of data_batch_1 ... data_batch_5") from None
        if len(label) != len(data):
            raise KerasCaffeError(f"{path}: {len(data)} images but {len(label)} labels")
        images.append(data.transpose(0, 2, 3, 1))
        labels.append(label)
        if sum(map(len, labels)) >= limit:
            break
    x = np.concatenate(images)[:limit].astype("float32")
    x = (x - x.mean(axis=(0, 1, 2))) / x.std(axis=(0, 1, 2))
    return x, np.concatenate(labels)[:limit]


def synthetic_cifar(n, seed=0):
    """``n`` seeded CIFAR-shaped images and labels in [0, 10).

    Label ``k``: a grating at ``(k % 5) * 36`` degrees, 0.1-0.25 cycles/pixel,
    random phase, under a Gaussian window (sigma 4-7 px, centre in the middle
    half), coloured warm (k < 5: RGB ~ (1, 0.6, 0.2)) or cool (~ (0.2, 0.6,
    1)) with +-0.2 jitter per channel, contrast 0.6-1.4, on a background of
    a random colour plus N(0, 0.4^2) pixel noise.
    """
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, n).astype("int32")
    theta = (labels % 5) * (np.pi / 5) + rng.uniform(-0.08, 0.08, n)
    freq = rng.uniform(0.1, 0.25, n)
    phase = rng.uniform(0, 2 * np.pi, n)
    centre = rng.uniform(8, 24, (n, 2))
    sigma = rng.uniform(4, 7, n)
    colour = np.where((labels < 5)[:, None], [1.0, 0.6, 0.2], [0.2, 0.6, 1.0])
    colour = colour + rng.uniform(-0.2, 0.2, (n, 3))
    yy, xx = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    dx, dy = xx[None] - centre[:, :1, None], yy[None] - centre[:, 1:, None]
    along = dx * np.cos(theta)[:, None, None] + dy * np.sin(theta)[:, None, None]
    wave = np.cos(2 * np.pi * freq[:, None, None] * along + phase[:, None, None])
    window = np.exp(-(dx ** 2 + dy ** 2) / (2 * sigma[:, None, None] ** 2))
    pattern = (rng.uniform(0.6, 1.4, n)[:, None, None] * wave * window)[..., None]
    background = rng.uniform(-0.5, 0.5, (n, 1, 1, 3))
    images = pattern * colour[:, None, None, :] + background + rng.normal(0, 0.4, (n, 32, 32, 3))
    return images.astype("float32"), labels


# -- model --------------------------------------------------------------------------------


def resnet(depth=20, width=16, classes=10):
    """CIFAR ResNet-``depth`` (6n+2): He et al. 2016, section 4.2."""
    blocks = (depth - 2) // 6
    inputs = keras.Input((32, 32, 3))
    x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(inputs)
    x = keras.layers.ReLU()(keras.layers.BatchNormalization()(x))
    for stage in range(3):
        filters = width * 2 ** stage
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = keras.layers.Conv2D(filters, 3, stride, padding="same", use_bias=False)(x)
            y = keras.layers.ReLU()(keras.layers.BatchNormalization()(y))
            y = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(y)
            y = keras.layers.BatchNormalization()(y)
            if stride != 1 or x.shape[-1] != filters:
                x = keras.layers.Conv2D(filters, 1, stride, use_bias=False)(x)
            x = keras.layers.ReLU()(keras.layers.Add()([x, y]))
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, keras.layers.Dense(classes)(x), name=f"resnet{depth}")


# -- recording and plotting ---------------------------------------------------------------


class StepRecorder(keras.callbacks.Callback):
    """Each step's loss, ``yf_lr`` and ``yf_mu`` (list it after YellowFinMonitor).

    ``fit`` logs the running mean ``m_k`` of the epoch's first ``k`` batch
    losses; batch ``k``'s own loss is ``k m_k - (k - 1) m_(k-1)``
    (several batches averaged when ``steps_per_execution`` > 1).
    """

    def __init__(self):
        super().__init__()
        self.series = {"step": [], "loss": [], "yf_lr": [], "yf_mu": []}
        self._seen, self._mean = 0, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self._seen, self._mean = 0, 0.0

    def on_train_batch_end(self, batch, logs=None):
        seen, mean = batch + 1, float(logs["loss"])
        loss = (seen * mean - self._seen * self._mean) / max(seen - self._seen, 1)
        self._seen, self._mean = seen, mean
        self.series["step"].append(len(self.series["step"]) + 1)
        self.series["loss"].append(loss)
        self.series["yf_lr"].append(float(logs["yf_lr"]))
        self.series["yf_mu"].append(float(logs["yf_mu"]))


def write_atomically(path, data):
    """``data`` to ``path`` through a temporary file in the same folder and a
    rename: a crash leaves the old file or the new one, never a partial one."""
    path = Path(path)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise


def csv_bytes(series):
    rows = ["step,loss,yf_lr,yf_mu"]
    rows += [f"{s},{loss!r},{lr!r},{mu!r}" for s, loss, lr, mu in
             zip(series["step"], series["loss"], series["yf_lr"], series["yf_mu"])]
    return ("\n".join(rows) + "\n").encode()


def png_bytes(series, title):
    """The three panels as PNG bytes, the series as JSON in a ``yellowfin`` chunk."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    steps = series["step"]
    fig, (ax_loss, ax_lr, ax_mu) = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    ax_loss.plot(steps, series["loss"], lw=0.6, alpha=0.5, label="batch loss")
    window = max(1, len(steps) // 20)
    if len(steps) >= window:
        smooth = np.convolve(series["loss"], np.ones(window) / window, mode="valid")
        ax_loss.plot(steps[window - 1:], smooth, lw=1.5, label=f"mean of {window}")
    ax_loss.set_ylabel("training loss")
    ax_loss.legend(loc="upper right")
    ax_lr.semilogy(steps, series["yf_lr"], color="tab:red")
    ax_lr.set_ylabel("tuned lr (yf_lr)")
    ax_mu.plot(steps, series["yf_mu"], color="tab:green")
    ax_mu.set_ylabel("tuned momentum (yf_mu)")
    ax_mu.set_ylim(0, 1)
    ax_mu.set_xlabel("step")
    for ax in (ax_loss, ax_lr, ax_mu):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100,
                metadata={"Software": "keras-caffe examples/yellowfin_cifar.py",
                          "yellowfin": json.dumps(series)})
    plt.close(fig)
    return buffer.getvalue()


def have_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


# -- main ---------------------------------------------------------------------------------


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, help="CIFAR-10 python batches folder "
                        "(cifar-10-batches-py); default: synthetic CIFAR-shaped data")
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--depth", type=int, default=20, help="ResNet depth, 6n+2 (8, 14, 20, ...)")
    parser.add_argument("--width", type=int, default=16, help="first stage's filters")
    parser.add_argument("--samples", type=int, default=10000, help="training images used")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("yellowfin_cifar.png"),
                        help="the PNG (the CSV goes to the same name with .csv)")
    parser.add_argument("--csv", action="store_true", help="write the CSV, not the PNG")
    parser.add_argument("--no-xla", action="store_true",
                        help="no XLA (compiles faster: for runs of a few steps)")
    args = parser.parse_args(argv)
    for name in ("steps", "batch", "width", "samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.depth < 8 or (args.depth - 2) % 6:
        parser.error(f"--depth must be 6n+2 with n >= 1 (8, 14, 20, ...), got {args.depth}")
    if args.samples < args.batch:
        parser.error(f"--samples ({args.samples}) must be at least --batch ({args.batch})")
    if not args.out.resolve().parent.is_dir():
        parser.error(f"--out {args.out}: the folder {args.out.resolve().parent} does not exist")
    return parser, args


def main(argv=None):
    parser, args = parse_args(argv)
    keras.utils.set_random_seed(args.seed)
    if args.data is not None:
        try:
            x, y = load_cifar(args.data, args.samples)
        except KerasCaffeError as err:
            parser.error(str(err))
        source = f"CIFAR-10 from {args.data} ({len(x)} training images)"
    else:
        x, y = synthetic_cifar(args.samples, args.seed)
        source = (f"synthetic CIFAR-shaped data ({len(x)} seeded images, 10 classes: "
                  "orientation x colour; no CIFAR-10 given with --data)")
    print(f"data: {source}")

    model = resnet(args.depth, args.width)
    optimizer = keras_caffe.YellowFin()
    model.compile(optimizer=optimizer, jit_compile=not args.no_xla, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    data = (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(len(x), seed=args.seed)
            .repeat().batch(args.batch, drop_remainder=True))
    recorder = StepRecorder()
    start = time.perf_counter()
    history = model.fit(data, epochs=1, steps_per_epoch=args.steps, verbose=0, shuffle=False,
                        callbacks=[YellowFinMonitor(), recorder]).history
    seconds = time.perf_counter() - start
    series = recorder.series

    tenth = max(1, args.steps // 10)
    first, last = np.mean(series["loss"][:tenth]), np.mean(series["loss"][-tenth:])
    print(f"model: ResNet-{args.depth} (width {args.width}, {model.count_params():,} "
          f"parameters), YellowFin() defaults, batch {args.batch}"
          + ("" if args.no_xla else ", XLA"))
    print(f"trained {args.steps} steps in {seconds:.1f} s: loss {first:.4f} (first {tenth} "
          f"steps) -> {last:.4f} (last {tenth}), accuracy {history['accuracy'][-1]:.3f} "
          "(epoch mean)")
    print(f"YellowFin at the end: lr {series['yf_lr'][-1]:.4g}, mu {series['yf_mu'][-1]:.4g}"
          f" (lr from {min(series['yf_lr']):.3g} to {max(series['yf_lr']):.3g})")
    if not all(map(math.isfinite, series["loss"])):
        print("warning: the loss became NaN or inf")

    title = f"YellowFin, ResNet-{args.depth}, " + ("CIFAR-10" if args.data else "synthetic data")
    if not args.csv and have_matplotlib():
        write_atomically(args.out, png_bytes(series, title))
        print(f"wrote {args.out} (loss, lr, mu over steps)")
    else:
        path = args.out.with_suffix(".csv")
        write_atomically(path, csv_bytes(series))
        print(f"wrote {path} (step, loss, yf_lr, yf_mu)")
        if not args.csv:
            print("matplotlib is not installed: `pip install 'keras-caffe[plots]'` gives the PNG")
    return 0


if __name__ == "__main__":
    sys.exit(main())

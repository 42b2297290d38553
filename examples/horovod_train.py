"""Data-parallel training of a small CNN with Horovod and Caffe's SGD.

    horovodrun -np 2 -H localhost:2 --gloo python examples/horovod_train.py
    python examples/horovod_train.py                 # one worker, same script
    ... examples/horovod_train.py --yellowfin        # YellowFin instead of SGD

    [--epochs 3] [--batch 32] [--samples 4096] [--out DIR] [--seed 0] [--display 20]

The FireCaffe / Caffe2 recipe with ``keras_caffe.distributed``:

- ``kd.init(seed)`` starts Horovod (one worker without ``horovodrun``); each
  worker reads its own share of the data (``kd.shard``) and trains on
  batches of ``--batch``, so the global batch is ``P * batch``.
- ``keras_caffe.SGD`` with Caffe's semantics: momentum 0.9, coupled L2
  weight decay 5e-4, ``lr_mult`` 2 and ``decay_mult`` 0 for biases, and
  Caffe's ``step`` lr policy (``base_lr`` 0.01, gamma 0.1 at 3/4 of the
  run). The policy is wrapped in ``kd.ScaledLearningRate``: the rate is
  scaled by ``P`` for the ``P``-times larger batch and warmed up linearly
  over the first epoch (Goyal et al. 2017). ``--yellowfin`` trains with
  ``keras_caffe.YellowFin()`` instead, which tunes its own rate.
- ``kd.DistributedOptimizer`` averages the gradients of all workers in one
  all-reduce per step; ``BroadcastGlobalState`` starts every worker from
  rank 0's weights; ``MetricAverage`` averages the epoch's metrics
  (training and validation, each worker validating its share) over the
  workers.
- ``CaffeLogger`` prints Caffe's training log and ``CaffeSnapshot`` writes
  ``cnn_iter_N`` snapshots at every epoch's end into ``--out DIR`` (by
  default a fresh temporary folder, ``horovod_train-*`` under the system's
  temporary directory): on rank 0 only, which names the folder before
  training and the files in it at the end.
- ``kd.failures()`` turns a lost worker into one ``DistributedError``.

Data: seeded synthetic 16x16 grey images of a sinusoidal grating at one of
eight orientations (the class, 22.5 degrees apart) with a random phase and frequency, under
Gaussian noise. Rank 0 prints the final (worker-averaged) loss and accuracy
on the training and validation sets. Without Horovod the script prints how
to install it (one line) and exits with status 1. About 15 s on two busy
CPU cores under ``horovodrun -np 2``.
"""

import argparse
import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_caffe  # noqa: E402
import keras_caffe.distributed as kd  # noqa: E402
from keras_caffe.callbacks import (  # noqa: E402
    BroadcastGlobalState, CaffeLogger, CaffeSnapshot, MetricAverage)

CLASSES = 8
SIZE = 16


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32, help="per-worker batch")
    parser.add_argument("--samples", type=int, default=4096, help="training images")
    parser.add_argument("--yellowfin", action="store_true", help="YellowFin instead of SGD")
    parser.add_argument("--out", metavar="DIR",
                        help="the folder of the cnn_iter_N snapshots, created if needed "
                             "(default: a fresh temporary folder); printed by rank 0")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--display", type=int, default=20, help="log every N iterations")
    args = parser.parse_args(argv)
    for name in ("epochs", "batch", "samples", "display"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    return args


def gratings(n, seed):
    """``n`` images (n, 16, 16, 1) float32 and their classes: a grating at
    angle ``class * 45`` degrees, random phase and frequency, plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, CLASSES, n)
    angle = labels * np.pi / CLASSES + rng.normal(0.0, 0.08, n)
    freq = rng.uniform(0.5, 1.1, n)
    phase = rng.uniform(0.0, 2 * np.pi, n)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE] - (SIZE - 1) / 2.0
    along = np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy
    images = np.sin(freq[:, None, None] * along + phase[:, None, None])
    images += rng.normal(0.0, 1.5, images.shape)
    return images[..., None].astype("float32"), labels.astype("int32")


def cnn():
    inputs = keras.Input((SIZE, SIZE, 1), name="data")
    x = keras.layers.Conv2D(16, 3, activation="relu", name="conv1")(inputs)
    x = keras.layers.MaxPooling2D(2, name="pool1")(x)
    x = keras.layers.Conv2D(32, 3, activation="relu", name="conv2")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool2")(x)
    outputs = keras.layers.Dense(CLASSES, name="ip1")(x)
    return keras.Model(inputs, outputs, name="grating_cnn")


def make_optimizer(args, iterations, warmup):
    if args.yellowfin:
        return keras_caffe.YellowFin()
    policy = keras_caffe.schedules.Step(base_lr=0.01, gamma=0.1,
                                        stepsize=max(1, 3 * iterations // 4))
    return keras_caffe.SGD(kd.ScaledLearningRate(policy, warmup_steps=warmup), momentum=0.9,
                           weight_decay=5e-4, lr_mult={"*/bias": 2.0}, decay_mult={"*/bias": 0.0})


def snapshot_folder(args, me):
    """``--out``, else on rank 0 a fresh temporary folder (the other ranks
    write no snapshot, so they make none; ``CaffeSnapshot`` ignores their
    prefix)."""
    if args.out:
        return os.path.abspath(args.out)
    return tempfile.mkdtemp(prefix="horovod_train-") if me.is_chief else tempfile.gettempdir()


def main(argv=None):
    args = parse_args(argv)
    try:
        me = kd.init(seed=args.seed)
    except kd.HorovodUnavailableError as err:
        print(err, file=sys.stderr)
        return 1

    x, y = gratings(args.samples, args.seed)
    x_val, y_val = gratings(max(args.samples // 4, me.size * args.batch), args.seed + 1)
    per_worker = len(x) // me.size
    steps_per_epoch = per_worker // args.batch
    if steps_per_epoch < 1:
        print(f"--samples {args.samples} gives each of {me.size} workers fewer than --batch "
              f"{args.batch} images", file=sys.stderr)
        return 2
    iterations = steps_per_epoch * args.epochs

    train = (kd.shard(tf.data.Dataset.from_tensor_slices((x, y)))
             .shuffle(per_worker, seed=args.seed, reshuffle_each_iteration=True)
             .batch(args.batch, drop_remainder=True).repeat())
    val = kd.shard(tf.data.Dataset.from_tensor_slices((x_val, y_val))).batch(args.batch)

    out = snapshot_folder(args, me)
    if me.is_chief:
        print(f"snapshots go to {out}", flush=True)
    model = cnn()
    optimizer = kd.DistributedOptimizer(make_optimizer(args, iterations, steps_per_epoch))
    model.compile(optimizer=optimizer, jit_compile=False,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    callbacks = [BroadcastGlobalState(), MetricAverage(),
                 CaffeLogger(display=args.display),
                 CaffeSnapshot(os.path.join(out, "cnn"), steps_per_epoch, keep=2)]
    with kd.failures(lambda: f"iteration {int(optimizer.iterations.numpy())}"):
        history = model.fit(train, epochs=args.epochs, steps_per_epoch=steps_per_epoch,
                            validation_data=val, callbacks=callbacks, shuffle=False,
                            verbose=0)

    if me.is_chief:
        last = {k: v[-1] for k, v in history.history.items()}
        solver = "YellowFin" if args.yellowfin else "SGD (step policy, scaled x%d)" % me.size
        print(f"{me.size} worker(s), global batch {me.size * args.batch}, {iterations} "
              f"iterations of {solver}")
        print(f"final: loss {last['loss']:.4f} accuracy {last['accuracy']:.4f} "
              f"val_loss {last['val_loss']:.4f} val_accuracy {last['val_accuracy']:.4f}")
        written = callbacks[3].written
        print(f"snapshots in {out}: "
              f"{', '.join(os.path.basename(f.solverstate) for f in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

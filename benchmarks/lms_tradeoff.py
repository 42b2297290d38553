"""LMS trade-off: peak memory and step time without LMS and with three thresholds.

    python benchmarks/lms_tradeoff.py [--batch 16] [--steps 5] [--thresholds 6000 3000 0]

One net (a deep VGG-like plain conv net: 3 stages of 10 x (Conv 3x3 + ReLU),
96x96x16 -> 48x48x32 -> 24x24x64 with 2x2 max pooling between stages, global
pooling, Dense(10); 63 layers), one training step = forward, backward and a
keras_caffe.SGD update in a ``tf.function``. At batch 16 one activation of
the stages is 9216, 4608 and 2304 KB, so the thresholds 6000, 3000 and 0 KB
rematerialize stage 1, stages 1-2, and everything.

Each configuration runs in a fresh subprocess, so its memory is its own.
Peak memory is the process's ``ru_maxrss`` (peak resident set) after the
steps, minus ``ru_maxrss`` after building and tracing the step and before
running it: the memory the step itself takes (activations, gradients,
workspace). On a CPU host memory is the device memory, so this is the memory
LMS is meant to save. Step time is the fastest of ``--steps`` steps after one
warm-up step (the fastest, not the median: on a shared machine other
processes only ever add time).
"""

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time


SIZE = 96


def build(batch):
    import keras

    x = inputs = keras.Input((SIZE, SIZE, 16), name="data")
    channels = 16
    for stage in range(3):
        for i in range(10):
            x = keras.layers.Conv2D(channels, 3, padding="same", name=f"conv{stage}_{i}")(x)
            x = keras.layers.ReLU(name=f"relu{stage}_{i}")(x)
        if stage < 2:
            x = keras.layers.MaxPooling2D(2, name=f"pool{stage}")(x)
            channels *= 2
    x = keras.layers.GlobalAveragePooling2D(name="gap")(x)
    return keras.Model(inputs, keras.layers.Dense(10, name="fc")(x), name="vgg_like")


def child(threshold, batch, steps):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import keras
    import numpy as np
    import tensorflow as tf

    import keras_caffe
    from keras_caffe.lms.policy import LMS

    keras.utils.set_random_seed(0)
    model = build(batch)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.standard_normal((batch, SIZE, SIZE, 16)).astype("float32"))
    y = tf.constant(rng.integers(0, 10, batch).astype("int32"))
    if threshold is not None:
        LMS(threshold_kb=threshold, batch=batch).apply(model)
    optimizer = keras_caffe.SGD(learning_rate=0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    step.get_concrete_function(x, y)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        loss = float(step(x, y))
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    remat = 0
    if threshold is not None:
        remat = sum(len(b.nodes) for b in model.caffe_lms.blocks[batch] if b.kind == "remat")
    print(json.dumps({"threshold": threshold, "step_memory": peak - before, "peak_rss": peak,
                      "step_time": min(times[1:]), "loss": loss,
                      "remat_layers": remat, "layers": len(model.layers) - 1}))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--thresholds", type=float, nargs=3, default=[6000, 3000, 0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        child(None if args.child == "none" else float(args.child), args.batch, args.steps)
        return 0
    rows = []
    for threshold in [None, *args.thresholds]:
        out = subprocess.run([sys.executable, __file__, "--child",
                              "none" if threshold is None else repr(threshold),
                              "--batch", str(args.batch), "--steps", str(args.steps)],
                             capture_output=True, text=True, check=True,
                             env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    import tensorflow as tf

    from keras_caffe.kernels import cpu_kernels, cpu_model

    print(f"machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} cores; TensorFlow "
          f"{tf.__version__} with {cpu_kernels()} CPU kernels; batch {args.batch}; fastest of "
          f"{args.steps} steps")
    base = rows[0]
    print(f"{'LMS threshold':>14} | {'remat layers':>12} | {'step memory':>11} | "
          f"{'peak RSS':>9} | {'step time':>9} | trade-off")
    for row in rows:
        name = "off" if row["threshold"] is None else f"{row['threshold']:g} KB"
        mem = row["step_memory"] / base["step_memory"] - 1
        slow = row["step_time"] / base["step_time"] - 1
        trade = "" if row is base else f"{mem:+.0%} step memory for {slow:+.0%} step time"
        print(f"{name:>14} | {row['remat_layers']:>5} of {row['layers']:<3} | "
              f"{row['step_memory'] / 2 ** 20:>7.0f} MiB | {row['peak_rss'] / 2 ** 20:>5.0f} MiB | "
              f"{row['step_time']:>7.2f} s | {trade}")
        if abs(row["loss"] - base["loss"]) > 1e-6 * abs(base["loss"]):
            print(f"  loss differs: {row['loss']!r} vs {base['loss']!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

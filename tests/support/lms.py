"""Helpers of the LMS tests, and the child process of the memory-ceiling test.

``python lms.py ceiling {none|lms|roomy}`` builds a deep plain conv
stack, caps the process's data segment (RLIMIT_DATA) at what it uses before
the step plus half the activations' bytes (``roomy``: plus twice them,
without LMS: the control that the plain step fits given the memory), and
trains one step; it prints ``STEP OK <loss> peak ...`` if the step
completes. LMS runs with ``batch_parts`` (under Eigen, convolutions
recompute over parts of the batch). ``peak-none`` / ``peak-lms`` /
``peak-whole-lms`` (LMS without ``batch_parts``) set no ceiling and print the step's
peak data segment (docs/lms.md's table).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402


def conv_stack(depth=6, channels=8, size=16, dropout=False, batchnorm=False, name="stack"):
    """``depth`` x (Conv2D 3x3 + ReLU), global pooling, Dense(10) logits."""
    x = inputs = keras.Input((size, size, channels), name="data")
    for i in range(depth):
        x = keras.layers.Conv2D(channels, 3, padding="same", name=f"conv{i}")(x)
        if batchnorm and i == 1:
            x = keras.layers.BatchNormalization(name=f"bn{i}")(x)
        x = keras.layers.ReLU(name=f"relu{i}")(x)
        if dropout and i == 2:
            x = keras.layers.Dropout(0.5, seed=3, name=f"drop{i}")(x)
    x = keras.layers.GlobalAveragePooling2D(name="pool")(x)
    return keras.Model(inputs, keras.layers.Dense(10, name="fc")(x), name=name)


def batch_for(model, n, seed=0):
    rng = np.random.default_rng(seed)
    shape = (n, *model.inputs[0].shape[1:])
    return rng.standard_normal(shape).astype("float32"), rng.integers(0, 10, n).astype("int32")


def loss_and_grads(model, x, y, training=True, compiled=True):
    """One forward/backward in a ``tf.function`` (``compiled=False``: eagerly,
    a plain ``tf.GradientTape`` step): (loss, [gradients]); the loss
    includes ``model.losses`` (what layers add in their call), as
    ``model.fit`` counts them."""
    import tensorflow as tf

    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=training))
            loss = loss + sum(model.losses)
        return loss, tape.gradient(loss, model.trainable_variables)

    loss, grads = (tf.function(step) if compiled else step)(tf.constant(x), tf.constant(y))
    return float(loss), [g.numpy() for g in grads]


def max_relative(a, b):
    """max |a - b| / max |a| over a list of arrays (0 where a is all 0)."""
    worst = 0.0
    for u, v in zip(a, b):
        scale = float(np.max(np.abs(u))) or 1.0
        worst = max(worst, float(np.max(np.abs(u - v))) / scale)
    return worst


# -- the memory-ceiling child -------------------------------------------------------------

DEPTH, BATCH, SIZE, CHANNELS = 24, 64, 64, 16


def _vm_data():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


class PeakSampler:
    """The largest VmData seen, sampled every 0.5 ms on a thread."""

    def __init__(self):
        import threading

        self.peak, self._stop = _vm_data(), threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.wait(0.0005):
            self.peak = max(self.peak, _vm_data())

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self.peak


def ceiling_child(mode):
    """``none`` / ``lms`` / ``roomy``: under the ceiling (see the module
    docstring); ``peak-none`` / ``peak-lms`` / ``peak-whole-lms``: no ceiling, print the step's
    peak data segment over its start (docs/lms.md's table)."""
    import logging
    import resource

    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
    keras.utils.set_random_seed(0)
    model = conv_stack(DEPTH, CHANNELS, SIZE, name="ceiling")
    x, y = batch_for(model, BATCH)
    model(x[:2])  # builds everything the step needs except the activations
    activations = 2 * DEPTH * BATCH * SIZE * SIZE * CHANNELS * 4
    start = _vm_data()
    if not mode.startswith("peak-"):
        limit = start + (2 * activations if mode == "roomy" else activations // 2)
        resource.setrlimit(resource.RLIMIT_DATA, (limit, resource.RLIM_INFINITY))
        print(f"RLIMIT_DATA {limit} activations {activations}", flush=True)
    if mode.endswith("lms"):
        from keras_caffe.lms.policy import LMS

        # under the ceiling, frac 0.5 must see it and switch LMS on; without one, always on.
        # Under Eigen, convolutions recompute over parts of the batch (no change elsewhere)
        LMS(threshold_kb=1000, frac=0.0 if mode.startswith("peak-") else 0.5,
            batch_parts=not mode.endswith("whole-lms")).apply(model)
    sampler = PeakSampler()
    loss, _ = loss_and_grads(model, x, y)
    peak = sampler.stop() - start
    print(f"STEP OK {loss:.9g} peak {peak / 2 ** 20:.0f} MiB over the start "
          f"(ceiling: {activations // 2 / 2 ** 20:.0f} MiB)", flush=True)


if __name__ == "__main__":
    MODES = ("none", "lms", "roomy", "peak-none", "peak-lms", "peak-whole-lms")
    if len(sys.argv) == 3 and sys.argv[1] == "ceiling" and sys.argv[2] in MODES:
        ceiling_child(sys.argv[2])
    else:
        sys.exit(f"usage: {sys.argv[0]} ceiling {'|'.join(MODES)}")

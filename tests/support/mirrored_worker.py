"""``model.fit`` under ``tf.distribute.MirroredStrategy`` on two logical CPU
devices against one device with the whole batch, for tests/optimizers/test_mirrored.py.

``python mirrored_worker.py OUT CASE...``: splits the CPU into two logical
devices (before TensorFlow starts), then for each CASE (a name of
``CASES``) fits a small MLP for 4 epochs of 4 steps three times: on one
device with batch 16; under ``MirroredStrategy(["CPU:0", "CPU:1"])`` with
global batch 16 (8 per replica); on one device without clipping (to show the
clipping clips). Writes ``OUT/CASE.npz``: ``one_*``, ``noclip_*`` (weights),
``mirrored_r{d}_*`` (device d's copy of each weight), ``opt_r{d}_*``
(device d's copy of each optimizer variable), ``iterations`` (one, mirrored).
"""

import sys

import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])

import keras  # noqa: E402

import keras_caffe  # noqa: E402
from solver_cases import SHARED  # noqa: E402  (support/solver_cases.py)
from solver_cases import CASES as SOLVER_CASES  # noqa: E402

# YellowFin's update both as TensorFlow ops and XLA-compiled
CASES = dict(SOLVER_CASES,
             yellowfin=("YellowFin", dict(learning_rate=0.1, jit_compile=False)))
CASES["yellowfin-xla"] = ("YellowFin", dict(learning_rate=0.1, jit_compile=True))


def build(case, clip=True):
    keras.utils.set_random_seed(7)
    name, own = CASES[case]
    kwargs = dict(SHARED, **own)
    if not clip:
        kwargs["clip_gradients"] = None
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, name="ip1"),
                              keras.layers.ReLU(), keras.layers.Dense(3, name="ip2")])
    model.compile(optimizer=getattr(keras_caffe, name)(**kwargs), loss="mse")
    return model


def fit(model, x, y):
    model.fit(x, y, batch_size=16, epochs=4, shuffle=False, verbose=0)


def local(strategy, variable):
    return [np.asarray(v.numpy()) for v in strategy.experimental_local_results(variable.value)]


def run(out, case):
    data = np.random.RandomState(3)
    x = data.randn(64, 6).astype("float32")
    y = data.randn(64, 3).astype("float32")
    found = {}
    one = build(case)
    fit(one, x, y)
    noclip = build(case, clip=False)
    fit(noclip, x, y)
    strategy = tf.distribute.MirroredStrategy(["CPU:0", "CPU:1"])
    with strategy.scope():
        mirrored = build(case)
    fit(mirrored, x, y)
    for i, (a, b, c) in enumerate(zip(one.weights, noclip.weights, mirrored.weights)):
        found[f"one_{i}"] = a.numpy()
        found[f"noclip_{i}"] = b.numpy()
        for d, value in enumerate(local(strategy, c)):
            found[f"mirrored_r{d}_{i}"] = value
    for i, v in enumerate(mirrored.optimizer.variables):
        for d, value in enumerate(local(strategy, v)):
            found[f"opt_r{d}_{i}"] = value
    found["iterations"] = np.array([int(one.optimizer.iterations.numpy()),
                                    int(mirrored.optimizer.iterations.numpy())])
    np.savez(f"{out}/{case}.npz", **found)


if __name__ == "__main__":
    for case in sys.argv[2:]:
        run(sys.argv[1], case)

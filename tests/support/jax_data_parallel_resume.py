"""Snapshots taken under ``keras.distribution.DataParallel`` on one host, and
resumed on N devices and on one, for tests/distributed/test_jax_data_parallel.py.

``KERAS_BACKEND=jax python jax_data_parallel_resume.py OUT many`` (with
``XLA_FLAGS=--xla_force_host_platform_device_count=N``): for each solver of
``SOLVERS`` (iter_size 2), ``model.fit`` for ``UPDATES`` updates under
``keras_caffe.data_parallel.data_parallel()`` over the N devices, rank 0's
CaffeSnapshot writing ``OUT/many/<solver>_<format>`` in each of the
solver's ``FORMATS`` every ``SNAPSHOT_AT`` updates (on an update boundary);
then a model on the N devices restores each format's snapshot of update
``SNAPSHOT_AT`` and trains the rest of the batches. The same for one device
(no distribution: ``OUT/one/...``), whose snapshots are resumed on the N
devices.

``KERAS_BACKEND=jax python jax_data_parallel_resume.py OUT one DIR...``
(one device, a fresh process): restores each ``DIR/<solver>_<format>``
snapshot (a ``many`` run's ``OUT/many``) with no distribution and trains on.

Writes ``OUT/arrays.npz``: the weights, then the optimizer's variables, as
``SOLVER/PART/INDEX`` and ``SOLVER/PART/FORMAT/INDEX``. ``many`` parts:
``saved_many`` (the state at the snapshot), ``final_many`` (uninterrupted),
``restored_many_on_many/FORMAT`` (just restored), ``resumed_many_on_many/FORMAT``
(trained on from it), ``saved_one``, ``final_one``, ``restored_one_on_many``,
``resumed_one_on_many``; ``one``: ``restored_DIRINDEX_on_one``,
``resumed_DIRINDEX_on_one``. ``OUT/result.json``: the devices, and each
solver's weights' and optimizer variables' paths.
"""

import json
import os
import sys

import jax
import keras
import numpy as np

import keras_caffe
from keras_caffe.callbacks import CaffeSnapshot, restore_snapshot
from keras_caffe.data_parallel import data_parallel
from keras_caffe.importers.snapshots.files import snapshot_paths

GLOBAL_BATCH, ITER_SIZE, UPDATES = 16, 2, 4
STEPS = ITER_SIZE * UPDATES  # micro-batches
SNAPSHOT_AT = UPDATES // 2
#: A Caffe net (Caffe's formats need Caffe layers): conv, two InnerProducts.
NET = f"""
name: "small"
layer {{ name: "data" type: "Input" top: "data"
        input_param {{ shape {{ dim: {GLOBAL_BATCH} dim: 2 dim: 4 dim: 4 }} }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param {{ num_output: 3 kernel_size: 3 pad: 1 }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "conv1" top: "ip1"
        param {{ lr_mult: 1 }} param {{ lr_mult: 2 decay_mult: 0 }}
        inner_product_param {{ num_output: 5 }} }}
layer {{ name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param {{ num_output: 3 }} }}
"""
SOLVERS = {
    "sgd": lambda: keras_caffe.SGD(0.1, momentum=0.9, weight_decay=0.01, iter_size=ITER_SIZE),
    "adam": lambda: keras_caffe.Adam(0.01, weight_decay=0.01, iter_size=ITER_SIZE),
    "yellowfin": lambda: keras_caffe.YellowFin(learning_rate=0.1, curv_win_width=3,
                                               iter_size=ITER_SIZE),
}
#: Caffe's formats hold Caffe's six solvers; YellowFin's state is in ours.
FORMATS = {"sgd": ("caffe", "caffe_hdf5", "keras"), "adam": ("caffe", "caffe_hdf5", "keras"),
           "yellowfin": ("keras",)}


def data():
    rng = np.random.RandomState(3)
    x = rng.randn(GLOBAL_BATCH * STEPS, 4, 4, 2).astype("float32")  # NHWC, as Keras's layers
    y = rng.randn(GLOBAL_BATCH * STEPS, 3).astype("float32")
    return x, y


def build(solver):
    """The net imported, NumPy's initial weights, compiled with the solver."""
    model = keras_caffe.import_model(NET, phase="TRAIN")
    rng = np.random.RandomState(5)
    model.set_weights([rng.standard_normal(w.shape).astype("float32") * 0.3
                       for w in model.get_weights()])
    model.compile(optimizer=SOLVERS[solver](), loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def state(model):
    """The weights, then the optimizer's variables, as numpy arrays."""
    return [np.array(keras.ops.convert_to_numpy(v))
            for v in list(model.weights) + list(model.optimizer.variables)]


class Capture(keras.callbacks.Callback):
    """The state when the iteration first reaches ``SNAPSHOT_AT`` (the batch
    that completes the update, as CaffeSnapshot writes it)."""

    values = None

    def on_train_batch_end(self, batch, logs=None):
        reached = int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))
        if self.values is None and reached == SNAPSHOT_AT:
            self.values = state(self.model)


def fit(model, x, y, callbacks=()):
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0,
              callbacks=list(callbacks))


def uninterrupted(solver, folder, x, y):
    """All the batches, snapshots of every format under ``folder``; the
    state at the snapshot and at the end."""
    model = build(solver)
    capture = Capture()
    fit(model, x, y, [CaffeSnapshot(os.path.join(folder, f"{solver}_{format}"), SNAPSHOT_AT,
                                    format=format) for format in FORMATS[solver]] + [capture])
    return capture.values, state(model)


def resume(solver, folder, x, y, arrays, part):
    """One model restores each format's snapshot in turn (every variable is
    restored: the test checks) and trains the second half of the batches."""
    model = build(solver)
    half = GLOBAL_BATCH * STEPS // 2
    for format in FORMATS[solver]:
        _, solverstate = snapshot_paths(os.path.join(folder, f"{solver}_{format}"),
                                        SNAPSHOT_AT, format)
        restore_snapshot(model, solverstate)
        keep(arrays, f"{solver}/restored_{part}/{format}", state(model))
        fit(model, x[half:], y[half:])
        keep(arrays, f"{solver}/resumed_{part}/{format}", state(model))


def keep(arrays, key, values):
    for i, value in enumerate(values):
        arrays[f"{key}/{i}"] = value


def many(out, x, y, arrays):
    distribution = data_parallel()
    for solver in SOLVERS:
        with distribution.scope():
            saved, final = uninterrupted(solver, os.path.join(out, "many"), x, y)
            resume(solver, os.path.join(out, "many"), x, y, arrays, "many_on_many")
        keep(arrays, f"{solver}/saved_many", saved)
        keep(arrays, f"{solver}/final_many", final)
        saved, final = uninterrupted(solver, os.path.join(out, "one"), x, y)
        keep(arrays, f"{solver}/saved_one", saved)
        keep(arrays, f"{solver}/final_one", final)
        with distribution.scope():
            resume(solver, os.path.join(out, "one"), x, y, arrays, "one_on_many")


def one(folders, x, y, arrays):
    for index, folder in enumerate(folders):
        for solver in SOLVERS:
            resume(solver, folder, x, y, arrays, f"{index}_on_one")


def run(out, mode, folders):
    x, y = data()
    arrays = {}
    if mode == "many":
        many(out, x, y, arrays)
    else:
        one(folders, x, y, arrays)
    np.savez(os.path.join(out, "arrays.npz"), **arrays)
    models = {solver: build(solver) for solver in SOLVERS}
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump({"devices": len(jax.devices()),
                   "weights": {s: [v.path for v in m.weights] for s, m in models.items()},
                   "optimizer": {s: [v.path for v in m.optimizer.variables]
                                 for s, m in models.items()}}, f, indent=1)


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2], sys.argv[3:])

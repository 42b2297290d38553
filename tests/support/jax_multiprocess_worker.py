"""One process of a JAX multi-process ``model.fit`` with keras-caffe's solvers
(tests/distributed/test_jax_multiprocess.py), and what the test compares it
with: the model, the data and the solvers.

Run as ``python jax_multiprocess_worker.py CONFIG_JSON`` (KERAS_BACKEND=jax,
one CPU device per process). CONFIG_JSON's keys:

- ``coordinator``: ``"127.0.0.1:PORT"``; ``num_processes``, ``process_id``.
- ``runs``: a list of runs, each ``{"solver": "sgd"|"adam"|"yellowfin",
  "epochs": int, "out": path}``, optionally ``"snapshots"`` (a list of
  ``[prefix, format]``: one CaffeSnapshot each, written by rank 0 only, with
  one CaffeLogger), ``"snapshot_every"``, ``"resume"`` (a solverstate every
  process restores before training), ``"marker"`` (rank 0 writes this file
  once its first snapshot is complete) and ``"initial_epoch"``. Each process
  writes ``<out>.rank<id>.npz`` (the final weights, then the optimizer's
  variables) and ``<out>.rank<id>.json`` (``is_chief``, the solverstates
  each CaffeSnapshot wrote, by prefix, its log lines' count).
- ``refusals``: optionally a path; each process writes there, as JSON, the
  messages ``process_share`` refuses a global batch that the processes do
  not divide with, and an array that global batches do not divide.

Each process joins the job with ``keras_caffe.data_parallel.initialize``
(timeouts a test can bound, seed 0 on every process), trains under its
``data_parallel()`` distribution over the global CPU devices, and feeds
``process_share`` of the data: its half of every global batch. This module
imports no other test helper (it runs as a script).
"""

import io
import json
import os
import sys

import jax
import keras
import numpy as np

import keras_caffe
from keras_caffe import data_parallel
from keras_caffe.callbacks import CaffeLogger, CaffeSnapshot, restore_snapshot
from keras_caffe.callbacks.chief import is_chief
from keras_caffe.errors import ArgumentError

#: Samples, features and classes of the toy problem, and the global batch.
SAMPLES, FEATURES, CLASSES, GLOBAL_BATCH = 32, 6, 3, 8
#: Seconds the runtime waits for a dead peer's heartbeat, for all processes
#: at shutdown, and for every process to connect at start.
HEARTBEAT_TIMEOUT_S, SHUTDOWN_TIMEOUT_S, INITIALIZATION_TIMEOUT_S = 3, 5, 60
#: A two-layer classifier as a Caffe net, so that all three snapshot
#: formats (Caffe's need Caffe layers) can hold it.
NET = f"""
name: "toy"
layer {{ name: "data" type: "Input" top: "data"
        input_param {{ shape {{ dim: {GLOBAL_BATCH} dim: {FEATURES} }} }} }}
layer {{ name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param {{ num_output: 8 }} }}
layer {{ name: "tanh1" type: "TanH" bottom: "ip1" top: "ip1" }}
layer {{ name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param {{ num_output: {CLASSES} }} }}
"""
SOLVERS = {
    "sgd": lambda: keras_caffe.SGD(0.05, momentum=0.9, weight_decay=5e-4),
    "adam": lambda: keras_caffe.Adam(0.01, weight_decay=5e-4),
    "yellowfin": lambda: keras_caffe.YellowFin(learning_rate=0.05, curv_win_width=3),
}


def data():
    """The whole data set: float32 features, int32 labels."""
    rng = np.random.RandomState(7)
    x = rng.standard_normal((SAMPLES, FEATURES)).astype(np.float32)
    y = rng.randint(0, CLASSES, size=SAMPLES).astype(np.int32)
    return x, y


def model(solver_name):
    """The net imported, with fixed initial weights, compiled with the
    solver named ``solver_name`` (a key of ``SOLVERS``)."""
    net = keras_caffe.import_model(NET, phase="TRAIN")
    rng = np.random.RandomState(3)
    net.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.5
                     for w in net.get_weights()])
    net.compile(optimizer=SOLVERS[solver_name](),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return net


def state(net):
    """The weights, then the optimizer's variables, as numpy arrays."""
    return [np.array(keras.ops.convert_to_numpy(v))
            for v in list(net.weights) + list(net.optimizer.variables)]


class Marker(keras.callbacks.Callback):
    """Writes ``path`` (atomically) once ``snapshot`` has written a snapshot:
    the file a test polls for before it kills a process."""

    def __init__(self, path, snapshot):
        super().__init__()
        self.path, self.snapshot = path, snapshot

    def on_train_batch_end(self, batch, logs=None):
        if self.snapshot.written and not os.path.exists(self.path):
            with open(self.path + ".tmp", "w") as f:
                f.write(self.snapshot.written[-1].solverstate)
            os.replace(self.path + ".tmp", self.path)


def train(run, process_id):
    """One run of the config; returns the model."""
    net = model(run["solver"])
    if run.get("resume"):
        restore_snapshot(net, run["resume"])
    x, y = (data_parallel.process_share(a, GLOBAL_BATCH) for a in data())
    snapshots = [CaffeSnapshot(prefix, run["snapshot_every"], format=format)
                 for prefix, format in run.get("snapshots", [])]
    log = io.StringIO()
    callbacks = list(snapshots)
    if snapshots:
        callbacks.append(CaffeLogger(display=1, stream=log))
        if run.get("marker"):
            callbacks.append(Marker(run["marker"], snapshots[0]))
    net.fit(x, y, batch_size=GLOBAL_BATCH // jax.process_count(), epochs=run["epochs"],
            initial_epoch=run.get("initial_epoch", 0), shuffle=False, verbose=0,
            callbacks=callbacks)
    out = f"{run['out']}.rank{process_id}"
    np.savez(out + ".npz", *state(net))
    report = {"is_chief": is_chief(), "log_lines": len(log.getvalue().splitlines()),
              "written": {s.prefix: [f.solverstate for f in s.written] for s in snapshots}}
    with open(out + ".json", "w") as f:
        json.dump(report, f)
    return net


def refusals():
    """``process_share``'s messages for a global batch of 7 (two processes
    cannot share it) and 12 rows in global batches of 8."""
    messages = []
    for array, global_batch in ((np.zeros((14, 2)), 7), (np.zeros((12, 2)), 8)):
        try:
            data_parallel.process_share(array, global_batch)
        except ArgumentError as err:
            messages.append(str(err))
    return messages


def main(config):
    keras.config.disable_traceback_filtering()  # whole tracebacks in the logs a failure shows
    data_parallel.initialize(
        config["coordinator"], config["num_processes"], config["process_id"], seed=0,
        local_device_ids=[0], heartbeat_timeout=HEARTBEAT_TIMEOUT_S,
        shutdown_timeout=SHUTDOWN_TIMEOUT_S, initialization_timeout=INITIALIZATION_TIMEOUT_S)
    if config.get("refusals"):
        with open(f"{config['refusals']}.rank{config['process_id']}", "w") as f:
            json.dump(refusals(), f)
    keras.distribution.set_distribution(data_parallel.data_parallel())
    for run in config["runs"]:
        train(run, config["process_id"])


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))

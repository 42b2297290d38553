"""Horovod's collectives as keras_caffe.distributed issues them (run under horovodrun -np 2).

``python collectives_worker.py OUT`` writes ``OUT/rank{r}.json`` (op counts,
MetricAverage's logs) and ``OUT/rank{r}.npz`` (the gradients each rank sent
and got back; the model and optimizer state before and after
``broadcast_state``), for tests/distributed/test_collectives.py to compare.

- Op counts: the op types in the traced graph of one train step (forward,
  gradients, ``DistributedOptimizer.apply``) of MLPs of 2 and 30 Dense
  layers, with ``grouped=True`` and ``grouped=False``.
- ``reduce_gradients`` of rank-dependent tensors: average, sum, and fp16.
- ``MetricAverage.on_epoch_end`` on rank-dependent logs.
- ``broadcast_state`` of a model (Conv, Dropout, Dense) whose weights,
  optimizer slots and iteration differ per rank.
- ``model.save`` / ``load_model`` of that model under Horovod (2 workers).
"""

import collections
import json
import os
import sys

import numpy as np

out = sys.argv[1]

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_caffe  # noqa: E402
import keras_caffe.distributed as kd  # noqa: E402
from keras_caffe.callbacks import MetricAverage  # noqa: E402
from keras_caffe.importers.snapshots.random_states import seed_variables  # noqa: E402

me = kd.init(seed=11)
rank = me.rank
report = {"rank": rank, "size": me.size}
arrays = {}


def op_types(graph):
    """Counts of op types in ``graph`` and in every function it calls."""
    graph_def = graph.as_graph_def()
    counts = collections.Counter(node.op for node in graph_def.node)
    for function in graph_def.library.function:
        counts.update(node.op for node in function.node_def)
    return counts


def mlp(depth):
    layers = [keras.Input((8,))]
    layers += [keras.layers.Dense(4, name=f"ip{i}") for i in range(depth - 1)]
    layers.append(keras.layers.Dense(2, name="out"))
    return keras.Sequential(layers)


def traced_step_ops(depth, **options):
    """Op types of one traced train step of an MLP of ``depth`` Dense layers."""
    model = mlp(depth)
    optimizer = kd.DistributedOptimizer(keras_caffe.SGD(0.01, momentum=0.9), **options)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    spec = (tf.TensorSpec((None, 8), "float32"), tf.TensorSpec((None,), "int32"))
    counts = op_types(step.get_concrete_function(*spec).graph)
    return {"variables": len(model.trainable_variables),
            "grouped_allreduce": counts["HorovodGroupedAllreduce"],
            "allreduce": counts["HorovodAllreduce"],
            "horovod_ops": sum(n for op, n in counts.items() if op.startswith("Horovod"))}


report["ops"] = {f"{depth}_{'grouped' if grouped else 'single'}": traced_step_ops(
    depth, grouped=grouped) for depth in (2, 30) for grouped in (True, False)}
report["ops"]["30_grouped_fp16"] = traced_step_ops(30, compression="fp16")

# -- reduce_gradients of rank-dependent values ---------------------------------------------
rng = np.random.default_rng(100 + rank)
a = rng.uniform(0.5, 2.0, size=(64,)).astype("float32")
b = rng.uniform(-2.0, -0.5, size=(3, 5)).astype("float32")
arrays["sent_a"], arrays["sent_b"] = a, b
report["none_kept"] = {}
for label, options in {"average": {}, "average_single": {"grouped": False},
                       "sum": {"op": "sum"}, "fp16": {"compression": "fp16"},
                       "fp16_sum": {"compression": "fp16", "op": "sum"}}.items():
    reduced = kd.DistributedOptimizer(keras_caffe.SGD(0.1), **options).reduce_gradients(
        [tf.constant(a), None, tf.constant(b)])
    report["none_kept"][label] = reduced[1] is None
    arrays[f"{label}_a"], arrays[f"{label}_b"] = reduced[0].numpy(), reduced[2].numpy()
    report[f"{label}_dtype"] = str(reduced[0].dtype.name)

# -- MetricAverage ---------------------------------------------------------------------------
logs = {"loss": 1.0 + rank, "accuracy": np.float32(0.5 * rank), "count": 3 + rank,
        "name": "step", "vector": [1.0, 2.0 + rank]}
MetricAverage().on_epoch_end(0, logs)
report["metric_logs"] = {k: (v if isinstance(v, (str, list)) else float(v))
                         for k, v in logs.items()}

# -- broadcast_state -------------------------------------------------------------------------
model = keras.Sequential([keras.Input((6, 6, 1)), keras.layers.Conv2D(3, 3, name="conv"),
                          keras.layers.Flatten(), keras.layers.Dropout(0.5, name="drop"),
                          keras.layers.Dense(2, name="ip")])
inner = keras_caffe.SGD(0.1, momentum=0.9)
model.compile(optimizer=kd.DistributedOptimizer(inner), loss="mse")
inner.build(model.trainable_variables)
for i, v in enumerate(inner.variables):
    if v.path.endswith("_history"):
        v.assign(np.full(v.shape, 10.0 * rank + i, "float32"))
inner.iterations.assign(5 * rank + 3)
for w in model.weights:  # kernels differ by the per-rank seed; biases start at 0
    if w.path.endswith("/bias"):
        w.assign(np.full(w.shape, 0.1 * (rank + 1), "float32"))


def state():
    values = {f"w_{v.path}": v.numpy() for v in model.weights}
    values.update({f"opt_{v.path}": v.numpy() for v in inner.variables})
    values.update({f"seed_{v.path}": v.numpy() for v in seed_variables(model)})
    return values


for key, value in state().items():
    arrays[f"before/{key}"] = value
kd.broadcast_state(model)
for key, value in state().items():
    arrays[f"after/{key}"] = value
report["seed_variables"] = [v.path for v in seed_variables(model)]

# -- saving and loading under Horovod: the wrapper comes back around the inner optimizer --
os.makedirs(out, exist_ok=True)
path = os.path.join(out, f"model_rank{rank}.keras")
model.save(path)
loaded = keras.models.load_model(path)
report["loaded"] = {
    "type": type(loaded.optimizer).__name__,
    "inner": type(getattr(loaded.optimizer, "inner_optimizer", None)).__name__,
    "equal": all(np.array_equal(a.numpy(), b.numpy())
                 for a, b in zip(loaded.optimizer.variables, inner.variables))
    and len(loaded.optimizer.variables) == len(inner.variables),
}

os.makedirs(out, exist_ok=True)
np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
    json.dump(report, f)
print(f"rank {rank} of {me.size} done", file=sys.stderr)

"""Caffe's solvers and YellowFin under ``keras.distribution.DataParallel`` on
N virtual CPU devices against one device with the same global batch, for
tests/distributed/test_jax_data_parallel.py.

``XLA_FLAGS=--xla_force_host_platform_device_count=N KERAS_BACKEND=jax
python jax_data_parallel_case.py OUT N CASE...``: for each CASE (a name of
``CASES``) trains a small conv net two ways with ``iter_size`` 2, clipping,
``lr_mult`` 2 and 0 and weight decay, each on one device (no distribution)
and on the N devices: ``model.fit`` (under ``DataParallel``), and a custom
loop on Keras's stateless JAX API (``model.stateless_call``,
``optimizer.stateless_apply`` under ``jax.jit``, the batch sharded over the
N devices). Then counts the all-reduces in the compiled HLO of the stateless
step of SGD and YellowFin with ``iter_size`` 1 and 2, and of model.fit's own
train steps (XLA writes them to ``OUT/hlo``).

Writes ``OUT/result.json``: per case and way, each variable's max relative
and absolute difference (N devices against one), the iterations, whether
ip1's bias (``lr_mult`` 0) stayed 0; the first update's gradient norm and
``clip_gradients``; the all-reduces (``all_reduces``: the stateless steps;
``fit_all_reduces``: fit's N-device train steps, one per case, in order);
the seconds each part took. ``OUT/arrays.npz``: the final weights and
optimizer variables, ``CASE/WAY/PART/INDEX`` with WAY ``fit`` or ``loop``
and PART ``one_w``, ``many_w`` (weights on one and on N devices), ``one_o``,
``many_o`` (optimizer variables).
"""

import glob
import json
import os
import re
import sys
import time

# Keras's compiled train steps (model.fit's) written as HLO text after XLA's
# passes, to count their all-reduces: set before JAX starts.
HLO_DIR = os.path.join(sys.argv[1], "hlo") if __name__ == "__main__" else None
if HLO_DIR:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={HLO_DIR}"
                               " --xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_train_step")

import jax  # noqa: E402
import keras
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import keras_caffe
from solver_cases import CASES, CLIP, SHARED  # support/solver_cases.py

GLOBAL_BATCH = 16
STEPS = 8  # micro-batches: 4 updates with iter_size 2


def data():
    rng = np.random.RandomState(3)
    x = rng.randn(GLOBAL_BATCH * STEPS, 4, 4, 2).astype("float32")
    y = rng.randn(GLOBAL_BATCH * STEPS, 3).astype("float32")
    return x, y


def build(case, **changes):
    """The net and its optimizer, the same initial weights every time."""
    keras.utils.set_random_seed(7)
    name, own = CASES[case]
    optimizer = getattr(keras_caffe, name)(**dict(SHARED, **own, **changes))
    model = keras.Sequential([
        keras.Input((4, 4, 2)), keras.layers.Conv2D(3, 3, padding="same", name="conv1"),
        keras.layers.Flatten(), keras.layers.Dense(5, name="ip1"), keras.layers.ReLU(),
        keras.layers.Dense(3, name="ip2")])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def compare(weights, reference):
    """Per variable: max |a - b| / |b| over the nonzero b, and max |a - b|."""
    rel, absolute = [], []
    for a, b in zip(weights, reference):
        a, b = np.asarray(a, "float64"), np.asarray(b, "float64")
        diff = np.abs(a - b)
        nonzero = b != 0
        rel.append(float((diff[nonzero] / np.abs(b[nonzero])).max()) if nonzero.any() else 0.0)
        absolute.append(float(diff.max()))
    return rel, absolute


def values(variables):
    return [np.asarray(keras.ops.convert_to_numpy(v)) for v in variables]


def fit(case, x, y):
    model = build(case)
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return model


# -- the custom loop: Keras's stateless JAX API ------------------------------


def stateless_step(model):
    """One training step through ``stateless_call`` and ``stateless_apply``,
    as Keras's guide to a JAX training loop writes it."""
    loss_fn = keras.losses.MeanSquaredError()
    optimizer = model.optimizer

    def loss_and_updates(trainable, non_trainable, x, y):
        y_pred, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, y_pred), non_trainable

    grad_fn = jax.value_and_grad(loss_and_updates, has_aux=True)

    def step(state, batch):
        trainable, non_trainable, optimizer_vars = state
        x, y = batch
        (loss, non_trainable), grads = grad_fn(trainable, non_trainable, x, y)
        trainable, optimizer_vars = optimizer.stateless_apply(optimizer_vars, grads, trainable)
        return loss, (trainable, non_trainable, optimizer_vars)

    return step


def initial_state(model):
    model.optimizer.build(model.trainable_variables)
    return ([v.value for v in model.trainable_variables],
            [v.value for v in model.non_trainable_variables],
            [v.value for v in model.optimizer.variables])


def shardings(mesh):
    """The batch split over the mesh's devices, everything else replicated."""
    if mesh is None:
        return None, None
    return (NamedSharding(mesh, PartitionSpec("batch")), NamedSharding(mesh, PartitionSpec()))


def loop(case, x, y, mesh):
    """``STEPS`` steps of the stateless loop; the final weights and optimizer variables."""
    model = build(case)
    state = initial_state(model)
    batch_sharding, replicated = shardings(mesh)
    if mesh is not None:
        state = jax.device_put(state, replicated)
    step = jax.jit(stateless_step(model), donate_argnums=0)
    for i in range(STEPS):
        part = slice(i * GLOBAL_BATCH, (i + 1) * GLOBAL_BATCH)
        batch = (x[part], y[part])
        if mesh is not None:
            batch = jax.device_put(batch, batch_sharding)
        _, state = step(state, batch)
    return [np.asarray(v) for v in state[0]], [np.asarray(v) for v in state[2]]


def count_all_reduces(text):
    """The all-reduces in compiled HLO text: their count, and the elements of
    each operand (a fused all-reduce has several)."""
    ops_found = [line for line in text.splitlines()
                 if re.search(r" all-reduce(-start)?\(", line.split("=", 1)[-1])]
    sizes = []
    for line in ops_found:
        result = line.split("=", 1)[1].split(" all-reduce", 1)[0]
        for dims in re.findall(r"f32\[([\d,]*)\]", result):
            sizes.append(int(np.prod([int(d) for d in dims.split(",") if d] or [1])))
    return {"count": len(ops_found), "operand_elements": sizes}


def all_reduces(case, iter_size, mesh, x, y):
    """The all-reduces of one stateless step under the mesh, compiled."""
    model = build(case, iter_size=iter_size)
    state = jax.device_put(initial_state(model), shardings(mesh)[1])
    batch = jax.device_put((x[:GLOBAL_BATCH], y[:GLOBAL_BATCH]), shardings(mesh)[0])
    compiled = jax.jit(stateless_step(model)).lower(state, batch).compile()
    found = count_all_reduces(compiled.as_text())
    found["gradient_elements"] = int(sum(np.prod(v.shape) for v in model.trainable_variables))
    return found


def train_step_hlo(hlo_dir, devices):
    """The HLO text, after XLA's passes, of each of model.fit's train steps
    compiled for ``devices`` devices (``num_partitions``) that XLA dumped
    into ``hlo_dir``, in the order they were compiled."""
    found = []
    for path in sorted(glob.glob(os.path.join(hlo_dir, "*jit_train_step*after_optimizations.txt"))):
        with open(path) as f:
            text = f.read()
        if re.search(rf"num_partitions={devices}\b", text.split("\n", 1)[0]):
            found.append(text)
    return found


def fit_all_reduces(devices):
    """The all-reduces of each of model.fit's train steps compiled for
    ``devices`` devices, in the order they were compiled."""
    return [count_all_reduces(text) for text in train_step_hlo(HLO_DIR, devices)]


def first_update_norm(case, x, y):
    """The L2 norm of the first update's summed gradient (two micro-batches),
    which ``clip_gradients`` is compared with: the same for every case (the
    same initial weights and batches)."""
    model = build(case)
    state = initial_state(model)
    loss_fn = keras.losses.MeanSquaredError()

    def loss(trainable, xb, yb):
        y_pred, _ = model.stateless_call(trainable, state[1], xb, training=True)
        return loss_fn(yb, y_pred)

    total = None
    for i in range(SHARED["iter_size"]):
        part = slice(i * GLOBAL_BATCH, (i + 1) * GLOBAL_BATCH)
        g = jax.grad(loss)(state[0], x[part], y[part])
        total = g if total is None else [a + b for a, b in zip(total, g)]
    # ip1's bias has lr_mult 0: Caffe computes no gradient for it
    frozen = [model.optimizer.frozen(v) for v in model.trainable_variables]
    return float(np.sqrt(sum(float(np.sum(np.square(g))) for g, f in zip(total, frozen)
                             if not f)))


def run(out, devices, cases):
    x, y = data()
    found = {"devices": len(jax.devices()), "cases": {}, "seconds": {},
             "first_update_norm": first_update_norm("sgd", x, y), "clip_gradients": CLIP}
    arrays = {}
    mesh_devices = jax.devices()[:devices]
    distribution = keras.distribution.DataParallel(devices=mesh_devices)
    mesh = distribution.device_mesh.backend_mesh
    bias = [v.path.endswith("ip1/bias") for v in build("sgd").trainable_variables].index(True)
    for case in cases:
        start = time.time()
        one = fit(case, x, y)
        with distribution.scope():
            many = fit(case, x, y)
        fit_w = values(one.trainable_variables), values(many.trainable_variables)
        fit_o = values(one.optimizer.variables), values(many.optimizer.variables)
        fit_rel, fit_abs = compare(fit_w[1], fit_w[0])
        opt_rel, opt_abs = compare(fit_o[1], fit_o[0])
        found["seconds"][f"fit_{case}"] = time.time() - start
        start = time.time()
        one_w, one_o = loop(case, x, y, None)
        with distribution.scope():
            many_w, many_o = loop(case, x, y, mesh)
        for way, parts in (("fit", fit_w + fit_o), ("loop", (one_w, many_w, one_o, many_o))):
            for part, got in zip(("one_w", "many_w", "one_o", "many_o"), parts):
                for i, value in enumerate(got):
                    arrays[f"{case}/{way}/{part}/{i}"] = value
        loop_rel, loop_abs = compare(many_w, one_w)
        loop_opt_rel, loop_opt_abs = compare(many_o, one_o)
        found["seconds"][f"loop_{case}"] = time.time() - start
        found["cases"][case] = {
            "variables": [v.path for v in one.trainable_variables],
            "fit": {"rel": fit_rel, "abs": fit_abs, "opt_rel": opt_rel, "opt_abs": opt_abs,
                    "iterations": [int(one.optimizer.iterations.numpy()),
                                   int(many.optimizer.iterations.numpy())],
                    "frozen_bias_max": float(np.abs(fit_w[1][bias]).max())},
            "loop": {"rel": loop_rel, "abs": loop_abs, "opt_rel": loop_opt_rel,
                     "opt_abs": loop_opt_abs,
                     "frozen_bias_max": float(np.abs(many_w[bias]).max())},
        }
    start = time.time()
    found["all_reduces"] = {}
    with distribution.scope():
        for case in ("sgd", "yellowfin"):
            for iter_size in (1, 2):
                found["all_reduces"][f"{case}_iter_size_{iter_size}"] = all_reduces(
                    case, iter_size, mesh, x, y)
    found["seconds"]["all_reduces"] = time.time() - start
    found["fit_all_reduces"] = fit_all_reduces(devices)
    np.savez(f"{out}/arrays.npz", **arrays)
    with open(f"{out}/result.json", "w") as f:
        json.dump(found, f, indent=1)


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3:])

"""``keras_caffe.data_parallel``'s local sums (``with_local_sums``,
``local_sums_step``) on N virtual CPU devices against one device with the
same global batch, for tests/distributed/test_jax_local_sums.py.

``XLA_FLAGS=--xla_force_host_platform_device_count=N KERAS_BACKEND=jax
python jax_local_sums_case.py OUT N CASE...``: for each CASE (a name of
jax_data_parallel_case.CASES: the small conv net, ``iter_size`` 2, clipping,
``lr_mult`` 2 and 0, weight decay) trains 8 micro-batches (4 updates) on one
device with Keras's own ``model.fit`` (no distribution), and on the N
devices under ``DataParallel`` twice: ``model.fit`` of ``with_local_sums``'s
model, and a custom loop of ``local_sums_step`` under ``jax.jit``. Then:

- ``all_reduces``: the compiled custom step of SGD and YellowFin, iter_size 2
  and 1, its all-reduces by where they run (``count_by_branch``);
  ``fit_all_reduces``: the same for each of the local-sums fits' own
  compiled train steps (XLA's dump, ``OUT/hlo``), in order.
- ``dropout``: a Dropout net's chunk losses when every device chunk holds the
  same rows, the one-device loss of those rows, the seed state's advance.
- ``batch_norm``: a BatchNormalization net's chunk losses and moving
  statistics after one step (``OUT/arrays.npz`` holds its input ``bn/x``).
- ``iter_size_1``: ``with_local_sums`` with iter_size 1 against plain
  ``DataParallel`` fit (Keras's own step: the same numbers).
- ``errors``: the errors a global batch not divisible by N raises (the
  custom step, fit), and fit outside the distribution it was compiled under.
- ``saved``: a fitted model saved as .keras, loaded, both trained on.
- ``two_outputs``: a two-output net's fit, one device against N: weights, logs.

Writes ``OUT/result.json`` and ``OUT/arrays.npz`` (``CASE/WAY/PART/INDEX``,
WAY ``fit`` or ``loop``, PART ``one_w``, ``many_w``, ``one_o``,
``many_o``), as jax_data_parallel_case.py does.
"""

import json
import os
import re
import sys
import time

HLO_DIR = os.path.join(sys.argv[1], "hlo") if __name__ == "__main__" else None
if HLO_DIR:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + f" --xla_dump_to={HLO_DIR}"
                               " --xla_dump_hlo_as_text --xla_dump_hlo_module_re=jit_train_step")

import jax  # noqa: E402
import jax_data_parallel_case as base
import keras
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

import keras_caffe
from keras_caffe.data_parallel import local_sums_step, with_local_sums

GLOBAL_BATCH, STEPS = base.GLOBAL_BATCH, base.STEPS


def batches(x, y, mesh):
    sharding = NamedSharding(mesh, PartitionSpec("batch"))
    return [jax.device_put((x[i * GLOBAL_BATCH:(i + 1) * GLOBAL_BATCH],
                            y[i * GLOBAL_BATCH:(i + 1) * GLOBAL_BATCH]), sharding)
            for i in range(STEPS)]


def fit_local(case, x, y, distribution, **changes):
    """``with_local_sums``'s model fit under ``distribution``; the net."""
    with distribution.scope():
        net = base.build(case, **changes)
        trainer = with_local_sums(net)
        trainer.compile(optimizer=net.optimizer, loss="mse")
        history = trainer.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    return net, trainer, history.history["loss"][0]


def loop_local(case, x, y, distribution, **changes):
    """``STEPS`` steps of ``local_sums_step`` under jax.jit; the net, the step's
    compiled text, the last chunk losses."""
    with distribution.scope():
        net = base.build(case, **changes)
        step = local_sums_step(net, keras.losses.MeanSquaredError())
        state = step.initial_state()
        jitted = jax.jit(step)
        parts = batches(x, y, distribution.device_mesh.backend_mesh)
        text = jitted.lower(state, parts[0]).compile().as_text()
        for part in parts:
            losses, state = jitted(state, part)
        step.assign(state)
    return net, text, np.asarray(losses)


def computations(text):
    """HLO text's computations: name -> its instruction lines."""
    found, current = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            words = line.split()
            current = (words[1] if words[0] == "ENTRY" else words[0]).lstrip("%")
            found[current] = []
        elif line.startswith("}"):
            current = None
        elif current is not None:
            found[current].append(line)
    return found


def _called(lines):
    names = set()
    for line in lines:
        for group in re.findall(r"(?:calls|to_apply|body|condition)=%?([\w.\-]+)", line):
            names.add(group)
        for group in re.findall(r"branch_computations=\{([^}]*)\}", line):
            names.update(n.strip().lstrip("%") for n in group.split(","))
    return names


def count_by_branch(text):
    """The all-reduces of a compiled step by where they run: ``update`` (the
    local-sums ``lax.cond``'s update branch, with all it calls),
    ``accumulate`` (its other branch), ``every_step`` (outside it). Each
    entry: the element counts of one all-reduce's operands."""
    comps = computations(text)
    branches = None
    for lines in comps.values():
        for line in lines:
            if re.search(r' conditional\(', line) and re.search(
                    r'op_name="jit\([^)]*\)/cond"', line):
                names = re.search(r"branch_computations=\{([^}]*)\}", line).group(1)
                branches = [n.strip().lstrip("%") for n in names.split(",")]
    where = {}
    if branches:
        for label, root in (("accumulate", branches[0]), ("update", branches[1])):
            todo = [root]
            while todo:
                name = todo.pop()
                if name in where or name not in comps:
                    continue
                where[name] = label
                todo.extend(_called(comps[name]))
    found = {"update": [], "accumulate": [], "every_step": [], "has_cond": bool(branches)}
    for name, lines in comps.items():
        for line in lines:
            if re.search(r" all-reduce(-start)?\(", line.split("=", 1)[-1]):
                result = line.split("=", 1)[1].split(" all-reduce", 1)[0]
                sizes = [int(np.prod([int(d) for d in dims.split(",") if d] or [1]))
                         for dims in re.findall(r"(?:f32|s32|u32)\[([\d,]*)\]", result)]
                found[where.get(name, "every_step")].append(sorted(sizes))
    return found


def fit_all_reduces(devices):
    """``count_by_branch`` of each train step compiled for ``devices``
    devices, in order."""
    return [count_by_branch(text) for text in base.train_step_hlo(HLO_DIR, devices)]


def dropout_case(distribution, devices):
    """Every chunk holds the same 2 rows; one step of a Dropout net."""
    def build():
        keras.utils.set_random_seed(11)
        return keras.Sequential([
            keras.Input((8,)), keras.layers.Dropout(0.5, seed=5),
            keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
    rows = np.random.RandomState(5).rand(2, 8).astype("float32") + 1.0
    x, y = np.tile(rows, (devices, 1)), np.zeros((2 * devices, 1), "float32")
    one = build()
    seed = [v for v in one.non_trainable_variables if v.name == "seed_generator_state"][0]
    before = np.asarray(seed.value)
    values = [v.value for v in one.non_trainable_variables]
    y_pred, after = one.stateless_call([v.value for v in one.trainable_variables], values,
                                       rows, training=True)
    one_loss = float(keras.losses.MeanSquaredError()(y[:2], y_pred))
    with distribution.scope():
        net = build()
        step = local_sums_step(net, keras.losses.MeanSquaredError(),
                               keras_caffe.SGD(learning_rate=0.1, iter_size=2))
        sharding = NamedSharding(distribution.device_mesh.backend_mesh, PartitionSpec("batch"))
        losses, state = jax.jit(step)(step.initial_state(), jax.device_put((x, y), sharding))
        step.assign(state)
    index = [v.name for v in net.non_trainable_variables].index("seed_generator_state")
    return {"chunk_losses": [float(v) for v in np.asarray(losses)], "one_device_loss": one_loss,
            "seed_before": before.tolist(),
            "seed_after_one_device": np.asarray(after[0]).tolist(),
            "seed_after": np.asarray(net.non_trainable_variables[index].value).tolist()}


def batch_norm_case(distribution, devices, arrays):
    """One step of a BatchNormalization net (momentum 0.5, no scale or
    offset, summed by a ones kernel); chunk c's rows shifted by 3c."""
    keras.utils.set_random_seed(13)
    rng = np.random.RandomState(13)
    x = (rng.randn(4 * devices, 2) + np.repeat(3.0 * np.arange(devices), 4)[:, None])
    x = x.astype("float32")
    y = np.zeros((4 * devices, 1), "float32")
    arrays["bn/x"] = x
    with distribution.scope():
        net = keras.Sequential([
            keras.Input((2,)),
            keras.layers.BatchNormalization(momentum=0.5, epsilon=1e-3, center=False,
                                            scale=False),
            keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")])
        step = local_sums_step(net, keras.losses.MeanSquaredError(),
                               keras_caffe.SGD(learning_rate=0.1, iter_size=2))
        sharding = NamedSharding(distribution.device_mesh.backend_mesh, PartitionSpec("batch"))
        data = jax.device_put((x, y), sharding)
        state = step.initial_state()
        jitted = jax.jit(step)
        text = jitted.lower(state, data).compile().as_text()
        losses, state = jitted(state, data)
        step.assign(state)
    stats = {v.name: np.asarray(v.value).tolist() for v in net.non_trainable_variables}
    return {"chunk_losses": [float(v) for v in np.asarray(losses)], "stats": stats,
            "all_reduces": count_by_branch(text)}


def iter_size_1_case(x, y, distribution):
    """with_local_sums with iter_size 1 against plain DataParallel fit."""
    net, trainer, loss = fit_local("sgd", x, y, distribution, iter_size=1)
    with distribution.scope():
        plain = base.build("sgd", iter_size=1)
        history = plain.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    same = all(np.array_equal(a, b) for a, b in zip(base.values(net.trainable_variables),
                                                     base.values(plain.trainable_variables)))
    own = len(trainer.non_trainable_variables) - len(net.non_trainable_variables)
    return {"identical": bool(same), "losses": [loss, history.history["loss"][0]],
            "own_variables": own}


def batch_error(x, y, distribution, devices):
    """The custom step given a global batch of devices + 1 rows."""
    with distribution.scope():
        net = base.build("sgd")
        step = local_sums_step(net, keras.losses.MeanSquaredError())
        return caught(lambda: jax.jit(step)(step.initial_state(),
                                            (x[:devices + 1], y[:devices + 1])))


def two_outputs(x, y, distribution):
    """A two-output net (mse and mae, loss_weights, a metric on one output),
    SGD iter_size 2: Keras's fit on one device and with_local_sums's on N;
    the weights' largest relative difference and both runs' logs."""
    def build():
        keras.utils.set_random_seed(17)
        inputs = keras.Input((4, 4, 2))
        hidden = keras.layers.Flatten()(keras.layers.Conv2D(3, 3, name="conv")(inputs))
        net = keras.Model(inputs, [keras.layers.Dense(3, name="out_a")(hidden),
                                   keras.layers.Dense(2, name="out_b")(hidden)])
        return net

    def compile_and_fit(model):
        model.compile(optimizer=keras_caffe.SGD(learning_rate=0.05, momentum=0.9, iter_size=2,
                                                weight_decay=0.01),
                      loss={"out_a": "mse", "out_b": "mae"}, loss_weights=[1.0, 0.5],
                      metrics={"out_a": ["mae"]})
        targets = {"out_a": y, "out_b": y[:, :2]}
        return model.fit(x, targets, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False,
                         verbose=0).history

    one = build()
    one_logs = compile_and_fit(one)
    with distribution.scope():
        net = build()
        many_logs = compile_and_fit(with_local_sums(net))
    rel = base.compare(base.values(net.trainable_variables), base.values(one.trainable_variables))
    return {"rel": max(rel[0]), "abs": max(rel[1]),
            "logs": [{k: v[0] for k, v in one_logs.items()},
                     {k: v[0] for k, v in many_logs.items()}]}


def fit_errors(x, y, distribution, devices):
    """with_local_sums's fit given a batch_size of N + 1, and run outside
    the distribution it was compiled under."""
    found = {}
    with distribution.scope():
        net = base.build("sgd")
        trainer = with_local_sums(net)
        trainer.compile(optimizer=net.optimizer, loss="mse")
        for name, call in (
                ("batch_size", lambda: trainer.fit(x[:2 * (devices + 1)], y[:2 * (devices + 1)],
                                                   batch_size=devices + 1, verbose=0)),):
            found[name] = caught(call)
    found["distribution"] = caught(
        lambda: trainer.fit(x, y, batch_size=GLOBAL_BATCH, shuffle=False, verbose=0))
    return found


def caught(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 -- reported to the test
        return {"type": type(error).__name__, "message": str(error),
                "is_argument_error": isinstance(error, keras_caffe.errors.ArgumentError)}
    return None


def saved_and_loaded(x, y, distribution, out):
    """sgd's with_local_sums model after one epoch, saved as .keras and
    loaded under the distribution: one more epoch of each; the loaded one's
    sums' layout and the largest relative difference of the weights."""
    net, trainer, _ = fit_local("sgd", x, y, distribution)
    path = os.path.join(out, "local_sums.keras")
    with distribution.scope():
        trainer.save(path)
        loaded = keras.saving.load_model(path)
        for model in (trainer, loaded):
            model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
    rel = base.compare(base.values(loaded.trainable_variables),
                       base.values(trainer.trainable_variables))[0]
    return {"type": type(loaded).__name__, "rel": max(rel),
            "iterations": int(loaded.optimizer.iterations.numpy()),
            "sums_sharding": str(loaded.local_sums[0].value.sharding.spec)}


def run(out, devices, cases):
    x, y = base.data()
    found = {"devices": len(jax.devices()), "cases": {}, "seconds": {},
             "first_update_norm": base.first_update_norm("sgd", x, y),
             "clip_gradients": base.CLIP}
    arrays, texts = {}, {}
    distribution = keras.distribution.DataParallel(devices=jax.devices()[:devices])
    bias = [v.path.endswith("ip1/bias") for v in base.build("sgd").trainable_variables].index(True)
    for case in cases:
        start = time.time()
        one = base.build(case)
        one_history = one.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0)
        one_w, one_o = base.values(one.trainable_variables), base.values(one.optimizer.variables)
        net, trainer, loss = fit_local(case, x, y, distribution)
        fit_w, fit_o = base.values(net.trainable_variables), base.values(net.optimizer.variables)
        sums = [np.asarray(v.value) for v in trainer.local_sums]
        found["seconds"][f"fit_{case}"] = time.time() - start
        start = time.time()
        looped, texts[case], _ = loop_local(case, x, y, distribution)
        loop_w, loop_o = base.values(looped.trainable_variables), base.values(
            looped.optimizer.variables)
        found["seconds"][f"loop_{case}"] = time.time() - start
        for way, parts in (("fit", (one_w, fit_w, one_o, fit_o)),
                           ("loop", (one_w, loop_w, one_o, loop_o))):
            for part, got in zip(("one_w", "many_w", "one_o", "many_o"), parts):
                for i, value in enumerate(got):
                    arrays[f"{case}/{way}/{part}/{i}"] = value
        found["cases"][case] = {
            "variables": [v.path for v in one.trainable_variables],
            "fit": {"rel": base.compare(fit_w, one_w)[0],
                    "iterations": [int(one.optimizer.iterations.numpy()),
                                   int(net.optimizer.iterations.numpy())],
                    "losses": [one_history.history["loss"][0], loss],
                    "frozen_bias_max": float(np.abs(fit_w[bias]).max()),
                    "sums_shapes": [list(s.shape) for s in sums],
                    "sums_max": max(float(np.abs(s).max()) for s in sums),
                    "sums_sharding": str(trainer.local_sums[0].value.sharding.spec),
                    "micro_step": int(np.asarray(trainer.local_sums_micro_step.value))},
            "loop": {"rel": base.compare(loop_w, one_w)[0],
                     "frozen_bias_max": float(np.abs(loop_w[bias]).max())},
        }
    # only the solver cases' fits have been compiled for N devices so far
    found["fit_all_reduces"] = fit_all_reduces(devices)
    start = time.time()
    found["all_reduces"] = {}
    for case in [c for c in ("sgd", "yellowfin") if c in cases]:
        for iter_size in (1, 2):
            # iter_size 2: the loop's own step, compiled above
            text = texts[case] if iter_size == 2 else None
            with distribution.scope():
                model = base.build(case, iter_size=iter_size)
                if text is None:
                    step = local_sums_step(model, keras.losses.MeanSquaredError())
                    part = batches(x, y, distribution.device_mesh.backend_mesh)[0]
                    text = jax.jit(step).lower(step.initial_state(), part).compile().as_text()
            entry = count_by_branch(text)
            entry["gradient_elements"] = int(sum(np.prod(v.shape)
                                                 for v in model.trainable_variables))
            found["all_reduces"][f"{case}_iter_size_{iter_size}"] = entry
    found["seconds"]["all_reduces"] = time.time() - start
    start = time.time()
    found["dropout"] = dropout_case(distribution, devices)
    found["batch_norm"] = batch_norm_case(distribution, devices, arrays)
    found["iter_size_1"] = iter_size_1_case(x, y, distribution)
    found["errors"] = {"batch": batch_error(x, y, distribution, devices),
                       "fit": fit_errors(x, y, distribution, devices)}
    found["saved"] = saved_and_loaded(x, y, distribution, out)
    found["two_outputs"] = two_outputs(x, y, distribution)
    found["seconds"]["checks"] = time.time() - start
    np.savez(f"{out}/arrays.npz", **arrays)
    with open(f"{out}/result.json", "w") as f:
        json.dump(found, f, indent=1)


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3:])

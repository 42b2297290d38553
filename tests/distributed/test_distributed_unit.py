"""keras_caffe.distributed in one process, with and without Horovod installed.

Runs with and without Horovod installed (``make test`` and ``make
test-compat`` build it; a venv without it runs the same file). Nothing here initializes Horovod in the test process
(``kd.init`` would make it a one-worker job for every later test); what needs
Horovod missing runs in a child process where ``import horovod`` is blocked
(``sys.modules['horovod'] = None``). The real multi-process collectives are
in test_collectives.py and test_fit.py.
"""

import io
import json
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.horovod_jobs import check, python, require_horovod

import keras_caffe
import keras_caffe.distributed as kd
from keras_caffe.callbacks import BroadcastGlobalState, CaffeLogger, CaffeSnapshot, MetricAverage
from keras_caffe.distributed import context, faults
from keras_caffe.distributed import data as data_module
from keras_caffe.distributed._hvd import INSTALL_HINT
from keras_caffe.distributed.state import offset_seeds
from keras_caffe.importers.snapshots.random_states import seed_variables
from keras_caffe.errors import ArgumentError, DistributedError

OWNER = "DistributedOptimizer"


def small_model(dropout=False):
    layers = [keras.Input((4,)), keras.layers.Dense(3, name="ip1")]
    if dropout:
        layers.append(keras.layers.Dropout(0.5, seed=3, name="drop"))
    layers.append(keras.layers.Dense(2, name="ip2"))
    return keras.Sequential(layers, name="small")


def data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 2)).astype("float32")


def train_inner(model, optimizer, steps=3):
    """``steps`` updates of ``optimizer`` (the inner one: no Horovod needed)."""
    x, y = data()
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean((model(x, training=True) - y) ** 2)
        optimizer.apply(tape.gradient(loss, model.trainable_variables), model.trainable_variables)


# -- DistributedOptimizer: arguments ---------------------------------------------------

@pytest.mark.parametrize("make, argument, message", [
    (lambda: "sgd", "optimizer", "must be a Keras 3 optimizer, got str"),
    (lambda: kd.DistributedOptimizer(keras_caffe.SGD(0.1)), "optimizer",
     "is already a DistributedOptimizer"),
])
def test_optimizer_argument_errors(make, argument, message):
    with pytest.raises(ArgumentError) as info:
        kd.DistributedOptimizer(make())
    assert str(info.value) == f"{OWNER}: `{argument}` {message}"
    assert info.value.argument == argument


@pytest.mark.parametrize("kwargs, argument, message", [
    ({"compression": "bf16"}, "compression", "must be None or 'fp16', got 'bf16'"),
    ({"compression": True}, "compression", "must be None or 'fp16', got True"),
    ({"op": "max"}, "op", "must be 'average' or 'sum', got 'max'"),
    ({"op": "Average"}, "op", "must be 'average' or 'sum', got 'Average'"),
    ({"grouped": 1}, "grouped", "must be True or False, got 1"),
    ({"clipnorm": 1.0, "learning_rate": 0.1}, "clipnorm, learning_rate",
     "is not an argument of DistributedOptimizer: set it on the wrapped optimizer"),
])
def test_wrapper_argument_errors(kwargs, argument, message):
    with pytest.raises(ArgumentError) as info:
        kd.DistributedOptimizer(keras_caffe.SGD(0.1), **kwargs)
    assert str(info.value) == f"{OWNER}: `{argument}` {message}"


def test_defaults_and_name():
    opt = kd.DistributedOptimizer(keras_caffe.SGD(0.1, name="solver"), compression="none")
    assert (opt.compression, opt.op, opt.grouped) == (None, "average", True)
    assert opt.name == "distributed_solver"
    assert kd.DistributedOptimizer(keras.optimizers.Adam(), name="x", op="sum").name == "x"


# -- DistributedOptimizer: the wrapped optimizer's attributes ------------------------------

def test_attributes_are_the_inner_optimizers():
    inner = keras_caffe.SGD(0.1, momentum=0.9)
    opt = kd.DistributedOptimizer(inner)
    model = small_model()
    opt.build(model.trainable_variables)
    assert inner.built and opt.inner_optimizer is inner
    assert opt.iterations is inner.iterations
    assert [id(v) for v in opt.variables] == [id(v) for v in inner.variables]
    assert len(opt.variables) == 2 + 4  # iteration, learning_rate, 4 momentum histories
    assert float(opt.learning_rate) == pytest.approx(0.1)
    opt.learning_rate = 0.25
    assert float(inner.learning_rate) == 0.25 and float(opt.learning_rate) == 0.25
    train_inner(model, inner, steps=2)
    assert int(opt.iterations.numpy()) == 2
    assert opt.momentum == 0.9  # any other attribute: the inner one's
    with pytest.raises(AttributeError):
        opt.no_such_attribute
    with pytest.raises(AttributeError):
        opt._no_such_private_attribute


def test_caffe_rate_at_through_the_wrapper():
    sched = keras_caffe.schedules.Step(base_lr=0.01, gamma=0.1, stepsize=10)
    opt = kd.DistributedOptimizer(keras_caffe.SGD(sched, momentum=0.9))
    assert [opt.rate_at(i) for i in (0, 9, 10, 25)] == pytest.approx([0.01, 0.01, 0.001, 1e-4],
                                                                      rel=1e-6)


def test_yellowfin_tuned_values_through_the_wrapper():
    inner = keras_caffe.YellowFin(learning_rate=0.01)
    opt = kd.DistributedOptimizer(inner)
    model = small_model()
    opt.build(model.trainable_variables)
    assert float(opt.tuned_learning_rate) == pytest.approx(0.01)  # before the first update
    train_inner(model, inner, steps=3)
    assert float(opt.tuned_learning_rate) == float(inner.tuned_learning_rate)
    assert float(opt.tuned_learning_rate) != pytest.approx(0.01)  # the tuner ran
    assert float(opt.tuned_momentum) == float(inner.tuned_momentum) > 0.0


# -- saving and loading ------------------------------------------------------------------

@pytest.fixture
def saved_model(tmp_path):
    """A .keras file of a model compiled with DistributedOptimizer(SGD) after 3
    updates, and the optimizer's variable values at saving time."""
    model = small_model()
    inner = keras_caffe.SGD(0.1, momentum=0.9, weight_decay=5e-4, lr_mult={"*/bias": 2.0})
    opt = kd.DistributedOptimizer(inner)
    model.compile(optimizer=opt, loss="mse")
    opt.build(model.trainable_variables)
    train_inner(model, inner)
    path = tmp_path / "model.keras"
    model.save(path)
    values = [v.numpy() for v in inner.variables]
    np.savez(tmp_path / "expected.npz", *values, *[w.numpy() for w in model.weights])
    return path, values, [w.numpy() for w in model.weights]


def test_load_gives_the_bare_inner_optimizer(saved_model):
    path, values, weights = saved_model
    loaded = keras.models.load_model(path)
    opt = loaded.optimizer
    assert type(opt) is keras_caffe.SGD
    assert opt.lr_mult == {"*/bias": 2.0} and opt.caffe_weight_decay == 5e-4
    assert int(opt.iterations.numpy()) == 3
    assert len(opt.variables) == len(values)
    for got, want in zip(opt.variables, values):
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in zip(loaded.weights, weights):
        np.testing.assert_array_equal(got.numpy(), want)
    assert any(np.abs(v).sum() > 0 for v in values[2:])  # real momentum histories


BLOCK = "import sys\nsys.modules['horovod'] = None\n"

CHILD_WITHOUT_HOROVOD = BLOCK + textwrap.dedent("""
    import json, os
    import keras, numpy as np, tensorflow as tf
    import keras_caffe, keras_caffe.distributed as kd
    from keras_caffe.callbacks import BroadcastGlobalState, MetricAverage
    out = {"worker": [kd.rank(), kd.size(), kd.local_rank()],
           "chief": kd.is_chief(), "active": kd.active()}
    def error(call):
        try:
            call()
        except Exception as err:
            return [type(err).__name__, str(err), isinstance(err, ImportError)]
        return None
    opt = kd.DistributedOptimizer(keras_caffe.SGD(0.1))
    out["reduce"] = error(lambda: opt.reduce_gradients([tf.ones(2)]))
    out["init"] = error(lambda: kd.init())
    out["broadcast_variables"] = error(lambda: kd.broadcast_variables([]))
    out["horovod_in_modules"] = sys.modules.get("horovod", "absent") is not None
    if len(sys.argv) > 1:
        model = keras.models.load_model(sys.argv[1])
        expected = np.load(sys.argv[2])
        arrays = [v.numpy() for v in model.optimizer.variables] + [w.numpy() for w in model.weights]
        out["loaded_type"] = type(model.optimizer).__name__
        out["loaded_equal"] = len(arrays) == len(expected.files) and all(
            np.array_equal(a, expected[f"arr_{i}"]) for i, a in enumerate(arrays))
    print("RESULT " + json.dumps(out))
""")


@pytest.fixture
def without_horovod(saved_model, tmp_path):
    """The child process's findings (Horovod's import blocked)."""
    path, _, _ = saved_model
    result = check(python(["-c", CHILD_WITHOUT_HOROVOD, path, tmp_path / "expected.npz"],
                          timeout=120, cwd=tmp_path))  # cwd: never the source tree
    line = [s for s in result.stdout.splitlines() if s.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT "):])


def test_without_horovod(without_horovod):
    """Without Horovod: the package imports, the process is rank 0 of 1, a
    saved model loads (bare SGD, same variables), and what needs Horovod
    raises HorovodUnavailableError, an ImportError whose message is one
    line saying how to install it."""
    out = without_horovod
    assert out["worker"] == [0, 1, 0] and out["chief"] is True and out["active"] is False
    assert out["loaded_type"] == "SGD" and out["loaded_equal"] is True
    assert out["horovod_in_modules"] is False
    for key in ("reduce", "init", "broadcast_variables"):
        kind, message, is_import_error = out[key]
        assert kind == "HorovodUnavailableError" and is_import_error, out[key]
        assert "\n" not in message
        # the hint, then Python's own words on the failed import
        assert message.startswith(f"{INSTALL_HINT} (") and message.endswith(")")
        assert "horovod" in message[len(INSTALL_HINT):]
    assert "run `keras-caffe install-horovod`" in INSTALL_HINT


# -- reduce_gradients before init ----------------------------------------------------------

def test_reduce_gradients_before_init():
    """Horovod installed but not initialized: a DistributedError saying to call init()."""
    require_horovod()
    opt = kd.DistributedOptimizer(keras_caffe.SGD(0.1))
    with pytest.raises(DistributedError) as info:
        opt.reduce_gradients([tf.ones(2), None])
    assert str(info.value) == ("DistributedOptimizer: Horovod is not initialized: call "
                               "keras_caffe.distributed.init() first")
    model = small_model()
    opt.build(model.trainable_variables)
    with pytest.raises(DistributedError, match="Horovod is not initialized"):
        opt.apply([tf.zeros_like(v) for v in model.trainable_variables])
    with pytest.raises(DistributedError, match="^Horovod is not initialized: call "
                                               r"keras_caffe\.distributed\.init\(\) first$"):
        kd.broadcast_variables(model.trainable_variables)


# -- ScaledLearningRate --------------------------------------------------------------------

def rates(schedule, steps):
    return [float(schedule(step)) for step in steps]


def test_scaled_rate_with_a_float_base():
    """lr(t) = base (1 + (P - 1) min(1, t / warmup)), P = 4, warmup 10."""
    sched = kd.ScaledLearningRate(0.1, workers=4, warmup_steps=10)
    assert rates(sched, [0, 1, 5, 9, 10, 11, 1000]) == pytest.approx(
        [0.1, 0.13, 0.25, 0.37, 0.4, 0.4, 0.4], rel=1e-6)
    assert rates(kd.ScaledLearningRate(0.1, workers=4), [0, 7]) == pytest.approx([0.4, 0.4])
    assert sched.rate_at(5) == pytest.approx(0.25)
    # without Horovod P is 1: the base itself
    assert rates(kd.ScaledLearningRate(0.1, warmup_steps=5), [0, 3, 100]) == pytest.approx(
        [0.1, 0.1, 0.1])
    assert kd.ScaledLearningRate(2).workers == 1


def test_scaled_rate_over_a_caffe_step_policy():
    """base = Step(0.1, gamma 0.5, stepsize 8), P = 2, warmup 4: the policy's
    decay continues after the warm-up."""
    step = keras_caffe.schedules.Step(base_lr=0.1, gamma=0.5, stepsize=8)
    sched = kd.ScaledLearningRate(step, workers=2, warmup_steps=4)
    assert rates(sched, [0, 2, 4, 7, 8, 16, 23]) == pytest.approx(
        [0.1, 0.15, 0.2, 0.2, 0.1, 0.05, 0.05], rel=1e-6)
    opt = keras_caffe.SGD(sched, momentum=0.9)
    assert opt.rate_at(2) == pytest.approx(0.15, rel=1e-6)


def test_scaled_rate_config_round_trip():
    step = keras_caffe.schedules.Step(base_lr=0.1, gamma=0.5, stepsize=8)
    for sched in (kd.ScaledLearningRate(step, workers=3, warmup_steps=5),
                  kd.ScaledLearningRate(0.25, workers=2)):
        config = sched.get_config()
        again = kd.ScaledLearningRate.from_config(config)
        restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(sched))
        for other in (again, restored):
            assert type(other) is kd.ScaledLearningRate
            assert other.get_config() == config
            assert rates(other, [0, 3, 9, 40]) == rates(sched, [0, 3, 9, 40])
    assert type(again.base) is float
    assert type(restored.base) is float
    config = kd.ScaledLearningRate(step, workers=3, warmup_steps=5).get_config()
    assert config["workers"] == 3 and config["warmup_steps"] == 5
    assert type(kd.ScaledLearningRate.from_config(config).base) is keras_caffe.schedules.Step


@pytest.mark.parametrize("kwargs, argument, message", [
    ({"base": -0.1}, "base", "must be a non-negative float or a LearningRateSchedule, got -0.1"),
    ({"base": "0.1"}, "base", "must be a non-negative float or a LearningRateSchedule, got '0.1'"),
    ({"base": True}, "base", "must be a non-negative float or a LearningRateSchedule, got True"),
    ({"base": 0.1, "workers": 0}, "workers", "must be a positive integer, got 0"),
    ({"base": 0.1, "workers": 2.0}, "workers", "must be a positive integer, got 2.0"),
    ({"base": 0.1, "workers": True}, "workers", "must be a positive integer, got True"),
    ({"base": 0.1, "warmup_steps": -1}, "warmup_steps", "must be a non-negative integer, got -1"),
    ({"base": 0.1, "warmup_steps": 1.5}, "warmup_steps",
     "must be a non-negative integer, got 1.5"),
])
def test_scaled_rate_argument_errors(kwargs, argument, message):
    with pytest.raises(ArgumentError) as info:
        kd.ScaledLearningRate(**kwargs)
    assert str(info.value) == f"ScaledLearningRate: `{argument}` {message}"


# -- shard -----------------------------------------------------------------------------------

def elements(dataset):
    return [int(x) for x in dataset.as_numpy_iterator()]


def test_shard_elements():
    ds = tf.data.Dataset.range(10)
    assert elements(kd.shard(ds, rank=0, size=3)) == [0, 3, 6, 9]
    assert elements(kd.shard(ds, rank=1, size=3)) == [1, 4, 7]
    assert elements(kd.shard(ds, rank=2, size=3)) == [2, 5, 8]
    assert kd.shard(ds, rank=0, size=1) is ds
    assert kd.shard(ds) is ds  # no Horovod: rank 0 of 1, everything


@pytest.mark.parametrize("args, kwargs, argument, message", [
    (([1, 2],), {}, "dataset", "must be a tf.data.Dataset, got list"),
    ((None,), {}, "dataset", "must be a tf.data.Dataset, got NoneType"),
    ((tf.data.Dataset.range(3),), {"rank": 0, "size": 0}, "size",
     "must be a positive integer, got 0"),
    ((tf.data.Dataset.range(3),), {"rank": 0, "size": True}, "size",
     "must be a positive integer, got True"),
    ((tf.data.Dataset.range(3),), {"rank": 3, "size": 3}, "rank",
     "must be an integer in [0, 3), got 3"),
    ((tf.data.Dataset.range(3),), {"rank": -1, "size": 2}, "rank",
     "must be an integer in [0, 2), got -1"),
    ((tf.data.Dataset.range(3),), {"size": 4}, None, None),
])
def test_shard_errors(args, kwargs, argument, message):
    if argument is None:  # rank defaults to this worker's (0): fine
        assert elements(kd.shard(*args, **kwargs)) == [0]
        return
    with pytest.raises(ArgumentError) as info:
        kd.shard(*args, **kwargs)
    assert str(info.value) == f"shard: `{argument}` {message}"


DUMMY_NET = ('layer { name: "d" type: "DummyData" top: "n" dummy_data_param { '
             'shape { dim: 4 dim: 3 } data_filler { type: "gaussian" std: 1 } } }')


def test_net_pipeline_reads_everything_without_horovod():
    from keras_caffe.importers.data.pipelines import net_pipeline

    pipe = net_pipeline(DUMMY_NET, "TRAIN")
    assert (pipe.shard_index, pipe.num_shards) == (0, 1)
    pipe = net_pipeline(DUMMY_NET, "TRAIN", shard_index=1, num_shards=2)
    assert (pipe.shard_index, pipe.num_shards) == (1, 2)


def test_net_pipeline_default_shard_follows_the_worker(monkeypatch):
    """Under Horovod (a worker that says rank 1 of 3) the default share is that worker's."""
    from keras_caffe.importers.data.pipelines import net_pipeline

    monkeypatch.setattr(context, "worker", lambda seed=None: kd.Worker(1, 3, 1, 3, seed))
    monkeypatch.setattr(data_module, "worker", context.worker)
    pipe = net_pipeline(DUMMY_NET, "TRAIN")
    assert (pipe.shard_index, pipe.num_shards) == (1, 3)
    assert elements(kd.shard(tf.data.Dataset.range(7))) == [1, 4]


# -- failures --------------------------------------------------------------------------------

SHUTDOWN = ("Horovod has been shut down. This was caused by an exception on one of the ranks "
            "or an attempt to allreduce, allgather or broadcast a tensor after one of the "
            "ranks finished execution. If the shutdown was caused by an exception, you should "
            "see the exception in the log before the first shutdown message.")
GRAPH_SHUTDOWN = ("Graph execution error:\n\nDetected at node "
                  "DistributedOptimizer_Allreduce/HorovodGroupedAllreduce defined at (most "
                  "recent call last):\n  File \"train.py\", line 3, in <module>\n\n"
                  f"{SHUTDOWN}\n\t [[{{{{node HorovodGroupedAllreduce}}}}]] "
                  "[Op:__inference_one_step_on_iterator_1234]")
GLOO = ("{{function_node __wrapped__HorovodAllreduce_device_/job:localhost}} "
        "Gloo error: [pair.cc:589] Read error [127.0.0.1]:45123: Connection reset by peer")


class HorovodInternalError(RuntimeError):
    """Named like horovod.common.exceptions.HorovodInternalError."""


@pytest.mark.parametrize("err, reason", [
    (tf.errors.UnknownError(None, None, SHUTDOWN), "Horovod has been shut down"),
    (tf.errors.UnknownError(None, None, GRAPH_SHUTDOWN), "Horovod has been shut down"),
    (tf.errors.InternalError(None, None, GLOO), GLOO),
    (RuntimeError("gloo::IoException: Connection closed by peer"),
     "gloo::IoException: Connection closed by peer"),
    (HorovodInternalError("ring broken"), "ring broken"),
])
def test_worker_failures_become_one_distributed_error(err, reason):
    assert faults.is_worker_failure(err)
    assert faults.reason(err) == reason
    with pytest.raises(DistributedError) as info:
        with kd.failures(lambda: "iteration 12"):
            raise err
    assert str(info.value) == (f"rank 0 of 1: training stopped at iteration 12: a worker "
                               f"failed or left during a Horovod collective ({reason})")
    assert info.value.__cause__ is None and info.value.__suppress_context__
    with pytest.raises(DistributedError, match=r"^rank 0 of 1: training stopped: a worker"):
        with kd.failures():
            raise err


@pytest.mark.parametrize("err", [
    ValueError("Horovod"),  # not an OpError/RuntimeError
    tf.errors.InvalidArgumentError(None, None, "Incompatible shapes: [2] vs. [3]"),
    RuntimeError("out of memory"),
    DistributedError("rank 1's model differs from rank 0's: Horovod"),
    KeyboardInterrupt(),
])
def test_other_errors_pass_unchanged(err):
    assert not faults.is_worker_failure(err)
    with pytest.raises(type(err)) as info:
        with kd.failures(lambda: "iteration 1"):
            raise err
    assert info.value is err


def test_failure_names_the_rank(monkeypatch):
    monkeypatch.setattr(context, "worker", lambda seed=None: kd.Worker(3, 4, 1, 2, seed))
    monkeypatch.setattr(faults, "worker", context.worker)
    with pytest.raises(DistributedError, match=r"^rank 3 of 4: training stopped at step 5: "):
        with kd.failures(lambda: "step 5"):
            raise tf.errors.UnknownError(None, None, SHUTDOWN)


# -- random-generator states -------------------------------------------------------------

def test_seed_variables_and_offsets():
    model = small_model(dropout=True)
    seeds = seed_variables(model)
    assert [v.path.rsplit("/", 1)[-1] for v in seeds] == ["seed_generator_state"]
    assert not {id(v) for v in seeds} & {id(w) for w in model.weights}
    assert seed_variables(small_model()) == []
    before = seeds[0].numpy().copy()
    offset_seeds(model)  # no Horovod: rank 0, unchanged
    offset_seeds(model, rank=0)
    np.testing.assert_array_equal(seeds[0].numpy(), before)

    twin = small_model(dropout=True)
    twin.set_weights(model.get_weights())
    seed_variables(twin)[0].assign(before)
    offset_seeds(twin, rank=2)
    after = seed_variables(twin)[0].numpy()
    assert after.tolist() == [before[0] + 2 * kd.RANK_SEED_STRIDE, before[1]]
    assert kd.RANK_SEED_STRIDE == 1000003
    # rank 2 draws other dropout masks than rank 0 from the same starting state
    x = np.ones((16, 4), "float32")
    mask0 = model.get_layer("drop")(x, training=True).numpy() == 0
    mask2 = twin.get_layer("drop")(x, training=True).numpy() == 0
    assert mask0.any() and mask2.any() and (mask0 != mask2).any()


def test_callbacks_in_one_process_change_nothing():
    """BroadcastGlobalState and MetricAverage without Horovod: no-ops."""
    model = small_model(dropout=True)
    model.compile(optimizer=keras_caffe.SGD(0.1), loss="mse", jit_compile=True)
    weights = [w.numpy() for w in model.variables]
    callback = BroadcastGlobalState()
    callback.set_model(model)
    callback.on_train_begin()
    assert model.jit_compile is True
    for got, want in zip(model.variables, weights):
        np.testing.assert_array_equal(got.numpy(), want)
    logs = {"loss": 1.5, "acc": 0.25}
    MetricAverage().on_epoch_end(0, logs)
    assert logs == {"loss": 1.5, "acc": 0.25}


# -- rank 0 writes logs and snapshots ----------------------------------------------------

def fit_with_writers(tmp_path):
    model = small_model()
    model.compile(optimizer=keras_caffe.SGD(0.05, momentum=0.9), loss="mse")
    x, y = data(16)
    stream = io.StringIO()
    prefix = tmp_path / "snaps" / "run"
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, shuffle=False,
              callbacks=[CaffeLogger(display=1, stream=stream), CaffeSnapshot(prefix, 2)])
    return stream.getvalue(), sorted(p.name for p in tmp_path.rglob("*") if p.is_file())


def test_rank_0_writes_logs_and_snapshots(tmp_path):
    log, files = fit_with_writers(tmp_path)
    assert "Solving small" in log and "Iteration 3, lr = 0.05" in log
    assert "Optimization Done." in log
    assert files == ["run_iter_2.solverstate", "run_iter_2.weights.h5",
                     "run_iter_4.solverstate", "run_iter_4.weights.h5"]


def test_other_ranks_write_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(context, "worker", lambda seed=None: kd.Worker(1, 2, 1, 2, seed))
    assert not kd.is_chief() and kd.rank() == 1 and kd.active()
    log, files = fit_with_writers(tmp_path)
    assert log == "" and files == []
    assert not (tmp_path / "snaps").exists()


def test_loss_scaling_outside_the_all_reduce_is_refused():
    """Under mixed_float16 Keras wraps the compiled optimizer in a
    LossScaleOptimizer; around a DistributedOptimizer its overflow check would
    see each worker's own gradients, so BroadcastGlobalState refuses it."""
    keras.mixed_precision.set_dtype_policy("mixed_float16")
    model = small_model()
    model.compile(optimizer=kd.DistributedOptimizer(keras_caffe.SGD(0.1)), loss="mse")
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    with pytest.raises(DistributedError, match=r"^the model's optimizer is LossScaleOptimizer\("
                                               r"DistributedOptimizer\(\.\.\.\)\) .*compile with "
                                               r"optimizer=DistributedOptimizer\(keras\.optimizers"
                                               r"\.LossScaleOptimizer\(opt\)\) and "
                                               r"auto_scale_loss=False$"):
        BroadcastGlobalState().set_model(model)
    fine = small_model()
    fine.compile(optimizer=kd.DistributedOptimizer(keras.optimizers.LossScaleOptimizer(
        keras_caffe.SGD(0.1))), loss="mse", auto_scale_loss=False)
    BroadcastGlobalState().set_model(fine)  # the recommended order passes


def test_cli_train_under_horovodrun_without_horovod_says_how_to_install(tmp_path):
    """``keras-caffe train`` started by horovodrun (its environment variables
    set) where Horovod cannot be imported: exit 1 and one error line."""
    from support.horovod_jobs import python

    from keras_caffe.distributed._hvd import INSTALL_HINT

    blocker = tmp_path / "blocked" / "horovod"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text('raise ImportError("horovod blocked by the test")\n')
    (tmp_path / "solver.prototxt").write_text('net: "net.prototxt" base_lr: 0.1\n')  # found
    result = python(["-m", "keras_caffe.cli", "train", "--solver", tmp_path / "solver.prototxt"],
                    cwd=tmp_path, env={"PYTHONPATH": blocker.parent, "HOROVOD_RANK": 0,
                                       "HOROVOD_SIZE": 2})
    assert result.returncode == 1, result.stdout[-3000:]
    lines = [line for line in result.stdout.splitlines() if "Horovod" in line]
    assert lines == [f"keras-caffe: error: {INSTALL_HINT} (horovod blocked by the test)"]

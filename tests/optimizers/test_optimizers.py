"""The Caffe solvers as Keras optimizers: arguments, serialization, saving,
mixed precision, lr_mult/decay_mult, iteration counting."""

import copy

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe import schedules
from keras_caffe.errors import ArgumentError, KerasCaffeError
from support import caffe_weights, golden_dataset, sparse_softmax_loss, tiny_mlp

OPTIMIZERS = [
    keras_caffe.SGD, keras_caffe.Nesterov, keras_caffe.AdaGrad,
    keras_caffe.RMSProp, keras_caffe.AdaDelta, keras_caffe.Adam,
]
ids = [cls.__name__ for cls in OPTIMIZERS]


def full_config(cls):
    """Non-default values for every argument the class takes."""
    extra = {
        "SGD": {"momentum": 0.8}, "Nesterov": {"momentum": 0.7},
        "AdaGrad": {"delta": 1e-7}, "RMSProp": {"rms_decay": 0.9, "delta": 1e-6},
        "AdaDelta": {"momentum": 0.9, "delta": 1e-5},
        "Adam": {"momentum": 0.8, "momentum2": 0.99, "delta": 1e-7},
    }[cls.__name__]
    return dict(
        learning_rate=schedules.Warmup(schedules.Step(0.05, gamma=0.5, stepsize=3), 2),
        weight_decay=1e-3, regularization_type="L1", clip_gradients=5.0, iter_size=2,
        lr_mult={"ip1/bias": 2.0, "ip2/*": 0.5}, decay_mult={"*/bias": 0.0}, **extra,
    )


def train(model, optimizer, batches, jit_compile=False, folder=None):
    model.compile(optimizer=optimizer, loss=sparse_softmax_loss(), jit_compile=jit_compile)
    model.fit(golden_dataset(folder), steps_per_epoch=batches, epochs=1, verbose=0, shuffle=False)


# -- arguments ------------------------------------------------------------------

SHARED_BAD = [
    ("learning_rate", -0.1), ("learning_rate", float("nan")), ("weight_decay", -5e-4),
    ("weight_decay", float("inf")), ("clip_gradients", -1.0), ("clip_gradients", float("nan")),
    ("iter_size", 0), ("iter_size", 1.5), ("regularization_type", "L3"),
    ("lr_mult", {"ip1/bias": -1.0}), ("decay_mult", {"*": float("nan")}), ("lr_mult", [2.0]),
]
OWN_BAD = {
    "SGD": [("momentum", -0.9), ("momentum", 1.5), ("momentum", float("nan"))],
    "Nesterov": [("momentum", -0.1)],
    "AdaGrad": [("delta", -1e-8), ("delta", float("nan"))],
    "RMSProp": [("rms_decay", -0.1), ("rms_decay", 1.01), ("delta", -1.0)],
    "AdaDelta": [("momentum", -0.95), ("delta", float("nan"))],
    "Adam": [("momentum", 1.0), ("momentum2", -0.1), ("momentum2", 1.0), ("delta", -1e-8)],
}


@pytest.mark.parametrize(
    "cls, argument, value",
    [(cls, a, v) for cls in OPTIMIZERS for a, v in SHARED_BAD + OWN_BAD[cls.__name__]],
    ids=lambda x: x.__name__ if isinstance(x, type) else str(x),
)
def test_bad_argument_is_refused_with_its_name(cls, argument, value):
    with pytest.raises(ArgumentError) as info:
        cls(**{argument: value})
    assert info.value.argument.split("[")[0] == argument
    assert str(info.value).startswith(f"{cls.__name__}: `{argument}")


@pytest.mark.parametrize(
    "keras_arg", ["clipnorm", "clipvalue", "global_clipnorm", "gradient_accumulation_steps"]
)
def test_keras_options_with_other_semantics_are_refused(keras_arg):
    with pytest.raises(ArgumentError, match=f"`{keras_arg}` is not supported: use `"):
        keras_caffe.SGD(**{keras_arg: 2})


def test_integer_rate_and_unknown_keyword():
    assert float(keras_caffe.SGD(learning_rate=1).learning_rate) == 1.0
    with pytest.raises(ValueError, match="not recognized"):
        keras_caffe.SGD(momentun=0.9)


@pytest.mark.skipif(keras.backend.backend() == "tensorflow",
                    reason="Keras's TensorFlow optimizer has no stateless_apply")
@pytest.mark.parametrize("cls", OPTIMIZERS + [keras_caffe.YellowFin], ids=lambda c: c.__name__)
def test_stateless_apply_is_apply(cls):
    """Keras's stateless API (what its JAX trainer calls: ``stateless_apply``
    runs ``apply`` in a ``StatelessScope``) goes through Caffe's pipeline:
    the same new values as ``apply``, for iter_size 2 with clipping that
    clips, weight decay and an lr_mult, on every backend."""
    rng = np.random.default_rng(0)
    start = [rng.standard_normal((3, 4)).astype("float32"),
             rng.standard_normal(4).astype("float32")]
    grads = [[rng.standard_normal(w.shape).astype("float32") for w in start] for _ in range(4)]

    def make():
        variables = [keras.Variable(w, name=f"w{i}") for i, w in enumerate(start)]
        optimizer = cls(iter_size=2, clip_gradients=0.5, weight_decay=0.01,
                        lr_mult={"w1": 2.0})
        optimizer.build(variables)
        return optimizer, variables

    applied, variables = make()
    for g in grads:
        applied.apply([keras.ops.convert_to_tensor(x) for x in g], variables)
    stateless, twins = make()
    weights = [v.value for v in twins]
    state = [v.value for v in stateless.variables]
    for g in grads:
        weights, state = stateless.stateless_apply(
            state, [keras.ops.convert_to_tensor(x) for x in g], weights)
    assert int(applied.iterations) == 2
    for ours, theirs in zip(weights, variables):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), theirs.numpy(), rtol=1e-6, atol=1e-7)
    for ours, theirs in zip(state, applied.variables):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), theirs.numpy(), rtol=1e-6, atol=1e-7,
                                   err_msg=theirs.path)


def test_errors_are_value_errors():
    assert issubclass(KerasCaffeError, ValueError)
    assert issubclass(ArgumentError, KerasCaffeError)


# -- state ------------------------------------------------------------------------

SLOTS = {"SGD": ["history"], "Nesterov": ["history"], "AdaGrad": ["history"],
         "RMSProp": ["history"], "AdaDelta": ["history", "update_history"], "Adam": ["m", "v"]}


@pytest.mark.parametrize("iter_size", [1, 2])
@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_optimizer_variables_are_its_own_state_only(cls, iter_size):
    """Caffe's history blobs per variable (+ the iter_size sum and counter)."""
    model = tiny_mlp()
    optimizer = cls(learning_rate=0.1, iter_size=iter_size, name="opt")
    optimizer.build(model.trainable_variables)
    expected = ["opt/iteration", "opt/learning_rate"]
    per_variable = SLOTS[cls.__name__]
    if iter_size > 1:
        expected.append("opt/iter_size_micro_step")
        per_variable = ["iter_size_sum"] + per_variable
    for slot in per_variable:
        expected += [f"opt/{v.path.replace('/', '_')}_{slot}" for v in model.trainable_variables]
    assert sorted(v.path for v in optimizer.variables) == sorted(expected)


# -- serialization ----------------------------------------------------------------


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_config_round_trip(cls):
    optimizer = cls(**full_config(cls))
    config = optimizer.get_config()
    for refused in ("clipnorm", "clipvalue", "global_clipnorm", "gradient_accumulation_steps"):
        assert refused not in config
    restored = cls.from_config(copy.deepcopy(config))  # Keras's from_config edits its input
    assert restored.get_config() == config
    serialized = keras.optimizers.serialize(optimizer)
    assert serialized["registered_name"] == f"keras_caffe>{cls.__name__}"
    again = keras.optimizers.deserialize(serialized)
    assert type(again) is cls and again.get_config() == config


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
def test_save_load_resumes_exactly(cls, golden, tmp_path):
    """N + N steps through model.save/load_model equals 2N steps.

    Saved after an odd number of batches, so with iter_size 2 the file holds
    a half-accumulated iteration; it must resume from there.
    """
    folder = golden / "solvers" / "sgd"
    init = np.load(folder / "init.npz")

    reference = tiny_mlp(init)
    train(reference, cls(**full_config(cls)), batches=14, folder=folder)

    first = tiny_mlp(init)
    optimizer = cls(**full_config(cls))
    train(first, optimizer, batches=7, folder=folder)
    assert int(optimizer.iterations) == 3  # 7 batches, iter_size 2
    path = tmp_path / "model.keras"
    first.save(path)
    del first

    resumed = keras.models.load_model(path)
    restored = resumed.optimizer
    assert type(restored) is cls and int(restored.iterations) == 3
    assert len(restored.variables) == len(optimizer.variables)
    for ours, theirs in zip(restored.variables, optimizer.variables):
        np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs), err_msg=ours.path)
    # Continue on batches 7..13 of the same stream.
    ds = golden_dataset(folder, skip=7)
    resumed.fit(ds, steps_per_epoch=7, epochs=1, verbose=0, shuffle=False)
    assert int(restored.iterations) == 7
    for name, value in caffe_weights(resumed).items():
        np.testing.assert_allclose(value, caffe_weights(reference)[name], rtol=1e-6, atol=1e-7,
                                   err_msg=name)


# -- mixed precision ----------------------------------------------------------------


#: The training step not compiled and compiled (XLA on TensorFlow and JAX;
#: PyTorch's torch.compile left out: minutes per case, not Keras's default).
JIT = {"tensorflow": [False, True], "jax": [False, True], "torch": [False]}[keras.backend.backend()]


@pytest.mark.parametrize("cls", OPTIMIZERS, ids=ids)
@pytest.mark.parametrize("jit_compile", JIT, ids=["graph", "xla"][:len(JIT)])
def test_mixed_float16(cls, jit_compile, golden):
    folder = golden / "solvers" / "sgd"
    init = np.load(folder / "init.npz")
    config = dict(full_config(cls), learning_rate=0.05, clip_gradients=None)

    reference = tiny_mlp(init)
    train(reference, cls(**config), batches=8, jit_compile=jit_compile, folder=folder)

    keras.mixed_precision.set_dtype_policy("mixed_float16")
    model = tiny_mlp(init)
    train(model, cls(**config), batches=8, jit_compile=jit_compile, folder=folder)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    inner = model.optimizer.inner_optimizer
    assert type(inner) is cls and int(inner.iterations) == 4
    assert all(v.dtype == "float32" for v in model.trainable_variables)
    start = init["ip1_w"]
    moved = np.abs(caffe_weights(model)["ip1_w"] - start).max()
    assert moved > 1e-3
    # float16 activations: the same trajectory to about 3 significant digits.
    for name, value in caffe_weights(model).items():
        ref = caffe_weights(reference)[name]
        np.testing.assert_allclose(value, ref, rtol=0, atol=2e-3 * (1 + np.abs(ref).max()),
                                   err_msg=name)


# -- lr_mult / decay_mult ----------------------------------------------------------


def test_lr_mult_zero_freezes_and_globs_resolve(golden):
    folder = golden / "solvers" / "sgd"
    init = np.load(folder / "init.npz")
    model = tiny_mlp(init)
    optimizer = keras_caffe.SGD(
        0.1, momentum=0.9, weight_decay=0.01,
        lr_mult={"ip1/bias": 3.0, "*/bias": 0.0, "ip2/kernel": 0.0},
        decay_mult={"ip1/*": 0.0},
    )
    train(model, optimizer, batches=3, folder=folder)
    assert optimizer._lr_mults == [1.0, 3.0, 0.0, 0.0]  # exact path wins over the glob
    assert optimizer._decay_mults == [0.0, 0.0, 1.0, 1.0]
    after = caffe_weights(model)
    np.testing.assert_array_equal(after["ip2_w"], init["ip2_w"])
    np.testing.assert_array_equal(after["ip2_b"], init["ip2_b"])
    assert np.abs(after["ip1_b"] - init["ip1_b"]).max() > 1e-4


def test_unmatched_multiplier_warns(golden):
    model = tiny_mlp()
    optimizer = keras_caffe.SGD(0.1, lr_mult={"conv1/kernel": 2.0})
    with pytest.warns(UserWarning, match=r"lr_mult entries \['conv1/kernel'\] match no"):
        optimizer.build(model.trainable_variables)


# -- iterations ----------------------------------------------------------------------


def test_iterations_count_updates_not_micro_batches(golden):
    model = tiny_mlp()
    optimizer = keras_caffe.SGD(schedules.Step(0.1, gamma=0.5, stepsize=2), iter_size=3)
    train(model, optimizer, batches=7, folder=golden / "solvers" / "sgd")
    assert int(optimizer.iterations) == 2
    assert float(optimizer.learning_rate) == pytest.approx(0.05)


# -- one all-reduce per update (data parallelism with iter_size) -------------------

REDUCE_CASES = [(cls, {}) for cls in OPTIMIZERS] + [
    (keras_caffe.YellowFin, {"jit_compile": False}), (keras_caffe.YellowFin, {"jit_compile": True})]


def _micro_batches(model, count, seed=3):
    rng = np.random.default_rng(seed)
    return [[rng.normal(size=v.shape).astype("float32") for v in model.trainable_variables]
            for _ in range(count)]


class _Updates:
    """One tiny MLP and one optimizer (iter_size 3) for a case of
    ``test_reduce_runs_once_per_update_on_the_sum``, put back to their
    state just after ``build`` (every weight and optimizer variable) before
    each run: the runs compare updates, and a shared optimizer keeps what it
    compiled (YellowFin's XLA update, traced once per (method, variables)),
    which a new optimizer per run compiled again (5 times a case)."""

    def __init__(self, cls, extra):
        keras.utils.set_random_seed(11)
        self.model = tiny_mlp()
        config = {key: value for key, value in full_config(cls).items() if key in (
            "weight_decay", "lr_mult", "decay_mult")} if cls in OPTIMIZERS else {}
        # The sum of 3 micro-batches has a norm of about 35: the doubled one is clipped.
        self.optimizer = cls(0.05, iter_size=3, clip_gradients=50.0, **config, **extra)
        self.optimizer.build(self.model.trainable_variables)
        self.weights = [v.numpy() for v in self.model.weights]
        self.state = [v.numpy() for v in self.optimizer.variables]

    def run(self, step):
        """Final weights after ``step(optimizer, variables, k)`` ran for
        micro-batches k = 0..5 (two updates) from the state after build."""
        for variable, value in zip(self.model.weights + self.optimizer.variables,
                                   self.weights + self.state):
            variable.assign(value)
        for k in range(6):
            step(self.optimizer, self.model.trainable_variables, k)
        return [v.numpy() for v in self.model.weights], self.optimizer


@pytest.mark.tensorflow_only  # the all-reduce hook is Horovod's (TensorFlow)
@pytest.mark.parametrize("cls, extra", REDUCE_CASES, ids=lambda c: getattr(c, "__name__", str(c)))
def test_reduce_runs_once_per_update_on_the_sum(cls, extra):
    """``apply(..., reduce=f)`` (what ``DistributedOptimizer`` passes) calls
    ``f`` once per ``iter_size`` micro-batches, on their sum, inside a
    ``tf.function`` as ``fit`` runs it; ``apply_summed`` of that sum is the
    same update. An identity ``f`` changes no bit; ``f`` = 2x (two workers
    holding the same gradients, summed) equals applying doubled gradients."""
    import tensorflow as tf

    updates = _Updates(cls, extra)
    grads = _micro_batches(updates.model, 6)
    calls = tf.Variable(0, dtype=tf.int64)

    def identity(sums):
        with tf.control_dependencies([calls.assign_add(1)]):
            return [tf.identity(g) for g in sums]

    def compiled(reduce=None, scale=1.0):
        functions = {}

        def step(opt, variables, k):
            if opt not in functions:  # the variables are captured, not arguments
                functions[opt] = tf.function(lambda g: opt.apply(g, variables, reduce=reduce))
            functions[opt]([g * scale for g in grads[k]])
        return step

    def summed():
        functions = {}

        def step(opt, variables, k):
            if k % 3 == 2:
                if opt not in functions:
                    functions[opt] = tf.function(lambda g: opt.apply_summed(g, variables))
                functions[opt]([a + b + c for a, b, c in zip(*grads[k - 2:k + 1])])
        return step

    plain, _ = updates.run(compiled())
    reduced, optimizer = updates.run(compiled(identity))
    assert int(calls.numpy()) == 2 and int(optimizer.iterations.numpy()) == 2
    once, optimizer = updates.run(summed())
    assert int(optimizer.iterations.numpy()) == 2
    assert int(optimizer._micro_step.numpy()) == 6
    doubled, _ = updates.run(compiled(lambda sums: [2.0 * g for g in sums]))
    twice, _ = updates.run(compiled(scale=2.0))
    for a, b, c, d, e in zip(plain, reduced, once, doubled, twice):
        np.testing.assert_array_equal(b, a)
        np.testing.assert_allclose(c, a, rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(d, e)
    assert not np.allclose(plain[0], twice[0])  # doubling (and clipping) the sum matters


def test_apply_without_variables_needs_a_built_optimizer():
    with pytest.raises(ValueError, match="must already be built"):
        keras_caffe.SGD().apply([np.zeros(2, "float32")])

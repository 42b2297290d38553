"""Frozen parameters (``lr_mult: 0``) as Caffe treats them (issue 14).

Caffe's ``Net::Init`` gives a parameter with ``lr_mult`` 0 no backward pass
(``param_propagate_down`` false), so its diff stays 0: it adds nothing to
``clip_gradients``' norm or to ``iter_size``'s sum, ``Regularize`` still
adds its weight decay, the solver still updates its history with that, and
the weight never moves (local rate 0). Checked against the float64 port of
Caffe's update in ``caffe_reference.py`` on a two-layer MLP under softmax
loss, for the six solvers, with ``clip_gradients`` binding, with and
without ``iter_size``; each case also checks that the old rule (the frozen
gradient computed and counted) would have given other numbers.

On every Keras backend (tests/support/tiers.py BACKENDS), with the same
tolerances; the count of TensorFlow's backward kernels below the lowest
learning layer (its traced graph, its convolution kernels) is
``tensorflow_only``, and PyTorch's compiled step (torch.compile) is left out.
"""

import re

import keras
import numpy as np
import pytest

import keras_caffe
from support import golden_dataset, golden_train_shapes
from support.autodiff import gradients
from support.caffe_reference import apply_update, mlp_softmax_diffs
from support.traced import BACKEND, JIT
from keras_caffe.importers import training_args

pytestmark = pytest.mark.kernels  # parity: run under oneDNN and Eigen

N, D, H, K = 16, 20, 16, 5
RNG = np.random.RandomState(14)
X = RNG.randn(N, D).astype("float32")
Y = RNG.randint(0, K, N).astype("int32")
INIT = [(RNG.randn(D, H) * 0.3).astype("float32"), (RNG.randn(H) * 0.1).astype("float32"),
        (RNG.randn(H, K) * 0.3).astype("float32"), (RNG.randn(K) * 0.1).astype("float32")]
PATHS = ["ip1/kernel", "ip1/bias", "ip2/kernel", "ip2/bias"]
ITERATIONS = 6

HYPER = {
    "SGD": {"lr": 0.1, "momentum": 0.9},
    "Nesterov": {"lr": 0.1, "momentum": 0.9},
    "AdaGrad": {"lr": 0.1},
    "RMSProp": {"lr": 0.01, "rms_decay": 0.95},
    "AdaDelta": {"lr": 1.0, "momentum": 0.95, "delta": 1e-6},
    "Adam": {"lr": 0.01, "momentum": 0.9, "momentum2": 0.999},
}
SLOTS = {"SGD": {"h": "history"}, "Nesterov": {"h": "history"}, "AdaGrad": {"h": "history"},
         "RMSProp": {"h": "history"}, "AdaDelta": {"h": "history", "h2": "update_history"},
         "Adam": {"h": "m", "v": "v"}}
WEIGHT_DECAY = 0.05
CLIP = 0.2


def mlp():
    inputs = keras.Input((D,))
    hidden = keras.layers.Dense(H, activation="relu", name="ip1")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(K, name="ip2")(hidden))
    model.set_weights(INIT)
    return model


def numpy_diffs(params, x, y):
    return mlp_softmax_diffs(params, x, y)


def reference(solver, lr_mults, iter_size, net_init_rule=True, init=INIT, batches=None,
              iterations=ITERATIONS, hp=None):
    """Caffe's run (float64): (params, solver state, iterations clipped).
    ``batches``: the (x, y) of each micro-batch in turn (default: X, Y split
    into ``iter_size`` parts at every iteration)."""
    params = [np.asarray(p, np.float64) for p in init]
    state = {}
    hp = dict(hp or HYPER[solver], weight_decay=WEIGHT_DECAY)
    if batches is None:
        batches = list(zip(np.split(X, iter_size), np.split(Y, iter_size))) * iterations
    batches = iter(batches)
    for it in range(iterations):
        diffs = [np.zeros_like(p) for p in params]
        for _ in range(iter_size):
            x, y = next(batches)
            diffs = [a + b for a, b in zip(diffs, numpy_diffs(params, x.astype(np.float64), y))]
        params = apply_update(solver, hp, params, diffs, state, it, lr_mults=lr_mults,
                              clip_gradients=CLIP, iter_size=iter_size,
                              net_init_rule=net_init_rule)
    return params, state, state["clipped"]


def train(solver, lr_mults, iter_size, frozen_gradient="computed"):
    model = mlp()
    hp = HYPER[solver]
    kwargs = {k: v for k, v in hp.items() if k in getattr(keras_caffe, solver).solver_fields}
    optimizer = getattr(keras_caffe, solver)(
        learning_rate=hp["lr"], weight_decay=WEIGHT_DECAY, clip_gradients=CLIP,
        iter_size=iter_size, lr_mult=dict(zip(PATHS, lr_mults)), **kwargs)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    variables = model.trainable_variables
    for _ in range(ITERATIONS):
        for x, y in zip(np.split(X, iter_size), np.split(Y, iter_size)):
            grads = gradients(lambda: loss_fn(y, model(x)), variables)
            if frozen_gradient == "none":
                grads = [None if lr == 0 else g for g, lr in zip(grads, lr_mults)]
            optimizer.apply(grads, variables)
    assert int(optimizer.iterations) == ITERATIONS
    return model, optimizer


CASES = [(solver, iter_size) for solver in HYPER for iter_size in (1, 2)]


@pytest.mark.parametrize("solver, iter_size", CASES)
def test_frozen_weight_gets_no_gradient_as_in_caffe(solver, iter_size):
    lr_mults = [0.0, 1.0, 1.0, 2.0]  # ip1's weights frozen, as in fine-tuning
    model, optimizer = train(solver, lr_mults, iter_size)
    expected, state, clipped = reference(solver, lr_mults, iter_size)
    assert clipped == ITERATIONS  # clip_gradients binds at every iteration
    weights = model.get_weights()
    for ours, theirs in zip(weights, expected):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(weights[0], INIT[0])  # frozen: never moves
    # the frozen param's history is Caffe's (its diff is the weight decay alone)
    for key, slot in SLOTS[solver].items():
        ours = keras.ops.convert_to_numpy(optimizer.slot(getattr(optimizer, slot),
                                                         model.trainable_variables[0]))
        np.testing.assert_allclose(ours, state[(key, 0)], rtol=2e-5, atol=1e-7)
    # the case tells the rules apart: counting the frozen gradient moves ip2 elsewhere
    old, _, _ = reference(solver, lr_mults, iter_size, net_init_rule=False)
    assert np.abs(old[2] - expected[2]).max() > 1e-4


@pytest.mark.parametrize("solver", ["SGD", "Adam"])
def test_a_gradient_that_was_never_computed_counts_as_zero(solver):
    """Imported layers stop the gradient of a frozen blob, so the optimizer
    gets None for it: the same numbers as a computed gradient set to 0."""
    lr_mults = [1.0, 0.0, 1.0, 1.0]  # ip1's bias frozen
    computed, _ = train(solver, lr_mults, 1)
    never, _ = train(solver, lr_mults, 1, frozen_gradient="none")
    for a, b in zip(computed.get_weights(), never.get_weights()):
        np.testing.assert_array_equal(a, b)
    expected, _, _ = reference(solver, lr_mults, 1)
    for ours, theirs in zip(never.get_weights(), expected):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("jit_compile", JIT)
def test_fit_freezes_as_apply_does(jit_compile):
    lr_mults = [0.0, 1.0, 1.0, 2.0]
    model = mlp()
    optimizer = keras_caffe.Adam(learning_rate=0.01, momentum=0.9, momentum2=0.999,
                                 weight_decay=WEIGHT_DECAY, clip_gradients=CLIP,
                                 lr_mult=dict(zip(PATHS, lr_mults)))
    model.compile(optimizer=optimizer, jit_compile=jit_compile,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(X, Y, batch_size=N, epochs=ITERATIONS, shuffle=False, verbose=0)
    expected, _, _ = reference("Adam", lr_mults, 1)
    for ours, theirs in zip(model.get_weights(), expected):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)
    np.testing.assert_array_equal(model.get_weights()[0], INIT[0])


# -- imported nets: the prototxt's lr_mult 0 ----------------------------------------------


@pytest.mark.parametrize("solver", list(HYPER))
def test_imported_net_with_a_frozen_layer_replays_caffe(golden, solver, monkeypatch):
    """The golden train net with ``param { lr_mult: 0 }`` on both of ip1's
    blobs, Caffe's weights and data, clip_gradients binding: fit lands on
    the float64 port of Caffe's run, ip1 never moves, and its gradient is
    not even computed (its blobs' gradients are stopped)."""
    folder = golden / "solvers" / "sgd"
    text = (folder / "train_net.prototxt").read_text().replace(
        "param { lr_mult: 1 decay_mult: 1 }\n  param { lr_mult: 2 decay_mult: 0 }",
        "param { lr_mult: 0 decay_mult: 1 }\n  param { lr_mult: 0 decay_mult: 0 }")
    assert text.count("lr_mult: 0") == 2
    monkeypatch.chdir(folder)  # the HDF5Data source is relative, as Caffe reads it
    model = keras_caffe.import_model(text, weights=folder / "init.caffemodel", phase="TRAIN",
                                     input_shapes=golden_train_shapes())
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    assert lr_mult == {"ip1/kernel": 0.0, "ip1/bias": 0.0, "ip2/kernel": 1.0, "ip2/bias": 1.0}
    hp = HYPER[solver]
    kwargs = {k: v for k, v in hp.items() if k in getattr(keras_caffe, solver).solver_fields}
    optimizer = getattr(keras_caffe, solver)(
        learning_rate=hp["lr"], weight_decay=WEIGHT_DECAY, clip_gradients=CLIP,
        lr_mult=lr_mult, decay_mult=decay_mult, **kwargs)
    model.compile(optimizer=optimizer, **training_args(model))
    init = [w.copy() for w in model.get_weights()]
    data = np.load(folder / "data.npz")
    iterations = 12
    model.fit(golden_dataset(folder), steps_per_epoch=iterations, epochs=1, verbose=0,
              shuffle=False)
    batches = [(data["data"][16 * (k % 4):16 * (k % 4) + 16],
                data["label"][16 * (k % 4):16 * (k % 4) + 16].astype(int))
               for k in range(iterations)]
    lr_mults = [0.0, 0.0, 1.0, 1.0]
    expected, _, clipped = reference(solver, lr_mults, 1, init=init, batches=batches,
                                     iterations=iterations, hp=dict(hp))
    assert clipped >= iterations // 2
    weights = model.get_weights()
    for ours, theirs in zip(weights, expected):
        np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)
    for ours, start in zip(weights[:2], init[:2]):
        np.testing.assert_array_equal(ours, start)
    assert stopped_gradients(model, data["data"][:16]) == [True, True, False, False]


def stopped_gradients(model, x):
    """For each trainable variable: whether the gradient of ``model(x)``
    (summed) cannot reach it. TensorFlow and PyTorch compute none there
    (None); JAX's ``grad`` returns zeros where no path leads."""
    variables = model.trainable_variables

    def loss():
        return sum(keras.ops.sum(y) for y in keras.tree.flatten(model(x, training=True)))

    if BACKEND == "torch":  # torch.autograd.grad refuses an unreached input unless allowed
        import torch  # here: the backend in use (the others lack PyTorch)

        grads = torch.autograd.grad(loss(), [v.value for v in variables], allow_unused=True)
        return [g is None for g in grads]
    grads = gradients(loss, variables)
    if BACKEND == "jax":
        return [not np.any(keras.ops.convert_to_numpy(g)) for g in grads]
    return [g is None for g in grads]


def conv_net(frozen):
    """Three 3x3 convolutions and a classifier; ``frozen``: how many of the
    convolutions, from the bottom, have lr_mult 0 on both blobs."""
    layers = ['layer { name: "data" type: "Input" top: "data" '
              'input_param { shape { dim: 4 dim: 3 dim: 16 dim: 16 } } }']
    bottom = "data"
    for i in range(1, 4):
        params = "param { lr_mult: 0 } param { lr_mult: 0 } " if i <= frozen else ""
        layers.append(f'layer {{ name: "conv{i}" type: "Convolution" bottom: "{bottom}" '
                      f'top: "conv{i}" {params}convolution_param {{ num_output: 8 '
                      f'kernel_size: 3 pad: 1 }} }}')
        layers.append(f'layer {{ name: "relu{i}" type: "ReLU" bottom: "conv{i}" '
                      f'top: "conv{i}" }}')
        bottom = f"conv{i}"
    layers.append(f'layer {{ name: "fc" type: "InnerProduct" bottom: "{bottom}" top: "fc" '
                  'inner_product_param { num_output: 3 } }')
    return keras_caffe.import_model("\n".join(layers))


def backward_ops(model, scopes=()):
    """Op types of the traced backward pass of ``sum(model(x))`` over the
    model's trainable variables, with their counts; an op under a name
    scope of ``scopes`` counts as that scope, once per scope instance."""
    import tensorflow as tf  # here: TensorFlow-only tests (the other backends lack it)

    variables = model.trainable_variables

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True))
        return [g for g in tape.gradient(loss, variables) if g is not None]

    graph = step.get_concrete_function(tf.TensorSpec((4, 16, 16, 3))).graph
    # what runs: the ops the outputs depend on (TensorFlow prunes the rest)
    needed, stack = set(), [t.op for t in graph.outputs]
    while stack:
        op = stack.pop()
        if op.name in needed:
            continue
        needed.add(op.name)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    counts, instances = {}, set()
    for op in graph.get_operations():
        if op.name not in needed:
            continue
        parts = op.name.split("/")
        found = [(i, s) for i, part in enumerate(parts) for s in scopes
                 if re.fullmatch(rf"{s}(_\d+)?", part)]
        if not found:
            counts[op.type] = counts.get(op.type, 0) + 1
        elif "/".join(parts[:found[0][0] + 1]) not in instances:  # a scope uniquified: _1, _2
            instances.add("/".join(parts[:found[0][0] + 1]))
            counts[found[0][1]] = counts.get(found[0][1], 0) + 1
    return counts


@pytest.mark.tensorflow_only  # TensorFlow's traced backward graph and convolution kernels
@pytest.mark.parametrize("frozen, filters, inputs", [(0, 3, 2), (1, 2, 1), (2, 1, 0), (3, 0, 0)])
def test_no_backward_work_below_the_lowest_learning_layer(monkeypatch, frozen, filters, inputs):
    """As Caffe's ``layer_need_backward``: the weight gradient is computed
    for learning convolutions only, and the gradient of a convolution's
    input only where a learning layer lies below it. With TensorFlow's
    gradient kernels (forced: Eigen's CPU kernels, and oneDNN's from 8
    channels, take the own backward)."""
    from keras_caffe.layers import conv

    monkeypatch.setattr(conv, "takes_own_backward", lambda channels: False)
    counts = backward_ops(conv_net(frozen))
    assert counts.get("Conv2DBackpropFilter", 0) == filters
    assert counts.get("Conv2DBackpropInput", 0) == inputs


@pytest.mark.tensorflow_only  # keras-caffe's own convolution backward on TensorFlow
@pytest.mark.parametrize("frozen, filters, inputs", [(0, 3, 2), (1, 2, 1), (2, 1, 0), (3, 0, 0)])
def test_no_own_backward_work_below_the_lowest_learning_layer(monkeypatch, frozen, filters,
                                                              inputs):
    """The same with keras-caffe's own convolution backward (Eigen's CPU
    kernels: ``keras_caffe.layers.tensorflow_kernels.own_backward_conv``), forced on here
    whatever the kernels: its filter gradients (one XLA call each) and its
    input gradients (convolutions) run only where Caffe's would."""
    from keras_caffe.layers import conv

    monkeypatch.setattr(conv, "takes_own_backward", lambda channels: True)
    counts = backward_ops(conv_net(frozen), scopes=("conv_filter_gradient", "conv_input_gradient"))
    assert counts.get("Conv2DBackpropFilter", 0) == 0
    assert counts.get("conv_filter_gradient", 0) == filters
    assert counts.get("conv_input_gradient", 0) == inputs

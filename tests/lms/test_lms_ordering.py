"""LMS's rematerialized blocks finish their backward pass before any update
of their weights can run (lms_exec: ``_after_all``).

Why: with ``keras.remat`` the backward pass reads a block's weights again,
and nothing but a control edge orders that read before the optimizer's
update of the same weights. benchmarks/lms_race.py shows such steps
computing a gradient with the already-updated weights. Here the ordering is
checked on the graph itself, where it cannot flake: in a training step,
every live read of a variable must be a *data* ancestor of each update of
that variable. That fails for ``keras.remat`` (the check is run on it too,
so it can fail) and holds without LMS and for LMS's remat and staging.
"""

import collections

import keras
import pytest
import tensorflow as tf

import keras_caffe
from keras_caffe.lms import execution as lms_exec
from support.lms import loss_and_grads

pytestmark = pytest.mark.kernels

READ = "ReadVariableOp"
UPDATES = {"AssignVariableOp", "AssignSubVariableOp", "AssignAddVariableOp"}


def mlp():
    """LMS(0) cuts it into two remat blocks, (ip1, relu1) and (ip2, ip3): the
    second one's recomputed outputs are not needed by its gradients (a
    MatMul's gradient takes its inputs), as in the golden SGD net's
    (ip1, relu1, ip2) block."""
    inputs = keras.Input((20,), name="data")
    x = keras.layers.Dense(16, name="ip1")(inputs)
    x = keras.layers.ReLU(name="relu1")(x)
    x = keras.layers.Dense(16, name="ip2")(x)
    return keras.Model(inputs, keras.layers.Dense(5, name="ip3")(x), name="mlp")


def step_graph(model, optimizer):
    """The training step's GraphDef and the names of the nodes it returns."""
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    spec = (tf.TensorSpec((8, 20), tf.float32), tf.TensorSpec((8,), tf.int32))
    concrete = step.get_concrete_function(*spec)
    return concrete.graph.as_graph_def(), [t.op.name for t in concrete.outputs]


def _port(text):
    name, _, port = text.partition(":")
    return name, int(port or 0)


def unordered_reads(graph_def, returned):
    """``[(variable, read, update)]`` where the read is live (the step's
    result or an update depends on it) and is not a data ancestor of the
    update.

    A read that the update depends on by data runs first, and TensorFlow's
    copy-on-write then keeps the value it read for all its consumers. A read
    ordered before the update by a control edge alone is at the mercy of
    graph rewrites.

    Dependencies are followed per tensor through ``IdentityN`` (output k
    depends on input k only), as Grappler's dependency optimizer treats it
    when it bypasses the node: an ``IdentityN`` that happens to wait for all
    its inputs orders nothing once it is gone."""
    nodes = {n.name: n for n in graph_def.node}
    data_inputs = {n.name: [_port(i) for i in n.input if not i.startswith("^")]
                   for n in graph_def.node}
    def parents(name, port):
        if nodes[name].op == "IdentityN":
            return [data_inputs[name][port]]
        return data_inputs[name]

    def ancestors(*names):
        seen, stack = set(), [(name, 0) for name in names]
        while stack:
            for parent in parents(*stack.pop()):
                if parent not in seen:
                    seen.add(parent)
                    stack.append(parent)
        return {name for name, _ in seen}

    def resource(node):
        name = _port(node.input[0])[0]
        while nodes[name].op == "Identity":
            name = _port(nodes[name].input[0])[0]
        return name

    reads, updates = collections.defaultdict(list), collections.defaultdict(list)
    for n in graph_def.node:
        if n.op == READ:
            reads[resource(n)].append(n.name)
        elif n.op in UPDATES:
            updates[resource(n)].append(n.name)
    every_update = [u for us in updates.values() for u in us]
    live = ancestors(*returned, *every_update)
    bad = []
    for variable, assigns in updates.items():
        for update in assigns:
            before = ancestors(update)
            for read in reads[variable]:
                if read in live and read not in before:
                    bad.append((variable, read, update))
    return bad


def keras_remat(forward, weights, host=False):
    """LMS's blocks as they were: ``keras.remat``, the layers reading their
    weights themselves (the values read for them are left unused)."""
    return lambda xs, values: keras.remat(forward)(*xs)


def lms_step(mechanism, monkeypatch, remat=None):
    keras.utils.set_random_seed(1)
    model = mlp()
    if remat is not None:
        monkeypatch.setattr(lms_exec, "_recomputing", remat)
    keras_caffe.LMS(threshold_kb=0, mechanism=mechanism).apply(model)
    return step_graph(model, keras_caffe.SGD(learning_rate=0.1, momentum=0.9))


@pytest.mark.parametrize("mechanism", ["remat", "stage"])
def test_every_read_of_a_weight_comes_before_its_update(mechanism, monkeypatch):
    graph_def, returned = lms_step(mechanism, monkeypatch)
    assert sum(n.op == "AssignSubVariableOp" for n in graph_def.node) == 6
    assert unordered_reads(graph_def, returned) == []


def test_the_check_finds_keras_remats_unordered_read(monkeypatch):
    """The control: through keras.remat, the second block's backward pass
    reads ip2's kernel again for ``dL/d relu1`` (and ip3's for ``dL/d ip2``,
    ip2's bias for ip3's recomputed input), and the updates of those
    variables do not wait for these reads by data: the race
    benchmarks/lms_race.py measures (there on the golden net's ip2)."""
    graph_def, returned = lms_step("remat", monkeypatch, remat=keras_remat)
    bad = unordered_reads(graph_def, returned)
    assert [(read, update) for _, read, update in bad] == [
        ("lms_remat_ip2_1/ip2_1/Cast/ReadVariableOp", "sgd/AssignSubVariableOp_2"),
        ("lms_remat_ip2_1/ip2_1/BiasAdd/ReadVariableOp", "sgd/AssignSubVariableOp_3"),
        ("lms_remat_ip2_1/ip3_1/Cast/ReadVariableOp", "sgd/AssignSubVariableOp_4")]


def test_without_lms_every_read_comes_before_its_update():
    keras.utils.set_random_seed(1)
    assert unordered_reads(*step_graph(mlp(), keras_caffe.SGD(learning_rate=0.1))) == []


def test_layers_that_add_losses_keep_their_gradients():
    """A layer whose call adds a loss (keras-caffe's TopLoss: Caffe's
    loss_weight on a non-loss top; an activity regularizer) runs plain
    under LMS: inside a block its loss would have no gradient."""
    import numpy as np

    from keras_caffe.layers.gradient import TopLoss

    def build():
        keras.utils.set_random_seed(3)
        inputs = keras.Input((20,), name="data")
        x = keras.layers.Dense(16, name="ip1")(inputs)
        x = TopLoss(0.5, name="weighted")(x)
        x = keras.layers.ReLU(name="relu1")(x)
        x = keras.layers.Dense(16, activity_regularizer="l2", name="ip2")(x)
        return keras.Model(inputs, keras.layers.Dense(5, name="ip3")(x), name="losses")

    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 20)).astype("float32")
    y = rng.integers(0, 5, 8).astype("int32")
    plain_loss, plain_grads = loss_and_grads(build(), x, y)
    model = build()
    keras_caffe.LMS(threshold_kb=0).apply(model)
    loss, grads = loss_and_grads(model, x, y)
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-6)
    for g, want in zip(grads, plain_grads):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-7)

"""A Caffe net's forward/backward as compiled TensorFlow functions.

``NetOutputs`` turns a batch (``{top: tensor}``, what the data layers'
pipelines yield) into the imported model's inputs and targets, and computes
Caffe's net outputs: each loss layer's value (weighted by ``loss_weight`` in
the total) and each Accuracy layer's, per batch, as Caffe's
``Net::Forward`` leaves them in the output blobs.

``train_function`` runs ``k`` Caffe iterations per call: each is
``iter_size`` forward/backward passes whose gradients the optimizer
accumulates (``CaffeOptimizer`` sums, clips, divides by ``iter_size``,
regularizes, updates). The per-pass step is one ``tf.function``, optionally
XLA-compiled; the loop over iterations and the reads from the ``tf.data``
iterator run in a second ``tf.function`` around it, as Keras's own
``steps_per_execution`` does, so Python is entered once per ``k``
iterations.

``mirrored_train_function`` is the same loop under a
``tf.distribute.MirroredStrategy``: each device runs its own batches (Caffe's
``-gpu 0,1``), sums its ``iter_size`` passes' gradients itself and the
optimizer reduces the devices' sums once per iteration.
"""

import tensorflow as tf
from keras import ops

from keras_caffe.errors import KerasCaffeError
from keras_caffe.kernels import cpu_only


def update_jit(jit_compile):
    """Whether the optimizer's update is XLA-compiled: with the step (XLA),
    and on CPUs (``keras_caffe.kernels.cpu_only``) also when the step is
    not. Compiled, the update is one pass over each variable instead of one
    TensorFlow op per term: CaffeNet's SGD update (61M weights, momentum,
    weight decay) took 35 ms against 180 ms with Eigen's kernels and 28
    against 55-85 ms with oneDNN's (TF 2.21, 2-core AMD EPYC). Caffe's
    solvers compute with XLA within their golden tolerance
    (tests/optimizers/test_golden_solvers.py)."""
    return bool(jit_compile) or cpu_only()


def resolve_jit(jit_compile):
    """``jit_compile`` as a bool: ``"auto"`` means XLA on GPUs only (XLA's CPU
    convolutions were slower than TensorFlow's own in our benchmarks)."""
    if jit_compile == "auto":
        return bool(tf.config.list_logical_devices("GPU"))
    return bool(jit_compile)


class NetOutputs:
    """The inputs, targets and Caffe outputs of an imported net."""

    def __init__(self, model):
        spec = getattr(model, "caffe_training", None)
        if not spec or not getattr(spec, "outputs", None):
            raise KerasCaffeError(
                f"net {model.name!r} has no loss or Accuracy layer: nothing to train or "
                "test (import it with phase='TRAIN' / 'TEST' from a train_val prototxt)")
        self.model = model
        self.inputs = list(model.caffe_inputs)
        self.entries = list(spec.outputs)
        self.names = [e.top for e in self.entries]
        self.weights = [e.weight for e in self.entries]
        self.tops = sorted(set(self.inputs) | {e.label for e in self.entries})

    def inputs_of(self, batch):
        x = [batch[top] for top in self.inputs]
        return x[0] if len(x) == 1 else x

    def predictions(self, x, training):
        out = self.model(x, training=training)
        if not isinstance(out, dict):
            out = {self.model.caffe_outputs[0]: out}
        return out

    def __call__(self, batch, training):
        """``(total loss, [output values])`` of one batch."""
        preds = self.predictions(self.inputs_of(batch), training)
        total = ops.convert_to_tensor(0.0, "float32")
        values = []
        for entry in self.entries:
            pred = ops.cast(preds[entry.prediction], "float32")
            label = batch[entry.label]
            if entry.is_loss:
                value = ops.cast(entry.fn(label, pred), "float32")
                total = total + entry.weight * value
            else:
                entry.fn.reset_state()
                entry.fn.update_state(label, pred)
                value = ops.cast(entry.fn.result(), "float32")
            values.append(value)
        share = 1.0 if tf.distribute.in_cross_replica_context() else \
            1.0 / tf.distribute.get_strategy().num_replicas_in_sync
        for extra in self.model.losses:  # Keras regularizers, if a user added any
            # divided among the replicas, as Keras's fit does (Caffe's losses divide themselves)
            total = total + ops.cast(extra, "float32") * share
        return total, values


def train_function(outputs, optimizer, iter_size, jit_compile, reduce=None):
    """``run(iterator, k) -> (losses (k,), outputs (k, n_outputs))``: ``k``
    Caffe iterations. ``losses`` is each iteration's loss averaged over its
    ``iter_size`` passes (what Caffe smooths and prints); ``outputs`` each
    iteration's net outputs from its last pass (what Caffe's output blobs
    hold when it displays them).

    ``reduce``: data-parallel training's gradient all-reduce
    (``DistributedOptimizer.reduce_gradients``), run between the
    forward/backward and the update, each its own (XLA-compiled if asked)
    function: Horovod's collectives cannot run inside XLA. With a Caffe
    solver it runs once per iteration, on the sum of the ``iter_size``
    passes' gradients (``CaffeOptimizer.apply_summed``), as Caffe's
    multi-GPU solvers reduce once per iteration."""
    model = outputs.model
    variables = model.trainable_variables
    count = len(outputs.entries)

    def gradients(batch):
        with tf.GradientTape() as tape:
            loss, values = outputs(batch, training=True)
        return loss, tf.stack(values), tape.gradient(loss, variables)

    if reduce is None:
        iteration = _passes(gradients, optimizer, variables, iter_size, jit_compile)
    elif hasattr(optimizer, "apply_summed"):
        iteration = _summed(gradients, optimizer, variables, iter_size, jit_compile, reduce)
    else:
        iteration = _passes(gradients, optimizer, variables, iter_size, jit_compile, reduce)

    @tf.function
    def run(iterator, k):
        losses = tf.TensorArray(tf.float32, size=k)
        values = tf.TensorArray(tf.float32, size=k, element_shape=(count,))
        for i in tf.range(k):
            total, last = iteration(iterator)
            losses = losses.write(i, total / iter_size)
            values = values.write(i, last)
        return losses.stack(), values.stack()

    return run


def _passes(gradients, optimizer, variables, iter_size, jit_compile, reduce=None):
    """One iteration as ``iter_size`` passes, each handing its gradients to
    ``optimizer.apply`` (which accumulates them); with ``reduce``, each
    pass's gradients are reduced first."""
    @tf.function(jit_compile=update_jit(jit_compile))
    def update(grads):
        optimizer.apply(grads, variables)

    if reduce is None:  # one compiled function: forward, backward, update
        @tf.function(jit_compile=jit_compile)
        def one_pass(batch):
            loss, values, grads = gradients(batch)
            update(grads)
            return loss, values
    else:  # the all-reduce between two compiled functions
        compiled_gradients = tf.function(gradients, jit_compile=jit_compile)

        def one_pass(batch):
            loss, values, grads = compiled_gradients(batch)
            update(reduce(grads))
            return loss, values

    def iteration(iterator):
        total = tf.constant(0.0)
        for _ in range(iter_size):
            loss, last = one_pass(next(iterator))
            total += loss
        return total, last

    return iteration


def _summed(gradients, optimizer, variables, iter_size, jit_compile, reduce):
    """One iteration as ``iter_size`` compiled forward/backward passes whose
    gradients are summed here, ``reduce`` once on the sum, then one compiled
    ``optimizer.apply_summed``. The sum runs in the passes' order, so it
    equals the optimizer's own accumulation bit for bit when the update is
    not XLA-compiled (``update_jit``; compiled, XLA may fuse the
    accumulation differently in the two, moving the last bits)."""
    compiled_gradients = tf.function(gradients, jit_compile=jit_compile)

    @tf.function(jit_compile=update_jit(jit_compile))
    def update(grads):
        optimizer.apply_summed(grads, variables)

    def iteration(iterator):
        total = tf.constant(0.0)
        sums = None
        for _ in range(iter_size):
            loss, last, grads = compiled_gradients(next(iterator))
            total += loss
            sums = list(grads) if sums is None else [_add(s, g) for s, g in zip(sums, grads)]
        update(reduce(sums))
        return total, last

    return iteration


def _add(total, grad):
    if total is None or grad is None:
        return grad if total is None else total
    return tf.convert_to_tensor(total) + tf.convert_to_tensor(grad)


def mirrored_train_function(outputs, optimizer, iter_size, jit_compile, strategy):
    """``run(iterators, k)`` as ``train_function``'s, under ``strategy`` (a
    ``MirroredStrategy`` of ``R`` devices): ``iterators`` holds one data
    stream per device. Per iteration each device reads ``iter_size``
    batches of its own stream, runs forward/backward on them (its Caffe
    losses divided by ``R``, see ``keras_caffe.losses``) and sums their
    gradients; ``optimizer.apply_summed`` then reduces the devices' sums once
    (Caffe's P2PSync / NCCL all-reduce per iteration) and updates every
    device's copy. The losses are the global batch's (the devices' sum of
    their scaled losses); an Accuracy output is the devices' mean. With
    ``jit_compile`` each device's forward/backward is its own XLA program
    (the reduction and update are not compiled: a merge of the replicas
    cannot sit inside one)."""
    model = outputs.model
    variables = model.trainable_variables
    count = len(outputs.entries)
    replicas = strategy.num_replicas_in_sync
    is_loss = tf.constant([e.is_loss for e in outputs.entries])

    def gradients(batch):
        with tf.GradientTape() as tape:
            loss, values = outputs(batch, training=True)
        return loss, tf.stack(values), tape.gradient(loss, variables)

    # One compiled function per device: a trace runs on its device's variables.
    per_device = [tf.function(gradients, jit_compile=True) for _ in range(replicas)] \
        if jit_compile else None

    def replica_iteration(batches):
        step = gradients
        if per_device is not None:
            context = tf.distribute.get_replica_context()
            step = per_device[tf.get_static_value(context.replica_id_in_sync_group)]
        total = tf.constant(0.0)
        sums = None
        for batch in batches:
            loss, last, grads = step(batch)
            total += loss
            sums = list(grads) if sums is None else [_add(s, g) for s, g in zip(sums, grads)]
        optimizer.apply_summed(sums, variables)
        return total, last

    @tf.function
    def run(iterators, k):
        losses = tf.TensorArray(tf.float32, size=k)
        values = tf.TensorArray(tf.float32, size=k, element_shape=(count,))
        for i in tf.range(k):
            read = [[next(it) for _ in range(iter_size)] for it in iterators]
            batches = strategy.experimental_distribute_values_from_function(
                lambda context: read[context.replica_id_in_sync_group])
            total, last = strategy.run(replica_iteration, args=(batches,))
            total = strategy.reduce(tf.distribute.ReduceOp.SUM, total, axis=None)
            summed = strategy.reduce(tf.distribute.ReduceOp.SUM, last, axis=None)
            mean = strategy.reduce(tf.distribute.ReduceOp.MEAN, last, axis=None)
            losses = losses.write(i, total / iter_size)
            values = values.write(i, tf.where(is_loss, summed, mean))
        return losses.stack(), values.stack()

    return run


def test_function(outputs, jit_compile):
    """``run(iterator, k) -> (n_outputs,)``: the mean of each net output over
    ``k`` batches, as Caffe's ``Solver::Test`` averages them."""
    count = len(outputs.entries)

    @tf.function(jit_compile=jit_compile)
    def one_pass(batch):
        _, values = outputs(batch, training=False)
        return tf.stack(values)

    @tf.function
    def run(iterator, k):
        total = tf.zeros((count,))
        for _ in tf.range(k):
            total += one_pass(next(iterator))
        return total / tf.cast(k, tf.float32)

    return run

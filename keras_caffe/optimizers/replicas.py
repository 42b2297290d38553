"""Caffe's update under ``tf.distribute.MirroredStrategy`` (several devices, one process).

Keras's TensorFlow optimizer sums the replicas' gradients inside its own
update step, after whatever the optimizer did to them; Caffe's pipeline
(``iter_size``, global-norm clipping, weight decay, YellowFin's statistics)
must instead see the gradient of the whole (global) batch, once per update,
as Caffe's multi-GPU solver applies its update to the reduced diffs.
``CaffeOptimizer`` therefore leaves the replicas once per ``apply`` with one
``merge_call`` and, in cross-replica context (where TensorFlow's branches
may hold per-device work but no synchronisation point):

1. ``iter_size``: each device adds its replica's gradient to its own copy of
   the accumulators (no communication), as Keras's own
   ``gradient_accumulation_steps`` does under ``tf.distribute``;
2. on an update, ``sum_to_root`` adds the replicas' sums on the first device
   (the root, as Caffe's P2PSync reduces onto its root solver): ONE reduction
   per update whatever ``iter_size``;
3. the rest of Caffe's pipeline runs once, on the root;
4. ``update_each_replica`` runs the solver's ``update_step`` on every
   device's copy of each variable with that one processed gradient (Keras's
   own per-device update, ``strategy.extended.update``, without its sum).

Every device therefore holds the same weights, slots and statistics after
each update. Between the updates of an ``iter_size`` cycle each device's
accumulator copy holds its own replica's partial sum (they are all zero
again after the update).

Keras scales a mean loss by ``1 / replicas`` inside each replica
(``keras.losses.Loss``), so the sum of the replicas' gradients is the
gradient of the global batch's mean loss; Caffe's losses do the same
(``keras_caffe.losses``).
"""

import tensorflow as tf


def count():
    """Replicas of the current ``tf.distribute`` strategy (1 without one)."""
    return tf.distribute.get_strategy().num_replicas_in_sync


def replicated_replica_context():
    """The replica context when running inside ``strategy.run`` of a
    ``tf.distribute`` strategy; None otherwise. A strategy of one replica
    (``MirroredStrategy()`` on a machine with one device) takes the same
    path: Keras's own ``apply`` would ``merge_call`` inside the ``iter_size``
    branch, which TensorFlow refuses."""
    if not tf.distribute.has_strategy() or tf.distribute.in_cross_replica_context():
        return None
    return tf.distribute.get_replica_context()


def replicated_cross_replica():
    """Whether this runs in cross-replica context of a ``tf.distribute`` strategy."""
    return tf.distribute.has_strategy() and tf.distribute.in_cross_replica_context()


def root(strategy):
    """The first of the strategy's devices, where the reduced gradient lives."""
    return strategy.extended.worker_devices[0]


def sum_to_root(strategy, values):
    """``values`` (per-replica tensors or per-device variables) summed over
    the replicas, in replica order, on the root device: plain tensors."""
    with tf.device(root(strategy)):
        return [tf.add_n([tf.convert_to_tensor(x) for x in strategy.experimental_local_results(v)])
                for v in values]


def update_each_replica(optimizer, grads, variables):
    """Keras's ``Optimizer.apply`` from cross-replica context: ``update_step``
    with the one processed gradient on every device's copy of each variable
    (``strategy.extended.update``), constraints, ``iterations += 1``. Keras's
    ``apply`` cannot run there (its update step asks for a replica context)."""
    strategy = tf.distribute.get_strategy()
    rate = optimizer.learning_rate
    scale = optimizer.loss_scale_factor
    if scale is not None:
        grads = [g / scale for g in grads]

    def step(variable, grad):
        return optimizer.update_step(grad, variable, rate)

    for grad, variable in zip(grads, variables):
        strategy.extended.update(variable.value, step, args=(grad,), group=False)
    for variable in variables:
        if variable.constraint is not None:
            variable.assign(variable.constraint(variable))
    optimizer.iterations.assign_add(1)


def apply_summed(strategy, optimizer, grads, variables):
    """``CaffeOptimizer.apply_summed`` in cross-replica context (``merge_call``):
    the replicas' sums reduced once, then one update."""
    with tf.device(root(strategy)):
        optimizer.update_from_sum(sum_to_root(strategy, grads), variables)
        if optimizer.iter_size > 1:
            optimizer._micro_step.assign_add(optimizer.iter_size)


def caffe_apply(strategy, optimizer, grads, variables):
    """``CaffeOptimizer.caffe_apply`` in cross-replica context (``merge_call``);
    ``grads`` per replica: each device accumulates its replica's gradient,
    and an update reduces the accumulators once."""
    with tf.device(root(strategy)):
        if optimizer.iter_size == 1:
            return optimizer.update_from_sum(sum_to_root(strategy, grads), variables)
        sums = [optimizer.slot(optimizer._accumulators, v).value for v in variables]

        def accumulate():
            for s, g in zip(sums, grads):
                s.assign_add(g)  # each device adds its own replica's gradient

        def update():
            accumulate()
            optimizer.update_from_sum(sum_to_root(strategy, sums), variables)
            for s in sums:
                s.assign(tf.zeros_like(s))

        is_update = tf.equal((optimizer._micro_step + 1) % optimizer.iter_size, 0)
        tf.cond(is_update, update, accumulate)
        optimizer._micro_step.assign_add(1)

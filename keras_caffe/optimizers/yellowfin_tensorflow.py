"""YellowFin's TensorFlow speed paths, imported only on TensorFlow's backend.

- ``run_compiled``: the whole update (Caffe's pipeline, the statistics, the
  tuning and the per-parameter pass) as one XLA program, also where the
  training step is not compiled (Keras's default on CPU); ``jit_compile``.
- ``fused_momentum``: the momentum step as TensorFlow's fused
  ``ResourceApplyMomentum`` kernel, one kernel without XLA.

The other backends run the same update as ``keras.ops`` formulas
(``keras_caffe.optimizers.yellowfin``): JAX compiles it with the training
step, PyTorch runs it op by op.
"""

import keras
import tensorflow as tf
from keras import ops


def has_strategy():
    """Whether a ``tf.distribute`` strategy is in scope (its update runs in
    cross-replica context, which one XLA program on one device cannot)."""
    return tf.distribute.has_strategy()


def executing_eagerly():
    """Whether values can be read as numbers here (not inside a tf.function)."""
    return tf.executing_eagerly()


def run_compiled(optimizer, method, grads, variables):
    """``method(optimizer, grads, variables)`` as one XLA program, traced once
    per (method, variables) and kept in ``optimizer._compiled_updates``;
    ``optimizer._compiling`` is True while it traces (nested calls run plainly)."""
    key = (method.__name__, *(id(v) for v in variables))
    compiled = optimizer._compiled_updates.get(key)
    if compiled is None:
        def update(grads):
            # A densified IndexedSlices (an Embedding's gradient) can come
            # without its static shape, which the update needs.
            grads = [tf.ensure_shape(g, v.shape) for g, v in zip(grads, variables)]
            object.__setattr__(optimizer, "_compiling", True)
            try:
                method(optimizer, grads, variables)
            finally:
                object.__setattr__(optimizer, "_compiling", False)

        compiled = tf.function(update, jit_compile=True, autograph=False)
        optimizer._compiled_updates[key] = compiled
    # XLA updates dense tensors: an IndexedSlices gradient is densified here.
    compiled([tf.convert_to_tensor(g) for g in grads])


def _handle(variable):
    """The resource handle of a Keras or TensorFlow variable."""
    return variable.value.handle if isinstance(variable, keras.Variable) else variable.handle


def fused_momentum(variable, velocity, grad, rate, momentum, nesterov):
    """``v <- momentum v + g``, ``w <- w - rate v`` (Nesterov: ``w <- w - rate g
    - rate momentum v``) as TensorFlow's ``ResourceApplyMomentum``: one kernel
    without XLA, and under XLA the same fused loop as the ops."""
    dtype = variable.dtype
    tf.raw_ops.ResourceApplyMomentum(
        var=_handle(variable), accum=_handle(velocity), lr=rate, grad=ops.cast(grad, dtype),
        momentum=ops.cast(momentum, dtype), use_locking=False, use_nesterov=nesterov)

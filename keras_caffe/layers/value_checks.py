"""Caffe's run-time CHECKs on a layer's input *values* (shapes are checked
at import): raised as ``LayerValueError`` naming the layer, on every
backend.

Where the values are known when the layer is called (eager calls on every
backend, and PyTorch's trainer, which runs eagerly) the error is raised
there. Inside a compiled step the values exist only when the step runs, so
the same check goes into the step: on TensorFlow a graph assertion
(``tensorflow_kernels.checked_take``), on JAX a host callback that raises
the ``LayerValueError``. There the backend reports it wrapped in its own
run-time error (``InvalidArgumentError``, ``JaxRuntimeError``) whose text
carries the same message; Caffe itself aborts the process at a CHECK.
"""

import functools

import keras
import numpy as np

from keras_caffe.errors import LayerValueError


def batch_index_problem(index, rows):
    """Caffe's complaint about the first of ``index`` outside ``[0, rows)``,
    or None (``BatchReindexLayer::check_batch_reindex``: "Index specified
    for reindex layer was negative." / "... was greater than batch size.")."""
    index = np.asarray(index).reshape(-1)
    bad = np.flatnonzero((index < 0) | (index >= rows))
    if not bad.size:
        return None
    at = int(bad[0])
    return (f"index {int(index[at])} at position {at} of bottom 1 is outside [0, {rows}), "
            f"the batch of bottom 0 (batch_reindex_layer.cpp's CHECK)")


def _raise_if_bad(layer, rows, index):
    problem = batch_index_problem(index, rows)
    if problem is not None:
        raise LayerValueError(layer, problem)


def _known_on_tensorflow(index):
    # TensorFlow optional: only reached on its backend.
    import tensorflow as tf

    return tf.executing_eagerly()


def _known_on_jax(index):
    # JAX optional: only reached on its backend.
    import jax

    return not isinstance(index, jax.core.Tracer)


def _known_on_torch(index):
    # Keras infers PyTorch output shapes on the "meta" device, which holds no values.
    return index.device.type != "meta"


_KNOWN_NOW = {"tensorflow": _known_on_tensorflow, "jax": _known_on_jax, "torch": _known_on_torch}


def values_known(x):
    """Whether ``x``'s values exist at this call (not a tensor being traced
    into a compiled step or a shape inference)."""
    known = _KNOWN_NOW.get(keras.backend.backend())
    return known is None or known(x)


def _in_jax_step(layer, index, rows):
    # JAX optional: only reached on its backend.
    import jax

    jax.debug.callback(functools.partial(_raise_if_bad, layer, rows), index)


#: How a check goes into a step being compiled, per backend (TensorFlow's is
#: its graph assertion, in ``tensorflow_kernels.checked_take``).
_IN_STEP = {"jax": _in_jax_step}


def check_batch_indices(layer, index, rows):
    """``LayerValueError`` for an ``index`` outside ``[0, rows)``: now where
    the values are known, else when the compiled step runs (JAX)."""
    if values_known(index):
        _raise_if_bad(layer, rows, keras.ops.convert_to_numpy(index))
        return
    in_step = _IN_STEP.get(keras.backend.backend())
    if in_step is not None:
        in_step(layer, index, rows)

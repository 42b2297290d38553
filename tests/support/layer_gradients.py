"""Gradients of a loss in a net's inputs (and variables) on whichever Keras
backend the suite runs: the layer types' backward tests, one call on
TensorFlow, JAX and PyTorch.

    dx, (dw,) = gradients(lambda x: weighted_sum(model(x), cotangent), [x], [layer.kernel])

``loss`` takes one tensor per array of ``inputs`` (numpy) and returns a
scalar; the result is one numpy array per input and per variable, or None
for a variable the loss does not depend on where the backend says so
(TensorFlow, PyTorch; JAX gives zeros there). TensorFlow: ``tf.GradientTape``;
JAX: ``jax.grad`` with the variables' values mapped by
``keras.StatelessScope``; PyTorch: ``torch.autograd.grad``.
"""

import keras
import numpy as np


def _tensorflow(loss, inputs, variables):
    import tensorflow as tf  # here: the backend in use (the others lack TensorFlow)

    feeds = [tf.constant(a) for a in inputs]
    with tf.GradientTape() as tape:
        tape.watch(feeds)
        value = loss(*feeds)
    return tape.gradient(value, feeds + variables)


def _jax(loss, inputs, variables):
    import jax  # here: the backend in use

    def of(arrays, values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return loss(*arrays)

    arrays, values = jax.grad(of, argnums=(0, 1))([jax.numpy.asarray(a) for a in inputs],
                                                  [v.value for v in variables])
    return list(arrays) + list(values)


def _torch(loss, inputs, variables):
    import torch  # here: the backend in use

    feeds = [keras.ops.convert_to_tensor(a).detach().requires_grad_(True) for a in inputs]
    value = loss(*feeds)
    if not value.requires_grad:  # no path from any of them to the loss
        return [None] * (len(feeds) + len(variables))
    return list(torch.autograd.grad(value, feeds + [v.value for v in variables],
                                    allow_unused=True))


_BY_BACKEND = {"tensorflow": _tensorflow, "jax": _jax, "torch": _torch}


def gradients(loss, inputs, variables=()):
    """``(input gradients, variable gradients)``: d ``loss(*inputs)`` / d each
    input array and each variable, as numpy arrays (None where the backend
    found no dependence)."""
    inputs = [np.asarray(a) for a in inputs]
    grads = _BY_BACKEND[keras.backend.backend()](loss, inputs, list(variables))
    grads = [None if g is None else keras.ops.convert_to_numpy(g) for g in grads]
    return grads[:len(inputs)], grads[len(inputs):]


def weighted_sum(y, weights):
    """``sum(y * weights)``: the loss whose input gradient is the backward
    of a top diff ``weights`` (numpy, made a tensor of ``y``'s backend: a
    PyTorch tensor times a numpy array would be numpy's product)."""
    return keras.ops.sum(keras.ops.multiply(y, weights))


def backward(model, x, cotangent, data_format, variables=()):
    """``(dx, variable gradients)`` of ``sum(model(x) * cotangent)``: Caffe's
    backward of a one-input net, ``x`` and ``cotangent`` (the top's diff)
    in Caffe's layout, ``dx`` returned in it."""
    from support import from_keras_layout, to_keras_layout

    top = to_keras_layout(np.asarray(cotangent, np.float32), data_format)
    (dx,), grads = gradients(lambda feed: weighted_sum(model(feed), top),
                             [to_keras_layout(np.asarray(x, np.float32), data_format)], variables)
    return from_keras_layout(dx, data_format), grads


def no_gradient(grad):
    """Whether ``grad`` (from ``gradients``) says the loss does not depend on
    that input or variable: None on TensorFlow and PyTorch (no path to it),
    zeros on JAX (whose ``grad`` has no None)."""
    return grad is None if keras.backend.backend() != "jax" else not np.any(grad)

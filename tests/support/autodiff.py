"""Gradients on whichever Keras backend the suite runs: Keras has no public
backend-neutral ``grad``, so each backend's own autodiff, behind one call.

    grads = gradients(lambda: loss_of(model(x)), model.trainable_variables)

TensorFlow: ``tf.GradientTape``. JAX: ``jax.grad`` of the loss as a function
of the variables' values (read through ``keras.StatelessScope``). PyTorch:
``torch.autograd.grad``. Returns one tensor per variable, in order.
"""

import keras


def _tensorflow(loss, variables):
    import tensorflow as tf  # here: the backend in use (the others lack TensorFlow)

    with tf.GradientTape() as tape:
        value = loss()
    return tape.gradient(value, variables)


def _jax(loss, variables):
    import jax  # here: the backend in use

    def of_values(values):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return loss()

    return jax.grad(of_values)([v.value for v in variables])


def _torch(loss, variables):
    import torch  # here: the backend in use

    return list(torch.autograd.grad(loss(), [v.value for v in variables]))


_BY_BACKEND = {"tensorflow": _tensorflow, "jax": _jax, "torch": _torch}


def gradients(loss, variables):
    """d loss() / d variables on the current backend (``loss``: no arguments)."""
    return _BY_BACKEND[keras.backend.backend()](loss, list(variables))

"""Caffe's float fields: the value Caffe computes with, the value a person wrote.

A ``SolverParameter``'s ``base_lr``, ``momentum``, ``gamma``, ... are
``float`` (float32) in ``caffe.proto``. Read from a solver file, 0.1 becomes
0.10000000149011612 as a Python float. keras-caffe computes with that value,
as Caffe does, and shows it (``get_config``, ``repr``) as the shortest
decimal that maps to the same float32: 0.1.

Where Caffe computes in double (``pow(float, int)`` in C++), keras-caffe
does too, in ``widest_float()``: float64, except on JAX without x64 (its
default), which has none.
"""

import keras
import numpy as np


def widest_float():
    """``"float64"``, or ``"float32"`` on JAX without x64 enabled (JAX's
    default, where float64 would be truncated with a warning)."""
    if keras.backend.backend() != "jax":
        return "float64"
    import jax  # here, not at the top: on the JAX backend only (an optional backend)

    return "float64" if jax.config.jax_enable_x64 else "float32"


def float32_value(value):
    """``value`` rounded to float32, as a Python float (what Caffe holds)."""
    return float(np.float32(value))


def shortest(value):
    """The shortest decimal that maps to the same float32 as ``value``, as a
    Python float: ``shortest(0.10000000149011612) == 0.1``. Rounding it to
    float32 gives ``float32_value(value)`` back, so a config that holds it
    rebuilds the same float32."""
    return float(str(np.float32(value)))


def shown(value, float32_fields):
    """``value`` as a config or repr shows it: the shortest float32 decimal
    for a Caffe float field (``float32_fields``), else as given."""
    if float32_fields and isinstance(value, float):
        return shortest(value)
    return value

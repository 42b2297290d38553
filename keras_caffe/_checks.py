"""Validation of hyperparameters, with messages that name the argument."""

import math
import numbers

from keras_caffe.errors import ArgumentError


def check_number(owner, name, value, *, low=0.0, high=None, high_open=False, low_open=False):
    """Return ``value`` as a float if it is a finite real number in range.

    The range is ``[low, high]``; ``low_open``/``high_open`` exclude an end.
    ``high=None`` means no upper bound.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentError(owner, name, f"must be a number, got {value!r}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        raise ArgumentError(owner, name, f"must be finite, got {value}")
    too_low = value <= low if low_open else value < low
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        lo = "(" if low_open else "["
        hi = ("inf)" if high is None else (f"{high:g})" if high_open else f"{high:g}]"))
        raise ArgumentError(owner, name, f"must be in {lo}{low:g}, {hi}, got {value:g}")
    return value


def check_int(owner, name, value, *, low=0):
    """Return ``value`` if it is an integer >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise ArgumentError(owner, name, f"must be an integer, got {value!r}")
    value = int(value)
    if value < low:
        raise ArgumentError(owner, name, f"must be >= {low}, got {value}")
    return value

"""Caffe's reducing layers: ArgMax, Reduction, MVN."""

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import register, top_k


def _axes(axes):
    return tuple(int(a) for a in axes)


@register
class ArgMax(keras.layers.Layer):
    """Caffe's ArgMax: the ``top_k`` largest values' indices (or the values).

    ``axis`` (a tensor axis) given: indices along it (or, with
    ``out_max_val``, the values), that axis becoming ``top_k`` long.
    ``axis=None``: Caffe's default, each sample flattened (the input must be
    in Caffe's order); the output is (N, 1, top_k, 1, ...) of indices, or
    (N, 2, top_k, 1, ...) with ``out_max_val`` (indices, then values), of
    rank max(input rank, 3).

    Ties rank the larger index first, as Caffe's ``std::partial_sort`` of
    (value, index) pairs with ``std::greater`` does. Indices are floats.
    """

    def __init__(self, top_k=1, out_max_val=False, axis=None, **kwargs):
        super().__init__(**kwargs)
        self.top_k = int(top_k)
        self.out_max_val = bool(out_max_val)
        self.axis = None if axis is None else int(axis)

    def _top_k_last(self, x):
        """Values and indices of the top_k along the last axis, larger index first on ties."""
        dim = x.shape[-1] if x.shape[-1] is not None else ops.shape(x)[-1]
        values, reversed_index = top_k(ops.flip(x, axis=-1), self.top_k)
        index = ops.cast(dim - 1 - reversed_index, x.dtype)
        return values, index

    def call(self, x):
        if self.axis is None:
            rank = len(x.shape)
            flat = ops.reshape(x, (ops.shape(x)[0], -1))
            values, index = self._top_k_last(flat)  # (N, k)
            y = ops.stack([index, values], axis=1) if self.out_max_val else index[:, None, :]
            return ops.reshape(y, (ops.shape(x)[0], y.shape[1], self.top_k,
                                   *[1] * (max(rank, 3) - 3)))
        axis = self.axis % len(x.shape)
        moved = ops.moveaxis(x, axis, -1)
        values, index = self._top_k_last(moved)
        return ops.moveaxis(values if self.out_max_val else index, -1, axis)

    def compute_output_shape(self, input_shape):
        if self.axis is None:
            rank = max(len(input_shape), 3)
            return (input_shape[0], 2 if self.out_max_val else 1, self.top_k, *[1] * (rank - 3))
        shape = list(input_shape)
        shape[self.axis % len(shape)] = self.top_k
        return tuple(shape)

    def get_config(self):
        config = super().get_config()
        config.update(top_k=self.top_k, out_max_val=self.out_max_val, axis=self.axis)
        return config


@register
class Reduction(keras.layers.Layer):
    """Caffe's Reduction: SUM, ASUM (sum of |x|), SUMSQ or MEAN over ``axes``, times ``coeff``.

    ``axes`` are the tensor axes reduced (Caffe reduces every axis from its
    ``axis`` on; with axis 0 the batch too, giving a scalar). MEAN multiplies
    the sum by ``coeff / count`` computed in float32, as Caffe does.
    """

    OPERATIONS = ("SUM", "ASUM", "SUMSQ", "MEAN")

    def __init__(self, operation="SUM", axes=(1,), coeff=1.0, **kwargs):
        super().__init__(**kwargs)
        if operation not in self.OPERATIONS:
            raise ValueError(f"operation must be one of {self.OPERATIONS}, got {operation!r}")
        self.operation = operation
        self.axes = _axes(axes)
        self.coeff = float(coeff)

    def call(self, x):
        if self.operation == "ASUM":
            x = ops.abs(x)
        elif self.operation == "SUMSQ":
            x = ops.square(x)
        total = ops.sum(x, axis=self.axes)
        coeff = ops.convert_to_tensor(np.float32(self.coeff), dtype=total.dtype)
        if self.operation == "MEAN":
            dims = [x.shape[a] for a in self.axes]
            if all(d is not None for d in dims):
                count = ops.convert_to_tensor(np.float32(int(np.prod(dims, dtype=np.int64))),
                                              dtype=total.dtype)
            else:
                count = ops.cast(ops.prod(ops.stack([ops.shape(x)[a] for a in self.axes])),
                                 total.dtype)
            coeff = coeff / count
        return total * coeff

    def compute_output_shape(self, input_shape):
        return tuple(d for i, d in enumerate(input_shape) if i not in self.axes)

    def get_config(self):
        config = super().get_config()
        config.update(operation=self.operation, axes=self.axes, coeff=self.coeff)
        return config


@register
class MVN(keras.layers.Layer):
    """Caffe's MVN: ``y = x - mean`` over ``axes``, then ``/ (std + eps)``.

    With ``normalize_variance``, ``std = sqrt(mean((x - mean)^2))`` and Caffe
    adds ``eps`` to the standard deviation, not to the variance. ``axes`` are
    the tensor axes the statistics run over (each sample's spatial axes, or
    with Caffe's ``across_channels`` every axis but the batch).
    """

    def __init__(self, normalize_variance=True, eps=1e-9, axes=(2, 3), **kwargs):
        super().__init__(**kwargs)
        self.normalize_variance = bool(normalize_variance)
        self.eps = float(eps)
        self.axes = _axes(axes)

    def call(self, x):
        if not self.axes:  # one value per statistic: x - x
            y = x - x
        else:
            y = x - ops.mean(x, axis=self.axes, keepdims=True)
        if not self.normalize_variance:
            return y
        variance = (ops.mean(ops.square(y), axis=self.axes, keepdims=True) if self.axes
                    else ops.square(y))
        eps = ops.convert_to_tensor(np.float32(self.eps), dtype=y.dtype)
        return y / (ops.sqrt(variance) + eps)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(normalize_variance=self.normalize_variance, eps=self.eps, axes=self.axes)
        return config

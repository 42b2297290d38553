"""Caffe's fillers as one Keras initializer.

Caffe's fan-in and fan-out are counted on the Caffe blob shape
(``count / shape[0]`` and ``count / shape[1]``), which differs from Keras's
kernel layouts, so the importer passes them in explicitly.
"""

import math
import random

import keras
from keras import ops

from keras_caffe._serializable import register
from keras_caffe.proto import caffe_pb2

FILLERS = ("constant", "uniform", "gaussian", "positive_unitball", "xavier", "msra", "bilinear")


@register
class CaffeFiller(keras.initializers.Initializer):
    """Caffe's ``FillerParameter`` (src/caffe/util/filler.hpp).

    constant: ``value``; uniform: U(min, max); gaussian: N(mean, std), with
    ``sparse >= 0`` keeping each value with probability sparse / num_outputs;
    positive_unitball: U(0, 1) normalized to sum 1 per output; xavier:
    U(+-sqrt(3 / n)); msra: N(0, sqrt(2 / n)), n the fan-in, the fan-out or
    their average (``variance_norm``); bilinear: the upsampling kernel
    (spatial axes first in the Keras kernel).
    """

    def __init__(self, type="constant", value=0.0, min=0.0, max=1.0, mean=0.0, std=1.0,
                 sparse=-1, variance_norm="FAN_IN", fan_in=1, fan_out=1, num_outputs=1,
                 seed=None):
        if type not in FILLERS:
            raise ValueError(f"unknown filler type {type!r}; Caffe's are {', '.join(FILLERS)}")
        if variance_norm not in ("FAN_IN", "FAN_OUT", "AVERAGE"):
            raise ValueError(f"variance_norm must be FAN_IN, FAN_OUT or AVERAGE, got {variance_norm!r}")
        self.type, self.value, self.min, self.max = type, float(value), float(min), float(max)
        self.mean, self.std, self.sparse = float(mean), float(std), int(sparse)
        self.variance_norm, self.fan_in, self.fan_out = variance_norm, int(fan_in), int(fan_out)
        self.num_outputs = int(num_outputs)
        self.seed = seed
        # Integer seeds, one per draw: a SeedGenerator would be one more
        # TensorFlow variable per filler (hundreds in a big net, most of an
        # import's time). ``keras.utils.set_random_seed`` seeds ``random``.
        self._base = random.randrange(2**31 - 1) if seed is None else int(seed)
        self._draws = 0

    def _next_seed(self):
        """A new integer seed for each draw: the same ``seed`` gives the same
        sequence of draws, and no draw repeats another."""
        self._draws += 1
        return (self._base * 1_000_003 + self._draws) % (2**31 - 1)

    def _n(self):
        return {"FAN_IN": self.fan_in, "FAN_OUT": self.fan_out,
                "AVERAGE": (self.fan_in + self.fan_out) / 2.0}[self.variance_norm]

    def __call__(self, shape, dtype=None):
        dtype = dtype or "float32"
        gen = self._next_seed()
        if self.type == "constant":
            return ops.full(shape, self.value, dtype=dtype)
        if self.type == "uniform":
            return keras.random.uniform(shape, self.min, self.max, dtype=dtype, seed=gen)
        if self.type == "gaussian":
            values = keras.random.normal(shape, self.mean, self.std, dtype=dtype, seed=gen)
            if self.sparse >= 0:
                keep = self.sparse / max(self.num_outputs, 1)
                mask = keras.random.uniform(shape, dtype=dtype, seed=self._next_seed()) < keep
                values = values * ops.cast(mask, dtype)
            return values
        if self.type == "positive_unitball":
            values = keras.random.uniform(shape, 0.0, 1.0, dtype=dtype, seed=gen)
            axes = tuple(range(len(shape) - 1)) or (0,)  # per output (the last Keras axis)
            return values / ops.sum(values, axis=axes, keepdims=True)
        if self.type == "xavier":
            scale = math.sqrt(3.0 / self._n())
            return keras.random.uniform(shape, -scale, scale, dtype=dtype, seed=gen)
        if self.type == "msra":
            return keras.random.normal(shape, 0.0, math.sqrt(2.0 / self._n()), dtype=dtype, seed=gen)
        return self._bilinear(shape, dtype)

    @staticmethod
    def _bilinear(shape, dtype):
        kh, kw = shape[0], shape[1]

        def profile(k):
            f = math.ceil(k / 2.0)
            c = (2 * f - 1 - f % 2) / (2.0 * f)
            return [1 - abs(i / f - c) for i in range(k)]

        kernel = ops.outer(ops.convert_to_tensor(profile(kh)), ops.convert_to_tensor(profile(kw)))
        kernel = ops.reshape(ops.cast(kernel, dtype), (kh, kw) + (1,) * (len(shape) - 2))
        return ops.broadcast_to(kernel, shape)

    def get_config(self):
        return {"type": self.type, "value": self.value, "min": self.min, "max": self.max,
                "mean": self.mean, "std": self.std, "sparse": self.sparse,
                "variance_norm": self.variance_norm, "fan_in": self.fan_in,
                "fan_out": self.fan_out, "num_outputs": self.num_outputs, "seed": self.seed}


def from_filler(filler, caffe_shape):
    """A ``CaffeFiller`` for a ``FillerParameter`` and the Caffe blob shape it fills."""
    count = 1
    for d in caffe_shape:
        count *= d
    fan_in = count // caffe_shape[0] if caffe_shape else 1
    fan_out = count // caffe_shape[1] if len(caffe_shape) > 1 else count
    return CaffeFiller(
        type=filler.type, value=filler.value, min=filler.min, max=filler.max, mean=filler.mean,
        std=filler.std, sparse=filler.sparse,
        variance_norm=caffe_pb2.FillerParameter.VarianceNorm.Name(filler.variance_norm),
        fan_in=fan_in, fan_out=fan_out, num_outputs=caffe_shape[0] if caffe_shape else 1)

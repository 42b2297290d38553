"""Layers of the segmentation forks that Keras lacks, computed as the forks'
``Forward_cpu`` does:

- ``SegNetBN`` and ``PSPNetBN``: the two forks' one-layer batch norms (type
  ``BN``), with their own scale and shift blobs;
- ``MaxUnpool``: SegNet's ``Upsample`` with the pooling mask as a second input;
- ``Interp``: PSPNet's / DeepLab's bilinear ``Interp`` (``caffe_cpu_interp2``).

Their blobs are Caffe's ``(1, C, 1, 1)``, held as ``(C,)`` variables.
``axis`` is the channel axis of the Keras tensor.
"""

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import CaffeBlobs, check_data_format, register


def _channel_blobs(channels, count):
    return [(1, channels, 1, 1)] * count


class _ChannelBlobs(CaffeBlobs):
    """Blobs of one value per channel, Caffe shape (1, C, 1, 1)."""

    def _broadcast(self, v, ndim):
        axis = self.axis % ndim
        return ops.reshape(v, [-1 if i == axis else 1 for i in range(ndim)])

    def caffe_blob_shapes(self):
        variables = self.caffe_variables()
        return _channel_blobs(int(variables[0].shape[0]), len(variables))

    def keras_weights_from_caffe(self, blobs):
        return [np.reshape(b, (-1,)) for b in blobs]

    def caffe_from_keras_weights(self, weights):
        return [np.reshape(w, (1, -1, 1, 1)) for w in weights]


@register
class SegNetBN(_ChannelBlobs, keras.layers.Layer):
    """SegNet's BN (alexgkendall/caffe-segnet, src/caffe/layers/bn_layer.cpp).

    Blobs: scale and shift (Caffe shape (1, C, 1, 1)). ``mode``:

    - ``"LEARN"`` (the fork's default): the batch's statistics in every
      phase (the fork ignores the phase): per channel, over N, H, W,
      ``mean = E[x]``, ``var = E[x^2] - E[x]^2`` (the fork's formula, biased),
      ``y = (x - mean) / sqrt(var + 1e-9) * scale + shift``; no running
      statistics (SegNet's compute_bn_statistics.py folds the training set's
      into scale and shift and switches to INFERENCE).
    - ``"INFERENCE"``: ``y = x * scale + shift``.

    ``statistics`` (LEARN only): also return the batch mean and variance
    (before eps), the fork's optional second and third tops, shaped
    ``statistics_shape`` (Caffe's (1, C, 1, 1) in the tensor's layout); they
    carry no gradient (the fork's backward ignores them).
    """

    caffe_type = "BN"
    eps = 1e-9  # the fork's var_eps_, fixed

    def __init__(self, mode="LEARN", axis=-1, statistics=False, statistics_shape=None,
                 scale_initializer="zeros", shift_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        if mode not in ("LEARN", "INFERENCE"):
            raise ValueError(f"mode must be 'LEARN' or 'INFERENCE', got {mode!r}")
        if statistics and mode != "LEARN":
            raise ValueError("only LEARN mode has the statistics outputs")
        self.mode = mode
        self.axis = int(axis)
        self.statistics = bool(statistics)
        self.statistics_shape = tuple(statistics_shape) if statistics_shape else None
        self.scale_initializer = keras.initializers.get(scale_initializer)
        self.shift_initializer = keras.initializers.get(shift_initializer)

    def build(self, input_shape):
        channels = int(input_shape[self.axis])
        self.scale = self.add_weight(name="scale", shape=(channels,),
                                     initializer=self.scale_initializer)
        self.shift = self.add_weight(name="shift", shape=(channels,),
                                     initializer=self.shift_initializer)

    def call(self, x):
        ndim = len(x.shape)
        scale = self._broadcast(ops.cast(self.blob(self.scale), x.dtype), ndim)
        shift = self._broadcast(ops.cast(self.blob(self.shift), x.dtype), ndim)
        if self.mode == "INFERENCE":
            return x * scale + shift
        axes = [i for i in range(ndim) if i != self.axis % ndim]
        mean = ops.mean(x, axis=axes, keepdims=True)
        variance = ops.mean(ops.square(x), axis=axes, keepdims=True) - ops.square(mean)
        y = (x - mean) / ops.sqrt(variance + self.eps) * scale + shift
        if not self.statistics:
            return y
        shape = self.statistics_shape or tuple(ops.shape(mean))
        return (y, ops.stop_gradient(ops.reshape(mean, shape)),
                ops.stop_gradient(ops.reshape(variance, shape)))

    def compute_output_shape(self, input_shape):
        if not self.statistics:
            return input_shape
        shape = self.statistics_shape or tuple(
            d if i == self.axis % len(input_shape) else 1 for i, d in enumerate(input_shape))
        return (input_shape, shape, shape)

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode, axis=self.axis, statistics=self.statistics,
                      statistics_shape=self.statistics_shape,
                      scale_initializer=keras.initializers.serialize(self.scale_initializer),
                      shift_initializer=keras.initializers.serialize(self.shift_initializer))
        return config


@register
class PSPNetBN(_ChannelBlobs, keras.layers.Layer):
    """PSPNet's BN (hszhao/PSPNet, src/caffe/layers/bn_layer.cpp).

    Blobs: slope, bias, running mean, running variance (Caffe shape
    (1, C, 1, 1) each; the statistics start at 0, and the variance at 1 when
    ``frozen``). ``y = (x - mean) * (var + eps)^-1/2 * slope + bias`` with

    - the running statistics when ``frozen`` or in Caffe's TEST phase (Keras:
      ``training`` false);
    - otherwise the batch's (per channel over N, H, W; the variance biased,
      ``E[(x - mean)^2]``), and the running ones become
      ``(1 - momentum) * batch + momentum * running``.

    The fork forces ``lr_mult`` and ``decay_mult`` 0 on the statistics, and
    on slope and bias too when ``frozen`` (then only the input gets a
    gradient, ``dy * slope / std``): ``param_multipliers`` reads so whatever
    the prototxt says.
    """

    caffe_type = "BN"

    def __init__(self, momentum=0.9, eps=1e-5, frozen=False, axis=-1,
                 slope_initializer="zeros", bias_initializer="zeros", **kwargs):
        super().__init__(**kwargs)
        self.frozen = bool(frozen)
        self.momentum = float(momentum)
        self.eps = float(eps)
        self.axis = int(axis)
        self.slope_initializer = keras.initializers.get(slope_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    @property
    def param_multipliers(self):
        frozen = getattr(self, "frozen", False)
        # BNLayer::LayerSetUp overrides the prototxt's param { } so.
        return [[0.0, 0.0] if i >= 2 or frozen else list(m)
                for i, m in enumerate(self._multipliers)]

    @param_multipliers.setter
    def param_multipliers(self, value):
        self._multipliers = [[float(v) for v in m] for m in (value or [])]

    def build(self, input_shape):
        channels = int(input_shape[self.axis])
        self.slope = self.add_weight(name="slope", shape=(channels,),
                                     initializer=self.slope_initializer)
        self.bias = self.add_weight(name="bias", shape=(channels,),
                                    initializer=self.bias_initializer)
        self.moving_mean = self.add_weight(name="moving_mean", shape=(channels,),
                                           initializer="zeros", trainable=False)
        self.moving_variance = self.add_weight(
            name="moving_variance", shape=(channels,),
            initializer="ones" if self.frozen else "zeros", trainable=False)

    def caffe_variables(self):
        return [self.slope, self.bias, self.moving_mean, self.moving_variance]

    def call(self, x, training=None):
        ndim = len(x.shape)
        slope, bias = self.blob(self.slope), self.blob(self.bias)
        if self.frozen:
            slope, bias = ops.stop_gradient(slope), ops.stop_gradient(bias)
        if self.frozen or not training:
            mean = ops.cast(self.moving_mean, x.dtype)
            variance = ops.cast(self.moving_variance, x.dtype)
            centered = x - self._broadcast(mean, ndim)
        else:
            axes = [i for i in range(ndim) if i != self.axis % ndim]
            mean = ops.mean(x, axis=axes)
            centered = x - self._broadcast(mean, ndim)
            variance = ops.mean(ops.square(centered), axis=axes)
            keep = self.momentum
            self.moving_mean.assign(
                (1.0 - keep) * ops.cast(ops.stop_gradient(mean), self.moving_mean.dtype)
                + keep * self.moving_mean)
            self.moving_variance.assign(
                (1.0 - keep) * ops.cast(ops.stop_gradient(variance), self.moving_variance.dtype)
                + keep * self.moving_variance)
        inv = ops.power(variance + self.eps, -0.5)
        y = centered * self._broadcast(inv, ndim)
        return (y * self._broadcast(ops.cast(slope, x.dtype), ndim)
                + self._broadcast(ops.cast(bias, x.dtype), ndim))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(momentum=self.momentum, eps=self.eps, frozen=self.frozen, axis=self.axis,
                      slope_initializer=keras.initializers.serialize(self.slope_initializer),
                      bias_initializer=keras.initializers.serialize(self.bias_initializer))
        return config


@register
class MaxUnpool(keras.layers.Layer):
    """SegNet's Upsample (alexgkendall/caffe-segnet, upsample_layer.cpp):
    max-unpooling of ``[x, mask]`` (same shape) into ``size`` (H, W).

    Each plane's top starts at 0, then ``top[mask[i]] = x[i]`` for every i
    in order (the mask truncated to an integer; where two i name one place
    the last one's value stays). Indices outside ``[0, H*W)`` write nothing
    (the fork aborts on those at or past H*W). The gradient is the fork's
    ``Backward_cpu``: ``dx[i] = dtop[mask[i]]`` (for every i, also those whose
    value a later one overwrote); the mask gets none.
    """

    def __init__(self, size, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.size = tuple(int(s) for s in size)
        self.data_format = check_data_format(data_format)

    def call(self, inputs):
        x, mask = inputs
        first = self.data_format == "channels_first"
        c = x.shape[1] if first else x.shape[3]
        h, w = (x.shape[2], x.shape[3]) if first else (x.shape[1], x.shape[2])
        big_h, big_w = self.size
        plane = big_h * big_w
        per_sample = c * plane
        # Per sample: where element (c, y, x) of the input lands, given its
        # mask value, in the flat top of the tensor's layout.
        channel = np.arange(c).reshape((c, 1, 1) if first else (1, 1, c))
        index = ops.cast(mask, "int32")
        valid = ops.logical_and(ops.greater_equal(index, 0), ops.less(index, plane))
        if first:
            target = index + ops.convert_to_tensor(channel * plane, "int32")
        else:
            target = index * c + ops.convert_to_tensor(channel, "int32")
        batch = ops.shape(x)[0]
        offsets = ops.reshape(ops.arange(batch, dtype="int32") * per_sample, (-1, 1, 1, 1))
        dump = batch * per_sample  # one extra segment for what writes nothing
        target = ops.reshape(ops.where(valid, target + offsets, dump), (-1,))
        values = ops.reshape(x, (-1,))
        segments = dump + 1
        size = c * h * w
        position = ops.reshape(
            ops.arange(size, dtype="int32")[None, :]
            + ops.reshape(ops.arange(batch, dtype="int32") * size, (-1, 1)), (-1,))
        spread = ops.segment_sum(values, target, num_segments=segments)[:-1]
        count = ops.segment_sum(ops.ones_like(values), target, num_segments=segments)[:-1]
        last = ops.segment_max(position, target, num_segments=segments)[:-1]
        kept = ops.where(ops.greater_equal(last, 0),
                         ops.take(values, ops.maximum(last, 0)), ops.zeros_like(spread))
        # Where one place is written more than once, the value is the last
        # write's, the gradient still the fork's gather (spread's adjoint).
        top = ops.where(ops.greater(count, 1),
                        ops.stop_gradient(kept) + (spread - ops.stop_gradient(spread)), spread)
        shape = (-1, c, big_h, big_w) if first else (-1, big_h, big_w, c)
        return ops.reshape(top, shape)

    def compute_output_shape(self, input_shape):
        n, *_ = input_shape[0]
        if self.data_format == "channels_first":
            return (n, input_shape[0][1], *self.size)
        return (n, *self.size, input_shape[0][3])

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, data_format=self.data_format)
        return config


def interp_table(size_in, size_out):
    """``caffe_cpu_interp2``'s source index, next-index step and weights
    along one axis (float32 arithmetic as the fork's): output ``o`` reads
    ``(1 - lam) * in[i] + lam * in[i + step]``."""
    ratio = (np.float32(size_in - 1) / np.float32(size_out - 1) if size_out > 1
             else np.float32(0.0))
    real = (ratio * np.arange(size_out, dtype=np.float32)).astype(np.float32)
    index = real.astype(np.int64)  # truncation, as int(float) in C++
    step = (index < size_in - 1).astype(np.int64)
    lam = (real - index.astype(np.float32)).astype(np.float32)
    return index, index + step, (np.float32(1.0) - lam).astype(np.float32), lam


@register
class Interp(keras.layers.Layer):
    """PSPNet's / DeepLab v2's Interp (hszhao/PSPNet, interp_layer.cpp and
    src/caffe/util/interp.cpp ``caffe_cpu_interp2``): bilinear resizing
    with the corners aligned, to ``size`` (H, W).

    The input is first cropped by ``pad_beg`` (rows and columns from the
    start, both axes) and ``pad_end`` (from the end), both 0 or negative.
    Where the cropped size equals ``size`` the crop is copied; otherwise
    ``ratio = (in - 1) / (out - 1)`` (0 for one output), ``r = ratio * o``,
    ``i = int(r)``, ``lam = r - i`` per axis (float32), and
    ``top = h0 * (w0 * a + w1 * b) + h1 * (w0 * c + w1 * d)`` of the four
    neighbours (the next index clamped to the last). The gradient is the
    fork's adjoint. A second input (a later fork's size-giving bottom) is
    read for nothing but its size, which ``size`` already holds.
    """

    def __init__(self, size, pad_beg=0, pad_end=0, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.size = tuple(int(s) for s in size)
        self.pad_beg = int(pad_beg)
        self.pad_end = int(pad_end)
        self.data_format = check_data_format(data_format)

    def _axes(self):
        return (2, 3) if self.data_format == "channels_first" else (1, 2)

    def call(self, inputs):
        x = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        ax_h, ax_w = self._axes()
        start = -self.pad_beg
        h_eff = x.shape[ax_h] + self.pad_beg + self.pad_end
        w_eff = x.shape[ax_w] + self.pad_beg + self.pad_end
        crop = [slice(None)] * 4
        crop[ax_h] = slice(start, start + h_eff)
        crop[ax_w] = slice(start, start + w_eff)
        x = x[tuple(crop)]
        if (h_eff, w_eff) == self.size:
            return x
        rows = self._along(x, ax_w, w_eff, self.size[1])
        return self._along(rows, ax_h, h_eff, self.size[0])

    @staticmethod
    def _along(x, axis, size_in, size_out):
        first, second, w0, w1 = interp_table(size_in, size_out)
        shape = [1] * 4
        shape[axis] = size_out
        w0 = ops.cast(np.reshape(w0, shape), x.dtype)
        w1 = ops.cast(np.reshape(w1, shape), x.dtype)
        return w0 * ops.take(x, first, axis=axis) + w1 * ops.take(x, second, axis=axis)

    def compute_output_shape(self, input_shape):
        shape = input_shape[0] if isinstance(input_shape[0], (list, tuple)) else input_shape
        shape = list(shape)
        ax_h, ax_w = self._axes()
        shape[ax_h], shape[ax_w] = self.size
        return tuple(shape)

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, pad_beg=self.pad_beg, pad_end=self.pad_end,
                      data_format=self.data_format)
        return config

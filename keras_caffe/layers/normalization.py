"""Caffe's BatchNorm (statistics only) and Scale / Bias (the affine part)."""

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import CaffeBlobs, register


@register
class BatchNorm(CaffeBlobs, keras.layers.Layer):
    """Caffe's BatchNorm: normalization by mean and variance, no affine part.

    Its three blobs are Caffe's: running sums of means and variances and
    their scale factor ``s``; the statistics used are ``sum / s`` (``s == 0``
    means 0, as in Caffe). With global statistics (Caffe's TEST phase, or
    ``use_global_stats=True``): ``y = (x - mean) / sqrt(var + eps)``, computed
    as ``x * inv - mean * inv`` with ``inv`` per channel (one multiply-add per
    value; equal to Caffe's within float rounding).
    Otherwise the batch's statistics are used and the blobs are updated as
    Caffe updates them::

        s    <- maf * s + 1
        sum0 <- maf * sum0 + batch_mean
        sum1 <- maf * sum1 + m / (m - 1) * batch_var     (m values per channel)

    ``use_global_stats=None`` follows Keras's ``training`` flag.
    ``axis`` is the channel axis of the tensor.
    """

    caffe_type = "BatchNorm"

    def __init__(self, eps=1e-5, moving_average_fraction=0.999, use_global_stats=None, axis=-1,
                 **kwargs):
        super().__init__(**kwargs)
        self.eps = float(eps)
        self.moving_average_fraction = float(moving_average_fraction)
        self.use_global_stats = use_global_stats
        self.axis = int(axis)

    def build(self, input_shape):
        channels = int(input_shape[self.axis])
        self.mean_sum = self.add_weight(name="mean_sum", shape=(channels,), initializer="zeros",
                                        trainable=False)
        self.variance_sum = self.add_weight(name="variance_sum", shape=(channels,),
                                            initializer="ones", trainable=False)
        self.scale_factor = self.add_weight(name="scale_factor", shape=(1,), initializer="ones",
                                            trainable=False)

    def _broadcast(self, v, ndim):
        axis = self.axis % ndim
        return ops.reshape(v, [-1 if i == axis else 1 for i in range(ndim)])

    def call(self, x, training=None):
        inv, shift = self._normalizer(x, training)
        ndim = len(x.shape)
        return x * self._broadcast(inv, ndim) + self._broadcast(shift, ndim)

    def _normalizer(self, x, training):
        """Per channel (inv, shift) with y = x * inv + shift; updates the
        running sums when batch statistics are used."""
        ndim = len(x.shape)
        use_global = self.use_global_stats if self.use_global_stats is not None else not training
        if use_global:
            s = self.scale_factor[0]
            factor = ops.where(ops.equal(s, 0.0), 0.0, 1.0 / s)
            mean = self.mean_sum * factor
            variance = self.variance_sum * factor
        else:
            axes = [i for i in range(ndim) if i != self.axis % ndim]
            mean = ops.mean(x, axis=axes)
            # The mean's gradient through the variance is zero: stop it (as
            # tf.nn.moments does) and save the backward pass that work.
            centered = x - self._broadcast(ops.stop_gradient(mean), ndim)
            variance = ops.mean(ops.square(centered), axis=axes)
            m = int(np.prod([x.shape[i] for i in axes[1:]])) * ops.shape(x)[0]
            m = ops.cast(m, x.dtype)
            maf = self.moving_average_fraction
            self.scale_factor.assign(self.scale_factor * maf + 1.0)
            self.mean_sum.assign(self.mean_sum * maf + mean)
            correction = ops.where(m > 1, m / ops.maximum(m - 1.0, 1.0), 1.0)
            self.variance_sum.assign(self.variance_sum * maf + correction * variance)
        # Per channel inv = 1/sqrt(var + eps); per element one multiply-add.
        inv = ops.rsqrt(ops.cast(variance, x.dtype) + self.eps)
        return inv, -ops.cast(mean, x.dtype) * inv

    def compute_output_shape(self, input_shape):
        return input_shape

    def caffe_blob_shapes(self):
        c = self.mean_sum.shape[0]
        return [(c,), (c,), (1,)]


    def get_config(self):
        config = super().get_config()
        config.update(eps=self.eps, moving_average_fraction=self.moving_average_fraction,
                      use_global_stats=self.use_global_stats, axis=self.axis)
        return config


@register
class BatchNormScale(BatchNorm):
    """Caffe's BatchNorm followed by a per-channel Scale, as one Keras layer.

    The Caffe idiom (ResNet, MobileNet, ...) is two layers; computed as one,
    ``y = x * (inv * gamma) + (beta - mean * inv * gamma)``, the backward pass
    keeps no intermediate tensor (measured: the split costs about 25% of a
    BN-heavy block's train step on CPU with XLA). It still holds both Caffe
    layers' blobs (``caffe_parts``): BatchNorm's three statistics under
    ``caffe_name``, Scale's gamma (and beta) under ``scale_name``.
    """

    def __init__(self, scale_name=None, bias_term=True, **kwargs):
        super().__init__(**kwargs)
        self.scale_name = scale_name
        self.bias_term = bool(bias_term)

    def build(self, input_shape):
        super().build(input_shape)
        channels = int(input_shape[self.axis])
        self.gamma = self.add_weight(name="gamma", shape=(channels,), initializer="ones")
        self.beta = (self.add_weight(name="beta", shape=(channels,), initializer="zeros")
                     if self.bias_term else None)

    @property
    def caffe_parts(self):
        return [(self.caffe_name, "BatchNorm", 3), (self.scale_name, "Scale", len(self.weights) - 3)]

    def caffe_variables(self):
        extra = [self.gamma] + ([self.beta] if self.beta is not None else [])
        return [self.mean_sum, self.variance_sum, self.scale_factor] + extra

    def call(self, x, training=None):
        inv, shift = self._normalizer(x, training)
        ndim = len(x.shape)
        gamma = ops.cast(self.blob(self.gamma), x.dtype)
        offset = shift * gamma + (ops.cast(self.blob(self.beta), x.dtype)
                                  if self.beta is not None else 0.0)
        return x * self._broadcast(inv * gamma, ndim) + self._broadcast(offset, ndim)

    def caffe_blob_shapes(self):
        c = self.mean_sum.shape[0]
        return [(c,), (c,), (1,)] + [(c,)] * (len(self.weights) - 3)

    def get_config(self):
        config = super().get_config()
        config.update(scale_name=self.scale_name, bias_term=self.bias_term)
        return config


@register
class Scale(CaffeBlobs, keras.layers.Layer):
    """Caffe's Scale: ``y = x * gamma (+ beta)`` over axes ``axis .. axis+num_axes-1``.

    One input: gamma (and beta with ``bias_term``) are learned, shaped like
    those axes of the input. Two inputs: the second input is gamma (Caffe's
    two-bottom form) and must have exactly those axes' shape (batch included
    when ``axis`` is 0). ``axis`` is an axis of the Keras tensor.
    """

    caffe_type = "Scale"

    def __init__(self, axis=-1, num_axes=1, bias_term=False, **kwargs):
        super().__init__(**kwargs)
        self.axis = int(axis)
        self.num_axes = int(num_axes)
        self.bias_term = bool(bias_term)

    def build(self, input_shape):
        two_bottom = isinstance(input_shape, (list, tuple)) and isinstance(input_shape[0], (list, tuple))
        x_shape = input_shape[0] if two_bottom else input_shape
        self.ndim = len(x_shape)
        self.gamma = self.beta = None
        if two_bottom:
            return  # gamma is the second input; no learned weights
        start = self.axis % self.ndim
        shape = tuple(int(d) for d in x_shape[start:start + self.num_axes])
        self.gamma = self.add_weight(name="gamma", shape=shape, initializer="ones")
        if self.bias_term:
            self.beta = self.add_weight(name="beta", shape=shape, initializer="zeros")

    def _broadcast(self, v):
        start = self.axis % self.ndim
        dims = [-1 if (start == 0 and j == 0) else d for j, d in enumerate(v.shape)]
        return ops.reshape(v, [1] * start + dims + [1] * (self.ndim - start - self.num_axes))

    def call(self, inputs):
        if isinstance(inputs, (list, tuple)):
            x, gamma = inputs
        else:
            x, gamma = inputs, self.blob(self.gamma)
        y = x * self._broadcast(gamma)
        return y + self._broadcast(self.blob(self.beta)) if self.beta is not None else y

    def compute_output_shape(self, input_shape):
        if isinstance(input_shape, (list, tuple)) and isinstance(input_shape[0], (list, tuple)):
            return input_shape[0]
        return input_shape


    def caffe_blob_shapes(self):
        return [tuple(w.shape) for w in self.weights]

    def get_config(self):
        config = super().get_config()
        config.update(axis=self.axis, num_axes=self.num_axes, bias_term=self.bias_term)
        return config

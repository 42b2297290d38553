"""Caffe's LRN (Keras has none)."""

import keras
from keras import ops

from keras_caffe.kernels import cpu_only
from keras_caffe.layers.base import check_data_format, from_nhwc, on_tensorflow, register
from keras_caffe.layers.base import tensorflow_kernels, to_nhwc
from keras_caffe.layers.pooling import Pooling


@register
class LRN(keras.layers.Layer):
    """Local response normalization, Caffe's two regions.

    ACROSS_CHANNELS: ``y = x * (k + alpha/n * sum_{n channels around c} x^2)^-beta``,
    the window centred on the channel and zero-padded (TensorFlow's LRN op
    for float32 on its backend, these slices otherwise).
    WITHIN_CHANNEL: ``y = x * (1 + alpha * avgpool_{n x n}(x^2))^-beta``, the
    average taken by Caffe's AVE pooling (pad (n-1)/2), as Caffe composes it.
    """

    per_sample = True  # no sample reads another (keras_caffe.lms.plan.Node.per_sample)

    def __init__(self, local_size=5, alpha=1.0, beta=0.75, k=1.0, norm_region="ACROSS_CHANNELS",
                 data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        if norm_region not in ("ACROSS_CHANNELS", "WITHIN_CHANNEL"):
            raise ValueError(f"norm_region must be ACROSS_CHANNELS or WITHIN_CHANNEL, got {norm_region!r}")
        if int(local_size) % 2 != 1:
            raise ValueError(f"local_size must be odd, got {local_size}")
        self.local_size = int(local_size)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.k = float(k)
        self.norm_region = norm_region
        self.data_format = check_data_format(data_format)
        n = self.local_size
        self._pool = (Pooling("AVE", kernel_size=n, stride=1, pad=(n - 1) // 2,
                              data_format="channels_last", name="within_channel_pool")
                      if norm_region == "WITHIN_CHANNEL" else None)

    def call(self, x):
        x = to_nhwc(x, self.data_format)
        n = self.local_size
        if self.norm_region == "ACROSS_CHANNELS" and x.dtype == "float32" and on_tensorflow():
            if cpu_only():
                # Caffe's forward and backward formulas, each fused by XLA:
                # 3.7-5.1x faster than TensorFlow's LRN and LRNGrad on both CPU
                # kernel families (tensorflow_kernels.compiled_lrn).
                y = tensorflow_kernels.compiled_lrn(x, n, self.alpha, self.beta, self.k)
                return from_nhwc(y, self.data_format)
            # On GPUs, TensorFlow's LRN op (cuDNN's): this sum (its window cut
            # at the channel borders: Caffe's zero padding) with alpha per
            # element. On CPUs it had run 3-4x faster than this layer's slices
            # (CaffeNet's norm1, batch 16: 14-15 against 56-58 ms forward and
            # backward; TF 2.21, 2-core AMD EPYC); it runs there only with
            # KERAS_CAFFE_CPU_TUNING=0.
            y = tensorflow_kernels.lrn(x, depth_radius=(n - 1) // 2, bias=self.k,
                                         alpha=self.alpha / n, beta=self.beta)
            return from_nhwc(y, self.data_format)
        square = ops.square(x)
        if self.norm_region == "ACROSS_CHANNELS":
            half = (n - 1) // 2
            padded = ops.pad(square, [[0, 0], [0, 0], [0, 0], [half, half]])
            channels = x.shape[-1]
            window = padded[..., 0:channels]
            for i in range(1, n):
                window = window + padded[..., i:i + channels]
            scale = self.k + (self.alpha / n) * window
        else:
            scale = 1.0 + self.alpha * self._pool(square)
        return from_nhwc(x * ops.power(scale, -self.beta), self.data_format)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(local_size=self.local_size, alpha=self.alpha, beta=self.beta, k=self.k,
                      norm_region=self.norm_region, data_format=self.data_format)
        return config

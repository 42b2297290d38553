"""FlowNet 2.0's layers (lmb-freiburg/flownet2), computed as the fork's
forward code does (its ``Forward_cpu``, or its CUDA kernels where the CPU
one is ``NOT_IMPLEMENTED``):

- ``Correlation``: FlowNetC's patch correlation of two feature maps;
- ``Accum``: resize each input (corners aligned) and concatenate channels;
- ``FlowWarp``: bilinear backward warping of an image by a flow;
- ``Resample``: nearest, linear or cubic resizing (optionally antialiased);
- ``DataAugmentation``: its TEST-phase work, the mean subtraction.

The index and weight tables that depend on the sizes alone are computed
once, in numpy, in float32 as the fork computes them; the tensors are
computed channels-last inside and returned in the layer's ``data_format``.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.errors import WeightsError
from keras_caffe.layers.base import CaffeBlobs, check_data_format, from_nhwc, register, to_nhwc

F = np.float32


def _spatial(shape, data_format):
    """(H, W, C) of a 4-D Keras shape."""
    if data_format == "channels_first":
        return shape[2], shape[3], shape[1]
    return shape[1], shape[2], shape[3]


def _with_spatial(shape, data_format, size, channels=None):
    shape = list(shape)
    if data_format == "channels_first":
        shape[2], shape[3] = size
        if channels is not None:
            shape[1] = channels
    else:
        shape[1], shape[2] = size
        if channels is not None:
            shape[3] = channels
    return tuple(shape)


class _Formatted(keras.layers.Layer):
    def __init__(self, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.data_format = check_data_format(data_format)

    def get_config(self):
        config = super().get_config()
        config["data_format"] = self.data_format
        return config


def correlation_size(size, kernel_size, max_displacement, stride_1, pad):
    """``CorrelationLayer::Reshape``'s top size along one axis."""
    border = max_displacement + (kernel_size - 1) // 2
    return math.ceil(F(size + 2 * pad - 2 * border) / F(stride_1))


@register
class Correlation(_Formatted):
    """FlowNet 2.0's Correlation (correlation_layer.cu, ``CorrelateData`` and
    ``CorrelateDataSubtract``; the CPU forward is not implemented there).

    Both inputs are zero-padded by ``pad``. For top position (i, j) the
    k x k patch of the first input whose upper-left corner is at
    ``(i * stride_1 + max_displacement, j * stride_1 + max_displacement)``
    is compared with the patch of the second input displaced by
    ``(p * stride_2, o * stride_2)``, ``o, p`` in ``[-r, r]``,
    ``r = max_displacement // stride_2``; top channel ``(p + r) * (2r + 1)
    + (o + r)`` (x displacement fastest) holds ``sum(a * b)`` (``subtract``:
    ``sum(|a - b|)``) over the patch and the channels, divided by
    ``kernel_size^2 * channels``.
    """

    def __init__(self, kernel_size, max_displacement, stride_1=1, stride_2=1, pad=0,
                 subtract=False, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = int(kernel_size)
        self.max_displacement = int(max_displacement)
        self.stride_1 = int(stride_1)
        self.stride_2 = int(stride_2)
        self.pad = int(pad)
        self.subtract = bool(subtract)

    def _geometry(self, height, width):
        args = (self.kernel_size, self.max_displacement, self.stride_1, self.pad)
        top = (correlation_size(height, *args), correlation_size(width, *args))
        radius = self.max_displacement // self.stride_2
        return top, radius

    def call(self, inputs):
        a, b = (to_nhwc(x, self.data_format) for x in inputs)
        height, width, channels = a.shape[1], a.shape[2], a.shape[3]
        (top_h, top_w), radius = self._geometry(height, width)
        q = self.pad
        padding = [[0, 0], [q, q], [q, q], [0, 0]]
        if q:
            a, b = ops.pad(a, padding), ops.pad(b, padding)
        k, s1, s2, md = self.kernel_size, self.stride_1, self.stride_2, self.max_displacement
        span_h, span_w = (top_h - 1) * s1 + k, (top_w - 1) * s1 + k
        first = a[:, md:md + span_h, md:md + span_w, :]
        planes = []
        for p in range(-radius, radius + 1):        # y displacement: the slower index
            for o in range(-radius, radius + 1):    # x displacement: the faster one
                y0, x0 = md + p * s2, md + o * s2
                second = b[:, y0:y0 + span_h, x0:x0 + span_w, :]
                if self.subtract:
                    planes.append(ops.sum(ops.abs(first - second), axis=-1))
                else:
                    planes.append(ops.sum(first * second, axis=-1))
        stacked = ops.stack(planes, axis=-1)
        out = ops.average_pool(stacked, k, strides=s1, padding="valid",
                               data_format="channels_last") / F(channels)
        return from_nhwc(out, self.data_format)

    def compute_output_shape(self, input_shape):
        shape = input_shape[0]
        height, width, _ = _spatial(shape, self.data_format)
        top, radius = self._geometry(height, width)
        return _with_spatial(shape, self.data_format, top, (2 * radius + 1) ** 2)

    def get_config(self):
        config = super().get_config()
        config.update(kernel_size=self.kernel_size, max_displacement=self.max_displacement,
                      stride_1=self.stride_1, stride_2=self.stride_2, pad=self.pad,
                      subtract=self.subtract)
        return config


def accum_table(size_in, size_out):
    """``AccumLayer::Forward_cpu`` along one axis (float32 as the fork):
    ``pos = o / (out - 1) * (in - 1)``, output ``o`` reads
    ``(1 - d) * in[floor(pos)] + d * in[floor(pos) + 1]``, ``d = pos -
    floor(pos)`` (the next index clamped: its weight is then 0)."""
    o = np.arange(size_out, dtype=F)
    pos = (o / F(size_out - 1) * F(size_in - 1)).astype(F)
    low = np.floor(pos).astype(F)
    dist = (pos - low).astype(F)
    first = low.astype(np.int64)
    second = np.minimum(first + 1, size_in - 1)
    return first, second, (F(1) - dist).astype(F), dist


def _two_tap(x, axis, table):
    first, second, w0, w1 = table
    shape = [1] * 4
    shape[axis] = len(first)
    w0 = ops.cast(np.reshape(w0, shape), x.dtype)
    w1 = ops.cast(np.reshape(w1, shape), x.dtype)
    return w0 * ops.take(x, first, axis=axis) + w1 * ops.take(x, second, axis=axis)


@register
class Accum(_Formatted):
    """FlowNet 2.0's Accum (accum_layer.cpp): each input resized to ``size``
    (H, W) with the corners aligned (``accum_table``), the results
    concatenated along the channels. ``reference``: the last input only
    gives the size (``have_reference``) and is not concatenated."""

    def __init__(self, size, reference=False, **kwargs):
        super().__init__(**kwargs)
        self.size = tuple(int(s) for s in size)
        self.reference = bool(reference)

    def _inputs(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        return inputs[:-1] if self.reference else inputs

    def call(self, inputs):
        parts = []
        for x in self._inputs(inputs):
            x = to_nhwc(x, self.data_format)
            height, width = x.shape[1], x.shape[2]
            x = _two_tap(x, 1, accum_table(height, self.size[0]))
            parts.append(_two_tap(x, 2, accum_table(width, self.size[1])))
        out = parts[0] if len(parts) == 1 else ops.concatenate(parts, axis=-1)
        return from_nhwc(out, self.data_format)

    def compute_output_shape(self, input_shape):
        shapes = input_shape if isinstance(input_shape[0], (list, tuple)) else [input_shape]
        shapes = shapes[:-1] if self.reference else shapes
        channels = sum(_spatial(s, self.data_format)[2] for s in shapes)
        return _with_spatial(shapes[0], self.data_format, self.size, channels)

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, reference=self.reference)
        return config


@register
class FlowWarp(_Formatted):
    """FlowNet 2.0's FlowWarp (flow_warp_layer.cpp ``Forward_cpu``):
    ``[image, flow]`` (flow channels: x then y) -> the image sampled at
    ``(x + fx, y + fy)`` bilinearly (float32). Where that point is outside
    ``[0, W) x [0, H)`` (or not a number) the output is ``fill`` (0, or
    NaN for the fork's ``NOT_A_NUMBER``); the right and bottom neighbours
    are clamped to the last column and row."""

    def __init__(self, fill=0.0, **kwargs):
        super().__init__(**kwargs)
        self.fill = float(fill)

    def call(self, inputs):
        image, flow = (to_nhwc(x, self.data_format) for x in inputs)
        height, width, channels = image.shape[1], image.shape[2], image.shape[3]
        grid_y, grid_x = np.meshgrid(np.arange(height, dtype=F), np.arange(width, dtype=F),
                                     indexing="ij")
        x2 = ops.cast(grid_x[None], flow.dtype) + flow[..., 0]
        y2 = ops.cast(grid_y[None], flow.dtype) + flow[..., 1]
        inside = ops.logical_and(
            ops.logical_and(ops.greater_equal(x2, 0.0), ops.greater_equal(y2, 0.0)),
            ops.logical_and(ops.less(x2, float(width)), ops.less(y2, float(height))))
        # Outside points read (0, 0), their result replaced by the fill.
        x2 = ops.where(inside, x2, ops.zeros_like(x2))
        y2 = ops.where(inside, y2, ops.zeros_like(y2))
        left, top = ops.floor(x2), ops.floor(y2)
        alpha = (x2 - left)[..., None]
        beta = (y2 - top)[..., None]
        left, top = ops.cast(left, "int32"), ops.cast(top, "int32")
        right = ops.minimum(left + 1, width - 1)
        bottom = ops.minimum(top + 1, height - 1)
        flat = ops.reshape(image, (-1, height * width, channels))

        def at(row, col):
            index = ops.reshape(row * width + col, (-1, height * width, 1))
            picked = ops.take_along_axis(flat, index, axis=1)
            return ops.reshape(picked, (-1, height, width, channels))

        one = ops.cast(1.0, image.dtype)
        warped = ((one - alpha) * (one - beta) * at(top, left) + alpha * (one - beta)
                  * at(top, right) + (one - alpha) * beta * at(bottom, left)
                  + alpha * beta * at(bottom, right))
        fill = ops.full_like(warped, self.fill)
        out = ops.where(inside[..., None], warped, fill)
        return from_nhwc(out, self.data_format)

    def compute_output_shape(self, input_shape):
        return input_shape[0]

    def get_config(self):
        config = super().get_config()
        config["fill"] = self.fill
        return config


def _c_round(x):
    """C's ``round`` (halves away from zero) of float32 values, exactly."""
    x = np.asarray(x, np.float64)
    return (np.sign(x) * np.floor(np.abs(x) + 0.5)).astype(np.int64)


def _bicubic(x):
    x = np.abs(x).astype(F)
    near = x * x * (F(1.5) * x - F(2.5)) + F(1)
    far = x * (x * (F(-0.5) * x + F(2.5)) - F(4)) + F(2)
    return np.where(x <= 1, near, np.where(x < 2, far, F(0))).astype(F)


def _triangle(x):
    x = np.asarray(x, F)
    return np.where((x >= -1) & (x < 0), x + F(1),
                    np.where((x >= 0) & (x <= 1), F(1) - x, F(0))).astype(F)


def resample_positions(size_out, factor, other_factor):
    """Source positions along one axis as ``InterpolationKernel`` computes
    them: ``o * f + f_other / 2 - 0.5`` (the fork adds the other axis's half
    factor, as it does)."""
    o = np.arange(size_out, dtype=F)
    return (o * F(factor) + F(other_factor) / F(2) - F(0.5)).astype(F)


def resample_matrix(size_in, size_out, factor, other_factor, kind, antialias):
    """The (out, in) weights of ``InterpolationKernel`` along one axis,
    normalised (its ``sum / wsum`` is separable): the taps
    ``round(pos) +- r`` inside the input, weight ``a * k(a * (pos - x))``,
    ``k`` the triangle (``"linear"``) or bicubic filter, ``a = 1 / f``
    when antialiasing else 1, ``r = 2`` (``f < 1``) or ``ceil(width / a)``;
    a row whose weights sum to 0 gives 0."""
    pos = resample_positions(size_out, factor, other_factor)
    scale = F(1) / (F(factor) if antialias else F(1))
    width = 4 if kind == "cubic" else 2
    radius = 2 if factor < 1 else int(math.ceil(F(width) / scale))
    kernel = _bicubic if kind == "cubic" else _triangle
    matrix = np.zeros((size_out, size_in), np.float64)
    for o, centre in enumerate(_c_round(pos)):
        for x in range(centre - radius, centre + radius + 1):
            if 0 <= x < size_in:
                matrix[o, x] += scale * kernel(scale * (pos[o] - F(x)))
    total = matrix.sum(axis=1, keepdims=True)
    return np.where(total != 0, matrix / np.where(total != 0, total, 1), 0).astype(F)


def resample_nearest_index(in_size, out_size):
    """``NearestNeighborKernel``'s flat source index (y * W + x) per output
    pixel (out_h * out_w,), for input (H, W) and output (h, w)."""
    (in_h, in_w), (out_h, out_w) = in_size, out_size
    fx, fy = F(in_w) / F(out_w), F(in_h) / F(out_h)
    xs = _c_round(resample_positions(out_w, fx, fy))
    ys = _c_round(resample_positions(out_h, fy, fx))
    return (ys[:, None] * in_w + xs[None, :]).reshape(-1)


@register
class Resample(_Formatted):
    """FlowNet 2.0's Resample (resample_layer.cu; its CPU forward is not
    implemented): the input resized to ``size`` (H, W) with
    ``f = in / out`` per axis. ``"nearest"``: the pixel at the rounded
    source position (``resample_nearest_index``); ``"linear"`` or
    ``"cubic"``: the separable normalised filters of ``resample_matrix``,
    antialiased (a filter widened by ``f``) where ``antialias`` and either
    axis shrinks."""

    def __init__(self, size, kind="linear", antialias=False, **kwargs):
        super().__init__(**kwargs)
        if kind not in ("nearest", "linear", "cubic"):
            raise ValueError(f"kind must be 'nearest', 'linear' or 'cubic', got {kind!r}")
        self.size = tuple(int(s) for s in size)
        self.kind = kind
        self.antialias = bool(antialias)

    def call(self, inputs):
        x = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        x = to_nhwc(x, self.data_format)
        height, width, channels = x.shape[1], x.shape[2], x.shape[3]
        out_h, out_w = self.size
        if self.kind == "nearest":
            index = resample_nearest_index((height, width), self.size)
            flat = ops.reshape(x, (-1, height * width, channels))
            out = ops.reshape(ops.take(flat, index, axis=1), (-1, out_h, out_w, channels))
            return from_nhwc(out, self.data_format)
        fx, fy = F(width) / F(out_w), F(height) / F(out_h)
        antialias = self.antialias and (fx > 1 or fy > 1)
        rows = resample_matrix(height, out_h, fy, fx, self.kind, antialias)
        cols = resample_matrix(width, out_w, fx, fy, self.kind, antialias)
        x = ops.einsum("oh,nhwc->nowc", ops.cast(rows, x.dtype), x)
        x = ops.einsum("pw,nowc->nopc", ops.cast(cols, x.dtype), x)
        return from_nhwc(x, self.data_format)

    def compute_output_shape(self, input_shape):
        shape = input_shape[0] if isinstance(input_shape[0], (list, tuple)) else input_shape
        return _with_spatial(shape, self.data_format, self.size)

    def get_config(self):
        config = super().get_config()
        config.update(size=self.size, kind=self.kind, antialias=self.antialias)
        return config


@register
class DataAugmentation(CaffeBlobs, _Formatted):
    """FlowNet 2.0's DataAugmentation (data_augmentation_layer.cpp/.cu)
    without cropping, where the fork augments nothing: its mean
    subtraction, with no gradient (the fork allows no backward).

    ``recompute_mean`` > 0: blobs (Caffe shapes) the iteration count
    (1, 1, 1, 1), the per-pixel mean (1, C, H, W) and the per-channel mean
    (1, C, 1, 1). With ``t`` = count + 1 (the fork counts this forward),
    where ``t <= recompute_mean`` the means are first updated with the
    batch (``((t - 1) * mean + mean over the batch) / t``, the channel
    mean from it), as the fork's forward does; the fork also stores them
    and the count, which this layer does not: every call computes as the
    first after loading. Then ``x - mean`` per pixel (``mean_per_pixel``)
    or per channel. Otherwise (blob: the count alone) ``x - proto_mean``
    per channel when ``proto_mean`` is given (the prototxt's three
    ``mean`` values with ``mean_per_pixel`` false), else ``x``.

    ``set_caffe_blobs`` is the fork's ``adjust_blobs``: with
    ``mean_per_pixel`` false only the channel mean is copied (the pixel mean
    stays 0); else the pixel mean, or, where its size differs from the
    input's, its spatial average spread over the input's size, and the
    channel mean is its spatial average.
    """

    caffe_type = "DataAugmentation"

    def __init__(self, recompute_mean=0, mean_per_pixel=True, proto_mean=None, **kwargs):
        super().__init__(**kwargs)
        self.recompute_mean = int(recompute_mean)
        self.mean_per_pixel = bool(mean_per_pixel)
        self.proto_mean = None if proto_mean is None else [float(v) for v in proto_mean]

    def build(self, input_shape):
        shape = input_shape[0] if isinstance(input_shape[0], (list, tuple)) else input_shape
        height, width, channels = _spatial(shape, self.data_format)
        self.image_size = (int(height), int(width), int(channels))
        self.count = self.add_weight(name="count", shape=(1, 1, 1, 1), initializer="zeros",
                                     trainable=False)
        if self.recompute_mean > 0:
            self.pixel_mean = self.add_weight(name="pixel_mean", shape=(1, channels, height, width),
                                              initializer="zeros", trainable=False)
            self.channel_mean = self.add_weight(name="channel_mean", shape=(1, channels, 1, 1),
                                                initializer="zeros", trainable=False)

    def caffe_variables(self):
        if self.recompute_mean > 0:
            return [self.count, self.pixel_mean, self.channel_mean]
        return [self.count]

    def set_caffe_blobs(self, blobs):
        height, width, channels = self.image_size
        if self.recompute_mean <= 0:  # the count alone, which nothing reads then
            super().set_caffe_blobs(blobs)
            return
        if len(blobs) != 3:
            raise WeightsError(f"layer {self.name!r}: {len(blobs)} blobs in the weights, the net "
                               "needs 3 (count, pixel mean, channel mean)")
        count, pixel, channel = (np.asarray(b, F) for b in blobs)
        if count.size != 1:
            raise WeightsError(f"layer {self.name!r}: blob 0 (the count) has shape "
                               f"{count.shape}, the net needs (1, 1, 1, 1)")
        if pixel.ndim != 4 or pixel.shape[1] != channels:
            raise WeightsError(f"layer {self.name!r}: blob 1 (the pixel mean) has shape "
                               f"{pixel.shape}, the net needs (1, {channels}, H, W)")
        self.count.assign(count.reshape(1, 1, 1, 1))
        if not self.mean_per_pixel:
            if channel.size < channels:
                raise WeightsError(f"layer {self.name!r}: blob 2 (the channel mean) has "
                                   f"{channel.size} values, the net needs {channels}")
            self.channel_mean.assign(channel.reshape(-1)[:channels].reshape(1, channels, 1, 1))
            self.pixel_mean.assign(np.zeros((1, channels, height, width), F))
            return
        per_channel = pixel[0].reshape(channels, -1).mean(axis=1, dtype=np.float64).astype(F)
        if pixel.shape[2:] == (height, width):
            self.pixel_mean.assign(pixel[:1])
        else:
            self.pixel_mean.assign(np.broadcast_to(per_channel.reshape(1, channels, 1, 1),
                                                   (1, channels, height, width)))
        self.channel_mean.assign(per_channel.reshape(1, channels, 1, 1))

    def _layout(self, blob):
        """A (1, C, H, W) Caffe blob in the input's layout."""
        return ops.transpose(blob, (0, 2, 3, 1)) if self.data_format == "channels_last" else blob

    def call(self, inputs):
        x = inputs[0] if isinstance(inputs, (list, tuple)) else inputs
        x = ops.stop_gradient(x)
        if self.recompute_mean > 0:
            spatial = (1, 2) if self.data_format == "channels_last" else (2, 3)
            t = ops.cast(self.count, x.dtype) + 1.0
            stored_pixel = self._layout(ops.cast(self.pixel_mean, x.dtype))
            stored_channel = self._layout(ops.cast(self.channel_mean, x.dtype))
            fresh = (stored_pixel * (t - 1.0) + ops.mean(x, axis=0, keepdims=True)) / t
            fresh_channel = ops.mean(fresh, axis=spatial, keepdims=True)
            update = ops.less_equal(t, float(self.recompute_mean))
            if self.mean_per_pixel:
                return x - ops.where(update, fresh, stored_pixel)
            return x - ops.where(update, fresh_channel, stored_channel)
        if self.proto_mean is not None:
            shape = (1, 1, 1, -1) if self.data_format == "channels_last" else (1, -1, 1, 1)
            return x - ops.reshape(ops.cast(np.asarray(self.proto_mean, F), x.dtype), shape)
        return x

    def compute_output_shape(self, input_shape):
        return input_shape[0] if isinstance(input_shape[0], (list, tuple)) else input_shape

    def get_config(self):
        config = super().get_config()
        config.update(recompute_mean=self.recompute_mean, mean_per_pixel=self.mean_per_pixel,
                      proto_mean=self.proto_mean)
        return config

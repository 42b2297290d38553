"""Caffe's Pooling: explicit pads, Caffe's ceil-mode output size and clipping
(or the output-size rule of a Caffe build that patched it, ``RULES``), and
MAX pooling's argmax mask (its optional second top)."""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.kernels import eigen_cpu
from keras_caffe.layers.base import check_data_format, from_nhwc, on_tensorflow, pair, register
from keras_caffe.layers.base import tensorflow_kernels, to_nhwc

#: BVLC Caffe's output-size rule (``PoolingLayer::Reshape``).
BVLC = "bvlc"
#: The rule of ChenYingpeng/caffe-yolov3's Caffe: its
#: ``caffe_layers/pooling_layer/pooling_layer.cpp`` (commit 7bf54026, which
#: darknet2caffe's README has users copy over Caffe's for yolov3-tiny) adds
#: one output row and one column after the ceil size wherever
#: ``(kernel_h - stride_h) % 2 == 1`` in C++ (odd and positive: C++'s ``%``
#: of a negative difference is never 1), before the pad clipping. Darknet's
#: size-2 stride-1 maxpool then keeps 13x13 at 13x13, as darknet does.
CAFFE_YOLOV3 = "caffe-yolov3"
#: The output-size rules ``Pooling`` knows.
RULES = (BVLC, CAFFE_YOLOV3)


def pooled_size(size, kernel, stride, pad, ceil_mode=True):
    """BVLC Caffe's PoolingLayer::Reshape output size along one axis, as if
    it were the only one (``pooled_shape`` clips both axes where either is
    padded, as Caffe does)."""
    return pooled_shape((size,), (kernel,), (stride,), (pad,), ceil_mode)[0]


def extra_window(kernel, stride):
    """Whether caffe-yolov3's rule adds a row and a column: C++'s
    ``(kernel_h - stride_h) % 2 == 1`` (the first axis decides for both)."""
    difference = kernel[0] - stride[0]
    return difference > 0 and difference % 2 == 1


def pooled_shape(size, kernel, stride, pad, ceil_mode=True, rule=BVLC):
    """PoolingLayer::Reshape's top size over the spatial axes ``size`` (H, W):
    ceil (or floor) of ``(size + 2 pad - kernel) / stride`` plus 1, one more
    on every axis under caffe-yolov3's rule where ``extra_window``, then,
    if any pad is non-zero, each axis less 1 where its last window would
    start at or past ``size + pad`` (Caffe checks both axes then)."""
    out = [(math.ceil((n + 2 * p - k) / s) if ceil_mode else (n + 2 * p - k) // s) + 1
           for n, k, s, p in zip(size, kernel, stride, pad)]
    if rule == CAFFE_YOLOV3 and extra_window(kernel, stride):
        out = [o + 1 for o in out]
    if any(pad):
        out = [o - 1 if (o - 1) * s >= n + p else o
               for o, n, s, p in zip(out, size, stride, pad)]
    return tuple(out)


def max_pool(x, kernel, stride):
    """MAX pooling of an NHWC ``x`` over valid windows, with Caffe's
    backward: each window's gradient goes to its first maximum (row-major
    scan), summed where windows overlap.

    TensorFlow's ``MaxPoolGrad`` computes the same values, but its Eigen CPU
    kernel is slow: 3.0 ms for LeNet's pool1 (64x24x24x20, 2x2 stride 2)
    and 17.4 ms for CIFAR-10 quick's pool1 (100x33x33x32, 3x3 stride 2),
    against 0.5 and 7-8 ms for routing the gradient to each window's first
    maximum with XLA (TF 2.21, 2-core AMD EPYC; ``benchmarks/eigen_backward.py``
    times the layers both ways). ``tensorflow_kernels.routed_max_pool`` now
    keeps Caffe's mask (which cell won) from the forward and routes by it:
    pool1's forward and backward 7.6 against 10.5 ms. Caffe's own backward
    there: 0.24 and 1.3 ms (golden/timing). Used on TensorFlow with Eigen's CPU kernels only
    (``keras_caffe.kernels.eigen_cpu``): oneDNN's and cuDNN's
    ``MaxPoolGrad`` are faster still; the other Keras backends take their
    own max pooling's gradient, which routes to a window's maximum too."""
    if not on_tensorflow() or not eigen_cpu() or None in x.shape[1:]:
        return ops.max_pool(x, kernel, stride, padding="valid")
    return tensorflow_kernels.routed_max_pool(x, tuple(kernel), tuple(stride))


@register
class Pooling(keras.layers.Layer):
    """Caffe's MAX / AVE pooling over H, W.

    MAX ignores padded cells (they hold -inf). AVE divides each window's sum
    by the window clipped to ``H + pad`` (not to the image, not by k*k), as
    Caffe does. The output size is Caffe's: ceil mode by default, with the
    last window forced to start inside the input. ``global_pooling`` pools
    all of H, W.

    ``rule``: the output-size rule, ``"bvlc"`` (BVLC Caffe's) or
    ``"caffe-yolov3"`` (``CAFFE_YOLOV3``: one more row and column where
    ``kernel_h - stride_h`` is odd and positive, ceil mode only; a global
    pooling over an even H then has 2 x 2 windows of H x W at stride 1, the
    second row and column clipped to the input). Windows past the input's
    edge are clipped to it, as Caffe's loops clip them.

    ``return_mask`` (MAX only): the layer also returns Caffe's second top, the
    argmax of each window as an index into the flattened H*W plane of the
    input (``h * W + w``; float values, as Caffe's blob holds them). Caffe's
    ``Forward_cpu`` keeps the first maximum of its window scan (rows, then
    columns: the smallest index among the maxima), never a padded cell, and
    -1 where no value exceeds -FLT_MAX (its initial maximum). The mask
    carries no gradient (Caffe's backward ignores it).
    """

    per_sample = True  # no sample reads another (keras_caffe.lms.plan.Node.per_sample)

    def __init__(self, pool="MAX", kernel_size=1, stride=1, pad=0, global_pooling=False,
                 ceil_mode=True, data_format="channels_last", return_mask=False, rule=BVLC,
                 **kwargs):
        super().__init__(**kwargs)
        if pool not in ("MAX", "AVE"):
            raise ValueError(f"pool must be 'MAX' or 'AVE', got {pool!r}")
        if return_mask and pool != "MAX":
            raise ValueError("only MAX pooling has a mask")
        if rule not in RULES:
            raise ValueError(f"rule must be one of {', '.join(map(repr, RULES))}, got {rule!r}")
        if rule == CAFFE_YOLOV3 and not ceil_mode:
            raise ValueError("the caffe-yolov3 rule has ceil mode only")
        self.return_mask = bool(return_mask)
        self.pool = pool
        self.kernel_size = pair(kernel_size)
        self.stride = pair(stride)
        self.pad = pair(pad)
        self.global_pooling = bool(global_pooling)
        self.ceil_mode = bool(ceil_mode)
        self.rule = rule
        self.data_format = check_data_format(data_format)

    def _window(self, h, w):
        """(kernel, stride, pad) on an (h, w) input; None for a global
        pooling that reduces the whole plane to one value."""
        if not self.global_pooling:
            return self.kernel_size, self.stride, self.pad
        if self.rule == CAFFE_YOLOV3 and h is not None and extra_window((h, w), (1, 1)):
            return (h, w), (1, 1), (0, 0)
        return None

    def _geometry(self, h, w, window):
        kernel, stride, pad = window
        out = pooled_shape((h, w), kernel, stride, pad, self.ceil_mode, self.rule)
        starts = [(o - 1) * s - p for o, s, p in zip(out, stride, pad)]
        if self.rule == CAFFE_YOLOV3 and any(a >= n for a, n in zip(starts, (h, w))):
            raise ValueError(f"the caffe-yolov3 rule gives {out[0]}x{out[1]} windows on a "
                             f"{h}x{w} input (kernel {kernel}, stride {stride}, pad {pad}): the "
                             "last starts past the input")
        # Extra bottom/right padding so every window Caffe computes exists.
        extra = [max(0, a + k - n) for a, k, n in zip(starts, kernel, (h, w))]
        return out, extra

    def call(self, x):
        x = to_nhwc(x, self.data_format)
        h, w = x.shape[1], x.shape[2]
        window = self._window(h, w)
        if window is None:
            reduce = ops.max if self.pool == "MAX" else ops.mean
            y = reduce(x, axis=(1, 2), keepdims=True)
            if self.return_mask:
                return (from_nhwc(y, self.data_format),
                        from_nhwc(self._global_mask(x, y), self.data_format))
            return from_nhwc(y, self.data_format)
        (oh, ow), (eh, ew) = self._geometry(h, w, window)
        (kh, kw), (sh, sw), (ph, pw) = window
        paddings = [[0, 0], [ph, eh], [pw, ew], [0, 0]]
        if self.pool == "MAX":
            if ph or pw or eh or ew:
                x = ops.pad(x, paddings, constant_values=float("-inf"))
            y = max_pool(x, (kh, kw), (sh, sw))
            if self.return_mask:
                y = y[:, :oh, :ow, :]
                return (from_nhwc(y, self.data_format),
                        from_nhwc(self._window_mask(x, y, h, w, window), self.data_format))
        else:
            if ph or pw or eh or ew:
                x = ops.pad(x, paddings)
            y = ops.average_pool(x, (kh, kw), (sh, sw), padding="valid")
            scale = self._average_scale(h, w, oh, ow, window)
            if scale is not None:
                y = y * ops.cast(scale, y.dtype)
        if y.shape[1] != oh or y.shape[2] != ow:  # a slice costs a StridedSliceGrad
            y = y[:, :oh, :ow, :]
        return from_nhwc(y, self.data_format)

    @staticmethod
    def _window_mask(padded, y, h, w, window):
        """Caffe's argmax per window of the (padded) NHWC input, given the
        windows' maxima ``y``: the smallest plane index ``h * W + w`` among
        the window's real cells equal to the maximum."""
        oh, ow = y.shape[1], y.shape[2]
        (kh, kw), (sh, sw), (ph, pw) = window
        none = h * w  # larger than every index: no candidate
        found = None
        for u in range(kh):
            rows = np.arange(oh) * sh - ph + u
            for v in range(kw):
                cols = np.arange(ow) * sw - pw + v
                inside = ((rows >= 0) & (rows < h))[:, None] & ((cols >= 0) & (cols < w))[None, :]
                index = np.where(inside, rows[:, None] * w + cols[None, :], none)
                cells = padded[:, u:u + sh * (oh - 1) + 1:sh, v:v + sw * (ow - 1) + 1:sw, :]
                candidate = ops.where(ops.equal(cells, y),
                                      ops.convert_to_tensor(index[None, :, :, None], "int32"),
                                      none)
                found = candidate if found is None else ops.minimum(found, candidate)
        return Pooling._mask_values(found, y)

    def _global_mask(self, x, y):
        """The argmax of each whole plane (global pooling)."""
        h, w = x.shape[1], x.shape[2]
        flat = ops.reshape(x, (-1, h * w, x.shape[3]))
        index = ops.convert_to_tensor(np.arange(h * w)[None, :, None], "int32")
        candidate = ops.where(ops.equal(flat, ops.reshape(y, (-1, 1, x.shape[3]))), index, h * w)
        found = ops.reshape(ops.min(candidate, axis=1), (-1, 1, 1, x.shape[3]))
        return self._mask_values(found, y)

    @staticmethod
    def _mask_values(found, y):
        # Caffe starts each window's maximum at -FLT_MAX and its mask at -1.
        lowest = float(-np.finfo(np.float32).max)
        found = ops.where(ops.greater(y, ops.cast(lowest, y.dtype)), found, -1)
        return ops.stop_gradient(ops.cast(found, y.dtype))

    @staticmethod
    def _average_scale(h, w, oh, ow, window):
        """k*k / Caffe's pool_size per output cell (None where all are k*k)."""
        factors = []
        for n, o, k, s, p in zip((h, w), (oh, ow), *window):
            start = np.arange(o) * s - p
            size = np.minimum(start + k, n + p) - start
            factors.append(k / size)
        scale = np.outer(*factors).astype("float32")
        return None if np.all(scale == 1.0) else scale[None, :, :, None]

    def compute_output_shape(self, input_shape):
        if self.data_format == "channels_first":
            n, c, h, w = input_shape
        else:
            n, h, w, c = input_shape
        window = self._window(h, w)
        if window is None:
            oh = ow = 1
        else:
            (oh, ow), _ = self._geometry(h, w, window)
        shape = (n, c, oh, ow) if self.data_format == "channels_first" else (n, oh, ow, c)
        return (shape, shape) if self.return_mask else shape

    def get_config(self):
        config = super().get_config()
        config.update(pool=self.pool, kernel_size=self.kernel_size, stride=self.stride,
                      pad=self.pad, global_pooling=self.global_pooling,
                      ceil_mode=self.ceil_mode, data_format=self.data_format)
        if self.return_mask:
            config["return_mask"] = True
        if self.rule != BVLC:
            config["rule"] = self.rule
        return config

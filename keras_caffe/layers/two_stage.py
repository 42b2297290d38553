"""Two-stage detectors' layers: Faster R-CNN's region proposals
(py-faster-rcnn's Python ``ProposalLayer``, OpenCV's ``Proposal``), R-FCN's
``PSROIPooling`` and the Mask R-CNN ports' ``ROIAlign`` (as ncnn computes it).

Regions of interest are (R, 5) rows ``(batch index, x1, y1, x2, y2)`` in
image coordinates, as every Caffe ROI layer reads them; each region is
computed on its own (``regions.per_roi``), its bins as separable row and
column weights over the map, so the result is differentiable in the
features.
"""

import keras
import numpy as np
from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.layers.base import divide, on_tensorflow, register, tensorflow_kernels
from keras_caffe.layers.base import top_k
from keras_caffe.layers.regions import per_roi


def _round(x):
    """C's ``round``: halves away from zero."""
    return ops.sign(x) * ops.floor(ops.abs(x) + 0.5)


def _to_nchw(features, data_format):
    return ops.transpose(features, (0, 3, 1, 2)) if data_format == "channels_last" else features


def _from_nchw(out, data_format):
    """(R, C, ph, pw) in the model's layout."""
    return ops.transpose(out, (0, 2, 3, 1)) if data_format == "channels_last" else out


def _pooled_shape(input_shapes, channels, pooled_h, pooled_w, data_format):
    if data_format == "channels_last":
        return (None, pooled_h, pooled_w, channels)
    return (None, channels, pooled_h, pooled_w)


# -- py-faster-rcnn's proposals ---------------------------------------------------


def generate_anchors(base_size=16, ratios=(0.5, 1, 2), scales=(8, 16, 32)):
    """py-faster-rcnn's lib/rpn/generate_anchors.py: (A, 4) windows, for each
    ratio (a rounded width and height of the base_size area) each scale,
    centred on the base window (0, 0, base_size - 1, base_size - 1)."""
    base = np.array([0.0, 0.0, base_size - 1.0, base_size - 1.0])
    width, height = base[2] - base[0] + 1, base[3] - base[1] + 1
    cx, cy = base[0] + 0.5 * (width - 1), base[1] + 0.5 * (height - 1)
    out = []
    for ratio in ratios:
        w = np.round(np.sqrt(width * height / ratio))
        h = np.round(w * ratio)
        for scale in scales:
            sw, sh = w * scale, h * scale
            out.append([cx - 0.5 * (sw - 1), cy - 0.5 * (sh - 1),
                        cx + 0.5 * (sw - 1), cy + 0.5 * (sh - 1)])
    return np.array(out, np.float64)


def _check_single_image(name, scores):
    """py-faster-rcnn's ``assert bottom[0].data.shape[0] == 1``: at once where
    the batch is known, in TensorFlow's graph where it is known only when run."""
    message = "Proposal: only single item batches are supported"
    if scores.shape[0] is None and on_tensorflow():
        tensorflow_kernels.assert_single_image(scores, message)
    elif scores.shape[0] is not None and scores.shape[0] != 1:
        raise LayerError(name, f"{message}, got a batch of {scores.shape[0]}")


def non_max_suppression(corners, scores, count, most, threshold):
    """``(indices, found)``: greedy non-maximum suppression as TensorFlow's
    ``tf.image.non_max_suppression`` computes it, in ``keras.ops``.

    ``corners`` (K, 4) are (y1, x1, y2, x2) in score order (``scores``, its
    order already taken); the first ``count`` are candidates. The best
    candidate left is kept and takes out every candidate left whose overlap
    with it (intersection over union, TensorFlow's float32 sums, 0 where an
    area is not positive) exceeds ``threshold``; until ``most`` are kept or
    none is left, one iteration per kept box. ``indices`` (most,) are the
    kept rows in order, then zeros; ``found`` how many were kept."""
    del scores  # in order already: the first candidate left is the best
    k = corners.shape[0]
    positions = ops.arange(k, dtype="int32")
    low = ops.minimum(corners[:, :2], corners[:, 2:])
    high = ops.maximum(corners[:, :2], corners[:, 2:])
    areas = (high[:, 0] - low[:, 0]) * (high[:, 1] - low[:, 1])

    def overlap(i):
        area = ops.take(areas, i)
        inner = (ops.maximum(ops.minimum(ops.take(high, i, axis=0), high)
                             - ops.maximum(ops.take(low, i, axis=0), low), 0.0))
        intersection = inner[:, 0] * inner[:, 1]
        union = areas + area - intersection
        iou = intersection / ops.where(union > 0, union, 1.0)
        return ops.where((areas > 0) & (area > 0), iou, 0.0)

    def cond(left, kept, found):
        return ops.logical_and(ops.any(left), found < most)

    def body(left, kept, found):
        first = ops.min(ops.where(left, positions, k))
        pick = positions == first
        beaten = overlap(ops.minimum(first, k - 1)) > threshold
        return (ops.logical_and(left, ops.logical_not(ops.logical_or(pick, beaten))),
                ops.logical_or(kept, pick), found + 1)

    found = ops.convert_to_tensor(0, "int32")
    left = positions < ops.cast(count, "int32")
    _, kept, found = ops.while_loop(cond, body, (left, ops.zeros_like(left), found))
    _, indices = top_k(ops.where(kept, k - positions, 0), most)   # kept first, in order
    return ops.where(ops.arange(most) < found, ops.cast(indices, "int32"), 0), found


@register
class Proposal(keras.layers.Layer):
    """Region proposals from an RPN, as py-faster-rcnn's lib/rpn/proposal_layer.py.

    Inputs ``[scores, deltas, im_info]``: the RPN's probabilities (1, 2A, H,
    W) (background for the first A channels, object for the last A), its box
    deltas (1, 4A, H, W) (both channels-last with ``channels_last``), and
    ``im_info`` (1, 3): image height, width and scale. The anchors
    (``anchors``, (A, 4)) shifted by ``feat_stride`` over the map are moved
    by the deltas, clipped to the image, those narrower or lower than
    ``min_size * scale`` dropped; the best ``pre_nms_topn`` by score go
    through non-maximum suppression (a box goes when its overlap, with
    py-faster-rcnn's +1 areas, with a better kept box exceeds ``nms_thresh``)
    and the best ``post_nms_topn`` of what is left are the proposals, in
    order of score.

    py-faster-rcnn's top has as many rows as proposals were kept; here it
    always has ``rows`` rows (``post_nms_topn``, OpenCV's choice): the kept
    proposals, then rows of zeros. Output ``rois`` (rows, 5) (batch index 0,
    x1, y1, x2, y2) and, with ``with_scores``, the scores (rows, 1) too.
    A batch of one image only, as py-faster-rcnn; no gradient.
    """

    def __init__(self, anchors, feat_stride, pre_nms_topn, post_nms_topn, nms_thresh, min_size,
                 rows, with_scores=False, data_format="channels_first", **kwargs):
        super().__init__(**kwargs)
        self.anchors = [[float(v) for v in a] for a in anchors]
        self.feat_stride = int(feat_stride)
        self.pre_nms_topn = int(pre_nms_topn)
        self.post_nms_topn = int(post_nms_topn)
        self.nms_thresh = float(nms_thresh)
        self.min_size = float(min_size)
        self.rows = int(rows)
        self.with_scores = bool(with_scores)
        self.data_format = data_format

    def _all_anchors(self, height, width):
        """(H * W * A, 4) anchors in (h, w, a) order, as the layer shifts them."""
        base = np.array(self.anchors, np.float64)
        xs = np.arange(width) * self.feat_stride
        ys = np.arange(height) * self.feat_stride
        sx, sy = np.meshgrid(xs, ys)
        shifts = np.stack([sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel()], axis=1)
        return (base[None] + shifts[:, None]).reshape(-1, 4).astype(np.float32)

    def call(self, inputs):
        scores, deltas, im_info = inputs
        _check_single_image(self.name, scores)
        count = len(self.anchors)
        if self.data_format == "channels_first":
            scores = ops.transpose(scores, (0, 2, 3, 1))
            deltas = ops.transpose(deltas, (0, 2, 3, 1))
        height, width = scores.shape[1], scores.shape[2]
        scores = ops.reshape(scores[0, :, :, count:], (-1,))            # (h, w, a) order
        deltas = ops.reshape(deltas[0], (-1, 4))
        info = ops.cast(im_info[0], "float32")
        anchors = ops.convert_to_tensor(self._all_anchors(height, width))

        # bbox_transform_inv
        widths = anchors[:, 2] - anchors[:, 0] + 1.0
        heights = anchors[:, 3] - anchors[:, 1] + 1.0
        ctr_x = anchors[:, 0] + 0.5 * widths
        ctr_y = anchors[:, 1] + 0.5 * heights
        pred_x = deltas[:, 0] * widths + ctr_x
        pred_y = deltas[:, 1] * heights + ctr_y
        pred_w = ops.exp(deltas[:, 2]) * widths
        pred_h = ops.exp(deltas[:, 3]) * heights
        # clip_boxes
        x_high, y_high = info[1] - 1.0, info[0] - 1.0
        x1 = ops.maximum(ops.minimum(pred_x - 0.5 * pred_w, x_high), 0.0)
        y1 = ops.maximum(ops.minimum(pred_y - 0.5 * pred_h, y_high), 0.0)
        x2 = ops.maximum(ops.minimum(pred_x + 0.5 * pred_w, x_high), 0.0)
        y2 = ops.maximum(ops.minimum(pred_y + 0.5 * pred_h, y_high), 0.0)
        # _filter_boxes
        least = self.min_size * info[2]
        keep = ((x2 - x1 + 1.0) >= least) & ((y2 - y1 + 1.0) >= least)
        total = height * width * count
        kept = ops.sum(ops.cast(keep, "int32"))
        candidates = total if self.pre_nms_topn <= 0 else min(self.pre_nms_topn, total)
        ranked = ops.where(keep, scores, ops.full_like(scores, -np.inf))
        _, order = top_k(ranked, candidates)          # the kept boxes first, best first
        # The overlap on (y1, x1, y2 + 1, x2 + 1) is py-faster-rcnn's with +1 areas.
        corners = ops.take(ops.stack([y1, x1, y2 + 1.0, x2 + 1.0], axis=1), order, axis=0)
        most = candidates if self.post_nms_topn <= 0 else min(self.post_nms_topn, candidates)
        nms = tensorflow_kernels.non_max_suppression if on_tensorflow() else non_max_suppression
        chosen, found = nms(corners, ops.take(scores, order), ops.minimum(kept, candidates), most,
                            np.float32(self.nms_thresh))
        chosen = ops.take(order, chosen)
        real = (ops.arange(most) < found)[:, None]
        boxes = ops.take(ops.stack([x1, y1, x2, y2], axis=1), chosen, axis=0)
        rois = ops.concatenate([ops.zeros_like(boxes[:, :1]), boxes], axis=1)
        rois = ops.stop_gradient(self._rows(ops.where(real, rois, 0.0), most))
        if not self.with_scores:
            return rois
        best = ops.where(real, ops.take(scores, chosen)[:, None], 0.0)
        return [rois, ops.stop_gradient(self._rows(best, most))]

    def _rows(self, top, most):
        """``top`` (most, D) with rows of zeros to ``self.rows``."""
        if self.rows == most:
            return top
        return ops.concatenate([top, ops.zeros((self.rows - most, top.shape[1]), top.dtype)],
                               axis=0)

    def compute_output_shape(self, input_shapes):
        if self.with_scores:
            return [(self.rows, 5), (self.rows, 1)]
        return (self.rows, 5)

    def get_config(self):
        config = super().get_config()
        config.update(anchors=self.anchors, feat_stride=self.feat_stride,
                      pre_nms_topn=self.pre_nms_topn, post_nms_topn=self.post_nms_topn,
                      nms_thresh=self.nms_thresh, min_size=self.min_size, rows=self.rows,
                      with_scores=self.with_scores, data_format=self.data_format)
        return config


# -- R-FCN's position-sensitive ROI pooling ------------------------------------------


@register
class PSROIPooling(keras.layers.Layer):
    """R-FCN's position-sensitive average pooling (daijifeng001/caffe-rfcn,
    src/caffe/layers/psroi_pooling_layer.cpp ``PSROIPoolingForward_cpu``).

    Inputs ``[features, rois]``: features (N, output_dim * group_size^2, H,
    W) (channels-last with ``channels_last``), rois (R, 5). Each corner is
    rounded, the end + 1, all scaled by ``spatial_scale``; the region is at
    least 0.1 wide and high; bin (ph, pw) spans rows ``floor(ph * h / g +
    y1)`` to ``ceil((ph + 1) * h / g + y1)`` (clipped to the map) of channel
    ``(c * g + ph) * g + pw`` and is their mean (0 when empty). Output (R,
    output_dim, g, g) (or channels-last).
    """

    def __init__(self, output_dim, group_size, spatial_scale, data_format="channels_first",
                 **kwargs):
        super().__init__(**kwargs)
        self.output_dim, self.group_size = int(output_dim), int(group_size)
        self.spatial_scale = float(spatial_scale)
        self.data_format = data_format

    def _bins(self, start, end, size):
        """(g, size) weights: 1 / (bin length) on the positions each bin covers."""
        groups = self.group_size
        length = ops.maximum(end - start, 0.1)
        bin_size = divide(length, float(groups))
        index = ops.arange(groups, dtype="float32")
        low = ops.clip(ops.floor(index * bin_size + start), 0.0, float(size))
        high = ops.clip(ops.ceil((index + 1.0) * bin_size + start), 0.0, float(size))
        position = ops.arange(size, dtype="float32")
        inside = (position[None, :] >= low[:, None]) & (position[None, :] < high[:, None])
        return ops.cast(inside, "float32"), ops.maximum(high - low, 0.0)

    def _pool_one(self, features, roi):
        height, width = features.shape[2], features.shape[3]
        groups = self.group_size
        scale = self.spatial_scale
        x1, y1 = _round(roi[1]) * scale, _round(roi[2]) * scale
        x2, y2 = (_round(roi[3]) + 1.0) * scale, (_round(roi[4]) + 1.0) * scale
        rows, row_len = self._bins(y1, y2, height)          # (g, H)
        cols, col_len = self._bins(x1, x2, width)           # (g, W)
        image = ops.take(features, ops.cast(roi[0], "int32"), axis=0)
        image = ops.reshape(image, (self.output_dim, groups, groups, height, width))
        total = ops.einsum("dijhw,ih,jw->dij", image, rows, cols)
        area = row_len[:, None] * col_len[None, :]
        return ops.where(area[None] > 0, total / ops.maximum(area, 1.0)[None], 0.0)

    def call(self, inputs):
        features, rois = inputs
        features = _to_nchw(features, self.data_format)
        return _from_nchw(per_roi(self._pool_one, features, rois), self.data_format)

    def compute_output_shape(self, input_shapes):
        return _pooled_shape(input_shapes, self.output_dim, self.group_size, self.group_size,
                             self.data_format)

    def get_config(self):
        config = super().get_config()
        config.update(output_dim=self.output_dim, group_size=self.group_size,
                      spatial_scale=self.spatial_scale, data_format=self.data_format)
        return config


# -- ROIAlign (ncnn) ------------------------------------------------------------------


@register
class ROIAlign(keras.layers.Layer):
    """ROIAlign as ncnn's src/layer/roialign.cpp computes it (``version`` 0:
    ncnn's own; 1: detectron2's), on rois (R, 5) with their batch index.

    Each corner is scaled by ``spatial_scale`` (less 0.5 with ``aligned``;
    without it the region is at least 1 x 1); each of the pooled_h x
    pooled_w bins averages bilinear samples on a grid (``sampling_ratio``
    per side, or as many as the bin is long). Version 0 clips each bin to
    the map and samples from its clipped start (an empty bin is 0); version
    1 samples the whole bin, skipping samples beyond one pixel off the map
    but counting them. A sample on or past the last row (column) takes that
    row, where ncnn would read past the map.
    """

    def __init__(self, pooled_h, pooled_w, spatial_scale=1.0, sampling_ratio=0, aligned=False,
                 version=0, data_format="channels_first", **kwargs):
        super().__init__(**kwargs)
        self.pooled_h, self.pooled_w = int(pooled_h), int(pooled_w)
        self.spatial_scale = float(spatial_scale)
        self.sampling_ratio = int(sampling_ratio)
        self.aligned = bool(aligned)
        self.version = int(version)
        self.data_format = data_format

    @staticmethod
    def _weights(positions, valid, size):
        """(..., size) bilinear weights of ``positions`` (ncnn's
        bilinear_interpolate along one axis; invalid samples weigh 0)."""
        low = ops.floor(positions)
        frac_high = positions - low
        frac_low = (low + 1.0) - positions
        at_edge = low + 1.0 >= size
        frac_low = ops.where(at_edge, 1.0, frac_low)
        frac_high = ops.where(at_edge, 0.0, frac_high)
        low = ops.minimum(low, size - 1.0)
        grid = ops.arange(size, dtype="float32")
        weights = (ops.where(grid == low[..., None], frac_low[..., None], 0.0)
                   + ops.where(grid == low[..., None] + 1.0, frac_high[..., None], 0.0))
        return weights * ops.cast(valid, "float32")[..., None]

    def _axis(self, start, length, pooled, size):
        """(pooled, size) summed sample weights of each bin along one axis,
        with the number of samples of each bin, and whether it is empty.

        A bin's samples are ``grid`` points ``low + (s + 0.5) * bin / grid``;
        the ones weighed are a fixed number per bin (``_sample_steps``), so
        the shapes do not depend on the regions."""
        bin_size = divide(length, float(pooled))
        index = ops.arange(pooled, dtype="float32")
        if self.version == 0:
            low = ops.clip(start + index * bin_size, 0.0, float(size))
            high = ops.clip(start + (index + 1.0) * bin_size, 0.0, float(size))
            grid = (ops.zeros_like(low) + float(self.sampling_ratio) if self.sampling_ratio > 0
                    else ops.ceil(high - low))
            empty = high <= low
        else:
            low = start + index * bin_size
            per_bin = (float(self.sampling_ratio) if self.sampling_ratio > 0
                       else ops.ceil(divide(length, float(pooled))))
            grid = ops.zeros_like(low) + per_bin
            empty = ops.zeros_like(low, dtype="bool")
        grid = ops.maximum(grid, 0.0)
        step = self._sample_steps(low, bin_size, grid, size)                 # (pooled, G)
        positions = low[:, None] + ((step + 0.5) * bin_size) / grid[:, None]
        valid = step < grid[:, None]
        if self.version == 1:
            valid = valid & (positions >= -1.0) & (positions <= float(size))
            positions = ops.maximum(positions, 0.0)
        positions = ops.where(valid, positions, 0.0)
        weights = ops.sum(self._weights(positions, valid, float(size)), axis=1)
        return weights, grid, empty

    def _sample_steps(self, low, bin_size, grid, size):
        """(pooled, G) sample numbers ``s`` of each bin to weigh, as floats:
        every sample a bin can have that is not skipped.

        With ``sampling_ratio`` set, its G samples. Version 0 clips a bin to
        the map, so it has at most ``size`` samples (``ceil`` of its length).
        Version 1's bins are not clipped: of their ``ceil(bin)`` samples, at
        least half a pixel apart where there are more than one, at most
        ``2 size + 3`` lie from one pixel before the map to its end (the
        others are skipped), counted from the first at or after -1 (found
        here a sample or two early: the rest are checked one by one)."""
        if self.sampling_ratio > 0:
            count, first = self.sampling_ratio, ops.zeros_like(low)
        elif self.version == 0:
            count, first = size, ops.zeros_like(low)
        else:
            count = 2 * size + 6
            spacing = bin_size / ops.maximum(grid, 1.0)
            ahead = ops.where(spacing > 0, (-1.0 - low) / ops.where(spacing > 0, spacing, 1.0),
                              0.0)
            first = ops.minimum(ops.maximum(ops.floor(ahead - 0.5) - 1.0, 0.0), grid)
        return first[:, None] + ops.arange(count, dtype="float32")[None, :]

    def _pool_one(self, features, roi):
        height, width = features.shape[2], features.shape[3]
        corners = roi[1:] * self.spatial_scale
        if self.aligned:
            corners = corners - 0.5
        roi_w, roi_h = corners[2] - corners[0], corners[3] - corners[1]
        if not self.aligned:
            roi_w, roi_h = ops.maximum(roi_w, 1.0), ops.maximum(roi_h, 1.0)
        rows, grid_h, empty_h = self._axis(corners[1], roi_h, self.pooled_h, height)
        cols, grid_w, empty_w = self._axis(corners[0], roi_w, self.pooled_w, width)
        image = ops.take(features, ops.cast(roi[0], "int32"), axis=0)
        total = ops.einsum("chw,ph,qw->cpq", image, rows, cols)
        count = grid_h[:, None] * grid_w[None, :]
        if self.version == 1:
            count = ops.maximum(count, 1.0)
        empty = empty_h[:, None] | empty_w[None, :]
        return ops.where(empty[None], 0.0, total / ops.maximum(count, 1.0)[None])

    def call(self, inputs):
        features, rois = inputs
        features = _to_nchw(features, self.data_format)
        return _from_nchw(per_roi(self._pool_one, features, rois), self.data_format)

    def compute_output_shape(self, input_shapes):
        features = input_shapes[0]
        channels = features[-1] if self.data_format == "channels_last" else features[1]
        return _pooled_shape(input_shapes, channels, self.pooled_h, self.pooled_w,
                             self.data_format)

    def get_config(self):
        config = super().get_config()
        config.update(pooled_h=self.pooled_h, pooled_w=self.pooled_w,
                      spatial_scale=self.spatial_scale, sampling_ratio=self.sampling_ratio,
                      aligned=self.aligned, version=self.version, data_format=self.data_format)
        return config

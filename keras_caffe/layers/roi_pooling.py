"""Fast/Faster R-CNN's ROIPooling (rbgirshick/caffe-fast-rcnn,
src/caffe/layers/roi_pooling_layer.cpp), as its ``Forward_cpu`` computes it."""

import keras
from keras import ops

from keras_caffe.layers.base import divide, register
from keras_caffe.layers.regions import per_roi


def _round(x):
    """C's ``round``: halves away from zero."""
    return ops.sign(x) * ops.floor(ops.abs(x) + 0.5)


@register
class ROIPooling(keras.layers.Layer):
    """Max pooling of each region of interest into ``pooled_h`` x ``pooled_w`` bins.

    Inputs ``[features, rois]``: features (N, C, H, W) in Caffe's order (or
    (N, H, W, C) with ``channels_last``), rois (R, 5) rows
    ``(batch index, x1, y1, x2, y2)`` in image coordinates. Each corner is
    scaled by ``spatial_scale`` and rounded; the region is at least 1 x 1;
    bin ``ph`` spans rows ``floor(ph * h / pooled_h)`` to
    ``ceil((ph + 1) * h / pooled_h)`` from its start, clipped to the map; an
    empty bin is 0. Output (R, C, pooled_h, pooled_w) (or channels-last).
    """

    def __init__(self, pooled_h, pooled_w, spatial_scale=1.0, data_format="channels_first",
                 **kwargs):
        super().__init__(**kwargs)
        self.pooled_h, self.pooled_w = int(pooled_h), int(pooled_w)
        self.spatial_scale = float(spatial_scale)
        self.data_format = data_format

    def _bins(self, start, end, pooled, size):
        """(pooled, size) masks: which rows (or columns) each bin covers."""
        length = ops.maximum(end - start + 1.0, 1.0)
        bin_size = divide(length, float(pooled))
        index = ops.arange(pooled, dtype="float32")
        low = ops.clip(ops.floor(index * bin_size) + start, 0.0, float(size))
        high = ops.clip(ops.ceil((index + 1.0) * bin_size) + start, 0.0, float(size))
        position = ops.arange(size, dtype="float32")
        return ((position[None, :] >= low[:, None]) & (position[None, :] < high[:, None]))

    def _pool_one(self, features, roi):
        """(C, pooled_h, pooled_w) of one region; ``features`` is (N, C, H, W)."""
        height, width = features.shape[2], features.shape[3]
        corners = _round(roi[1:] * self.spatial_scale)
        rows = self._bins(corners[1], corners[3], self.pooled_h, height)   # (ph, H)
        cols = self._bins(corners[0], corners[2], self.pooled_w, width)    # (pw, W)
        image = ops.take(features, ops.cast(roi[0], "int32"), axis=0)     # (C, H, W)
        lowest = ops.convert_to_tensor(-3.0e38, image.dtype)
        # Max over the columns of each column bin, then over the rows of each row bin.
        by_col = ops.max(ops.where(cols[None, None], image[:, :, None, :], lowest), axis=-1)
        pooled = ops.max(ops.where(rows[None, :, :, None], by_col[:, None], lowest), axis=2)
        empty = ops.logical_not(ops.any(rows, axis=1)[:, None] & ops.any(cols, axis=1)[None, :])
        return ops.where(empty[None], ops.zeros_like(pooled), pooled)

    def call(self, inputs):
        features, rois = inputs
        if self.data_format == "channels_last":
            features = ops.transpose(features, (0, 3, 1, 2))
        out = per_roi(self._pool_one, features, rois)
        if self.data_format == "channels_last":
            out = ops.transpose(out, (0, 2, 3, 1))
        return out

    def compute_output_shape(self, input_shapes):
        features = input_shapes[0]
        channels = features[-1] if self.data_format == "channels_last" else features[1]
        if self.data_format == "channels_last":
            return (None, self.pooled_h, self.pooled_w, channels)
        return (None, channels, self.pooled_h, self.pooled_w)

    def get_config(self):
        config = super().get_config()
        config.update(pooled_h=self.pooled_h, pooled_w=self.pooled_w,
                      spatial_scale=self.spatial_scale, data_format=self.data_format)
        return config

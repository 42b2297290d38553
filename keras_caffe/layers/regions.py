"""Regions of interest one at a time: what ROIPooling, PSROIPooling and
ROIAlign share.

``per_roi`` maps a function over the rows of an (R, 5) region tensor: on
TensorFlow ``tf.map_fn`` (``tensorflow_kernels.map_rois``, as before the
other backends), elsewhere ``keras.ops.map`` (JAX's ``lax.map``, a loop on
PyTorch); the function itself is the same ``keras.ops`` formula on each.
"""

from keras import ops

from keras_caffe.layers.base import on_tensorflow, tensorflow_kernels


def per_roi(fn, features, rois):
    """``[fn(features, roi) for roi in rois]`` stacked, ``rois`` read as (R, 5)
    rows in ``features``' dtype. ``fn`` must give the same shape for every
    region (its shapes from ``features``' static shape)."""
    rois = ops.cast(ops.reshape(rois, (-1, 5)), features.dtype)
    if on_tensorflow():
        return tensorflow_kernels.map_rois(lambda roi: fn(features, roi), rois, features.dtype)
    if rois.shape[0] == 0:  # PyTorch's loop stacks nothing: the shape from one region
        return ops.expand_dims(fn(features, ops.zeros((5,), features.dtype)), 0)[:0]
    return ops.map(lambda roi: fn(features, roi), rois)


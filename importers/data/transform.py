"""Caffe's DataTransformer (src/caffe/data_transformer.cpp) in TensorFlow ops.

For every output element, in float32 as Caffe computes it::

    out[c, h, w] = (pixel[c, h + h_off, w_off + w'] - mean[c, h + h_off, w_off + w']) * scale

with ``w' = crop_w - 1 - w`` when the record is mirrored, ``mean`` the
``mean_file`` image (cropped at the same offsets) or the ``mean_value`` of
channel ``c`` (one value serves every channel), and no subtraction without
either. The mean is subtracted first, then the difference is scaled: the
golden Caffe batches (``../shared/golden/lmdb``) agree bit for bit.

``crop_size``: random offsets ``floor(u * (H - crop + 1))`` in TRAIN, the
centre ``(H - crop) // 2`` in TEST. ``mirror``: a coin flip per record, in
TRAIN only. (Caffe's DataTransformer also flips TEST records at random when
``mirror: true``; keras-caffe keeps TEST batches deterministic and warns once.)
The random numbers ``u`` come from the pipeline: stateless, one triple
``(u_h, u_w, u_mirror)`` per record.

The deprecated copies of these fields in ``data_param`` and
``image_data_param`` apply when ``transform_param`` lacks them, as Caffe's
``UpgradeNetDataTransformation`` moves them there.
"""

import warnings

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError, ProtoParseError, WeightsError
from keras_caffe.importers.formats.protofile import read_binary
from keras_caffe.importers.data.records import find_source
from keras_caffe.importers.net.weights import blob_shape, blob_values
from keras_caffe.proto import caffe_pb2

_FIELDS = ("scale", "mean_file", "crop_size", "mirror")
_warned_mirror = set()


def transform_parameters(layer):
    """The layer's ``TransformationParameter``, with deprecated fields moved in."""
    param = caffe_pb2.TransformationParameter()
    param.CopyFrom(layer.transform_param)
    for legacy in (layer.data_param, layer.image_data_param):
        for field in _FIELDS:
            if legacy.HasField(field) and not param.HasField(field):
                setattr(param, field, getattr(legacy, field))
    return param


def read_mean_file(layer, path, net_source):
    """A ``mean_file`` (BlobProto) as a float32 (C, H, W) array."""
    found = find_source(layer, path, net_source, "mean_file")
    try:
        blob = read_binary(found, caffe_pb2.BlobProto)
    except (OSError, ProtoParseError) as err:
        raise LayerError(layer.name, f"cannot read mean_file {found!r}: {err}") from None
    shape = blob_shape(blob)
    try:
        values = blob_values(blob, found)
    except WeightsError as err:
        raise LayerError(layer.name, f"cannot read mean_file {err}") from None
    if len(shape) == 4 and shape[0] == 1:
        shape = shape[1:]
    if len(shape) != 3 or values.size != int(np.prod(shape)):
        raise LayerError(layer.name, f"mean_file {found!r} holds {values.size} values of shape "
                                     f"{shape}; a 1xCxHxW mean image is needed")
    return values.reshape(shape), found


class Transformer:
    """One layer's DataTransformer: ``bind`` it to the records' (C, H, W), then
    ``batch`` transforms (B, C, H, W) records and ``image`` one (H, W, C) image."""

    def __init__(self, layer, phase, net_source):
        param = transform_parameters(layer)
        self.layer = layer.name
        self.scale = float(np.float32(param.scale))
        self.crop = int(param.crop_size)
        self.train = phase == "TRAIN"
        self.mirror = bool(param.mirror) and self.train
        if param.mirror and not self.train and layer.name not in _warned_mirror:
            _warned_mirror.add(layer.name)
            warnings.warn(f"layer {layer.name!r}: mirror is applied in TRAIN only; TEST "
                          "batches are not flipped", stacklevel=5)
        if param.HasField("mean_file") and len(param.mean_value):
            raise LayerError(layer.name, "cannot specify mean_file and mean_value at the same time")
        self.mean_file = self.mean_path = None
        if param.HasField("mean_file"):
            self.mean_file, self.mean_path = read_mean_file(layer, param.mean_file, net_source)
        self.mean_values = np.asarray(param.mean_value, np.float32)
        self.shape = self.bind_shape = None  # records' (C, H, W) and output (C, h, w)

    @property
    def random(self):
        """Whether records need random numbers (random crop or mirror)."""
        return self.mirror or (self.crop > 0 and self.train)

    def bind(self, channels, height, width):
        """Check the records' (C, H, W) against the mean and crop; the output (C, h, w)."""
        if self.mean_file is not None and self.mean_file.shape != (channels, height, width):
            raise LayerError(self.layer, f"mean_file {self.mean_path!r} has shape "
                                         f"{_dims(self.mean_file.shape)} but the data is "
                                         f"{_dims((channels, height, width))}")
        if len(self.mean_values) not in (0, 1, channels):
            raise LayerError(self.layer, f"{len(self.mean_values)} mean_value(s) for "
                                         f"{channels} channel(s): give 1 or {channels}")
        if self.crop > height or self.crop > width:
            raise LayerError(self.layer, f"crop_size {self.crop} is larger than the "
                                         f"{height}x{width} image")
        self.shape = (channels, height, width)
        side = self.crop or None
        self.bind_shape = (channels, side or height, side or width)
        return self.bind_shape

    def offsets(self, rand, height, width):
        """Crop offsets (h_off, w_off) and the mirror flag from ``rand[..., 0:3]``."""
        crop = self.crop
        if crop and self.train:
            h_off = tf.minimum(_draw(rand[..., 0], height - crop + 1), height - crop)
            w_off = tf.minimum(_draw(rand[..., 1], width - crop + 1), width - crop)
        elif crop:
            h_off = tf.zeros_like(rand[..., 0], tf.int32) + (height - crop) // 2
            w_off = tf.zeros_like(rand[..., 0], tf.int32) + (width - crop) // 2
        else:
            h_off = w_off = tf.zeros_like(rand[..., 0], tf.int32)
        mirror = rand[..., 2] < 0.5 if self.mirror else tf.zeros_like(rand[..., 0], tf.bool)
        return h_off, w_off, mirror

    def batch(self, records, rand):
        """Transform float32 records (B, C, H, W) -> (B, C, h, w); ``rand`` is (B, 3)."""
        channels, height, width = self.shape
        x = self._subtract(records)
        if self.crop and not self.train:
            top, left = (height - self.crop) // 2, (width - self.crop) // 2
            x = x[:, :, top:top + self.crop, left:left + self.crop]
        if self.random:
            h_off, w_off, mirror = self.offsets(rand, height, width)
            out_h, out_w = (self.crop, self.crop) if self.crop else (height, width)
            if self.crop and self.train:
                rows = h_off[:, None] + tf.range(out_h)[None, :]
                x = tf.gather(x, rows, axis=2, batch_dims=1)
            else:
                w_off = tf.zeros_like(w_off)
            step = tf.range(out_w)[None, :]
            cols = w_off[:, None] + tf.where(mirror[:, None], out_w - 1 - step, step)
            x = tf.gather(x, cols, axis=3, batch_dims=1)
        return self._scale(x)

    def image(self, image, rand):
        """Transform one uint8 image (H, W, C) -> float32 (h, w, C); ``rand`` is (3,).

        The image may differ in size from the bound shape when cropping without a
        mean_file (Caffe crops each record at its own size); the caller checks sizes.
        """
        x = tf.cast(image, tf.float32)
        if self.mean_file is not None:
            x = x - tf.constant(np.transpose(self.mean_file, (1, 2, 0)))
        elif len(self.mean_values):
            x = x - tf.constant(self.mean_values)
        if self.crop:
            shape = tf.shape(x)
            h_off, w_off, _ = self.offsets(rand, shape[0], shape[1])
            x = tf.slice(x, [h_off, w_off, 0], [self.crop, self.crop, -1])
        if self.mirror:
            x = tf.cond(rand[2] < 0.5, lambda: tf.reverse(x, [1]), lambda: x)
        return self._scale(x)

    def _subtract(self, x):
        if self.mean_file is not None:
            return x - tf.constant(self.mean_file)
        if len(self.mean_values):
            values = np.broadcast_to(self.mean_values, (self.shape[0],)).astype(np.float32)
            return x - tf.constant(values.reshape((-1, 1, 1)))
        return x

    def _scale(self, x):
        return x if self.scale == 1.0 else x * tf.constant(self.scale, tf.float32)


def _draw(u, count):
    """An integer in [0, count) from a uniform [0, 1) number (Caffe's ``Rand(count)``)."""
    return tf.cast(tf.floor(u * tf.cast(count, tf.float32)), tf.int32)


def _dims(shape):
    return "x".join(str(d) for d in shape)

"""Encoded images in a pipeline: reading, decoding and checking them.

Shared by the Data layer (encoded Datums) and ImageData (image files). Each
batch is decoded and transformed image by image (``tf.map_fn`` inside the
pipeline's parallel batch map), after one check per batch that every record
is a JPEG, PNG, GIF or BMP and, after decoding, one that every image fits the
first record's shape (the same size without crop or with a mean_file; at
least the crop otherwise, as Caffe crops each record at its own size). A
failed check raises the LayerError naming the record through
``data_errors.fail``.
"""

import os

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.data import read_errors as data_errors
from keras_caffe.importers.data import images
def check(ok, report, args):
    """An op that passes when ``ok``, else raises ``report(*args)`` (a LayerError)
    from the pipeline; ``args`` are tensors handed to ``report`` as numpy values."""
    def raise_error(*values):
        data_errors.fail(report(*values))
        return np.bool_(False)

    return tf.cond(ok, lambda: tf.constant(True),
                   lambda: tf.numpy_function(raise_error, args, tf.bool))


def text(value):
    """A record name (bytes from a tensor, or str) as text."""
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class ImageDecoder:
    """One layer's encoded images -> transformed float32 (h, w, C), in OpenCV's channel
    order (``mode``: color, gray or native), resized when ``resize`` is (h, w).
    ``what`` names a record in messages ("image", "LMDB '...' record")."""

    def __init__(self, layer, transformer, mode, resize, what):
        self.layer, self.transformer, self.mode, self.resize, self.what = (
            layer.name, transformer, mode, resize, what)
        self.source_shape = None  # (H, W, C) of the first record, set by first()

    def decode(self, contents):
        image = images.decode(contents, self.mode)
        if self.resize:
            image = images.resize_linear(image, *self.resize)
        return image

    def first(self, contents, name):
        """Decode the first record eagerly; bind the transformer to its shape."""
        try:
            ok = bool(images.known_format(contents))
            image = self.decode(tf.constant(contents)) if ok else None
        except tf.errors.OpError as err:
            ok, detail = False, err.message
        else:
            detail = "not a JPEG, PNG, GIF or BMP image"
        if not ok:
            raise LayerError(self.layer, f"cannot decode {self.what} {name!r}: {detail}")
        height, width, channels = image.shape
        self.source_shape = (height, width, channels)
        return self.transformer.bind(channels, height, width)

    def batch(self, contents, names, rand):
        """Decode and transform a batch: (B,) encoded images -> float32 (B, h, w, C).

        Unknown formats and images of the wrong size raise a LayerError naming the
        record (``names``), checked once per batch.
        """
        def unknown(names, ok):
            name = text(names[int(np.argmin(ok))])
            return LayerError(self.layer, f"{self.what} {name!r} is not a JPEG, PNG, GIF or BMP "
                                          "image")

        known = images.known_format(contents)
        with tf.control_dependencies([check(tf.reduce_all(known), unknown, [names, known])]):
            contents = tf.identity(contents)
        channels, height, width = self.transformer.bind_shape
        out = tf.TensorSpec((height, width, channels), tf.float32)
        batch, shapes = tf.map_fn(lambda item: self._one(*item), (contents, rand),
                                  fn_output_signature=(out, tf.TensorSpec([3], tf.int64)))
        ok = self._shape_ok(shapes)
        with tf.control_dependencies([check(tf.reduce_all(ok), self._wrong_shape,
                                              [names, shapes, ok])]):
            return tf.identity(batch)

    def _one(self, contents, rand):
        image = self.decode(contents)
        shape = tf.shape(image, out_type=tf.int64)
        channels, height, width = self.transformer.bind_shape
        transformed = tf.cond(self._shape_ok(shape[None])[0],
                              lambda: self.transformer.image(image, rand),
                              lambda: tf.zeros((height, width, channels)))
        return transformed, shape

    def _fixed(self):
        """Whether every image must have the first one's size (no crop, or a mean_file)."""
        return not self.transformer.crop or self.transformer.mean_file is not None

    def _shape_ok(self, shapes):
        """Per image of (B, 3) HWC shapes: usable with the first image's transform."""
        height, width, channels = self.source_shape
        crop = self.transformer.crop
        ok = tf.equal(shapes[:, 2], channels)
        if self._fixed():
            return ok & tf.equal(shapes[:, 0], height) & tf.equal(shapes[:, 1], width)
        return ok & (shapes[:, 0] >= crop) & (shapes[:, 1] >= crop)

    def _wrong_shape(self, names, shapes, ok):
        height, width, channels = self.source_shape
        crop = self.transformer.crop
        i = int(np.argmin(ok))
        got = "x".join(str(int(d)) for d in shapes[i])
        need = (f"{height}x{width}x{channels} like the first record" if self._fixed()
                else f"at least {crop}x{crop} with {channels} channel(s) for crop_size {crop}")
        return LayerError(self.layer, f"{self.what} {text(names[i])!r} decodes to {got} "
                                      f"(HxWxC); it must be {need}")


def image_batch(ctx, decoder, contents, names, rand):
    """Decode and transform a batch of images into the model's layout."""
    batch = decoder.batch(contents, names, rand)
    return batch if ctx.data_format == "channels_last" else tf.transpose(batch, [0, 3, 1, 2])


def image_base(layer, first, listing, net_source):
    """The directory relative image paths are read from: the current directory
    (Caffe's), else the prototxt's, else the list file's, whichever holds the first."""
    if os.path.isabs(first):
        return ""
    bases = [os.getcwd()]
    if net_source is not None and os.path.isfile(str(net_source)):
        bases.append(os.path.dirname(os.path.abspath(net_source)))
    bases.append(os.path.dirname(listing))
    for base in bases:
        if os.path.isfile(os.path.join(base, first)):
            return base
    raise LayerError(layer.name, f"image {first!r} (the first listed in {listing!r}) not found "
                                 f"in {', '.join(repr(b) for b in bases)}")


def read_image_file(layer, path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as err:
        raise LayerError(layer.name, f"cannot read image {text(path)!r}: "
                                     f"{err.strerror or err}") from None


def files_reader(layer):
    """Read a batch of image files in ``tf.numpy_function``; errors go through ``fail``."""
    def read(paths):
        out = np.empty(len(paths), object)
        try:
            for i, path in enumerate(paths):
                out[i] = read_image_file(layer, path)
        except LayerError as err:
            data_errors.fail(err)
        return out

    return read

"""DenseImageData: SegNet's images with per-pixel label images (alexgkendall/
caffe-segnet: src/caffe/layers/dense_image_data_layer.cpp, ``ReadImageToCVMat``
in src/caffe/util/io.cpp, ``DataTransformer::Transform(cv::Mat, Blob,
preserve_pixel_vals)`` in src/caffe/data_transformer.cpp).

Per record, as the fork's ``InternalThreadEntry``: the image is read in
color (BGR) or gray (``is_color``) and the label image in gray, both resized
to ``new_height`` x ``new_width`` when set (the image with OpenCV's
INTER_LINEAR, the label with INTER_NEAREST: ``ReadImageToCVMat(..., false,
true)``); with ``mirror`` both are flipped left-right on one coin flip; with
``crop_height`` / ``crop_width`` both are cut at one random offset
``floor(u * (H - crop + 1))``; then the image is transformed
(``transform_param`` mean_file / mean_value, scale) and the label keeps its
pixel values (no mean, no scale). The fork draws the crop and the mirror in
every phase, and so does this (from the pipeline's seed). Tops: data
(N, C, h, w) and label (N, 1, h, w).
"""

import os

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.data import images
from keras_caffe.importers.data import records
from keras_caffe.importers.layer_types._data import DataLayer, find_source
from keras_caffe.importers.layer_types.base import SEGNET, layer_type
from keras_caffe.importers.data.pipeline_core import (
    RecordOrder, epoch_permutation, positions, record_randoms)
from keras_caffe.importers.data.pipeline_images import check, files_reader, image_base, text
from keras_caffe.importers.data.pipeline_layers import (
    Spec, batch_size, check_resized, check_tops, rand_skip_start)
from keras_caffe.importers.data.transform import Transformer, transform_parameters


def read_pair_list(layer, path):
    """The list file's ``(images, label images, line numbers)``: one
    ``image label_image`` pair per line (the fork reads them with ``>>``, so
    paths hold no spaces); blank lines are skipped."""
    names, labels, numbers = [], [], []
    for number, line in records.list_lines(layer, path):
        fields = line.split()
        if len(fields) != 2:
            raise LayerError(layer.name, f"{path}:{number}: expected 'image_path "
                                         f"label_image_path', got {line!r}")
        names.append(fields[0])
        labels.append(fields[1])
        numbers.append(number)
    if not names:
        raise LayerError(layer.name, f"DenseImageData source {path!r} lists no images")
    return names, labels, numbers


def check_parameters(layer):
    """The fork's checks (``DataLayerSetUp``) and the transformations it cannot do."""
    p, t = layer.dense_image_data_param, transform_parameters(layer)
    for a, b in (("new_height", "new_width"), ("crop_height", "crop_width")):
        if (getattr(p, a) > 0) != (getattr(p, b) > 0):
            raise LayerError(layer.name, f"(DenseImageData) {a} and {b} must be set together "
                                         f"(got {getattr(p, a)} and {getattr(p, b)})")
    for field in ("crop_size", "mirror"):
        if getattr(t, field):
            raise LayerError(layer.name, f"(DenseImageData) transform_param {field} would "
                                         "transform the image but not its label (the fork "
                                         "refuses it); use dense_image_data_param crop_height/"
                                         "crop_width and mirror")
    if p.new_height and p.crop_height and (p.crop_height > p.new_height
                                           or p.crop_width > p.new_width):
        raise LayerError(layer.name, f"(DenseImageData) crop {p.crop_height}x{p.crop_width} is "
                                     f"larger than the {p.new_height}x{p.new_width} images")


def resize_nearest(image, height, width):
    """``cv::resize(image, Size(width, height), INTER_NEAREST)`` of (H, W, C):
    source index ``min(floor(d * (1 / (dst / src))), src - 1)`` (double), per axis."""
    shape = tf.shape(image)

    def taps(src, dst):
        scale = 1.0 / (tf.cast(dst, tf.float64) / tf.cast(src, tf.float64))
        index = tf.cast(tf.floor(tf.cast(tf.range(dst), tf.float64) * scale), tf.int32)
        return tf.minimum(index, src - 1)

    rows = tf.gather(image, taps(shape[0], height), axis=0)
    return tf.gather(rows, taps(shape[1], width), axis=1)


@layer_type("DenseImageData")
class DenseImageData(DataLayer):
    """DenseImageData (SegNet): a list file's ``image label_image`` pairs.

    Shapes: data (N, 3 with ``is_color`` else 1, h, w), label (N, 1, h, w);
    h x w is crop_height x crop_width, else new_height x new_width, else the
    first listed image's size (read from the file). See the module docstring
    for the pipeline. No example: the layer reads image files.
    """

    origin = SEGNET
    reads_source = True

    def source_shapes(self, layer, net_source):
        p = layer.dense_image_data_param
        check_parameters(layer)
        channels = 3 if p.is_color else 1
        if p.crop_height:
            height, width = p.crop_height, p.crop_width
        elif p.new_height:
            height, width = p.new_height, p.new_width
        else:
            listing = find_source(layer, p.source, net_source)
            first = read_pair_list(layer, listing)[0][0]
            path = os.path.join(image_base(layer, p.root_folder + first, listing, net_source),
                                p.root_folder + first)
            image = tf.io.decode_image(tf.io.read_file(path), expand_animations=False)
            height, width = int(image.shape[0]), int(image.shape[1])
        return [(p.batch_size, channels, height, width), (p.batch_size, 1, height, width)]

    def pipeline(self, layer, ctx):
        p = layer.dense_image_data_param
        check_tops(layer, 2, 2)
        check_parameters(layer)
        batch = batch_size(layer, p.batch_size)
        if p.new_height:
            check_resized(layer, ctx, batch, {
                layer.top[0]: (3 if p.is_color else 1, p.new_height, p.new_width),
                layer.top[1]: (1, p.new_height, p.new_width)})
        listing = records.find_source(layer, p.source, ctx.net_source)
        names, label_names, numbers = read_pair_list(layer, listing)
        base = image_base(layer, p.root_folder + names[0], listing, ctx.net_source)
        paths, label_paths = ([os.path.join(base, p.root_folder + n) for n in column]
                              for column in (names, label_names))
        _check_files(layer, listing, numbers, paths, label_paths)
        mode = "color" if p.is_color else "gray"
        resize = (p.new_height, p.new_width) if p.new_height else None
        crop = (p.crop_height, p.crop_width) if p.crop_height else None
        first = _Record(mode, resize, crop).read(layer, paths[0], label_paths[0])
        height, width = crop or first[:2]
        channels = first[2]
        transformer = Transformer(layer, ctx.phase, ctx.net_source)
        transformer.bind(channels, height, width)
        record = _Record(mode, resize, crop, bool(p.mirror), transformer, first)
        order = _order(layer, ctx, len(paths))
        tables = [tf.constant(np.asarray(column, object)) for column in (paths, label_paths)]
        reader = files_reader(layer)
        seed = ctx.layer_seed(layer, "transform")

        def load(g):
            indices = order(positions(g, batch))
            files = [tf.gather(table, indices) for table in tables]
            contents = [tf.ensure_shape(tf.numpy_function(reader, [f], tf.string), [batch])
                        for f in files]
            data, label = record.batch(layer, *contents, *files,
                                       record_randoms(seed, g, batch))
            return {layer.top[0]: _layout(ctx, data), layer.top[1]: _layout(ctx, label)}

        shapes = {layer.top[0]: ctx.model_shape((batch, channels, height, width)),
                  layer.top[1]: ctx.model_shape((batch, 1, height, width))}
        return Spec(batch, len(paths), shapes, load)


def _layout(ctx, batch):
    """An (N, H, W, C) batch in the model's layout."""
    return batch if ctx.data_format == "channels_last" else tf.transpose(batch, [0, 3, 1, 2])


def _check_files(layer, listing, numbers, paths, label_paths):
    """Every listed file exists (the fork fails on the first it cannot load)."""
    for number, path, label in zip(numbers, paths, label_paths):
        for what, name in (("image", path), ("label image", label)):
            if not os.path.isfile(name):
                raise LayerError(layer.name, f"{listing}:{number}: {what} {name!r} not found")


def _order(layer, ctx, count):
    """``rand_skip`` (TRAIN) into the first epoch; with ``shuffle`` a new
    permutation every epoch (the fork shuffles at setup and at every wrap)."""
    p = layer.dense_image_data_param
    skip = rand_skip_start(ctx, layer, p.rand_skip, count, False)
    shuffle = epoch_permutation(ctx.layer_seed(layer, "shuffle"), count) if p.shuffle else None
    return RecordOrder(count, skip, shuffle)


class _Record:
    """One image and its label image: decode, resize, mirror, crop, transform."""

    def __init__(self, mode, resize, crop=None, mirror=False, transformer=None, first=None):
        self.mode, self.resize, self.crop, self.mirror = mode, resize, crop, mirror
        self.transformer, self.first = transformer, first

    def decode(self, contents, label_contents):
        image = images.decode(contents, self.mode)
        label = images.decode(label_contents, "gray")
        if self.resize:
            image = images.resize_linear(image, *self.resize)
            label = resize_nearest(label, *self.resize)
        return image, label

    def read(self, layer, path, label_path):
        """The first record's (H, W, C), read eagerly; its errors name the files."""
        decoded = []
        for what, name in (("image", path), ("label image", label_path)):
            with open(name, "rb") as f:
                contents = f.read()
            if not bool(images.known_format(contents)):
                raise LayerError(layer.name, f"cannot decode {what} {name!r}: not a JPEG, "
                                             "PNG, GIF or BMP image")
            decoded.append(tf.constant(contents))
        image, label = self.decode(*decoded)
        if image.shape[:2] != label.shape[:2]:
            raise LayerError(layer.name, f"label image {label_path!r} is "
                                         f"{label.shape[0]}x{label.shape[1]} but image {path!r} "
                                         f"is {image.shape[0]}x{image.shape[1]}; they must match")
        if self.crop and (image.shape[0] < self.crop[0] or image.shape[1] < self.crop[1]):
            raise LayerError(layer.name, f"crop {self.crop[0]}x{self.crop[1]} is larger than "
                                         f"image {path!r} ({image.shape[0]}x{image.shape[1]})")
        return tuple(int(d) for d in image.shape)

    def batch(self, layer, contents, label_contents, names, label_names, rand):
        """(data (B, h, w, C), label (B, h, w, 1)), float32, checked per batch."""
        known = images.known_format(contents) & images.known_format(label_contents)

        def unknown(names, label_names, image_ok, label_ok):
            i = int(np.argmin(image_ok & label_ok))
            what, name = (("image", names[i]) if not image_ok[i] else
                          ("label image", label_names[i]))
            return LayerError(layer.name, f"{what} {text(name)!r} is not a JPEG, PNG, GIF or "
                                          "BMP image")

        ok_formats = check(tf.reduce_all(known), unknown,
                           [names, label_names, images.known_format(contents),
                            images.known_format(label_contents)])
        with tf.control_dependencies([ok_formats]):
            contents = tf.identity(contents)
        channels, height, width = self.transformer.bind_shape
        specs = (tf.TensorSpec((height, width, channels), tf.float32),
                 tf.TensorSpec((height, width, 1), tf.float32), tf.TensorSpec([4], tf.int64))
        data, label, sizes = tf.map_fn(lambda item: self._one(*item),
                                       (contents, label_contents, rand), fn_output_signature=specs)
        ok = self._sizes_ok(sizes)
        report = self._wrong_size(layer)
        with tf.control_dependencies([check(tf.reduce_all(ok), report,
                                            [names, label_names, sizes, ok])]):
            return tf.identity(data), tf.identity(label)

    def _sizes_ok(self, sizes):
        """Per record of (B, 4) [H, W, C, label H == H and label W == W]."""
        height, width, channels = self.first
        ok = tf.equal(sizes[:, 2], channels) & tf.equal(sizes[:, 3], 1)
        if self.crop:
            return ok & (sizes[:, 0] >= self.crop[0]) & (sizes[:, 1] >= self.crop[1])
        return ok & tf.equal(sizes[:, 0], height) & tf.equal(sizes[:, 1], width)

    def _wrong_size(self, layer):
        height, width, channels = self.first

        def report(names, label_names, sizes, ok):
            i = int(np.argmin(ok))
            h, w, c, same = (int(d) for d in sizes[i])
            if not same:
                return LayerError(layer.name, f"label image {text(label_names[i])!r} differs "
                                              f"in size from image {text(names[i])!r} ({h}x{w})")
            need = (f"at least {self.crop[0]}x{self.crop[1]} with {channels} channel(s) for "
                    "the crop" if self.crop else
                    f"{height}x{width}x{channels} like the first record")
            return LayerError(layer.name, f"image {text(names[i])!r} decodes to {h}x{w}x{c} "
                                          f"(HxWxC); it must be {need}")

        return report

    def _one(self, contents, label_contents, rand):
        image, label = self.decode(contents, label_contents)
        shape, label_shape = tf.shape(image, tf.int64), tf.shape(label, tf.int64)
        same = tf.reduce_all(tf.equal(shape[:2], label_shape[:2]))
        sizes = tf.concat([shape, tf.cast(same, tf.int64)[None]], 0)
        ok = self._sizes_ok(sizes[None])[0]
        channels, height, width = self.transformer.bind_shape
        zeros = (tf.zeros((height, width, channels)), tf.zeros((height, width, 1)))
        data, label = tf.cond(ok, lambda: self._transform(image, label, rand), lambda: zeros)
        return data, label, sizes

    def _transform(self, image, label, rand):
        if self.mirror:  # one coin flip for both (the fork's caffe_rng_rand() % 2)
            flip = rand[2] < 0.5
            image = tf.cond(flip, lambda: tf.reverse(image, [1]), lambda: image)
            label = tf.cond(flip, lambda: tf.reverse(label, [1]), lambda: label)
        if self.crop:  # one offset for both
            shape = tf.shape(image)
            h_off = _draw(rand[0], shape[0] - self.crop[0] + 1)
            w_off = _draw(rand[1], shape[1] - self.crop[1] + 1)
            image = tf.slice(image, [h_off, w_off, 0], [self.crop[0], self.crop[1], -1])
            label = tf.slice(label, [h_off, w_off, 0], [self.crop[0], self.crop[1], -1])
        # The label is transformed with preserve_pixel_vals: its values as read.
        return self.transformer.image(image, rand), tf.cast(label, tf.float32)


def _draw(u, count):
    """An integer in [0, count) from a uniform [0, 1) number."""
    return tf.minimum(tf.cast(tf.floor(u * tf.cast(count, tf.float32)), tf.int32), count - 1)

"""ImageData: the images of a list file and their labels (BVLC:
image_data_layer.cpp, data_transformer.cpp)."""

import os

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.data import records
from keras_caffe.importers.layer_types._data import DataLayer, cropped, find_source
from keras_caffe.importers.layer_types.base import layer_type
from keras_caffe.importers.data.pipeline_core import (
    RecordOrder, epoch_permutation, positions, record_randoms)
from keras_caffe.importers.data.pipeline_images import (
    ImageDecoder, files_reader, image_base, image_batch, read_image_file)
from keras_caffe.importers.data.pipeline_layers import (
    Spec, batch_size, check_resized, check_tops, data_label, rand_skip_start)
from keras_caffe.importers.data.transform import Transformer


@layer_type("ImageData")
class ImageData(DataLayer):
    """ImageData: a list file's images (``root_folder + path``) and labels.

    Shapes: 3 channels with ``is_color`` (BGR), else 1; ``new_height`` x
    ``new_width`` when both are set, else the first listed image's size
    (read from the file); cropped to ``crop_size``; the label top is (N,).
    The pipeline resizes with OpenCV's INTER_LINEAR, shuffles every epoch
    with ``shuffle`` and skips ``rand_skip`` records into the first (TRAIN).
    No example: the layer reads image files.
    """

    reads_source = True

    def source_shapes(self, layer, net_source):
        p = layer.image_data_param
        channels = 3 if p.is_color else 1
        if p.new_height and p.new_width:
            height, width = p.new_height, p.new_width
        else:
            listing = find_source(layer, p.source, net_source)
            lines = records.list_lines(layer, listing)
            if not lines:
                raise LayerError(layer.name, f"ImageData source {listing!r} lists no images")
            number, line = lines[0]
            first = line.rsplit(" ", 1)[0]
            # Caffe concatenates root_folder and the path as strings.
            try:
                image = tf.io.decode_image(tf.io.read_file(p.root_folder + first)).numpy()
            except tf.errors.OpError as err:
                raise LayerError(layer.name, f"{listing}:{number}: cannot read image "
                                 f"{p.root_folder + first!r} ({err.message})") from None
            height, width = image.shape[0], image.shape[1]
        return [(p.batch_size, *cropped(layer, channels, height, width)), (p.batch_size,)]

    def pipeline(self, layer, ctx):
        p = layer.image_data_param
        check_tops(layer, 1, 2)
        batch = batch_size(layer, p.batch_size)
        if (p.new_height > 0) != (p.new_width > 0):
            raise LayerError(layer.name, "new_height and new_width must be set together "
                                         f"(got {p.new_height} and {p.new_width})")
        if p.new_height > 0:
            check_resized(layer, ctx, batch, {layer.top[0]: (3 if p.is_color else 1,
                                                             p.new_height, p.new_width)})
        listing = records.find_source(layer, p.source, ctx.net_source)
        names, labels = records.read_image_list(layer, listing)
        full = [p.root_folder + name for name in names]
        base = image_base(layer, full[0], listing, ctx.net_source)
        paths = [os.path.join(base, name) for name in full]
        transformer = Transformer(layer, ctx.phase, ctx.net_source)
        resize = (p.new_height, p.new_width) if p.new_height > 0 else None
        decoder = ImageDecoder(layer, transformer, "color" if p.is_color else "gray", resize,
                               "image")
        reader = files_reader(layer)
        out = decoder.first(read_image_file(layer, paths[0]), paths[0])
        order = _order(layer, ctx, len(paths))
        path_table, label_table = tf.constant(np.asarray(paths, object)), tf.constant(labels)
        seed = ctx.layer_seed(layer, "transform")

        def load(g):
            indices = order(positions(g, batch))
            files = tf.gather(path_table, indices)
            contents = tf.ensure_shape(tf.numpy_function(reader, [files], tf.string), [batch])
            x = image_batch(ctx, decoder, contents, files, record_randoms(seed, g, batch))
            return data_label(layer, ctx, batch, out, x, tf.gather(label_table, indices))[0]

        return Spec(batch, len(paths), data_label(layer, ctx, batch, out, None, None)[1], load)


def _order(layer, ctx, count):
    """The records' order: ``rand_skip`` (TRAIN) into the first epoch, and
    with ``shuffle`` a new permutation every epoch."""
    p = layer.image_data_param
    skip = rand_skip_start(ctx, layer, p.rand_skip, count, False)
    shuffle = epoch_permutation(ctx.layer_seed(layer, "shuffle"), count) if p.shuffle else None
    return RecordOrder(count, skip, shuffle)

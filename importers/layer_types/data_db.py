"""Data: LMDB or LevelDB records of Caffe Datums (BVLC: data_layer.cpp,
base_data_layer.cpp, data_transformer.cpp)."""

import contextlib

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.data import records
from keras_caffe.importers.layer_types._data import DataLayer, cropped, find_source
from keras_caffe.importers.layer_types.base import layer_type
from keras_caffe.importers.data.pipeline_core import RecordOrder, positions, record_randoms
from keras_caffe.importers.data.pipeline_images import ImageDecoder, image_batch, text
from keras_caffe.importers.data.pipeline_layers import (
    Spec, batch_size, check_tops, data_label, rand_skip_start)
from keras_caffe.importers.data.transform import Transformer, transform_parameters
from keras_caffe.proto import caffe_pb2


@layer_type("Data")
class Data(DataLayer):
    """Data from an LMDB or LevelDB (``backend``): raw or encoded Datums and their labels.

    Shapes come from the first Datum, as Caffe's ``DataLayerSetUp``: a raw
    record's channels x height x width, an encoded one's decoded image
    (3 channels with ``force_color`` / ``force_encoded_color``, 1 with
    ``force_gray``), cropped to ``crop_size``; the label top is (N,). The
    pipeline reads the records in key order, wrapping, ``rand_skip`` into
    the first pass (TRAIN), and transforms them as Caffe's DataTransformer.
    No example: the layer reads a database.
    """

    reads_source = True

    def source_shapes(self, layer, net_source):
        p = layer.data_param
        path = find_source(layer, p.source, net_source)
        store = records.open_store(layer, path)
        kind = store.kind
        with contextlib.closing(store.items()) as pairs:
            key, value = next(pairs, (None, None))
        del store, pairs  # a LevelDB is closed (and unlocked) unless a pipeline still reads it
        if key is None:
            raise LayerError(layer.name, f"{kind} {path!r} is empty")
        channels, height, width = _datum_shape(layer, _datum(layer, kind, path, key, value),
                                               kind, path, key)
        return [(p.batch_size, *cropped(layer, channels, height, width)), (p.batch_size,)]

    def pipeline(self, layer, ctx):
        p = layer.data_param
        check_tops(layer, 1, 2)
        batch = batch_size(layer, p.batch_size)
        db = records.database_records(layer, records.find_source(layer, p.source, ctx.net_source),
                                      ctx.in_memory_limit)
        transformer = Transformer(layer, ctx.phase, ctx.net_source)
        order = RecordOrder(db.num_records,
                            rand_skip_start(ctx, layer, p.rand_skip, db.num_records, True))
        seed = ctx.layer_seed(layer, "transform")
        if db.encoded:
            out, read, to_batch = _encoded(layer, ctx, db, transformer, batch)
        else:
            out, read, to_batch = _raw(ctx, db, transformer, batch)

        def load(g):
            indices = order(positions(g, batch))
            data, label = read(indices)
            x = to_batch(data, indices, record_randoms(seed, g, batch))
            return data_label(layer, ctx, batch, out, x, label)[0]

        return Spec(batch, db.num_records, data_label(layer, ctx, batch, out, None, None)[1], load)


def _datum(layer, kind, path, key, value):
    try:
        return caffe_pb2.Datum.FromString(value)
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError or RuntimeError
        raise LayerError(layer.name, f"{kind} {path!r} record {records.key_text(key)} is not a "
                                     f"Caffe Datum ({err})") from None


def _datum_shape(layer, datum, kind, path, key):
    """(C, H, W) of a Datum as Caffe's DecodeDatum gives it: color forced to
    3 channels, gray to 1."""
    if not datum.encoded:
        return datum.channels, datum.height, datum.width
    try:
        image = tf.io.decode_image(datum.data, expand_animations=False).numpy()
    except tf.errors.OpError as err:
        raise LayerError(layer.name, f"{kind} {path!r} record {records.key_text(key)} is "
                                     f"encoded but not an image TensorFlow decodes "
                                     f"({err.message})") from None
    channels, height, width = image.shape[2], image.shape[0], image.shape[1]
    if layer.transform_param.force_color or layer.data_param.force_encoded_color:
        channels = 3
    elif layer.transform_param.force_gray:
        channels = 1
    return channels, height, width


def _reader(db, values, labels, dtype, batch):
    """``read(indices)`` -> (records, labels), from memory or the database."""

    def read(indices):
        if db.in_memory:
            return tf.gather(values, indices), tf.gather(labels, indices)
        data, label = tf.numpy_function(db.read, [indices], [dtype, tf.float32])
        return data, tf.ensure_shape(label, [batch])

    return read


def _encoded(layer, ctx, db, transformer, batch):
    """Encoded Datums: decoded per record (native, color or gray)."""
    keys = tf.constant(np.asarray(db.keys, object))  # to name a bad record
    param = transform_parameters(layer)
    if param.force_color and param.force_gray:
        raise LayerError(layer.name, "cannot set both force_color and force_gray")
    mode = ("color" if param.force_color or layer.data_param.force_encoded_color
            else "gray" if param.force_gray else "native")
    decoder = ImageDecoder(layer, transformer, mode, None, f"{db.kind} {db.path!r} record")
    out = decoder.first(db.first_image, text(db.keys[0]))
    values, labels = ((tf.constant(db.images), tf.constant(db.labels)) if db.in_memory
                      else (None, None))

    def to_batch(data, indices, rand):
        return image_batch(ctx, decoder, tf.reshape(data, [batch]), tf.gather(keys, indices), rand)

    return out, _reader(db, values, labels, tf.string, batch), to_batch


def _raw(ctx, db, transformer, batch):
    """Raw Datums: transformed a batch at a time."""
    out = transformer.bind(db.channels, db.height, db.width)
    dtype = tf.float32 if db.is_float else tf.uint8
    values, labels = ((tf.constant(db.data), tf.constant(db.labels)) if db.in_memory
                      else (None, None))

    def to_batch(data, indices, rand):
        pixels = tf.cast(tf.reshape(data, [batch, *transformer.shape]), tf.float32)
        return ctx.to_model(transformer.batch(pixels, rand))

    return out, _reader(db, values, labels, dtype, batch), to_batch

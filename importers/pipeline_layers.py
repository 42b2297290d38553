"""One pipeline builder per Caffe data layer type (Data, ImageData, HDF5Data,
DummyData, MemoryData, Input), following their Caffe sources:

- ``Data`` (layers/data_layer.cpp): LMDB or LevelDB records (``backend``;
  LevelDB through ``plyvel``) in key order, wrapping;
  ``rand_skip`` (TRAIN) starts at a random record (as Caffe before the
  DataReader rework did). Raw Datums are transformed a batch at a time;
  encoded ones are decoded per record (``images.decode``: native channels,
  or color with ``force_color`` / ``data_param.force_encoded_color``, gray with
  ``force_gray``). Label = ``datum.label``.
- ``ImageData`` (layers/image_data_layer.cpp): the list file's images,
  ``root_folder + path`` (string concatenation, as Caffe), read in color (BGR)
  or gray (``is_color``), resized to ``new_height`` x ``new_width`` with
  OpenCV's INTER_LINEAR, shuffled at the start of every epoch with ``shuffle``,
  ``rand_skip`` (TRAIN) into the first epoch.
- ``HDF5Data`` (layers/hdf5_data_layer.cpp): rows of the listed files in
  order; ``shuffle`` permutes the files and the rows within each file every
  epoch. No transform_param (Caffe refuses it).
- ``DummyData`` (layers/dummy_data_layer.cpp): fillers per top; random ones
  draw new values for every batch.
- ``MemoryData`` / ``Input``: the user's ``arrays`` in order, wrapping, in
  Caffe's layout (N, C, H, W). MemoryData's arrays are not transformed (as
  Caffe's ``Reset``).
"""

import os
import warnings

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers import records
from keras_caffe.importers.pipeline_images import (
    ImageDecoder, files_reader, image_base, image_batch, read_image_file, text)
from keras_caffe.importers.pipeline_core import (
    RecordOrder, epoch_permutation, positions, record_randoms)
from keras_caffe.importers.stateless_fill import check_filler, fill
from keras_caffe.importers.transform import Transformer, transform_parameters
from keras_caffe.proto import caffe_pb2

BUILDERS = {}


def builder(*types):
    def register(fn):
        for layer_type in types:
            BUILDERS[layer_type] = fn
        return fn

    return register


class Spec:
    """What a builder hands ``DataPipeline``: sizes, shapes and ``load(g)``."""

    def __init__(self, batch_size, num_records, shapes, load):
        self.batch_size, self.num_records, self.shapes, self.load = (
            batch_size, num_records, shapes, load)


def _batch_size(layer, value):
    if value <= 0:
        raise LayerError(layer.name, f"batch_size must be positive, got {value}")
    return int(value)


def _tops(layer, low, high):
    if not low <= len(layer.top) <= high:
        wanted = f"{low}" if low == high else f"{low} to {high}"
        raise LayerError(layer.name, f"{layer.type} has {wanted} tops, got {len(layer.top)}")


def _rand_skip(ctx, layer, rand_skip, num_records, wrap):
    """Caffe's ``caffe_rng_rand() % rand_skip``, drawn from the seed (TRAIN only)."""
    if not rand_skip or not ctx.train:
        return 0
    if not wrap and rand_skip > num_records:
        raise LayerError(layer.name, f"rand_skip {rand_skip} can skip past the {num_records} "
                                     "records of the source")
    skip = int(np.random.default_rng(ctx.layer_seed(layer, "rand_skip")).integers(rand_skip))
    return skip % num_records


def _data_label(layer, ctx, batch, out, data, label):
    """(batch dict, shapes dict) of a data + optional label layer."""
    result = {layer.top[0]: data}
    shapes = {layer.top[0]: ctx.model_shape((batch, *out))}
    if len(layer.top) > 1:
        result[layer.top[1]] = label
        shapes[layer.top[1]] = (batch,)
    return result, shapes


@builder("Data")
def data_layer(layer, ctx):
    p = layer.data_param
    _tops(layer, 1, 2)
    batch = _batch_size(layer, p.batch_size)
    db = records.database_records(layer, records.find_source(layer, p.source, ctx.net_source),
                                  ctx.in_memory_limit)
    transformer = Transformer(layer, ctx.phase, ctx.net_source)
    order = RecordOrder(db.num_records, _rand_skip(ctx, layer, p.rand_skip, db.num_records, True))
    seed = ctx.layer_seed(layer, "transform")

    if db.encoded:
        keys = tf.constant(np.asarray(db.keys, object))  # to name a bad record
        param = transform_parameters(layer)
        if param.force_color and param.force_gray:
            raise LayerError(layer.name, "cannot set both force_color and force_gray")
        mode = ("color" if param.force_color or p.force_encoded_color
                else "gray" if param.force_gray else "native")
        decoder = ImageDecoder(layer, transformer, mode, None, f"{db.kind} {db.path!r} record")
        out = decoder.first(db.first_image, text(db.keys[0]))
        if db.in_memory:
            values, labels = tf.constant(db.images), tf.constant(db.labels)

    else:
        out = transformer.bind(db.channels, db.height, db.width)
        dtype = tf.float32 if db.is_float else tf.uint8
        if db.in_memory:
            values, labels = tf.constant(db.data), tf.constant(db.labels)

    def read(indices):
        if db.in_memory:
            return tf.gather(values, indices), tf.gather(labels, indices)
        data, label = tf.numpy_function(db.read, [indices],
                                        [tf.string if db.encoded else dtype, tf.float32])
        return data, tf.ensure_shape(label, [batch])

    def load(g):
        indices = order(positions(g, batch))
        data, label = read(indices)
        rand = record_randoms(seed, g, batch)
        if db.encoded:
            x = image_batch(ctx, decoder, tf.reshape(data, [batch]), tf.gather(keys, indices),
                             rand)
        else:
            pixels = tf.cast(tf.reshape(data, [batch, *transformer.shape]), tf.float32)
            x = ctx.to_model(transformer.batch(pixels, rand))
        return _data_label(layer, ctx, batch, out, x, label)[0]

    return Spec(batch, db.num_records, _data_label(layer, ctx, batch, out, None, None)[1], load)


@builder("ImageData")
def image_data_layer(layer, ctx):
    p = layer.image_data_param
    _tops(layer, 1, 2)
    batch = _batch_size(layer, p.batch_size)
    if (p.new_height > 0) != (p.new_width > 0):
        raise LayerError(layer.name, "new_height and new_width must be set together "
                                     f"(got {p.new_height} and {p.new_width})")
    listing = records.find_source(layer, p.source, ctx.net_source)
    names, labels = records.read_image_list(layer, listing)
    full = [p.root_folder + name for name in names]
    base = image_base(layer, full[0], listing, ctx.net_source)
    paths = [os.path.join(base, name) for name in full]
    transformer = Transformer(layer, ctx.phase, ctx.net_source)
    resize = (p.new_height, p.new_width) if p.new_height > 0 else None
    decoder = ImageDecoder(layer, transformer, "color" if p.is_color else "gray", resize, "image")
    reader = files_reader(layer)
    out = decoder.first(read_image_file(layer, paths[0]), paths[0])
    count = len(paths)
    skip = _rand_skip(ctx, layer, p.rand_skip, count, False)
    shuffle = epoch_permutation(ctx.layer_seed(layer, "shuffle"), count) if p.shuffle else None
    order = RecordOrder(count, skip, shuffle)
    path_table, label_table = tf.constant(np.asarray(paths, object)), tf.constant(labels)
    seed = ctx.layer_seed(layer, "transform")

    def load(g):
        indices = order(positions(g, batch))
        files = tf.gather(path_table, indices)
        contents = tf.ensure_shape(tf.numpy_function(reader, [files], tf.string), [batch])
        x = image_batch(ctx, decoder, contents, files, record_randoms(seed, g, batch))
        return _data_label(layer, ctx, batch, out, x, tf.gather(label_table, indices))[0]

    return Spec(batch, count, _data_label(layer, ctx, batch, out, None, None)[1], load)


def _hdf5_permutation(seed, rows):
    """HDF5Data's shuffled epoch: the files in random order, each file's rows too."""
    def permutation(epoch):
        rng = np.random.default_rng([seed, epoch])
        parts = [rows.offsets[f] + rng.permutation(rows.counts[f])
                 for f in rng.permutation(len(rows.files))]
        return np.concatenate(parts).astype(np.int64)

    return permutation


@builder("HDF5Data")
def hdf5_data_layer(layer, ctx):
    p = layer.hdf5_data_param
    if not layer.top:
        raise LayerError(layer.name, "HDF5Data needs at least one top")
    if layer.HasField("transform_param"):
        raise LayerError(layer.name, "HDF5Data does not transform data; remove transform_param "
                                     "(Caffe refuses it too)")
    batch = _batch_size(layer, p.batch_size)
    rows = records.Hdf5Rows(layer, records.find_source(layer, p.source, ctx.net_source),
                            ctx.in_memory_limit)
    shuffle = _hdf5_permutation(ctx.layer_seed(layer, "shuffle"), rows) if p.shuffle else None
    order = RecordOrder(rows.num_records, 0, shuffle)
    if rows.in_memory:
        tables = [tf.constant(rows.arrays[top]) for top in layer.top]

    def load(g):
        indices = order(positions(g, batch))
        if rows.in_memory:
            values = [tf.gather(t, indices) for t in tables]
        else:
            values = tf.numpy_function(rows.read, [indices], [tf.float32] * len(layer.top))
        return {top: ctx.to_model(tf.ensure_shape(v, (batch, *rows.row_shapes[top])))
                for top, v in zip(layer.top, values)}

    shapes = {top: ctx.model_shape((batch, *rows.row_shapes[top])) for top in layer.top}
    return Spec(batch, rows.num_records, shapes, load)


def _dummy_shapes(layer):
    p, count = layer.dummy_data_param, len(layer.top)
    legacy = [p.num, p.channels, p.height, p.width]
    if any(len(v) for v in legacy):
        if len(p.shape):
            raise LayerError(layer.name, "both shape and the legacy num/channels/height/width "
                                         "were given")
        for name, values in zip(("num", "channels", "height", "width"), legacy):
            if len(values) not in (1, count):
                raise LayerError(layer.name, f"give '{name}' once or once per top ({count}), "
                                             f"got {len(values)}")
        return [tuple(int(v[i] if len(v) > 1 else v[0]) for v in legacy) for i in range(count)]
    if len(p.shape) not in (1, count):
        raise LayerError(layer.name, f"give 'shape' once or once per top ({count}), "
                                     f"got {len(p.shape)}")
    return [tuple(int(d) for d in p.shape[i if len(p.shape) > 1 else 0].dim) for i in range(count)]


@builder("DummyData")
def dummy_data_layer(layer, ctx):
    p = layer.dummy_data_param
    if not layer.top:
        raise LayerError(layer.name, "DummyData needs at least one top")
    shapes = _dummy_shapes(layer)
    for top, shape in zip(layer.top, shapes):
        if not shape or any(d <= 0 for d in shape):
            raise LayerError(layer.name, f"top {top!r} has shape {shape}; every dimension must "
                                         "be positive")
    if len(p.data_filler) not in (0, 1, len(layer.top)):
        raise LayerError(layer.name, f"give 0, 1 or {len(layer.top)} data_filler(s), got "
                                     f"{len(p.data_filler)}")
    fillers = []
    for i, shape in enumerate(shapes):
        filler = (p.data_filler[i if len(p.data_filler) > 1 else 0] if len(p.data_filler)
                  else caffe_pb2.FillerParameter(type="constant", value=0.0))
        check_filler(layer, filler, shape)
        fillers.append(filler)
    seeds = [ctx.layer_seed(layer, f"fill:{top}") for top in layer.top]

    def load(g):
        return {top: ctx.to_model(fill(filler, shape, tf.stack([tf.constant(s, tf.int64), g])))
                for top, filler, shape, s in zip(layer.top, fillers, shapes, seeds)}

    batch = shapes[0][0]
    return Spec(batch, batch, {t: ctx.model_shape(s) for t, s in zip(layer.top, shapes)}, load)


def _user_arrays(layer, ctx, expected):
    """The ``arrays`` for the layer's tops, checked: {top: float32 array}.

    ``expected`` maps each top to its record shape (without the batch axis).
    """
    tops = list(expected)
    hint = ", ".join(f"{t!r}: ({'N, ' + ', '.join(str(d) for d in s) if s else 'N,'}) array"
                     for t, s in expected.items())
    if ctx.arrays is None:
        raise LayerError(layer.name, f"{layer.type} reads no source: pass arrays={{{hint}}}")
    missing = [t for t in tops if t not in ctx.arrays]
    if missing:
        raise LayerError(layer.name, f"arrays has no entry for top(s) "
                                     f"{', '.join(repr(t) for t in missing)}; {layer.type} needs "
                                     f"arrays={{{hint}}}")
    out = {}
    for top in tops:
        try:
            array = np.asarray(ctx.arrays[top], np.float32)
        except (TypeError, ValueError) as err:
            raise LayerError(layer.name, f"arrays[{top!r}] is not numeric: {err}") from None
        if array.ndim < 1 or tuple(array.shape[1:]) != tuple(expected[top]):
            raise LayerError(layer.name, f"arrays[{top!r}] has shape {array.shape}; expected "
                                         f"(N, {', '.join(str(d) for d in expected[top])}) in "
                                         "Caffe's layout" if expected[top] else
                             f"arrays[{top!r}] has shape {array.shape}; expected (N,)")
        if not len(array):
            raise LayerError(layer.name, f"arrays[{top!r}] is empty")
        out[top] = array
    counts = {t: len(a) for t, a in out.items()}
    if len(set(counts.values())) > 1:
        raise LayerError(layer.name, "arrays differ in length: "
                                     + ", ".join(f"{t!r} has {n}" for t, n in counts.items()))
    return out


def _array_spec(layer, ctx, arrays, batch):
    tops = list(arrays)
    count = len(arrays[tops[0]])
    order = RecordOrder(count)
    tables = {t: tf.constant(a) for t, a in arrays.items()}

    def load(g):
        indices = order(positions(g, batch))
        return {t: ctx.to_model(tf.gather(tables[t], indices)) for t in tops}

    shapes = {t: ctx.model_shape((batch, *arrays[t].shape[1:])) for t in tops}
    return Spec(batch, count, shapes, load)


@builder("MemoryData")
def memory_data_layer(layer, ctx):
    p = layer.memory_data_param
    _tops(layer, 2, 2)
    batch = _batch_size(layer, p.batch_size)
    dims = (p.channels, p.height, p.width)
    if min(dims) <= 0:
        raise LayerError(layer.name, f"channels, height and width must be positive in "
                                     f"memory_data_param, got {dims}")
    if layer.HasField("transform_param"):
        warnings.warn(f"layer {layer.name!r}: MemoryData does not transform array data "
                      "(as Caffe's Reset); transform_param is ignored", stacklevel=4)
    arrays = _user_arrays(layer, ctx, {layer.top[0]: dims, layer.top[1]: ()})
    return _array_spec(layer, ctx, arrays, batch)


@builder("Input")
def input_layer(layer, ctx):
    shapes = layer.input_param.shape
    if not layer.top or len(shapes) not in (1, len(layer.top)):
        raise LayerError(layer.name, f"{len(shapes)} shape(s) for {len(layer.top)} top(s)")
    dims = [tuple(int(d) for d in shapes[min(i, len(shapes) - 1)].dim)
            for i in range(len(layer.top))]
    if any(not d or d[0] <= 0 for d in dims):
        raise LayerError(layer.name, "every input shape needs a positive batch dimension")
    batches = {d[0] for d in dims}
    if len(batches) > 1:
        raise LayerError(layer.name, f"input shapes differ in their batch dimension: {dims}")
    arrays = _user_arrays(layer, ctx, {top: d[1:] for top, d in zip(layer.top, dims)})
    return _array_spec(layer, ctx, arrays, dims[0][0])


def spec_for(layer, ctx):
    """The ``Spec`` of a data layer; ``LayerError`` for other layer types."""
    if layer.type not in BUILDERS:
        raise LayerError(layer.name, f"type {layer.type!r} is not a data layer; pipelines are "
                                     f"built for {', '.join(BUILDERS)}")
    return BUILDERS[layer.type](layer, ctx)


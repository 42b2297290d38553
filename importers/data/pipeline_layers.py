"""Helpers shared by the data units' pipelines (``pipeline`` of the units in
``keras_caffe.importers.layer_types``: data_db, data_images, data_hdf5,
data_dummy, data_memory, data_input), and ``spec_for``, which finds a data
layer's unit and builds its ``Spec``.

Each unit's ``pipeline`` follows its Caffe source:

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

import numpy as np
import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types import base
from keras_caffe.importers.layer_types._data import pipeline_types
from keras_caffe.importers.net.memory_budget import check_pipeline
from keras_caffe.importers.data.pipeline_core import RecordOrder, positions


class Spec:
    """What a unit's ``pipeline`` hands ``DataPipeline``: sizes, shapes and ``load(g)``."""

    def __init__(self, batch_size, num_records, shapes, load):
        self.batch_size, self.num_records, self.shapes, self.load = (
            batch_size, num_records, shapes, load)


def batch_size(layer, value):
    """``batch_size``, refused unless positive."""
    if value <= 0:
        raise LayerError(layer.name, f"batch_size must be positive, got {value}")
    return int(value)


def check_resized(layer, ctx, batch, records):
    """Refuse, before the first record is decoded, a layer whose records
    resized to its ``new_height`` x ``new_width`` (``records``: {name: Caffe
    shape without the batch, before any crop}) the pipeline cannot make a
    batch of in host memory (``memory_budget.check_pipeline``)."""
    check_pipeline([(layer, {f"{name} resized": (batch, *shape)
                             for name, shape in records.items()})], *ctx.host)


def check_tops(layer, low, high):
    """Refuse a layer with fewer than ``low`` or more than ``high`` tops."""
    if not low <= len(layer.top) <= high:
        wanted = f"{low}" if low == high else f"{low} to {high}"
        raise LayerError(layer.name, f"{layer.type} has {wanted} tops, got {len(layer.top)}")


def rand_skip_start(ctx, layer, rand_skip, num_records, wrap):
    """Caffe's ``caffe_rng_rand() % rand_skip``, drawn from the seed (TRAIN only)."""
    if not rand_skip or not ctx.train:
        return 0
    if not wrap and rand_skip > num_records:
        raise LayerError(layer.name, f"rand_skip {rand_skip} can skip past the {num_records} "
                                     "records of the source")
    skip = int(np.random.default_rng(ctx.layer_seed(layer, "rand_skip")).integers(rand_skip))
    return skip % num_records


def data_label(layer, ctx, batch, out, data, label):
    """(batch dict, shapes dict) of a data + optional label layer."""
    result = {layer.top[0]: data}
    shapes = {layer.top[0]: ctx.model_shape((batch, *out))}
    if len(layer.top) > 1:
        result[layer.top[1]] = label
        shapes[layer.top[1]] = (batch,)
    return result, shapes


def hdf5_permutation(seed, rows):
    """HDF5Data's shuffled epoch: the files in random order, each file's rows too."""
    def permutation(epoch):
        rng = np.random.default_rng([seed, epoch])
        parts = [rows.offsets[f] + rng.permutation(rows.counts[f])
                 for f in rng.permutation(len(rows.files))]
        return np.concatenate(parts).astype(np.int64)

    return permutation


def dummy_shapes(layer):
    """DummyData's shapes, one per top (Caffe's checks): ``shape`` once or once
    per top, or the legacy num/channels/height/width, each once or once per
    top; every dimension positive."""
    if not layer.top:
        raise LayerError(layer.name, "DummyData needs at least one top")
    shapes = _stated_dummy_shapes(layer)
    for top, shape in zip(layer.top, shapes):
        if not shape or any(d <= 0 for d in shape):
            raise LayerError(layer.name, f"top {top!r} has shape {shape}; every dimension must "
                                         "be positive")
    return shapes


def _stated_dummy_shapes(layer):
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


def user_arrays(layer, ctx, expected):
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


def array_spec(layer, ctx, arrays, batch):
    """The ``Spec`` of the user's ``arrays`` (MemoryData, Input), in order, wrapping."""
    tops = list(arrays)
    count = len(arrays[tops[0]])
    order = RecordOrder(count)
    tables = {t: tf.constant(a) for t, a in arrays.items()}

    def load(g):
        indices = order(positions(g, batch))
        return {t: ctx.to_model(tf.gather(tables[t], indices)) for t in tops}

    shapes = {t: ctx.model_shape((batch, *arrays[t].shape[1:])) for t in tops}
    return Spec(batch, count, shapes, load)


def spec_for(layer, ctx):
    """The ``Spec`` of a data layer, built by its unit's ``pipeline``;
    ``LayerError`` for other layer types."""
    build = getattr(base.unit(layer.type), "pipeline", None)
    if build is None:
        raise LayerError(layer.name, f"type {layer.type!r} is not a data layer; pipelines are "
                                     f"built for {', '.join(pipeline_types())}")
    return build(layer, ctx)

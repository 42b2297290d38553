"""The parts every data-layer pipeline shares: record order, seeds, batching.

A pipeline is a pure function from a global batch index ``g`` to a batch:
batch ``g`` holds the records at stream positions ``g * B ... g * B + B - 1``
(``B`` the batch size). Position ``r`` reads source record ``order(r)``:

    u = r + skip;   epoch = u // N;   record = permutation(epoch)[u % N]

with ``N`` the records in the source, ``skip`` the ``rand_skip`` drawn once
(TRAIN), and the permutation the identity unless the layer shuffles (then
``numpy.random.default_rng([seed, epoch]).permutation``-style, per layer).
Random crops and mirrors of batch ``g`` come from
``tf.random.stateless_uniform(seed=[layer seed, g])``. Nothing depends on what
was read before, so ``dataset(start_batch=s)`` starts exactly where an
uninterrupted run would be, and workers can split the batches:
worker ``i`` of ``P`` reads global batches ``i, i + P, i + 2P, ...``.

A pipeline's batches live in host memory. Where tf.data's AUTOTUNE can make
batches in parallel and buffer them ahead within the host memory
(``memory_budget.reads_ahead``) it does; a pipeline of batches too big for
that makes each batch when it is asked for (a plain ``map``, with tf.data's
own parallelization and injected prefetch turned off), so it holds the
batch being made and the one the net reads, no more
(``memory_budget.pipeline_need``, which ``pipelines`` checks first).
"""

import functools
import os
import zlib

import numpy as np
import tensorflow as tf

from keras_caffe._checks import check_int
from keras_caffe.importers.net import memory_budget
from keras_caffe.importers.data.read_errors import pipeline_errors

#: The seed used when none is given, so runs are reproducible by default.
DEFAULT_SEED = 1701
_ALG = "philox"


def derive_seed(seed, *parts):
    """A 31-bit seed for one purpose of one layer, from the pipeline seed."""
    text = ":".join(str(p) for p in (seed, *parts))
    return zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF


class RecordOrder:
    """Stream position -> source record index (see the module docstring).

    ``permutation(epoch)`` returns that epoch's order as an int64 array of
    length ``num_records``, or is ``None`` for the source order.
    """

    def __init__(self, num_records, skip=0, permutation=None):
        self.num_records = int(num_records)
        self.skip = int(skip)
        self.permutation = functools.lru_cache(maxsize=4)(permutation) if permutation else None

    def __call__(self, positions):
        """int64 record indices for int64 ``positions`` (a tensor of any shape)."""
        u = positions + self.skip
        if self.permutation is None:
            return tf.math.floormod(u, self.num_records)
        indices = tf.numpy_function(self.lookup, [u], tf.int64, stateful=False)
        return tf.ensure_shape(indices, positions.shape)

    def lookup(self, u):
        """The numpy side of ``__call__`` for shuffled sources."""
        u = np.asarray(u, np.int64)
        epochs, within = np.divmod(u, self.num_records)
        out = np.empty_like(u)
        for epoch in np.unique(epochs):
            mask = epochs == epoch
            out[mask] = self.permutation(int(epoch))[within[mask]]
        return out


class Context:
    """The options of one ``layer_pipeline`` / ``net_pipeline`` call."""

    def __init__(self, phase, net_source, data_format, seed, arrays, shard_index, num_shards,
                 in_memory_limit, host=(None, "host memory unknown")):
        self.phase = phase
        self.net_source = net_source
        self.data_format = data_format
        self.seed = seed
        self.arrays = arrays
        self.shard_index = shard_index
        self.num_shards = num_shards
        self.in_memory_limit = in_memory_limit
        #: ``(bytes or None, where)``: the host memory the batches must fit in.
        self.host = host

    @property
    def train(self):
        return self.phase == "TRAIN"

    def layer_seed(self, layer, purpose):
        return derive_seed(self.seed, layer.name, purpose)

    def to_model(self, batch):
        """A Caffe-layout batch (N, C, ...) in the model's layout (channels last
        moves axis 1 to the end for blobs of 3 or more axes, as the importer does)."""
        rank = batch.shape.rank
        if self.data_format == "channels_last" and rank >= 3:
            return tf.transpose(batch, [0, *range(2, rank), 1])
        return batch

    def model_shape(self, shape):
        shape = tuple(int(d) for d in shape)
        if self.data_format == "channels_last" and len(shape) >= 3:
            return (shape[0], *shape[2:], shape[1])
        return shape

    def caffe_shape(self, shape):
        """``model_shape``'s inverse: a batch's shape in Caffe's axes (N, C, ...)."""
        shape = tuple(int(d) for d in shape)
        if self.data_format == "channels_last" and len(shape) >= 3:
            return (shape[0], shape[-1], *shape[1:-1])
        return shape


def positions(batch_index, batch_size):
    """The stream positions (int64, (B,)) of global batch ``batch_index``."""
    return batch_index * batch_size + tf.range(batch_size, dtype=tf.int64)


def record_randoms(seed, batch_index, batch_size, count=3):
    """Uniform [0, 1) numbers, ``count`` per record of a batch, from (seed, batch)."""
    key = tf.stack([tf.constant(seed, tf.int64), tf.cast(batch_index, tf.int64)])
    return tf.random.stateless_uniform([batch_size, count], key, alg=_ALG)


def epoch_permutation(seed, num_records):
    """A function epoch -> that epoch's random order of ``num_records`` records."""
    def permutation(epoch):
        return np.random.default_rng([seed, epoch]).permutation(num_records).astype(np.int64)

    return permutation


class DataPipeline:
    """The batches of one or more Caffe data layers as a tf.data pipeline.

    Attributes: ``tops`` (top names in the layers' order), ``batch_size`` (per
    worker), ``num_records`` (records in one pass over the source, before
    sharding), ``shapes`` ({top: one batch's shape in the model's layout}),
    ``shard_index`` / ``num_shards``, ``seed``, ``layers`` (the layer
    names) and ``reads_ahead`` (whether AUTOTUNE makes batches in parallel
    and buffers them ahead, or each is made when asked for: see the module
    docstring).

    ``dataset(start_batch)`` is the ``tf.data.Dataset`` of the batches, for
    ``model.fit(pipeline.dataset(), steps_per_epoch=...)`` and tf.data's own
    transformations (``.take(n)``, ``.map``). Iterating the pipeline itself
    gives the same batches eagerly, from batch 0 and without end::

        for step, batch in zip(range(3), pipeline):
            batch["data"].shape   # {top: float32 tensor}

    An error from inside the pipeline (a bad record, a missing file) comes
    out as keras-caffe's own (``LayerError`` naming the layer, file or key).
    """

    #: Context manager turning errors from inside a pipeline back into keras-caffe's.
    errors = staticmethod(pipeline_errors)

    def __init__(self, *, layers, tops, batch_size, num_records, shapes, load, context):
        self.layers = tuple(layers)
        self.tops = tuple(tops)
        self.batch_size = int(batch_size)
        self.num_records = int(num_records)
        self.shapes = dict(shapes)
        self.shard_index = context.shard_index
        self.num_shards = context.num_shards
        self.seed = context.seed
        self.phase = context.phase
        self.data_format = context.data_format
        self._load = load
        nbytes = memory_budget.batch_bytes(self.shapes.values())
        self._ram_budget = memory_budget.ram_budget(context.host[0])
        self.reads_ahead = memory_budget.reads_ahead(nbytes, context.host[0], _cores())

    def load(self, batch_index):
        """Global batch ``batch_index`` (an int64 tensor) as {top: float32 tensor}."""
        batch = self._load(tf.cast(batch_index, tf.int64))
        return {top: tf.ensure_shape(tf.cast(batch[top], tf.float32), self.shapes[top])
                for top in self.tops}

    def dataset(self, start_batch=0):
        """An endless ``tf.data.Dataset`` of {top: batch} dicts, float32.

        Element ``k`` is this worker's batch ``start_batch + k``, that is global
        batch ``shard_index + (start_batch + k) * num_shards``; so element ``k`` of
        ``dataset(s)`` equals element ``s + k`` of ``dataset(0)``, bit for bit.
        """
        start = check_int("DataPipeline.dataset", "start_batch", start_batch)
        shard, shards = self.shard_index, self.num_shards
        ds = tf.data.Dataset.counter(start, dtype=tf.int64)
        options = tf.data.Options()
        options.deterministic = True
        if not self.reads_ahead:  # each batch made when asked for, one at a time
            options.experimental_optimization.map_parallelization = False
            options.experimental_optimization.inject_prefetch = False
            return ds.map(lambda k: self.load(shard + k * shards)).with_options(options)
        ds = ds.map(lambda k: self.load(shard + k * shards),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        if self._ram_budget is not None:
            options.autotune.ram_budget = self._ram_budget
        return ds.prefetch(tf.data.AUTOTUNE).with_options(options)

    def __iter__(self):
        """This worker's batches from batch 0, endless: ``dataset()``'s
        elements, {top: float32 tensor}, with errors raised inside the
        pipeline re-raised as keras-caffe's."""
        iterator = iter(self.dataset())
        while True:
            with self.errors():
                try:
                    batch = next(iterator)
                except StopIteration:
                    return
            yield batch

    def __repr__(self):
        shapes = ", ".join(f"{t}: {self.shapes[t]}" for t in self.tops)
        return (f"DataPipeline(layers={list(self.layers)}, batch_size={self.batch_size}, "
                f"num_records={self.num_records}, shard {self.shard_index}/{self.num_shards}, "
                f"{{{shapes}}})")


def _cores():
    """The CPUs this process may run on: the most loads AUTOTUNE runs at once."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1

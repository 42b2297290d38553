"""Caffe's data layers as tf.data pipelines that produce what Caffe's layers produce.

::

    from keras_caffe.importers.data.pipelines import layer_pipeline, net_pipeline

    pipe = net_pipeline("train_val.prototxt", phase="TRAIN")
    pipe.tops, pipe.batch_size, pipe.num_records, pipe.shapes
    ds = pipe.dataset(start_batch=0)          # endless; each element {top: float32 batch}
    model.fit(ds.map(lambda b: (b["data"], b["label"])), steps_per_epoch=..., ...)

Types: Data (LMDB or LevelDB), ImageData, HDF5Data, DummyData, MemoryData, Input,
SegNet's DenseImageData and C3D's VideoData (frame folders).
The modules: the data units of ``layer_types`` (``data_*.py``: each type's
``pipeline``, against its Caffe source; ``pipeline_layers``: the helpers they
share), ``pipeline_core`` (order, seeds, sharding, ``DataPipeline``),
``transform`` (Caffe's DataTransformer), ``images`` and ``pipeline_images``
(OpenCV's decoding and resizing), ``records`` (LMDB and LevelDB, HDF5 and list files),
``stateless_fill`` (DummyData's fillers), ``data_errors``.

- **Layout.** Image tops come out as the imported model takes them: (N, H, W, C)
  under ``data_format="channels_last"`` (every top of 3 or more axes has its
  axis 1 moved last, as the importer does), Caffe's (N, C, H, W) under
  ``"channels_first"``. Label tops are (N,) float32.
- **Resume.** Every batch is a pure function of (seed, batch index): element
  ``k`` of ``dataset(start_batch=s)`` is element ``s + k`` of ``dataset(0)``, bit
  for bit, random crops, mirrors, shuffles and ``rand_skip`` included
  (``pipeline_core``). ``seed=None`` means ``DEFAULT_SEED`` (1701), so runs are
  reproducible by default; each layer derives its own seeds from it.
- **Sharding.** With ``num_shards=P``, worker ``shard_index=i`` reads global
  batches ``i, i + P, i + 2P, ...``: together the workers read exactly the
  unsharded stream. ``start_batch`` counts the worker's own batches. Left
  unset, both come from Horovod (``keras_caffe.distributed``): this worker's
  rank and the number of workers; one process without Horovod reads it all.
- **Errors.** Bad sources, shapes and parameters raise ``LayerError`` here,
  before training. What can only be found while reading (a bad record in a
  database too big to check up front, a missing image file) is raised inside
  the pipeline; ``with DataPipeline.errors(): ...`` (``data_errors``) turns it
  back into the ``LayerError``.
- **Memory.** An LMDB, LevelDB or HDF5 source up to ``in_memory_limit`` bytes (1 GiB)
  is read into memory once; bigger ones are read per batch. A batch the host
  memory cannot hold while the pipeline makes it (``memory_budget.check_pipeline``:
  a DummyData batch of 10^9, an ImageData ``new_height`` of 100000) is refused
  with a ``LayerError`` naming the layer, the tops' shapes and the bytes before
  anything is read or filled; a batch too big for tf.data's AUTOTUNE to make
  batches in parallel and buffer them ahead is made when the net asks for it
  (``DataPipeline.reads_ahead``).

Where the batches differ from Caffe's, on purpose or by necessity:

- Random crops, mirrors, shuffles and skips use keras-caffe's seeded RNG, so
  they are Caffe's in distribution, not value by value. Deterministic
  batches (no crop or a TEST crop, no mirror, no shuffle) are bit-exact.
- ``mirror`` applies in TRAIN only (Caffe also flips TEST records at random);
  ``rand_skip`` applies in TRAIN only (Caffe's ImageData also skips in TEST).
- Records must all have the first record's size unless cropped: the model's
  input shape is fixed (Caffe reshapes each batch to its first record).
- MemoryData and Input take any number of records (Caffe's MemoryData wants a
  multiple of the batch size); the stream wraps record by record.
- Image decoding follows OpenCV through the same libpng / libjpeg calls, but
  EXIF orientation is not applied, and only JPEG, PNG, GIF and BMP are read.
- LevelDB (plyvel: ``pip install 'keras-caffe[leveldb]'``) lets one process open a
  database at a time: a streamed LevelDB stays locked while its pipeline lives;
  one read into memory is closed after reading. Use LMDB when several processes
  read one database.
"""

import os

from keras_caffe._checks import check_int
from keras_caffe.errors import ArgumentError, LayerError
from keras_caffe.importers.data.read_errors import pipeline_errors
from keras_caffe.importers.net.memory_budget import check_pipeline, host_budget
from keras_caffe.importers.data.pipeline_core import DEFAULT_SEED, Context, DataPipeline
from keras_caffe.importers.layer_types._data import pipeline_types
from keras_caffe.importers.data.pipeline_layers import spec_for
from keras_caffe.importers.data.records import IN_MEMORY_LIMIT
from keras_caffe.importers.formats.netfile import filter_net, net_state, read_net
from keras_caffe.proto import caffe_pb2

__all__ = ["layer_pipeline", "net_pipeline", "DataPipeline", "pipeline_errors",
           "DEFAULT_SEED", "DATA_LAYER_TYPES"]


def __getattr__(name):
    """``DATA_LAYER_TYPES``: the layer types a pipeline can be built for (the
    data units with a ``pipeline``), read from the registry on first use."""
    if name == "DATA_LAYER_TYPES":
        return pipeline_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _context(owner, phase, net_source, data_format, seed, arrays, shard_index, num_shards,
             in_memory_limit):
    if phase in (caffe_pb2.TRAIN, caffe_pb2.TEST) and not isinstance(phase, str):
        phase = "TRAIN" if phase == caffe_pb2.TRAIN else "TEST"
    if not isinstance(phase, str) or phase.upper() not in ("TRAIN", "TEST"):
        raise ArgumentError(owner, "phase", f"must be 'TRAIN' or 'TEST', got {phase!r}")
    if data_format not in ("channels_last", "channels_first"):
        raise ArgumentError(owner, "data_format", "must be 'channels_last' or 'channels_first', "
                                                  f"got {data_format!r}")
    seed = DEFAULT_SEED if seed is None else check_int(owner, "seed", seed)
    if shard_index is None and num_shards is None:  # this worker's share under Horovod
        # Only when the caller gives no share: keras_caffe.distributed's package
        # (Horovod, TensorFlow's collectives) then loads lazily, on first use.
        from keras_caffe.distributed.context import worker

        me = worker()
        shard_index, num_shards = me.rank, me.size
    else:
        shard_index = 0 if shard_index is None else shard_index
        num_shards = 1 if num_shards is None else num_shards
    num_shards = check_int(owner, "num_shards", num_shards, low=1)
    shard_index = check_int(owner, "shard_index", shard_index)
    if shard_index >= num_shards:
        raise ArgumentError(owner, "shard_index", f"must be < num_shards ({num_shards}), "
                                                  f"got {shard_index}")
    if arrays is not None and not hasattr(arrays, "keys"):
        raise ArgumentError(owner, "arrays", f"must be a dict {{top: array}}, got "
                                             f"{type(arrays).__name__}")
    in_memory_limit = check_int(owner, "in_memory_limit", in_memory_limit)
    if net_source is not None:
        net_source = os.fspath(net_source)
    return Context(phase.upper(), net_source, data_format, seed, arrays, shard_index, num_shards,
                   in_memory_limit, host_budget())


def _checked(ctx, layers, specs):
    """Refuse layers whose batches, read together, the host memory cannot hold
    while the pipeline makes them (``memory_budget.check_pipeline``)."""
    check_pipeline([(layer, {top: ctx.caffe_shape(spec.shapes[top]) for top in layer.top
                             if top in spec.shapes}) for layer, spec in zip(layers, specs)],
                   *ctx.host)


def layer_pipeline(layer, phase="TRAIN", *, net_source=None, data_format="channels_last",
                   seed=None, arrays=None, shard_index=None, num_shards=None,
                   in_memory_limit=IN_MEMORY_LIMIT):
    """The ``DataPipeline`` of one Caffe data layer (a ``caffe_pb2.LayerParameter``).

    ``net_source``: the prototxt's path, to find relative sources next to it
    (after the current directory, as Caffe looks). ``arrays``: {top: array} for
    MemoryData and Input, the whole data set in Caffe's layout.
    """
    ctx = _context("layer_pipeline", phase, net_source, data_format, seed, arrays, shard_index,
                   num_shards, in_memory_limit)
    spec = spec_for(layer, ctx)
    _checked(ctx, [layer], [spec])
    return DataPipeline(layers=[layer.name], tops=list(layer.top), batch_size=spec.batch_size,
                        num_records=spec.num_records, shapes=spec.shapes, load=spec.load,
                        context=ctx)


def net_pipeline(net_param, phase="TRAIN", *, net_source=None, data_format="channels_last",
                 seed=None, arrays=None, shard_index=None, num_shards=None,
                 in_memory_limit=IN_MEMORY_LIMIT):
    """One ``DataPipeline`` for every data layer of a net, yielding all their tops.

    ``net_param``: a filtered ``NetParameter`` (``read_net`` + ``filter_net``), or
    a prototxt path or text, which is read and filtered for ``phase`` here. Each
    batch of the result holds batch ``g`` of every layer. ``num_records`` is the
    first data layer's. The layers must share one batch size.
    """
    ctx = _context("net_pipeline", phase, net_source, data_format, seed, arrays, shard_index,
                   num_shards, in_memory_limit)
    if not isinstance(net_param, caffe_pb2.NetParameter):
        net_param, source = read_net(net_param)
        net_param = filter_net(net_param, net_state(ctx.phase))
        if ctx.net_source is None and os.path.isfile(source):
            ctx.net_source = source
    name = net_param.name or "net"
    types = pipeline_types()
    layers = [layer for layer in net_param.layer if layer.type in types and not layer.bottom]
    if not layers:
        raise LayerError(name, f"the net has no data layer in the {ctx.phase} phase "
                               f"(one of {', '.join(types)})")
    specs = [spec_for(layer, ctx) for layer in layers]
    seen = {}
    for layer in layers:
        for top in layer.top:
            if top in seen:
                raise LayerError(layer.name, f"top {top!r} is also produced by data layer "
                                             f"{seen[top]!r} (is the net filtered for one "
                                             "phase? read_net + filter_net)")
            seen[top] = layer.name
    sizes = {layer.name: spec.batch_size for layer, spec in zip(layers, specs)}
    if len(set(sizes.values())) > 1:
        listed = ", ".join(f"{n!r} has {b}" for n, b in sizes.items())
        raise LayerError(layers[1].name, f"data layers differ in batch size ({listed}); "
                                         "a Keras model takes one batch size")
    _checked(ctx, layers, specs)
    shapes = {}
    for spec in specs:
        shapes.update(spec.shapes)

    def load(g):
        batch = {}
        for spec in specs:
            batch.update(spec.load(g))
        return batch

    return DataPipeline(layers=[layer.name for layer in layers],
                        tops=[top for layer in layers for top in layer.top],
                        batch_size=specs[0].batch_size, num_records=specs[0].num_records,
                        shapes=shapes, load=load, context=ctx)

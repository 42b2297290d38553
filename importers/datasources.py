"""The blob shapes a Caffe data layer produces, found without reading its data.

Data layers (Data, ImageData, HDF5Data, DummyData, MemoryData) become model
inputs (their data tops) and training targets (their label tops); the
shapes come from the layer's parameters, or from the first record of its
source, as Caffe's own ``DataLayerSetUp`` finds them. A relative ``source``
is looked up from the current directory (as Caffe does), then next to the
prototxt.
"""

import os

from keras_caffe.errors import LayerError
from keras_caffe.importers.paths import locate

_READERS = {}


def reader(*types):
    def register(fn):
        for layer_type in types:
            _READERS[layer_type] = fn
        return fn

    return register


DATA_LAYER_TYPES = ("Data", "ImageData", "HDF5Data", "DummyData", "MemoryData")


def data_shapes(layer, net_source):
    """One Caffe shape (batch first) per top of a data layer."""
    shapes = _READERS[layer.type](layer, net_source)
    if len(shapes) < len(layer.top):
        raise LayerError(layer.name, f"produces {len(shapes)} blob(s) but names "
                                     f"{len(layer.top)} top(s)")
    return shapes[:len(layer.top)]


def _find(layer, path, net_source):
    found = locate(path, net_source)
    if found is not None:
        return found
    raise LayerError(layer.name, f"{layer.type} source {path!r} not found (looked in the "
                                 "current directory and next to the prototxt); give its shapes "
                                 "with input_shapes={top: shape without the batch}")


def _cropped(layer, channels, height, width):
    crop = layer.transform_param.crop_size
    return (channels, crop, crop) if crop else (channels, height, width)


@reader("DummyData")
def _dummy(layer, net_source):
    p = layer.dummy_data_param
    if p.shape:
        return [tuple(int(d) for d in s.dim) for s in p.shape]
    legacy = [p.num, p.channels, p.height, p.width]
    count = max(len(v) for v in legacy)
    return [tuple(int(v[min(i, len(v) - 1)]) for v in legacy) for i in range(count)]


@reader("MemoryData")
def _memory(layer, net_source):
    p = layer.memory_data_param
    return [(p.batch_size, p.channels, p.height, p.width), (p.batch_size,)]


@reader("HDF5Data")
def _hdf5(layer, net_source):
    import h5py

    p = layer.hdf5_data_param
    listing = _find(layer, p.source, net_source)
    with open(listing, encoding="utf-8") as f:
        files = [line.strip() for line in f if line.strip()]
    if not files:
        raise LayerError(layer.name, f"HDF5Data source {listing!r} lists no files")
    first = files[0]
    if not os.path.isabs(first) and not os.path.exists(first):
        first = os.path.join(os.path.dirname(listing), first)
    with h5py.File(_find(layer, first, net_source), "r") as h5:
        missing = [top for top in layer.top if top not in h5]
        if missing:
            raise LayerError(layer.name, f"HDF5 file {first!r} has no dataset(s) "
                                         f"{', '.join(missing)} for the layer's tops")
        return [(p.batch_size, *h5[top].shape[1:]) for top in layer.top]


@reader("Data")
def _database(layer, net_source):
    """The first Datum of the LMDB or LevelDB (``data_param.backend``) gives the
    shape, as Caffe's DataLayerSetUp: raw records their channels x height x
    width, encoded ones their decoded image's, forced to 3 channels with
    ``force_color`` / ``force_encoded_color`` and to 1 with ``force_gray``."""
    import contextlib

    from keras_caffe.importers import records
    from keras_caffe.proto import caffe_pb2

    p = layer.data_param
    path = _find(layer, p.source, net_source)
    store = records.open_store(layer, path)
    kind = store.kind
    with contextlib.closing(store.items()) as pairs:
        key, value = next(pairs, (None, None))
    del store, pairs  # a LevelDB is closed (and unlocked) unless a pipeline still reads it
    if key is None:
        raise LayerError(layer.name, f"{kind} {path!r} is empty")
    try:
        datum = caffe_pb2.Datum.FromString(value)
    except Exception as err:  # noqa: BLE001 - protobuf's DecodeError or RuntimeError
        raise LayerError(layer.name, f"{kind} {path!r} record {records.key_text(key)} is not a "
                                     f"Caffe Datum ({err})") from None
    if datum.encoded:
        import tensorflow as tf

        try:
            image = tf.io.decode_image(datum.data, expand_animations=False).numpy()
        except tf.errors.OpError as err:
            raise LayerError(layer.name, f"{kind} {path!r} record {records.key_text(key)} is "
                                         f"encoded but not an image TensorFlow decodes "
                                         f"({err.message})") from None
        channels, height, width = image.shape[2], image.shape[0], image.shape[1]
        # What Caffe's DecodeDatum gives: color forced to 3 channels, gray to 1.
        if layer.transform_param.force_color or p.force_encoded_color:
            channels = 3
        elif layer.transform_param.force_gray:
            channels = 1
    else:
        channels, height, width = datum.channels, datum.height, datum.width
    return [(p.batch_size, *_cropped(layer, channels, height, width)), (p.batch_size,)]


@reader("ImageData")
def _images(layer, net_source):
    p = layer.image_data_param
    channels = 3 if p.is_color else 1
    if p.new_height and p.new_width:
        height, width = p.new_height, p.new_width
    else:
        import tensorflow as tf

        listing = _find(layer, p.source, net_source)
        with open(listing, encoding="utf-8") as f:
            first = f.readline().rstrip("\n").rsplit(" ", 1)[0]
        # Caffe concatenates root_folder and the path as strings.
        image = tf.io.decode_image(tf.io.read_file(p.root_folder + first)).numpy()
        height, width = image.shape[0], image.shape[1]
    return [(p.batch_size, *_cropped(layer, channels, height, width)), (p.batch_size,)]

"""Writing a model's weights back as a Caffe ``.caffemodel``."""

from keras_caffe.errors import KerasCaffeError
from keras_caffe.importers.weights import array_to_blob
from keras_caffe.layers import CaffeBlobs
from keras_caffe.proto import caffe_pb2


def export_caffemodel(model, path):
    """Write the blobs of ``model``'s Caffe layers to ``path`` (binary).

    Every layer that holds Caffe blobs (the importer's Convolution,
    InnerProduct, BatchNorm, Scale, ...) becomes a ``layer { name type blobs }``
    entry under its Caffe name, blobs in Caffe's shapes and layout, so Caffe
    (``Net::CopyTrainedLayersFrom``) and ``import_model`` read them back;
    importing them gives bit-identical weights. The file is written to a
    temporary file and renamed: no partial file is ever left at ``path``.
    """
    layers = [layer for layer in model.layers if isinstance(layer, CaffeBlobs)]
    if not layers:
        raise KerasCaffeError(
            f"model {model.name!r} has no layers holding Caffe blobs; "
            "export_caffemodel writes models built by keras_caffe.import_model"
        )
    by_layer = {}
    for layer in layers:
        blobs = layer.caffe_blobs()
        start = 0
        for name, _, count in layer.caffe_parts:
            by_layer[name] = blobs[start:start + count]
            start += count
    write_atomically(path, caffemodel_proto(model, by_layer).SerializeToString())
    return path


def caffemodel_proto(model, blobs):
    """A ``NetParameter`` holding ``blobs`` (``{Caffe layer name: [arrays]}``,
    in the order given): one ``layer { name type blobs }`` per layer, the type
    from ``model``'s layer, what ``Net::CopyTrainedLayersFrom`` reads.

    A layer sharing another's parameters gets the owner's blobs too, as
    Caffe's ``Net::ToProto`` writes them; the layers follow the prototxt's
    order where the model knows it (``caffe_layer_order``)."""
    from keras_caffe.importers.api import caffe_parts, caffe_sharers

    types = {name: part[3] for name, part in caffe_parts(model).items()}
    sharers = {s: o for s, o in caffe_sharers(model).items() if o in blobs}
    types.update((s, types[o]) for s, o in sharers.items())
    blobs = {**blobs, **{s: blobs[o] for s, o in sharers.items()}}
    if sharers:
        order = getattr(model, "caffe_layer_order", None) or []
        rank = {name: i for i, name in enumerate(order)}
        blobs = dict(sorted(blobs.items(), key=lambda item: rank.get(item[0], len(rank))))
    net = caffe_pb2.NetParameter(name=model.name)
    for name, layer_blobs in blobs.items():
        entry = net.layer.add(name=name, type=types[name] or "")
        for blob in layer_blobs:
            entry.blobs.add().CopyFrom(array_to_blob(blob))
    return net


def write_atomically(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same
    directory, fsync and a rename (then fsync the directory): a crash leaves
    the old file or the new one, never a partial one."""
    from keras_caffe.importers.snapshot_io import write_bytes_durably

    write_bytes_durably(path, data)


def param_multipliers(model):
    """Caffe's per-parameter ``lr_mult`` and ``decay_mult`` for the optimizers.

    Returns ``(lr_mult, decay_mult)``: dicts from Keras variable path to the
    value the net's prototxt gives (``param { lr_mult decay_mult }``; 1 where
    it gives none), ready for ``keras_caffe.SGD(lr_mult=..., decay_mult=...)``.
    """
    lr_mult, decay_mult = {}, {}
    for layer in model.layers:
        if not isinstance(layer, CaffeBlobs):
            continue
        variables = layer.caffe_variables()
        specs = layer.param_multipliers or [[1.0, 1.0]] * len(variables)
        for weight, (lr, decay) in zip(variables, specs):
            lr_mult[weight.path] = lr
            decay_mult[weight.path] = decay
    return lr_mult, decay_mult

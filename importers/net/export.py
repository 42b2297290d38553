"""Writing a model's weights back as a Caffe ``.caffemodel`` (or ``.caffemodel.h5``)."""

import numpy as np

from keras_caffe.errors import KerasCaffeError
from keras_caffe.importers.formats import net_proto
from keras_caffe.importers.formats.atomic import atomic_output, write_bytes_durably
from keras_caffe.importers.net.blobs import blob_layers, caffe_parts, caffe_sharers, model_blobs
from keras_caffe.importers.net.weights import array_to_blob
from keras_caffe.proto import caffe_pb2

HDF5_SUFFIX = ".h5"


def export_caffemodel(model, path):
    """Write the blobs of ``model``'s Caffe layers to ``path``; returns ``path``.

    A path ending in ``.h5`` gets Caffe's HDF5 format (``Net::ToHDF5``), any
    other the binary one (``Net::ToProto``). For a model from
    ``import_model`` (which keeps its net as ``model.caffe_net``) the file is
    what Caffe writes for that net in the import's phase, byte for byte
    (``keras_caffe.importers.formats.net_proto``); for a model without its net (one
    loaded from a .keras file that does not carry it) each layer holding
    blobs becomes ``layer { name type blobs }``, which is all
    ``Net::CopyTrainedLayersFrom`` reads. Importing either gives bit-identical
    weights. Written to a temporary file and renamed: no partial file is
    ever left at ``path``.
    """
    if not blob_layers(model):
        raise KerasCaffeError(
            f"model {model.name!r} has no layers holding Caffe blobs; "
            "export_caffemodel writes models built by keras_caffe.import_model"
        )
    blobs = model_blobs(model)
    if str(path).endswith(HDF5_SUFFIX):
        with atomic_output(path) as tmp:
            write_hdf5(tmp, model, blobs)
    else:
        write_atomically(path, caffemodel_proto(model, blobs).SerializeToString())
    return path


def _with_sharers(model, blobs):
    """``blobs`` and, for each layer sharing another's parameters, the
    owner's blobs under the sharer's name (a shared ``Blob`` is written under
    every layer holding it); ``(blobs, {sharer: owner})``."""
    sharers = {s: o for s, o in caffe_sharers(model).items() if o in blobs}
    return {**blobs, **{s: blobs[o] for s, o in sharers.items()}}, sharers


def caffemodel_proto(model, blobs):
    """The ``NetParameter`` Caffe writes for ``model`` holding ``blobs``
    (``{Caffe layer name: [arrays]}``, owners' blobs; sharers get them too).

    With ``model.caffe_net``: ``Net::ToProto`` of that net
    (``net_proto.to_proto``). Without: one ``layer { name type blobs }``
    per layer holding blobs, the type from ``model``'s layer, in the
    prototxt's order where the model knows it (``caffe_layer_order``)."""
    blobs, sharers = _with_sharers(model, blobs)
    net = getattr(model, "caffe_net", None)
    if net is not None:
        return net_proto.to_proto(net, net.state.phase, blobs, array_to_blob)
    types = {name: part[3] for name, part in caffe_parts(model).items()}
    types.update((s, types[o]) for s, o in sharers.items())
    if sharers:
        order = getattr(model, "caffe_layer_order", None) or []
        rank = {name: i for i, name in enumerate(order)}
        blobs = dict(sorted(blobs.items(), key=lambda item: rank.get(item[0], len(rank))))
    out = caffe_pb2.NetParameter(name=model.name)
    for name, layer_blobs in blobs.items():
        entry = out.layer.add(name=name, type=types[name] or "")
        for blob in layer_blobs:
            entry.blobs.add().CopyFrom(array_to_blob(blob))
    return out


def hdf5_layer_names(model, blobs):
    """The groups of ``/data`` in Caffe's order: every layer of the net
    (``Net::ToHDF5``, splits included) when the model keeps its net, else
    ``caffe_layer_order`` or the layers holding ``blobs``."""
    net = getattr(model, "caffe_net", None)
    if net is not None:
        return net_proto.layer_names(net, net.state.phase)
    return getattr(model, "caffe_layer_order", None) or list(blobs)


def write_hdf5(path, model, blobs):
    """Caffe's HDF5 weights (``Net::ToHDF5`` without diffs): a group
    ``/data/<layer>`` per layer, holding datasets ``0..n-1`` (float32, the
    blob's shape) for the parameters the layer owns; a layer sharing
    another's has an empty group, as in Caffe. A '/' in a layer name nests
    groups, as HDF5 reads it."""
    import h5py

    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        for name in hdf5_layer_names(model, blobs):
            group = data.require_group(name)
            for i, blob in enumerate(blobs.get(name, ())):
                group.create_dataset(str(i), data=np.asarray(blob, "<f4"))


def write_atomically(path, data):
    """Write ``data`` to ``path`` through a temporary file in the same
    directory, fsync and a rename (then fsync the directory): a crash leaves
    the old file or the new one, never a partial one."""
    write_bytes_durably(path, data)


""".keras files of imported models, carrying their Caffe net.

``save_keras`` writes ``model.save``'s zip through ``atomic.atomic_output``
and adds one member, ``caffe_net.prototxt``: the model's filtered, upgraded
net (``model.caffe_net``, its ``state.phase`` the import's), which Keras's
loader ignores. ``load_keras`` reads such a file back with the net, so that
``export_caffemodel`` writes what Caffe writes for it (``net_proto``).
"""

import os
import zipfile

import keras
from google.protobuf import text_format

import keras_caffe.initializers  # noqa: F401 (registers CaffeFiller for the loader)
from keras_caffe.errors import KerasCaffeError
from keras_caffe.importers.formats.atomic import atomic_output
from keras_caffe.importers.formats.protofile import parse_text
from keras_caffe.importers.net.blobs import blob_layers
from keras_caffe.proto import caffe_pb2

NET_MEMBER = "caffe_net.prototxt"


def save_keras(model, path):
    """``model.save(path)``, atomically (no partial file; the user's path in
    errors; the mode ``open()`` would give), with the model's Caffe net when
    it has one."""
    net = getattr(model, "caffe_net", None)
    with atomic_output(path, suffix=".keras") as tmp:
        model.save(tmp)
        if net is not None:
            with zipfile.ZipFile(tmp, "a") as archive:
                archive.writestr(NET_MEMBER, text_format.MessageToString(net))
    return path


def load_keras(path):
    """``(model, net or None)`` from a .keras file made by keras-caffe;
    ``KerasCaffeError`` naming ``path`` for a missing file, one Keras cannot
    load, or a model without layers holding Caffe blobs."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise KerasCaffeError(f"{path}: no such file")
    if not zipfile.is_zipfile(path):
        raise KerasCaffeError(f"{path}: not a .keras file (not a zip archive)")
    try:
        model = keras.saving.load_model(path, compile=False)
    except Exception as err:  # Keras raises many types for a file it cannot read
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        raise KerasCaffeError(f"{path}: Keras cannot load it ({first})") from None
    if not blob_layers(model):
        raise KerasCaffeError(f"{path}: not a model made by keras-caffe (no layer holds Caffe "
                              "blobs): export needs one from `keras-caffe import -o` or "
                              "keras_caffe.import_model")
    net = read_net(path)
    if net is not None:
        model.caffe_net = net
        model.caffe_layer_order = [layer.name for layer in net.layer]
    return model, net


def read_net(path):
    """The Caffe net a .keras file carries, or None."""
    with zipfile.ZipFile(path) as archive:
        if NET_MEMBER not in archive.namelist():
            return None
        text = archive.read(NET_MEMBER).decode("utf-8")
    return parse_text(text, caffe_pb2.NetParameter, source=f"{path}:{NET_MEMBER}")

"""Reading Caffe weights: binary ``.caffemodel`` and HDF5 ``.caffemodel.h5``."""

import os

import numpy as np

from keras_caffe.errors import ProtoParseError, WeightsError
from keras_caffe.importers.formats import hdf5_files
from keras_caffe.importers.formats.file_kind import (
    SOLVERSTATE_NOT_WEIGHTS, hdf5_kind, is_solverstate, solverstate_not_weights)
from keras_caffe.importers.formats.message_count import excess_messages
from keras_caffe.importers.formats.protofile import parse_binary, truncation
from keras_caffe.importers.formats.upgrade import upgrade_net
from keras_caffe.proto import caffe_pb2

_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


#: NVIDIA/caffe's ``raw_data_type`` -> the numpy dtype of ``raw_data``.
_RAW_DTYPES = {
    caffe_pb2.BlobProto.DOUBLE: np.dtype("<f8"),
    caffe_pb2.BlobProto.FLOAT: np.dtype("<f4"),
    caffe_pb2.BlobProto.FLOAT16: np.dtype("<f2"),
    caffe_pb2.BlobProto.INT: np.dtype("<i4"),
    caffe_pb2.BlobProto.UINT: np.dtype("<u4"),
}


def blob_values(blob, where):
    """A ``BlobProto``'s values, flat, as float32: ``data`` (BVLC), else
    ``double_data``, else NVIDIA/caffe's ``raw_data`` of ``raw_data_type``."""
    if len(blob.data):
        return np.asarray(blob.data, dtype=np.float32)
    if len(blob.double_data):
        return np.asarray(blob.double_data, dtype=np.float32)
    if not blob.HasField("raw_data"):
        return np.zeros(0, np.float32)
    dtype = _RAW_DTYPES.get(blob.raw_data_type)
    if dtype is None or not blob.HasField("raw_data_type"):
        raise WeightsError(f"{where}: raw_data without a known raw_data_type "
                           f"({blob.raw_data_type if blob.HasField('raw_data_type') else 'none'})")
    if len(blob.raw_data) % dtype.itemsize:
        raise WeightsError(f"{where}: raw_data of {len(blob.raw_data)} bytes is not a whole "
                           f"number of {caffe_pb2.BlobProto.Type.Name(blob.raw_data_type)} values")
    return np.frombuffer(blob.raw_data, dtype=dtype).astype(np.float32)


def blob_shape(blob):
    """A ``BlobProto``'s shape: ``shape``, else the legacy 4-D fields."""
    if blob.HasField("shape"):
        return tuple(int(d) for d in blob.shape.dim)
    return (blob.num, blob.channels, blob.height, blob.width)


def _is_c3d_blob(blob):
    """Whether a ``BlobProto`` was written by C3D-v1.0 (facebook/C3D), whose
    BlobProto numbers num 1, channels 2, length 3, height 4, width 5, data 6,
    diff 7: read with BVLC's numbers it has no data and its values in diff
    (its width, a varint where BVLC has packed floats, is kept as an unknown
    field). BVLC's weights blobs always hold data."""
    return (not blob.HasField("shape") and not len(blob.data) and not len(blob.double_data)
            and not blob.HasField("raw_data")
            and len(blob.diff) > 0)


def _c3d_blob_to_array(blob, where):
    """A C3D-v1.0 blob (5-D num, channels, length, height, width)."""
    c3d = caffe_pb2.C3DBlobProto.FromString(blob.SerializeToString())
    shape = (c3d.num, c3d.channels, c3d.length, c3d.height, c3d.width)
    count = int(np.prod(shape))
    if len(c3d.data) != count:
        raise WeightsError(f"{where}: C3D blob holds {len(c3d.data)} values but its shape "
                           f"{shape} needs {count}")
    return np.asarray(c3d.data, dtype=np.float32).reshape(shape)


def blob_to_array(blob, where):
    """A ``BlobProto`` as a float32 numpy array of its shape (C3D-v1.0's 5-D
    blobs and NVIDIA/caffe's raw blobs too)."""
    if _is_c3d_blob(blob):
        return _c3d_blob_to_array(blob, where)
    shape = blob_shape(blob)
    data = blob_values(blob, where)
    count = int(np.prod(shape)) if shape else 1
    if len(data) != count:
        raise WeightsError(
            f"{where}: blob holds {len(data)} values but its shape {shape} needs {count}"
        )
    return data.reshape(shape)


def array_to_blob(array):
    """A numpy array as a ``BlobProto``, as ``Blob<float>::ToProto`` writes
    it (src/caffe/blob.cpp): ``shape`` and the float32 values in ``data``,
    nothing else. Built from the wire bytes (packed little-endian floats),
    not a Python list of floats per value."""
    array = np.asarray(array, np.float32)
    shape = b"".join(_varint(int(d)) for d in array.shape)
    data = np.ascontiguousarray(array, "<f4").tobytes()
    wire = _field(5, data) if data else b""  # data = 5 [packed = true]
    if array.ndim:  # Caffe's 0-d blob has no shape message at all
        wire += _field(7, _field(1, shape))  # shape = 7 { dim = 1 [packed] }
    return caffe_pb2.BlobProto.FromString(wire)


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number, payload):
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def load_weights(path):
    """``{layer name: [blobs as float32 arrays]}`` from a weights file.

    Binary (``.caffemodel``, V1 or current) or HDF5 (``/data/<layer>/<i>``),
    told apart by content, not by name. A binary file holding more messages
    than its size allows is refused before it is parsed
    (``message_count``); a solverstate is refused saying what it is.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(len(_HDF5_SIGNATURE))
    if head == _HDF5_SIGNATURE:
        return _load_hdf5(path)
    layers = _binary_layers(path)
    weights = {}
    for name, blobs in layers:
        if blobs:
            weights[name] = [blob_to_array(b, f"{path}: layer {name!r} blob {i}")
                             for i, b in enumerate(blobs)]
    if not weights and not layers:
        raise WeightsError(f"{path}: not a Caffe weights file (no layers in it)")
    return weights


def _binary_layers(path):
    """``[(layer name, blobs)]`` of a binary weights file (its bytes are
    freed on return, before the blobs are converted)."""
    with open(path, "rb") as f:
        data = f.read()
    _check_binary(path, data, caffe_pb2.NetParameter)
    if is_solverstate(data):
        raise WeightsError(f"{path}: {solverstate_not_weights(data, path)}")
    try:
        net = parse_binary(data, caffe_pb2.NetParameter, path)
        layers = _c3d_v1_layers(net)
        if layers is None:
            net = upgrade_net(net, path)
            layers = [(layer.name, layer.blobs) for layer in net.layer]
    except ProtoParseError as err:
        # A fork's file whose other fields clash with BVLC's numbering: its
        # names and blobs are still where every Caffe puts them.
        layers = _weights_only(path, data)
        if layers is None:
            raise WeightsError(f"{path}: {_unreadable(data, err)}") from None
    return layers


def _check_binary(path, data, message):
    """Refuse ``data`` holding more messages than its size allows, before
    the parse builds them."""
    refusal = excess_messages(data, message)
    if refusal:
        raise WeightsError(f"{path}: {refusal}")


def _unreadable(data, err):
    """Why a binary weights file did not parse: where it is cut short when
    that can be told (``protofile.truncation``), else the parser's error."""
    detail = truncation(data, caffe_pb2.NetParameter)
    return detail or f"not a Caffe weights file ({err})"


def _c3d_v1_layers(net):
    """``[(layer name, blobs)]`` of a C3D-v1.0 caffemodel (V1 layers with
    C3D's blobs), else None. Its V1 layer type enum clashes with BVLC's (30
    is C3D's CONVOLUTION3D, BVLC's ARGMAX; 40, DOWN_SAMPLING, is none of
    BVLC's), so its layers are not upgraded: names and blobs are all the
    weights need."""
    if net.layer or not any(_is_c3d_blob(b) for v1 in net.layers for b in v1.blobs):
        return None
    return [(v1.name, v1.blobs) for v1 in net.layers]


def _weights_only(path, data):
    """``[(layer name, blobs)]`` read with the weights-only schema (current,
    V1 and V0 layers), or None when that fails too."""
    _check_binary(path, data, caffe_pb2.WeightsOnlyNet)
    try:
        net = parse_binary(data, caffe_pb2.WeightsOnlyNet, path)
    except ProtoParseError:
        return None
    if net.layer:
        return [(layer.name, layer.blobs) for layer in net.layer]
    return [(v1.name or v1.layer.name, v1.blobs or v1.layer.blobs) for v1 in net.layers]


def _load_hdf5(path):
    """Caffe's HDF5 weights: ``/data/<layer>/<blob index>``. HDF5 reads a
    ``/`` in a layer name (``conv1/bn``) as nested groups, so a layer is a
    group whose members are the datasets ``0..n-1``, found at any depth.
    The file is checked as ``hdf5_files`` describes (no links, no other
    files, numbers only, sizes within the budget) before a value is read."""
    import h5py

    def fail(message):
        return WeightsError(f"{path}: {message}")

    found, budget = [], hdf5_files.Budget()
    with hdf5_files.open_file(path, fail) as f:
        if "data" not in f or not isinstance(f.get("data", getlink=True), h5py.HardLink) \
                or not isinstance(f["data"], h5py.Group):
            if hdf5_kind(f) == "solverstate":
                raise WeightsError(f"{path}: {SOLVERSTATE_NOT_WEIGHTS}")
            raise WeightsError(f"{path}: HDF5 file without Caffe's /data group")
        for name, group in hdf5_files.walk(f["data"], fail):
            datasets = hdf5_files.indexed(group, fail)
            if datasets and name:
                for ds in datasets:
                    hdf5_files.check_numeric(ds, fail, budget)
                found.append((name, datasets))
        # every blob checked (budget included) before any is read
        return {name: [hdf5_files.read(ds, fail) for ds in datasets] for name, datasets in found}

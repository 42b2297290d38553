"""Caffe's snapshot files, written and read as BVLC Caffe does.

``BINARYPROTO``: ``<prefix>_iter_N.caffemodel`` (``Net::ToProto`` of the
train net, the bytes Caffe writes: ``keras_caffe.importers.formats.net_proto``) and
``<prefix>_iter_N.solverstate`` (a ``SolverState``: ``iter``, ``learned_net``, ``history``, ``current_step``;
``SGDSolver::SnapshotSolverStateToBinaryProto``).

``HDF5``: ``<prefix>_iter_N.caffemodel.h5`` (``/data/<layer>/<blob index>``,
float32, one group per layer of the net, splits included, empty for layers
without blobs of their own; ``Net::ToHDF5``) and ``<prefix>_iter_N.solverstate.h5`` (``/iter`` and
``/current_step`` int32 (1,), ``/learned_net`` a NUL-terminated fixed-length
string, ``/history/<i>`` float32; ``SnapshotSolverStateToHDF5``).

What Caffe does not store (the user's ``state`` dict, the solver type, the
weights file's SHA-256) goes where Caffe ignores it: in binary files, one extra
length-delimited field number ``EXTRA_FIELD`` of SolverState (caffe.proto uses
1-4; proto2 parsers keep unknown fields and Caffe never reads them); in HDF5,
a root dataset ``/keras_caffe_state`` (Caffe reads only the names above).
Both hold JSON.
"""

import hashlib
import json

import numpy as np
from google.protobuf import message as _message

from keras_caffe.errors import CaffeImportError
from keras_caffe.importers.formats import hdf5_files
from keras_caffe.importers.snapshots import params as sp
from keras_caffe.importers.net.importing import load_into
from keras_caffe.importers.net.export import caffemodel_proto, write_hdf5
from keras_caffe.importers.formats.file_kind import WEIGHTS_NOT_SOLVERSTATE, hdf5_kind, is_weights
from keras_caffe.importers.formats.message_count import excess_messages
from keras_caffe.importers.formats.protofile import truncation
from keras_caffe.importers.formats.snapshot_marks import EXTRA_FIELD
from keras_caffe.importers.snapshots.file_io import (
    SnapshotError, atomic_output, check_checksum, decode_json, is_hdf5, resolve_weights,
    sha256_file, write_bytes_durably)
from keras_caffe.importers.net.weights import array_to_blob, blob_to_array, load_weights
from keras_caffe.proto import caffe_pb2

HDF5_EXTRA = "keras_caffe_state"
EXTRA_FORMAT = "keras-caffe"
EXTRA_VERSION = 1


def current_step(optimizer, iteration):
    """Caffe's ``current_step`` after ``iteration`` updates.

    ``SGDSolver::GetLearningRate`` sets it for "step" (``iter / stepsize``)
    and "multistep" (the number of stepvalues passed), evaluated at the last
    update's ``iter``, ``iteration - 1``; other policies leave it 0.
    """
    config = optimizer.get_config().get("learning_rate")
    while isinstance(config, dict) and config.get("class_name") == "Warmup":
        config = config["config"]["schedule"]
    if not isinstance(config, dict) or iteration <= 0:
        return 0
    last = iteration - 1
    if config.get("class_name") == "Step":
        return last // int(config["config"]["stepsize"])
    if config.get("class_name") == "MultiStep":
        return sum(1 for v in config["config"]["stepvalue"] if last >= v)
    return 0


# -- writing -------------------------------------------------------------------

def write(model, optimizer, weights_path, solverstate_path, learned_net, iteration, state_json,
          hdf5):
    """Write the pair, weights first; returns nothing. ``learned_net`` is the
    weights path as Caffe writes it (the prefix-based string)."""
    opt = sp.caffe_optimizer(optimizer, solverstate_path)
    params = sp.learnable_params(model, solverstate_path)
    if sp.pending_accumulation(opt):
        raise SnapshotError(solverstate_path, "the optimizer is between the micro-batches of "
                            "an iteration (iter_size); Caffe snapshots only whole iterations")
    blobs = _weights_by_layer(params)
    history = sp.slot_blobs(solverstate_path, opt, params)
    if hdf5:
        with atomic_output(weights_path) as tmp:
            write_hdf5(tmp, model, blobs)
            checksum = sha256_file(tmp)
    else:
        data = caffemodel_proto(model, blobs).SerializeToString()
        write_bytes_durably(weights_path, data)
        checksum = hashlib.sha256(data).hexdigest()
    extra = json.dumps({"format": EXTRA_FORMAT, "version": EXTRA_VERSION,
                        "solver": opt.caffe_type, "slots": list(opt.slot_names),
                        "weights_sha256": checksum, "state": json.loads(state_json)},
                       sort_keys=True)
    step = current_step(opt, iteration)
    if hdf5:
        with atomic_output(solverstate_path) as tmp:
            _write_state_hdf5(tmp, iteration, learned_net, step, history, extra)
    else:
        state = caffe_pb2.SolverState(iter=iteration, learned_net=learned_net, current_step=step)
        for blob in history:
            state.history.add().CopyFrom(array_to_blob(blob))
        write_bytes_durably(solverstate_path, state.SerializeToString()
                            + _length_delimited(EXTRA_FIELD, extra.encode("utf-8")))


def _weights_by_layer(params):
    """``{Caffe layer: [Caffe blobs]}`` in Caffe's order."""
    values = {id(layer): layer.caffe_blobs() for layer in sp.layer_order(params)}
    out = {}
    for p in params:
        # a copy: on PyTorch a layer's blobs may share its variables' storage
        blob = np.array(values[id(p.layer)][p.index], np.float32).reshape(p.shape)
        out.setdefault(p.caffe_layer, []).append(blob)
    return out


def _write_state_hdf5(path, iteration, learned_net, step, history, extra):
    import h5py

    with h5py.File(path, "w") as f:
        f.create_dataset("iter", data=np.array([iteration], "<i4"))
        _fixed_string(f, "learned_net", learned_net)
        f.create_dataset("current_step", data=np.array([step], "<i4"))
        group = f.create_group("history")
        for i, blob in enumerate(history):
            group.create_dataset(str(i), data=np.asarray(blob, "<f4"))
        _fixed_string(f, HDF5_EXTRA, extra)


def _fixed_string(f, name, text):
    """A scalar NUL-terminated ASCII string of ``len + 1`` bytes, as HDF5's
    ``H5LTmake_dataset_string`` (Caffe's ``hdf5_save_string``) writes it."""
    import h5py

    raw = text.encode("utf-8")
    string_type = h5py.h5t.C_S1.copy()
    string_type.set_size(len(raw) + 1)
    string_type.set_strpad(h5py.h5t.STR_NULLTERM)
    space = h5py.h5s.create(h5py.h5s.SCALAR)
    creation = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
    creation.set_obj_track_times(False)  # no clock in the file: the same state, the same bytes
    dataset = h5py.h5d.create(f.id, name.encode(), string_type, space, dcpl=creation)
    dataset.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array(raw + b"\0", dtype=f"S{len(raw) + 1}"),
                  mtype=string_type)


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _length_delimited(field, payload):
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


# -- reading -------------------------------------------------------------------

class CaffeState:
    """A parsed Caffe solverstate: ``iter``, ``learned_net`` (or None),
    ``current_step``, ``history`` (float32 arrays) and ``extra`` (our JSON, or
    None in Caffe's own files)."""

    def __init__(self, iteration, learned_net, step, history, extra):
        self.iter, self.learned_net, self.current_step = iteration, learned_net, step
        self.history, self.extra = history, extra


def read_state(path):
    """Parse a Caffe solverstate (binary or HDF5, told apart by content)."""
    return _read_state_hdf5(path) if is_hdf5(path) else _read_state_binary(path)


def _read_state_binary(path):
    with open(path, "rb") as f:
        data = f.read()
    if not data:
        raise SnapshotError(path, "empty file: not a solverstate")
    refusal = excess_messages(data, caffe_pb2.SolverState)
    if refusal:
        raise SnapshotError(path, refusal)
    if is_weights(data):
        raise SnapshotError(path, WEIGHTS_NOT_SOLVERSTATE)
    state = caffe_pb2.SolverState()
    try:
        state.ParseFromString(data)
        extra = _field_payload(data, EXTRA_FIELD)
    except (_message.DecodeError, RuntimeError, IndexError, ValueError) as err:
        cut = truncation(data, caffe_pb2.SolverState, {EXTRA_FIELD: "keras-caffe state"})
        raise SnapshotError(path, f"{cut}: not a whole solverstate" if cut else
                            f"truncated or corrupt solverstate (not a binary SolverState: "
                            f"{err or 'protobuf decode error'})") from None
    try:
        history = [blob_to_array(b, f"history blob {i}") for i, b in enumerate(state.history)]
    except CaffeImportError as err:
        raise SnapshotError(path, f"corrupt solverstate: {err}") from None
    if not state.HasField("iter"):
        raise SnapshotError(path, "not a solverstate (no `iter` field)")
    extra = decode_json(path, extra.decode("utf-8", "replace"), "keras-caffe state") \
        if extra is not None else None
    return CaffeState(state.iter, state.learned_net if state.HasField("learned_net") else None,
                      state.current_step, history, extra)


def _field_payload(data, wanted):
    """The payload of the last top-level length-delimited field ``wanted``."""
    found, pos = None, 0
    while pos < len(data):
        tag, pos = _read_varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, pos = _read_varint(data, pos)
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        elif wire == 2:
            size, pos = _read_varint(data, pos)
            if field == wanted:
                found = data[pos:pos + size]
            pos += size
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(data):
            raise ValueError("field runs past the end of the file")
    return found


def _read_varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _read_state_hdf5(path):
    """Caffe's HDF5 solverstate, each dataset checked before it is read
    (``hdf5_files``): numbers where Caffe writes numbers, no links, nothing
    stored in another file, sizes within the reading budget."""
    import h5py

    def fail(message):
        return SnapshotError(path, message)

    budget = hdf5_files.Budget()
    with hdf5_files.open_file(path, fail) as f:
        for key in ("iter", "current_step", "history"):
            if key not in f:
                if hdf5_kind(f) == "weights":
                    raise SnapshotError(path, WEIGHTS_NOT_SOLVERSTATE)
                raise SnapshotError(path, f"not a Caffe HDF5 solverstate (no /{key})")
        group = f["history"]
        if not isinstance(group, h5py.Group) or \
                not isinstance(f.get("history", getlink=True), h5py.HardLink):
            raise SnapshotError(path, "corrupt solverstate: /history is not a group")
        datasets = hdf5_files.indexed(group, fail)
        if len(datasets) != len(group):
            raise SnapshotError(path, f"corrupt solverstate: /history/{len(datasets)} is "
                                "missing")
        for ds in datasets:
            hdf5_files.check_numeric(ds, fail, budget)
        counters = [hdf5_files.dataset(f, key, fail) for key in ("iter", "current_step")]
        for ds in counters:
            hdf5_files.check_numeric(ds, fail, budget)
            if ds.size != 1:
                raise SnapshotError(path, f"corrupt solverstate: {ds.name} holds {ds.size} "
                                    "values, expected 1")
        iteration, step = (_counter(path, hdf5_files.read(ds, fail, np.float64), ds.name)
                           for ds in counters)
        learned = (hdf5_files.text(hdf5_files.dataset(f, "learned_net", fail), fail)
                   if "learned_net" in f else None)
        extra = (hdf5_files.text(hdf5_files.dataset(f, HDF5_EXTRA, fail), fail)
                 if HDF5_EXTRA in f else None)
        history = [hdf5_files.read(ds, fail) for ds in datasets]
    extra = decode_json(path, extra, "keras-caffe state") if extra is not None else None
    return CaffeState(iteration, learned, step, history, extra)


def _counter(path, value, name):
    """A solverstate's ``iter`` / ``current_step``: an integer in int32's
    range (Caffe stores them as int32), else ``SnapshotError``."""
    value = float(value.reshape(-1)[0])
    if not value.is_integer() or not 0 <= value < 2 ** 31:
        raise SnapshotError(path, f"corrupt solverstate: {name} is {value:g}, expected an "
                            "integer in [0, 2^31)")
    return int(value)


def read_weights(path, params):
    """``{Caffe layer: [blobs]}`` for ``params`` from a weights file, refusing
    one that lacks a layer or whose blob shapes differ (another net)."""
    try:
        if is_hdf5(path):
            found = _read_weights_hdf5(path, params)
        else:
            found = load_weights(path)
    except CaffeImportError as err:
        raise SnapshotError(path, f"truncated or corrupt weights file ({err})") from None
    out = {}
    for p in params:
        blobs = found.get(p.caffe_layer)
        if blobs is None:
            raise SnapshotError(path, f"weights of another net: no blobs for layer "
                                f"{p.caffe_layer!r}")
        if p.blob >= len(blobs):
            raise SnapshotError(path, f"weights of another net: layer {p.caffe_layer!r} has "
                                f"{len(blobs)} blobs, the net needs blob {p.blob} {p.shape}")
        blob = blobs[p.blob]
        if tuple(blob.shape) != p.shape and not sp.legacy_same(blob.shape, p.shape):
            raise SnapshotError(path, f"weights of another net: {p} has shape "
                                f"{tuple(blob.shape)}, the net needs {p.shape}")
        out.setdefault(p.caffe_layer, []).append(blob.reshape(p.shape))
    return out


def _read_weights_hdf5(path, params):
    """Blobs looked up by layer name (``/data/<name>/<i>``), so Caffe names
    with '/' (nested groups in HDF5) are found too. Each blob must have the
    shape the net needs (``params``) before any is read."""
    import h5py

    def fail(message):
        return SnapshotError(path, message)

    wanted = {}
    for p in params:
        wanted.setdefault(p.caffe_layer, {})[p.blob] = p
    found, budget = {}, hdf5_files.Budget()
    with hdf5_files.open_file(path, fail) as f:
        if "data" not in f or not isinstance(f["data"], h5py.Group):
            raise SnapshotError(path, "HDF5 file without Caffe's /data group: not a "
                                "Caffe weights file")
        data = f["data"]
        for name, blobs in wanted.items():
            group = _layer_group(data, name, fail)
            if group is None:
                continue
            datasets = hdf5_files.indexed(group, fail)
            for i, ds in enumerate(datasets):
                hdf5_files.check_numeric(ds, fail, budget)
                p = blobs.get(i)
                if p is not None and tuple(ds.shape) != p.shape and \
                        not sp.legacy_same(ds.shape, p.shape):
                    raise SnapshotError(path, f"weights of another net: {p} has shape "
                                        f"{tuple(ds.shape)}, the net needs {p.shape}")
            found[name] = datasets
        return {name: [hdf5_files.read(ds, fail) for ds in datasets]
                for name, datasets in found.items()}


def _layer_group(data, name, fail):
    """``/data/<name>`` (through nested groups for a name with '/'), with no
    link on the way; None when absent."""
    import h5py

    group = data
    for part in name.split("/"):
        if part not in group:
            return None
        members = dict(hdf5_files.members(group, fail))
        group = members.get(part)
        if not isinstance(group, h5py.Group):
            return None
    return group


def _checked_extra(path, extra):
    """Our JSON beside Caffe's fields, validated like user input before it
    changes anything: None when absent or not ours (another tool's field
    number), else a dict whose ``slots`` is a list of names,
    ``weights_sha256`` a hex digest and ``state`` a dict."""
    if not isinstance(extra, dict) or extra.get("format") != EXTRA_FORMAT:
        return None
    checks = {
        "slots": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "weights_sha256": lambda v: isinstance(v, str) and len(v) == 64
        and all(c in "0123456789abcdef" for c in v),
        "state": lambda v: isinstance(v, dict),
        "version": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "solver": lambda v: v is None or isinstance(v, str),
    }
    for key, valid in checks.items():
        if key in extra and not valid(extra[key]):
            raise SnapshotError(path, f"corrupt keras-caffe state: {key!r} is "
                                f"{_short(extra[key])}")
    if extra.get("version", EXTRA_VERSION) > EXTRA_VERSION:
        raise SnapshotError(path, f"keras-caffe state version {extra['version']} is newer than "
                            f"this keras-caffe reads ({EXTRA_VERSION})")
    return extra


def _short(value):
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load(path, model, optimizer, state=None, check_state=None):
    """Restore the model and optimizer from a Caffe solverstate; returns the
    stored ``state`` dict ({} for Caffe's own files). Everything is checked
    before anything is changed."""
    state = state or read_state(path)  # first: a file of another kind says so
    opt = sp.caffe_optimizer(optimizer, path)
    params = sp.learnable_params(model, path)
    extra = _checked_extra(path, state.extra)
    sp.check_history(path, opt, params, state.history,
                     stored_slots=extra.get("slots") if extra else None)
    n = len(params)
    history = [blob.reshape(params[i % n].shape) for i, blob in enumerate(state.history)]
    weights = None
    if state.learned_net:  # Caffe restores the weights only when it names them
        weights_path = resolve_weights(path, state.learned_net, caffe_style=True)
        weights = read_weights(weights_path, params)
        if extra:
            check_checksum(path, weights_path, extra.get("weights_sha256"))
    assignments = sp.slot_assignments(opt, params, history)
    stored = dict(extra.get("state") or {}) if extra else {}
    if check_state is not None:
        check_state(stored)
    if weights is not None:
        load_into(model, weights, source=path)
    for variable, value in assignments:
        variable.assign(np.asarray(value, np.float32).reshape(variable.shape))
    opt.iterations.assign(state.iter)
    sp.reset_accumulation(opt)
    return stored

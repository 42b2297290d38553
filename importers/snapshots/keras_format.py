"""keras-caffe's own snapshot format: any Keras model, any Keras optimizer.

``<prefix>_iter_N.weights.h5`` is ``model.save_weights``. The solverstate,
``<prefix>_iter_N.solverstate``, is an HDF5 file:

- attributes ``format`` (``FORMAT``), ``version``, ``iteration``,
  ``optimizer_class`` (module.qualname), ``optimizer_name``, ``model_name``,
  ``weights_file`` (the weights' file name, next to the solverstate) and
  ``weights_sha256``;
- string datasets ``optimizer_config`` (``keras.saving.serialize_keras_object``
  as JSON), ``model_fingerprint`` (JSON ``[[path, shape, dtype], ...]`` for
  ``model.weights``) and ``state`` (the caller's dict as JSON);
- group ``optimizer_variables``: every ``optimizer.variables`` value, keyed by
  its ``.path`` (``"sgd/ip1_kernel_history"``), in its own floating-point
  dtype; integers (the iteration counters) as int64 on every backend.

Restoring assigns the stored arrays unchanged, so the optimizer's state
(momentum, Adam's moments, YellowFin's curvature window and averages, the
iteration counter) is bitwise what it was.

A snapshot restores on every Keras backend, whichever wrote it. Keras keeps
an optimizer's counters in int64 on TensorFlow and in int32 on JAX (without
x64) and PyTorch: the file holds int64, and a counter is restored into the
variable's own integer type, refused if its value does not fit there.

The model is matched as Keras's ``load_weights`` matches it: by layer paths
and shapes, without the top-level model's name. Keras puts a Sequential's
name in its weights' paths (``sequential_1/conv1/kernel``) and in its
optimizer's slot names (``sgd/sequential_1_conv1_kernel_momentum``), and that
name is auto-generated per process: the same model rebuilt elsewhere is
``sequential``. The name is stored (``model_name``); in snapshots written
before it was, it is the first component all stored paths share when the
model's own paths all start with its name.
"""

import json
import os

import keras
import numpy as np
from keras import ops

from keras_caffe.importers.formats import hdf5_files
from keras_caffe.importers.formats.snapshot_marks import KERAS_FORMAT
from keras_caffe.importers.snapshots.file_io import (
    SnapshotError, atomic_output, check_checksum, decode_json, resolve_weights, sha256_file)
from keras_caffe.importers.snapshots.params import reset_accumulation

FORMAT = KERAS_FORMAT
VERSION = 1
_ACCUMULATION = ("iter_size_micro_step", "_iter_size_sum")


def class_name(obj):
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def fingerprint(model):
    return [[w.path, [int(d) for d in w.shape], str(w.dtype)] for w in model.weights]


def within_model(path, model_name):
    """A weight's path without the top-level model's name (Keras writes a
    Sequential's into its weights' paths: ``sequential_1/conv1/kernel``)."""
    prefix = f"{model_name}/"
    return path[len(prefix):] if model_name is not None and path.startswith(prefix) else path


def write(model, optimizer, weights_path, solverstate_path, iteration, state_json):
    """Write the pair, weights first."""
    import h5py

    with atomic_output(weights_path, suffix=".weights.h5") as tmp:
        model.save_weights(tmp, overwrite=True)
        checksum = sha256_file(tmp)
    config = json.dumps(keras.saving.serialize_keras_object(optimizer), default=repr)
    with atomic_output(solverstate_path) as tmp:
        with h5py.File(tmp, "w") as f:
            f.attrs.update({
                "format": FORMAT, "version": VERSION, "iteration": int(iteration),
                "optimizer_class": class_name(optimizer), "optimizer_name": optimizer.name,
                "model_name": model.name,
                "weights_file": os.path.basename(weights_path), "weights_sha256": checksum,
            })
            f.create_dataset("optimizer_config", data=config)
            f.create_dataset("model_fingerprint", data=json.dumps(fingerprint(model)))
            f.create_dataset("state", data=state_json)
            group = f.create_group("optimizer_variables")
            for variable in optimizer.variables:
                group.create_dataset(variable.path, data=stored_value(variable))


def stored_value(variable):
    """``variable``'s value as the file holds it: its own floating-point type,
    or int64 for an integer type (int32 on JAX and PyTorch, int64 on
    TensorFlow: the same file from every backend). A copy: on PyTorch the
    converted tensor shares the variable's storage."""
    value = np.array(ops.convert_to_numpy(variable), copy=True)
    return value.astype(np.int64) if np.issubdtype(value.dtype, np.integer) else value


def is_ours(f):
    return f.attrs.get("format") == FORMAT


def load(path, f, model, optimizer, check_state=None):
    """Restore from the open solverstate ``f``; returns the stored state dict.
    Everything is checked before anything is changed."""
    version = int(f.attrs.get("version", 0))
    if version > VERSION:
        raise SnapshotError(path, f"snapshot format version {version} is newer than this "
                            f"keras-caffe reads ({VERSION})")
    stored_class = _attr(f, "optimizer_class")
    if stored_class != class_name(optimizer):
        raise SnapshotError(path, f"holds the state of a {stored_class} optimizer; the model's "
                            f"optimizer is a {class_name(optimizer)}")
    stored = _checked_fingerprint(
        path, decode_json(path, _text(path, f, "model_fingerprint"), "fingerprint"))
    stored_name = _stored_model_name(path, f, stored, model)
    _check_fingerprint(path, stored, stored_name, model)
    values = _match_variables(path, f, optimizer, _slot_renamer(model, stored_name))
    weights = resolve_weights(path, _attr(f, "weights_file"), caffe_style=False)
    check_checksum(path, weights, _attr(f, "weights_sha256"))
    state = decode_json(path, _text(path, f, "state"), "state") if "state" in f else {}
    if not isinstance(state, dict):
        raise SnapshotError(path, f"corrupt state: a {type(state).__name__}, not a dict")
    if check_state is not None:
        check_state(state)
    _check_weights_file(weights)
    try:
        model.load_weights(weights)
    except (ValueError, OSError, KeyError) as err:
        raise SnapshotError(weights, f"cannot load these weights into model {model.name!r} "
                            f"({err})") from None
    for variable, value in values:
        variable.assign(value)
    _reset_missing_accumulation(optimizer, values)
    return state


def _attr(f, name):
    value = f.attrs.get(name)
    return value.decode("utf-8") if isinstance(value, bytes) else value


def _text(path, f, key):
    def fail(message):
        return SnapshotError(path, message)

    return hdf5_files.text(hdf5_files.dataset(f, key, fail), fail)


def _checked_fingerprint(path, stored):
    """``[(path, shape)]`` of the stored fingerprint (``[[path, shape, dtype],
    ...]``), or ``SnapshotError`` for anything else (the file may be hostile)."""
    def entry(item):
        return isinstance(item, list) and len(item) >= 2 and isinstance(item[0], str) and \
            isinstance(item[1], list) and all(isinstance(d, int) and not isinstance(d, bool)
                                              for d in item[1])

    if not isinstance(stored, list) or not all(entry(item) for item in stored):
        raise SnapshotError(path, "corrupt fingerprint: not a list of [path, shape, dtype]")
    return [(item[0], tuple(item[1])) for item in stored]


def _stored_model_name(path, f, stored, model):
    """The name of the model the snapshot was taken from, as its weights'
    paths hold it: the ``model_name`` attribute, else (snapshots written
    before it) the first component shared by all stored paths when the
    model's own paths all start with its name; None when neither holds."""
    name = _attr(f, "model_name")
    if name is not None and not isinstance(name, str):
        raise SnapshotError(path, f"corrupt solverstate: model_name is a "
                            f"{type(name).__name__}, not a string")
    if name is not None:
        return name
    paths = [p for p, _ in stored]
    own = [w.path for w in model.weights]
    if not paths or not own or not all(p.startswith(f"{model.name}/") for p in own):
        return None
    firsts = {p.split("/", 1)[0] for p in paths if "/" in p}
    return firsts.pop() if len(firsts) == 1 and all("/" in p for p in paths) else None


def _check_fingerprint(path, stored, stored_name, model):
    """Refuse a snapshot of another model, naming the first weight whose
    path (without the model's name) or shape differs, or the first extra
    weight when the counts differ."""
    old = [(within_model(p, stored_name), shape) for p, shape in stored]
    new = [(within_model(w.path, model.name), tuple(int(d) for d in w.shape))
           for w in model.weights]
    for i, (a, b) in enumerate(zip(old, new)):
        if a != b:
            what = [name for name, x, y in (("path", a[0], b[0]), ("shape", a[1], b[1]))
                    if x != y]
            raise SnapshotError(path, f"snapshot from another model: weight {i} is {a[0]!r} "
                                f"{a[1]} in the snapshot, {b[0]!r} {b[1]} in the model (the "
                                f"{' and the '.join(what)} differ{'' if len(what) > 1 else 's'})")
    if len(old) != len(new):
        longer = old if len(old) > len(new) else new
        extra = longer[min(len(old), len(new))]
        where = "snapshot" if longer is old else "model"
        raise SnapshotError(path, f"snapshot from another model: {len(old)} weights in the "
                            f"snapshot, {len(new)} in the model (first extra, in the "
                            f"{where}: {extra[0]!r} {extra[1]})")


def _slot_renamer(model, stored_name):
    """A function taking an optimizer variable's name after its optimizer's
    (``sequential_conv1_kernel_momentum``) to the snapshot's
    (``sequential_1_conv1_kernel_momentum``): Keras names a slot after its
    weight's path, model name included. Identity when the names agree."""
    if stored_name is None or stored_name == model.name:
        return lambda name: name
    owners = sorted({w.path.replace("/", "_") for w in model.weights
                     if w.path.startswith(f"{model.name}/")}, key=len, reverse=True)

    def rename(name):
        if any(name.startswith(f"{owner}_") for owner in owners):
            return stored_name + name[len(model.name):]
        return name

    return rename


def _check_weights_file(path):
    """Check the ``.weights.h5`` Keras is about to read as ``hdf5_files``
    checks our own files: no links, nothing in other files, numbers within
    the reading budget (Keras's reader follows whatever the file says)."""
    import h5py

    def fail(message):
        return SnapshotError(path, message)

    budget = hdf5_files.Budget()
    with hdf5_files.open_file(path, fail) as f:
        for _, group in hdf5_files.walk(f, fail):
            for _, obj in hdf5_files.members(group, fail):
                if isinstance(obj, h5py.Dataset):
                    hdf5_files.check_numeric(obj, fail, budget)


def _stored_variables(path, f):
    """``{path: dataset}`` under ``/optimizer_variables`` (groups follow the
    variables' paths), walked and checked by ``hdf5_files``; nothing read."""
    import h5py

    def fail(message):
        return SnapshotError(path, message)

    found = {}
    if "optimizer_variables" in f:
        root = f["optimizer_variables"]
        if not isinstance(root, h5py.Group):
            raise SnapshotError(path, "corrupt solverstate: /optimizer_variables is not a group")
        for name, group in hdf5_files.walk(root, fail):
            for key, obj in hdf5_files.members(group, fail):
                if isinstance(obj, h5py.Dataset):
                    found[f"{name}/{key}" if name else key] = obj
    return found


def _match_variables(path, f, optimizer, rename):
    """``[(optimizer variable, stored value)]``; refuses a missing variable or
    a shape/dtype change. ``rename`` takes a variable's name (after the
    optimizer's) to the snapshot's model name (``_slot_renamer``). An
    ``iter_size`` accumulator missing from the file (saved with iter_size 1)
    starts at zero; one in the file that the optimizer lacks must be zero (no
    micro-batch gradient pending)."""
    def fail(message):
        return SnapshotError(path, message)

    stored, budget = _stored_variables(path, f), hdf5_files.Budget()
    for dataset in stored.values():
        hdf5_files.check_numeric(dataset, fail, budget)
    old_name, new_name = _attr(f, "optimizer_name"), optimizer.name
    pairs, used = [], set()
    for variable in optimizer.variables:
        key = variable.path
        if key.startswith(new_name + "/"):
            key = (old_name or new_name) + "/" + rename(key[len(new_name) + 1:])
        if key not in stored:
            if any(key.endswith(tag) for tag in _ACCUMULATION):
                continue
            raise SnapshotError(path, f"has no value for optimizer variable {variable.path!r}: "
                                "the optimizer's configuration differs from the snapshot's")
        value = stored[key]
        used.add(key)
        if tuple(np.shape(value)) != tuple(variable.shape) or \
                not _same_type(np.dtype(value.dtype), np.dtype(variable.dtype)):
            raise SnapshotError(path, f"optimizer variable {variable.path!r} is "
                                f"{np.dtype(value.dtype).name} {tuple(np.shape(value))} in the "
                                f"snapshot, {variable.dtype} {tuple(variable.shape)} now")
        pairs.append((variable, value))
    pairs = [(variable, _restored_value(path, variable, hdf5_files.read(value, fail, value.dtype)))
             for variable, value in pairs]
    for key in sorted(set(stored) - used):
        if not (any(key.endswith(tag) for tag in _ACCUMULATION)
                and (key.endswith("micro_step")
                     or not np.any(hdf5_files.read(stored[key], fail, stored[key].dtype)))):
            raise SnapshotError(path, f"holds optimizer variable {key!r}, which the optimizer "
                                "does not have: the optimizer's configuration differs")
    return pairs


def _same_type(stored, own):
    """The stored type restores into the variable's: the same type, or two
    integer types (the counters: int64 in the file, int32 on JAX and PyTorch)."""
    return stored == own or (np.issubdtype(stored, np.integer) and np.issubdtype(own, np.integer))


def _restored_value(path, variable, value):
    """``value`` in ``variable``'s type; an integer it cannot hold (a counter
    past int32 from TensorFlow, restored on JAX or PyTorch) is refused."""
    own = np.dtype(variable.dtype)
    if value.dtype == own:
        return value
    limits = np.iinfo(own)
    outside = value[(value < limits.min) | (value > limits.max)]
    if outside.size:
        raise SnapshotError(path, f"optimizer variable {variable.path!r} is {int(outside[0])} in "
                            f"the snapshot, outside the range of {own.name}, the type Keras's "
                            f"{keras.backend.backend()} backend keeps it in")
    return value.astype(own)


def _reset_missing_accumulation(optimizer, restored):
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    step = getattr(inner, "_micro_step", None)
    if step is not None and id(step) not in {id(v) for v, _ in restored}:
        reset_accumulation(inner)

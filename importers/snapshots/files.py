"""Training snapshots: save and resume a model with its optimizer's state.

Three formats, chosen when saving and told apart by content when loading:

============  ==========================================  ==============================
format        weights file                                solverstate
============  ==========================================  ==============================
"keras"       ``<prefix>_iter_N.weights.h5``              ``<prefix>_iter_N.solverstate``
              (``model.save_weights``)                    (HDF5, ours: any optimizer)
"caffe"       ``<prefix>_iter_N.caffemodel``              ``<prefix>_iter_N.solverstate``
              (NetParameter, binary)                      (SolverState, binary)
"caffe_hdf5"  ``<prefix>_iter_N.caffemodel.h5``           ``<prefix>_iter_N.solverstate.h5``
============  ==========================================  ==============================

The Caffe formats are BVLC Caffe's own (``caffe train --snapshot`` reads
ours, ``load_snapshot`` reads Caffe's); they hold models from
``keras_caffe.import_model`` with the six Caffe solvers. The Keras format holds
any Keras model and optimizer (YellowFin, ``keras.optimizers.*``) bitwise.

Crash safety: each file is written to a temporary file in its directory,
fsynced, renamed into place and the directory fsynced; the weights come first
and the solverstate, which names its weights file, last. A crash at any point
leaves the previous snapshot loadable, and ``list_snapshots`` only lists
solverstates, so a weights file without its solverstate is never picked up.
Our solverstates also store the weights file's SHA-256: a pair whose weights
were overwritten afterwards is refused rather than silently mixed.
"""

import dataclasses
import os
import re

import keras

from keras_caffe._checks import check_int
from keras_caffe.errors import ArgumentError
from keras_caffe.importers.formats import hdf5_files
from keras_caffe.importers.snapshots import caffe_format as snapshot_caffe
from keras_caffe.importers.snapshots import keras_format as snapshot_keras
from keras_caffe.importers.snapshots.file_io import SnapshotError, encode_state, is_hdf5

__all__ = ["save_snapshot", "load_snapshot", "snapshot_paths", "list_snapshots",
           "latest_snapshot", "SnapshotFiles", "SnapshotError", "FORMATS"]

#: format -> (weights suffix, solverstate suffix)
FORMATS = {
    "keras": (".weights.h5", ".solverstate"),
    "caffe": (".caffemodel", ".solverstate"),
    "caffe_hdf5": (".caffemodel.h5", ".solverstate.h5"),
}


@dataclasses.dataclass(frozen=True)
class SnapshotFiles:
    """A snapshot's files: ``weights`` and ``solverstate`` paths, its
    ``iteration`` and ``format``."""

    weights: str
    solverstate: str
    iteration: int
    format: str


def _check_format(owner, format):
    if format not in FORMATS:
        raise ArgumentError(owner, "format", f"must be one of {', '.join(map(repr, FORMATS))}, "
                            f"got {format!r}")
    return format


def snapshot_paths(prefix, iteration, format="keras"):
    """``(weights_path, solverstate_path)`` for a snapshot, named as Caffe's
    ``Solver::SnapshotFilename`` does: ``prefix + "_iter_" + N + extension``."""
    _check_format("snapshot_paths", format)
    iteration = check_int("snapshot_paths", "iteration", iteration)
    stem = f"{os.fspath(prefix)}_iter_{iteration}"
    weights, state = FORMATS[format]
    return stem + weights, stem + state


def save_snapshot(model, optimizer, prefix, iteration=None, *, format="keras", state=None):
    """Write a snapshot of ``model`` and ``optimizer`` after ``iteration`` updates.

    Args:
        model: the Keras model (for Caffe formats, one from ``import_model``).
        optimizer: its optimizer (for Caffe formats, one of the six Caffe
            solvers). It is built on ``model.trainable_variables`` if it is not.
        prefix: Caffe's ``snapshot_prefix``, e.g. ``"snap/run"``; its
            directory is created if missing.
        iteration: Caffe's ``iter``; must equal ``optimizer.iterations``
            (``None`` takes it from there).
        format: ``"keras"``, ``"caffe"`` or ``"caffe_hdf5"``.
        state: a JSON-serializable dict stored with the solverstate and
            returned by ``load_snapshot`` (in Caffe's files where Caffe
            ignores it).
    Returns:
        ``SnapshotFiles``. In Caffe formats, ``learned_net`` in the
        solverstate is the weights path as written here (prefix-based), as
        Caffe writes it.
    """
    owner = "save_snapshot"
    _check_format(owner, format)
    state_json = encode_state(owner, state)
    optimizer = _unwrapped(optimizer)
    _ensure_built(model, optimizer)
    current = int(optimizer.iterations.numpy())
    iteration = current if iteration is None else check_int(owner, "iteration", iteration)
    if iteration != current:
        raise ArgumentError(owner, "iteration", f"is {iteration} but optimizer.iterations is "
                            f"{current} (Caffe's iter counts updates)")
    weights, solverstate = snapshot_paths(prefix, iteration, format)
    directory = os.path.dirname(os.path.abspath(solverstate))
    os.makedirs(directory, exist_ok=True)
    if format == "keras":
        snapshot_keras.write(model, optimizer, weights, solverstate, iteration, state_json)
    else:
        snapshot_caffe.write(model, optimizer, weights, solverstate, learned_net=weights,
                             iteration=iteration, state_json=state_json,
                             hdf5=format == "caffe_hdf5")
    return SnapshotFiles(weights, solverstate, iteration, format)


def _unwrapped(optimizer):
    """The optimizer a snapshot stores: a ``DistributedOptimizer``'s inner
    one, so snapshots from ``horovodrun`` load in a single process."""
    # Duck-typed, through the wrapper's public ``inner_optimizer``: the
    # importers never import keras_caffe.distributed (a layer above them).
    # Keras's LossScaleOptimizer also has one, but holds state of its own
    # (its loss scale), which the snapshot keeps: it is stored as it is.
    if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
        return optimizer
    return getattr(optimizer, "inner_optimizer", optimizer)


def load_snapshot(solverstate_path, model, optimizer, check_state=None):
    """Restore ``model``'s weights and ``optimizer``'s state from a snapshot.

    Reads all three formats, including BVLC Caffe's own files, told apart by
    content. The weights file is the one the solverstate names (Caffe's
    ``learned_net`` is tried relative to the current directory, as Caffe
    does, then to the solverstate's directory). Restores the weights, the
    optimizer's slots (Caffe's history blobs, converted to Keras's layout)
    and ``iterations``. Everything is checked before anything changes,
    including the stored ``state`` when ``check_state`` (a callable raising
    on a bad state, e.g. ``keras_caffe.training.resume_state.check``) is given.

    Returns:
        the ``state`` dict stored with the snapshot ({} for Caffe's files).
    Raises:
        SnapshotError naming the file: a corrupt or truncated file, a missing
        weights file, a snapshot of another net or another solver type.
    """
    path = os.fspath(solverstate_path)
    if not os.path.isfile(path):
        raise SnapshotError(path, "no such solverstate file")
    optimizer = _unwrapped(optimizer)
    _ensure_built(model, optimizer)
    if not is_hdf5(path):
        return snapshot_caffe.load(path, model, optimizer, check_state=check_state)
    with hdf5_files.open_file(path, lambda message: SnapshotError(path, message)) as f:
        if snapshot_keras.is_ours(f):
            return snapshot_keras.load(path, f, model, optimizer, check_state)
    return snapshot_caffe.load(path, model, optimizer, check_state=check_state)


def _ensure_built(model, optimizer):
    if not optimizer.built:
        optimizer.build(model.trainable_variables)


_NAME = re.compile(r"_iter_(\d+)\.solverstate(\.h5)?$")


def list_snapshots(prefix):
    """The complete snapshots of ``prefix`` on disk, oldest first.

    Only solverstates are listed (with the weights file their name implies),
    so a weights file whose solverstate was never written is not a snapshot.
    ``format`` is read from the content ("keras" or "caffe" for a
    ``.solverstate``).
    """
    prefix = os.fspath(prefix)
    directory = os.path.dirname(prefix) or "."
    base = os.path.basename(prefix)
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        match = _NAME.search(name)
        if not match or name[:match.start()] != base:
            continue
        iteration = int(match.group(1))
        path = os.path.join(directory, name)
        if match.group(2):
            format = "caffe_hdf5"
        else:
            format = "keras" if is_hdf5(path) else "caffe"
        weights, state = snapshot_paths(prefix, iteration, format)
        found.append(SnapshotFiles(weights, state, iteration, format))
    return sorted(found, key=lambda s: (s.iteration, s.format))


def latest_snapshot(prefix):
    """The newest complete snapshot of ``prefix``, or None."""
    found = list_snapshots(prefix)
    return found[-1] if found else None

"""Caffe's ``snapshot: N`` as a Keras callback, and resuming from a snapshot."""

import contextlib
import os

import keras
from keras import ops

from keras_caffe._checks import check_int
from keras_caffe.callbacks.chief import is_chief
from keras_caffe.errors import ArgumentError
from keras_caffe.importers.snapshots.files import (FORMATS, SnapshotError, load_snapshot,
                                                   save_snapshot)
from keras_caffe.importers.snapshots.random_states import random_states, restore_random_states


class CaffeSnapshot(keras.callbacks.Callback):
    """Write a snapshot every ``every_n_iter`` iterations, as Caffe's solver does.

    Iterations are ``model.optimizer.iterations``, Caffe's ``iter``: updates,
    not batches (with ``iter_size`` k, k batches make one iteration). After
    each batch, when the iteration has reached a positive multiple of
    ``every_n_iter`` that has not been written yet, the model and optimizer
    are saved with ``keras_caffe.importers.snapshots.files.save_snapshot`` as
    ``<prefix>_iter_<iteration>.*`` (with ``steps_per_execution`` > 1 the
    iteration may have passed the multiple; the files carry the iteration
    actually reached).

    Args:
        prefix: Caffe's ``snapshot_prefix`` (``"snap/run"``); its directory
            is created.
        every_n_iter: Caffe's ``snapshot`` interval, an int >= 1.
        format: ``"keras"``, ``"caffe"`` or ``"caffe_hdf5"`` (see
            ``save_snapshot``).
        keep: keep only the newest ``keep`` snapshots this callback wrote;
            older pairs are deleted once the new one is complete. ``None``
            keeps all.
        state: optional zero-argument callable returning the JSON-serializable
            dict stored with each snapshot (the data position, seeds, ...).
        snapshot_after_train: also write one when training ends, unless the
            last iteration was just written (Caffe's ``snapshot_after_train``).

    ``should_write()`` decides whether this process writes files: rank 0
    only under Horovod (``keras_caffe.distributed.is_chief``) and under JAX's
    multi-process runtime (``jax.process_index() == 0``); every process
    otherwise. Every process can resume from rank 0's files.
    ``written`` lists the ``SnapshotFiles`` written and still kept.
    """

    def __init__(self, prefix, every_n_iter, format="keras", keep=None, state=None,
                 snapshot_after_train=False):
        super().__init__()
        owner = "CaffeSnapshot"
        if not isinstance(prefix, (str, os.PathLike)) or not os.fspath(prefix):
            raise ArgumentError(owner, "prefix", f"must be a non-empty path, got {prefix!r}")
        self.prefix = os.fspath(prefix)
        self.every_n_iter = check_int(owner, "every_n_iter", every_n_iter, low=1)
        if format not in FORMATS:
            raise ArgumentError(owner, "format", f"must be one of "
                                f"{', '.join(map(repr, FORMATS))}, got {format!r}")
        self.format = format
        self.keep = None if keep is None else check_int(owner, "keep", keep, low=1)
        if state is not None and not callable(state):
            raise ArgumentError(owner, "state", "must be a zero-argument callable returning "
                                f"a dict, or None; got {type(state).__name__}")
        self.state = state
        if not isinstance(snapshot_after_train, bool):
            raise ArgumentError(owner, "snapshot_after_train",
                                f"must be True or False, got {snapshot_after_train!r}")
        self.snapshot_after_train = snapshot_after_train
        self.written = []
        self._last = None

    def should_write(self):
        """Whether this process writes snapshots (rank 0 of several)."""
        return is_chief()

    def on_train_begin(self, logs=None):
        self._last = self._iteration()
        if self.should_write():
            os.makedirs(os.path.dirname(os.path.abspath(self.prefix)), exist_ok=True)

    def on_train_batch_end(self, batch, logs=None):
        iteration = self._iteration()
        if self._last is None:
            self._last = 0
        if iteration // self.every_n_iter > self._last // self.every_n_iter:
            self.snapshot(iteration)

    def on_train_end(self, logs=None):
        iteration = self._iteration()
        if self.snapshot_after_train and iteration != self._last:
            self.snapshot(iteration)

    def snapshot(self, iteration=None):
        """Write a snapshot now (at ``iteration``, default the current one)."""
        iteration = self._iteration() if iteration is None else iteration
        self._last = iteration
        if not self.should_write():
            return None
        state = self.state() if self.state is not None else None
        rng = random_states(self.model)
        if rng:  # Dropout & co.: resume draws the masks the uninterrupted run draws
            state = dict(state or {})
            state.setdefault("rng", rng)
        with _without_distribution():
            files = save_snapshot(self.model, self.model.optimizer, self.prefix, iteration,
                                  format=self.format, state=state)
        self.written = [f for f in self.written if f.solverstate != files.solverstate]
        self.written.append(files)
        if self.keep is not None:
            while len(self.written) > self.keep:
                _delete(self.written.pop(0))
        return files

    def _iteration(self):
        return int(ops.convert_to_numpy(self.model.optimizer.iterations))

    @staticmethod
    def restore(model, solverstate_path):
        """``restore_snapshot``: resume ``model`` (compiled) from a snapshot."""
        return restore_snapshot(model, solverstate_path)


@contextlib.contextmanager
def _without_distribution():
    """No Keras distribution while the chief alone saves: Keras's saving makes
    reference objects (an Optimizer, a Layer) whose variables, under a
    distribution over several JAX processes, would be global arrays, and JAX
    checks a global array's value with a collective every process must join
    (the chief alone would fail or wait). Reading the model's replicated
    arrays needs no other process."""
    distribution = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)


def _delete(files):
    """Remove a snapshot, solverstate first: a crash in between leaves a
    weights file without solverstate, which no listing picks up."""
    for path in (files.solverstate, files.weights):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def restore_snapshot(model, solverstate_path):
    """Restore a compiled ``model``'s weights and its optimizer's state from a
    snapshot (any format ``load_snapshot`` reads); returns the stored state
    dict ({} for Caffe's own files). The model's random-generator states
    (Dropout's), which ``CaffeSnapshot`` stores, are restored too."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise SnapshotError(solverstate_path, f"model {model.name!r} has no optimizer: "
                            "compile it before restoring a snapshot")
    state = load_snapshot(solverstate_path, model, optimizer)
    stored = state.get("rng") if isinstance(state, dict) else None
    if isinstance(stored, dict):
        restore_random_states(model, stored)
    return state

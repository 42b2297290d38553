"""Elastic training: a lost worker is dropped, the others carry on.

Under an elastic ``horovodrun`` (``--min-np``, ``--max-np`` and a
``--host-discovery-script``) a worker that dies no longer stops the job:
the survivors go back to the last *commit*, Horovod rebuilds the ring
without the dead worker's host, rank 0's committed state is copied to
everyone, and training continues; a worker that joins (a host the discovery
script lists anew) starts from rank 0's state the same way. This is
Horovod's elastic protocol (``horovod.common.elastic``: ``State``,
``run_fn``, the host-update notifications; Sergeev & Del Balso, "Horovod",
2018, and Horovod's "Elastic Horovod" guide) over keras-caffe's own
broadcast, for Keras 3 models: Horovod's ``TensorFlowKerasState`` targets
tf.keras 2. ::

    import keras_caffe.distributed as kd
    from keras_caffe.callbacks import ElasticCommit

    kd.init(seed=1)
    model.compile(optimizer=kd.DistributedOptimizer(opt), loss=...)
    state = kd.elastic.KerasState(model)

    @kd.elastic.run
    def train(state):
        done = int(model.optimizer.iterations.numpy())   # the committed position
        data = kd.shard(dataset).repeat().batch(64).skip(done)  # this world's shard
        model.fit(data, epochs=1, steps_per_epoch=total - done,
                  callbacks=[ElasticCommit(state, every=100)])

    train(state)

    $ horovodrun -np 4 --min-np 2 --max-np 4 --host-discovery-script ./hosts.sh python train.py
    $ horovodrun -np 4 --min-np 2 ... keras-caffe train --solver solver.prototxt --elastic

What a commit holds (``KerasState.save``): a host copy of every model
variable (weights, statistics, random-generator states) and every
optimizer variable (slots, the iteration counter), and the Python values
given as keyword arguments (attributes of the state). ``restore`` puts the
last commit back; ``sync`` copies rank 0's state to every worker (after
checking that all built the same variables, as ``broadcast_state`` does)
and gives each worker its own random-generator seeds (``RANK_SEED_STRIDE``
times its *new* rank, so the result does not depend on which ranks
survived).

After a reset the number of workers ``P`` and the ranks change: a training
function must read its shard (``kd.shard`` / ``kd.rank()`` / ``kd.size()``)
inside the function ``run`` calls, never before. The global batch becomes
``P`` times the worker's batch for the new ``P``. The learning rate is
*not* rescaled: the rate is what the optimizer was built with
(``ScaledLearningRate`` keeps the ``workers`` it was built with); rescale
it in a reset callback (``state.register_reset_callbacks``) if wanted.

Exactness: the run after a reset equals a run resumed from a snapshot
taken at the last commit with the new number of workers (a snapshot stores
what a commit stores): the same weights to the bit on the same machine.

Without an elastic launch (plain ``horovodrun -np N``, which cannot replace
workers) ``run`` syncs once and calls the function; a lost worker then
stops the job with ``DistributedError`` in bounded time, as without
``run``. In a process not launched by ``horovodrun`` it just runs the
function.
"""

import copy
import functools
import hashlib
import importlib
import os

import numpy as np

from keras_caffe.distributed._hvd import horovod_elastic, initialized
from keras_caffe.distributed.context import RANK_SEED_STRIDE, launched, worker
from keras_caffe.distributed.faults import failures, is_worker_failure, recoverable
from keras_caffe.distributed.state import (
    broadcast_object, broadcast_variables, check_same_state, model_state)
from keras_caffe.errors import ArgumentError
from keras_caffe.importers.snapshots.random_states import seed_variables

_elastic = horovod_elastic()
_exceptions = importlib.import_module("horovod.common.exceptions")

__all__ = ["KerasState", "run", "elastic_launch", "checksum", "shift_seeds"]


def elastic_launch():
    """Whether this process was started by an elastic ``horovodrun``
    (``--min-np`` / ``--host-discovery-script``: Horovod sets ``HOROVOD_ELASTIC=1``)."""
    return launched() and os.environ.get("HOROVOD_ELASTIC") == "1"


def _rank():
    return worker().rank


def shift_seeds(model, from_rank, to_rank):
    """Move the random-generator states' seeds from ``from_rank``'s offset
    to ``to_rank``'s (``RANK_SEED_STRIDE`` per rank)."""
    delta = RANK_SEED_STRIDE * (int(to_rank) - int(from_rank))
    if not delta:
        return
    for v in seed_variables(model):
        value = np.array(v.numpy())
        value[0] += delta
        v.assign(value)


class KerasState(_elastic.State):
    """A Keras 3 model, its optimizer and Python values, committed in host
    memory and synchronized from rank 0 (Horovod's elastic ``State``).

    Args:
        model: a built Keras model.
        optimizer: default ``model.optimizer`` (built here if needed).
        **values: Python values to commit and sync with the model (epoch,
            data positions...); each becomes an attribute of the state.
    """

    def __init__(self, model, optimizer=None, **values):
        optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
        if optimizer is None:
            raise ArgumentError("KerasState", "optimizer", "is missing: compile the model or "
                                "pass the optimizer")
        clash = sorted(set(values) & set(dir(self)))
        if clash:
            raise ArgumentError("KerasState", ", ".join(clash), "is a name of the state "
                                "itself; choose another name for the value")
        self.model = model
        self.optimizer = optimizer
        self._names = list(values)
        for name, value in values.items():
            setattr(self, name, value)
        self._seed_rank = 0  # whose offset the random-generator seeds hold
        super().__init__(bcast_object=broadcast_object, get_rank=_rank)
        self.save()

    def _items(self):
        return model_state(self.model, self.optimizer)

    def values(self):
        """``{name: value}`` of the Python values."""
        return {name: getattr(self, name) for name in self._names}

    def save(self):
        """Commit: a host copy of every variable and of the Python values."""
        self._saved = [np.array(v.numpy(), copy=True) for _, v in self._items()]
        self._saved_values = copy.deepcopy(self.values())
        self._saved_seed_rank = self._seed_rank

    def restore(self):
        """Back to the last commit (undoes everything since)."""
        for (_, v), value in zip(self._items(), self._saved):
            v.assign(value)
        for name, value in copy.deepcopy(self._saved_values).items():
            setattr(self, name, value)
        self._seed_rank = self._saved_seed_rank

    def sync(self):
        """Rank 0's variables and values on every worker, each worker's own
        seeds (its rank's offset), then commit that."""
        me = worker()
        shift_seeds(self.model, self._seed_rank, 0)  # rank 0's stream, then the broadcast
        items = self._items()
        if me.size > 1:
            check_same_state(items)
            broadcast_variables([v for _, v in items])
            for name, value in broadcast_object(self.values()).items():
                setattr(self, name, value)
        shift_seeds(self.model, 0, me.rank)
        self._seed_rank = me.rank
        self.save()

    def reset(self):
        """The world changed (before ``sync``): ``fit`` must trace its train
        step again, with or without the all-reduce for the new size."""
        self.model.train_function = None


def _reset():
    hvd = initialized("keras_caffe.distributed.elastic")
    hvd.shutdown()
    hvd.init()


def run(func):
    """Decorator: ``func(state, ...)`` run elastically (Horovod's ``run_fn``).

    ``state.sync()`` first; then ``func``. When a worker is lost during a
    collective (any worker-loss error: TensorFlow's ``UnknownError`` from a
    Horovod op, ``HorovodInternalError``), every survivor restores the last
    commit, Horovod restarts with the workers left, and ``func`` runs again
    after a sync. When hosts are added or removed (noticed at a commit,
    ``HostsUpdatedInterrupt``), the same without the restore. Errors that
    are not worker losses propagate.

    Unlike ``horovod.tensorflow.elastic.run`` it recognizes the grouped
    all-reduce's errors too (Horovod's own looks for ``HorovodAllreduce``
    and returns None on other ``UnknownError``s).
    """
    exceptions = _exceptions

    def attempt(state, *args, **kwargs):
        try:
            with recoverable():
                return func(state, *args, **kwargs)
        except (exceptions.HorovodInternalError, exceptions.HostsUpdatedInterrupt):
            raise
        except Exception as err:  # noqa: BLE001 - re-raised unless a worker was lost
            if is_worker_failure(err):
                raise exceptions.HorovodInternalError(str(err)) from err
            raise

    elastic = _elastic.run_fn(attempt, _reset)

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if elastic_launch():
            return elastic(state, *args, **kwargs)
        with failures():  # a fixed set of workers: a loss stops the job
            state.sync()
            return func(state, *args, **kwargs)

    return wrapper


def checksum(model):
    """A short fingerprint of the model's weights (for logs: equal on every
    worker after a sync)."""
    digest = hashlib.sha256()
    for v in model.weights:
        digest.update(np.ascontiguousarray(v.numpy()).tobytes())
    return digest.hexdigest()[:16]

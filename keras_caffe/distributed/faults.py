"""A lost worker becomes one clear error instead of a TensorFlow traceback.

When a worker dies, the others' next collective fails (Gloo reads a closed
connection, Horovod shuts down) and TensorFlow raises an ``OpError`` from
deep inside the train step. ``failures()`` turns that into a
``DistributedError`` naming this worker, the iteration when given, and
Horovod's own reason. The job then ends in bounded time: the failing
collective returns at once, and ``horovodrun`` stops the remaining
workers. Snapshots are written atomically by rank 0, so the last one
complete before the failure is intact.

Under ``keras_caffe.distributed.elastic.run`` (``horovodrun --min-np``) a
lost worker is recovered from instead: inside ``recoverable()``,
``failures()`` lets the error through unchanged for ``run`` to restore the
last commit and carry on with the survivors.
"""

import contextlib

import tensorflow as tf

from keras_caffe.distributed.context import worker
from keras_caffe.errors import DistributedError

#: Words in the errors a lost peer causes (TensorFlow ops and Horovod's own).
_MARKERS = ("Horovod", "horovod", "gloo", "Gloo")
#: How many ``recoverable()`` blocks are open (elastic training).
_recovering = [0]


def is_worker_failure(err):
    """Whether ``err`` is a collective failing because a worker was lost."""
    if isinstance(err, DistributedError):
        return False
    name = type(err).__name__
    text = str(err)
    return name == "HorovodInternalError" or (
        isinstance(err, (tf.errors.OpError, RuntimeError)) and any(m in text for m in _MARKERS))


def reason(err):
    """Horovod's short reason: the first sentence of its own message
    ("Horovod has been shut down"), else the first line naming Horovod or
    Gloo that is not a traceback or graph-node line."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    for line in lines:
        if line.startswith("Horovod"):
            return line.split(". ")[0].rstrip(".")[:300]
    for line in lines:
        if any(m in line for m in _MARKERS) and not line.startswith(
                ("Detected at node", "[[", "File ")):
            return line[:300]
    return lines[0][:300] if lines else type(err).__name__


@contextlib.contextmanager
def failures(where=None):
    """Turn a worker-loss error inside the block into ``DistributedError``.

    ``where``: optional zero-argument callable describing the position
    (``"iteration 12"``) for the message.
    """
    try:
        yield
    except Exception as err:  # noqa: BLE001 - re-raised unless it is a worker loss
        if _recovering[0] or not is_worker_failure(err):
            raise
        me = worker()
        at = f" at {where()}" if where is not None else ""
        raise DistributedError(
            f"rank {me.rank} of {me.size}: training stopped{at}: a worker failed or left "
            f"during a Horovod collective ({reason(err)})") from None


@contextlib.contextmanager
def recoverable():
    """Inside this block ``failures()`` re-raises a worker loss unchanged:
    elastic training (``keras_caffe.distributed.elastic.run``) recovers from it."""
    _recovering[0] += 1
    try:
        yield
    finally:
        _recovering[0] -= 1

"""Identical parameters everywhere: ``broadcast_state`` copies rank 0's
weights, optimizer state and random-generator states to every worker.

Before copying, the workers compare their variables (path, shape, dtype)
through an all-gather: a worker that built a different model is reported by
every worker at once (``DistributedError`` naming the variable and both
shapes), instead of a hang or a garbled broadcast.

Keras's random-generator states (``SeedGenerator``: ``[seed, counter]``)
are copied too and then moved apart: worker ``r`` adds
``RANK_SEED_STRIDE * r`` to the seed. Each worker so draws its own dropout
masks, and a snapshot of rank 0's state determines every worker's, which
makes a resumed run continue exactly.
"""

import numpy as np
import tensorflow as tf

from keras_caffe.distributed._hvd import initialized, loaded
from keras_caffe.distributed.context import RANK_SEED_STRIDE
from keras_caffe.errors import DistributedError
from keras_caffe.importers.snapshots.random_states import seed_variables


def model_state(model, optimizer=None):
    """``[(label, variable)]``: the model's variables (weights, statistics,
    random-generator states) and its optimizer's, in a fixed order."""
    optimizer = optimizer if optimizer is not None else getattr(model, "optimizer", None)
    items = [(f"model:{v.path}", v) for v in model.variables]
    if optimizer is not None:
        if not optimizer.built:
            optimizer.build(model.trainable_variables)
        items += [(f"optimizer:{v.path}", v) for v in optimizer.variables]
    return items


def _signature(items):
    return [(label, tuple(int(d) for d in v.shape), str(v.dtype)) for label, v in items]


def check_same_state(items, what="model"):
    """Raise ``DistributedError`` on every worker if any worker's variables
    differ from rank 0's (count, path, shape or dtype)."""
    hvd = initialized()
    everyone = hvd.allgather_object(_signature(items))
    reference = everyone[0]
    for rank, theirs in enumerate(everyone[1:], start=1):
        for (label0, shape0, dtype0), (label, shape, dtype) in zip(reference, theirs):
            if (label0, shape0, dtype0) != (label, shape, dtype):
                raise DistributedError(
                    f"rank {rank}'s {what} differs from rank 0's: variable {label!r} has shape "
                    f"{shape} ({dtype}) on rank {rank} but {label0!r} has {shape0} ({dtype0}) on "
                    "rank 0; every worker must build the same model")
        if len(theirs) != len(reference):
            raise DistributedError(
                f"rank {rank}'s {what} differs from rank 0's: {len(theirs)} variables on rank "
                f"{rank}, {len(reference)} on rank 0; every worker must build the same model")


def broadcast_state(model, optimizer=None, root_rank=0):
    """Copy ``root_rank``'s model and optimizer variables to every worker
    (after checking that all workers have the same ones); then give each
    worker its own random-generator seeds. One worker: only the seeds step."""
    items = model_state(model, optimizer)
    hvd = loaded()
    if hvd is not None and hvd.size() > 1:
        check_same_state(items)
        broadcast_variables([v for _, v in items], root_rank)
    offset_seeds(model)


def broadcast_variables(variables, root_rank=0):
    """Assign ``root_rank``'s values to ``variables`` on every worker: one
    broadcast per dtype of all values flattened together."""
    hvd = initialized()
    by_dtype = {}
    for v in variables:
        by_dtype.setdefault(str(v.dtype), []).append(v)
    for dtype, group in sorted(by_dtype.items()):
        flat = tf.concat([tf.reshape(tf.convert_to_tensor(v.value), [-1]) for v in group], 0)
        flat = hvd.broadcast(flat, root_rank, name=f"keras_caffe_broadcast_{dtype}")
        sizes = [int(np.prod(v.shape)) for v in group]
        for v, part in zip(group, tf.split(flat, sizes)):
            v.assign(tf.reshape(part, v.shape))


def broadcast_object(obj, root_rank=0):
    """``root_rank``'s Python object on every worker (one worker: ``obj``)."""
    hvd = loaded()
    if hvd is None or hvd.size() == 1:
        return obj
    return hvd.broadcast_object(obj, root_rank)


def offset_seeds(model, rank=None):
    """Add ``RANK_SEED_STRIDE * rank`` to the seed of each random-generator
    state (after they were made equal to rank 0's)."""
    hvd = loaded()
    rank = rank if rank is not None else (hvd.rank() if hvd is not None else 0)
    if rank == 0:
        return
    for v in seed_variables(model):
        value = np.array(v.numpy())
        value[0] += RANK_SEED_STRIDE * rank
        v.assign(value)

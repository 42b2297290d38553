"""Each worker reads its own share of the data (Caffe2's data-parallel rule)."""

import tensorflow as tf

from keras_caffe.distributed.context import worker
from keras_caffe.errors import ArgumentError


def shard(dataset, rank=None, size=None):
    """``dataset``'s elements ``rank, rank + P, rank + 2P, ...`` (``P`` =
    ``size``; both default to this worker's Horovod rank and the number of
    workers). Shard before batching, shuffling and augmenting, so the workers
    together read the dataset once per epoch; one worker gets it unchanged.

    The importer's data layers shard themselves: ``net_pipeline`` /
    ``layer_pipeline`` default to this worker's share under Horovod, and
    ``keras_caffe.Solver`` reads its share.
    """
    if not isinstance(dataset, tf.data.Dataset):
        raise ArgumentError("shard", "dataset", f"must be a tf.data.Dataset, got "
                            f"{type(dataset).__name__}")
    me = worker()
    rank = me.rank if rank is None else rank
    size = me.size if size is None else size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ArgumentError("shard", "size", f"must be a positive integer, got {size!r}")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < size:
        raise ArgumentError("shard", "rank", f"must be an integer in [0, {size}), got {rank!r}")
    return dataset if size == 1 else dataset.shard(size, rank)

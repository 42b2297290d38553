"""Data-parallel training with Horovod's ring all-reduce, for Keras 3.

The FireCaffe / Caffe2 recipe: synchronous SGD; each worker reads its own
share of the data; gradients are averaged with an all-reduce (no parameter
server); every worker holds identical parameters; rank 0 writes snapshots
and logs; the global batch is ``P`` times the worker's, with a scaled,
warmed-up learning rate. ::

    import keras_caffe, keras_caffe.distributed as kd
    from keras_caffe.callbacks import BroadcastGlobalState, MetricAverage

    kd.init(seed=1)
    opt = kd.DistributedOptimizer(keras_caffe.SGD(kd.ScaledLearningRate(0.01, warmup_steps=500),
                                                  momentum=0.9))
    model.compile(optimizer=opt, loss=...)
    model.fit(kd.shard(dataset).batch(64), callbacks=[BroadcastGlobalState(), MetricAverage()])

    $ horovodrun -np 16 -H host1:8,host2:8 --gloo python train.py
    $ horovodrun -np 16 ... keras-caffe train --solver solver.prototxt

Elastic training (a lost worker is dropped, the others carry on from the
last commit; a new worker joins with rank 0's state): ``kd.elastic``
(``KerasState``, ``run``; imported on first use, it needs Horovod) and
``keras-caffe train --elastic`` under ``horovodrun --min-np ...
--host-discovery-script ...``.

Built on Horovod's TensorFlow core (``horovod.tensorflow``), not on its
Keras wrapper, which targets tf.keras 2. This package imports without
Horovod; what needs it raises ``HorovodUnavailableError`` with one line on
how to install it (``keras-caffe install-horovod``: Horovod 0.28.1 patched
and built with Gloo against the installed TensorFlow, 2.16 to 2.21).
"""

from keras_caffe.backends import require_tensorflow_backend

# Built on TensorFlow: on another Keras backend, one line saying so (keras_caffe.backends).
require_tensorflow_backend('keras_caffe.distributed (Horovod, MirroredStrategy)')

from keras_caffe.distributed._hvd import HorovodUnavailableError
from keras_caffe.distributed.context import (
    RANK_SEED_STRIDE,
    Worker,
    active,
    init,
    is_chief,
    launched,
    local_rank,
    rank,
    size,
    worker,
)
from keras_caffe.distributed.data import shard
from keras_caffe.distributed.faults import failures
from keras_caffe.distributed.optimizer import DistributedOptimizer
from keras_caffe.distributed.scaled_rate import ScaledLearningRate
from keras_caffe.distributed.state import (
    broadcast_object,
    broadcast_state,
    broadcast_variables,
    check_same_state,
    offset_seeds,
)
from keras_caffe.errors import DistributedError


def __getattr__(name):
    # ``kd.elastic``: imported on first use (it imports Horovod's elastic
    # machinery, so needs Horovod; the rest of the package does not).
    if name == "elastic":
        import importlib

        return importlib.import_module("keras_caffe.distributed.elastic")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "init", "worker", "Worker", "rank", "size", "local_rank", "is_chief", "active", "launched",
    "DistributedOptimizer", "ScaledLearningRate", "shard", "failures", "broadcast_state",
    "broadcast_variables", "broadcast_object", "check_same_state", "offset_seeds",
    "DistributedError", "HorovodUnavailableError", "RANK_SEED_STRIDE",
]

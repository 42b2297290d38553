"""Keras callbacks for keras-caffe training (installed as ``keras_caffe.callbacks``).

- ``YellowFinMonitor``: YellowFin's tuned rate, momentum and statistics in the
  logs, for History, CSVLogger and TensorBoard.
- ``CaffeSnapshot``: ``{prefix}_iter_{N}`` snapshots every N iterations, in
  Caffe's formats or ours; ``restore_snapshot`` resumes from one.
- ``CaffeLogger``: Caffe's training log lines from ``model.fit``, for Caffe's
  log parsers and plotting scripts.
- ``BroadcastGlobalState``, ``MetricAverage``: data-parallel ``fit`` under
  Horovod (``keras_caffe.distributed``); snapshots and logs come from rank 0.
- ``ElasticCommit``: commit an elastic state (``keras_caffe.distributed.elastic``)
  every N iterations, for ``fit`` under ``horovodrun --min-np``.
"""

from keras_caffe.callbacks.caffe_logger import CaffeLogger
from keras_caffe.callbacks.distributed import BroadcastGlobalState, MetricAverage
from keras_caffe.callbacks.elastic import ElasticCommit
from keras_caffe.callbacks.snapshot import CaffeSnapshot, restore_snapshot
from keras_caffe.callbacks.yellowfin import YellowFinMonitor

__all__ = ["CaffeLogger", "CaffeSnapshot", "restore_snapshot", "YellowFinMonitor",
           "BroadcastGlobalState", "MetricAverage", "ElasticCommit"]

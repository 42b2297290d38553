"""Keras callbacks for keras-caffe training (installed as ``keras_caffe.callbacks``).

On every Keras backend (TensorFlow, JAX, PyTorch):

- ``YellowFinMonitor``: YellowFin's tuned rate, momentum and statistics in the
  logs, for History, CSVLogger and TensorBoard.
- ``CaffeSnapshot``: ``{prefix}_iter_{N}`` snapshots every N iterations, in
  Caffe's formats or ours; ``restore_snapshot`` resumes from one.
- ``CaffeLogger``: Caffe's training log lines from ``model.fit``, for Caffe's
  log parsers and plotting scripts.

On the TensorFlow backend only (Horovod's, loaded on first use; elsewhere
reaching them raises ``TensorFlowRequirementError`` in one line):

- ``BroadcastGlobalState``, ``MetricAverage``: data-parallel ``fit`` under
  Horovod (``keras_caffe.distributed``); snapshots and logs come from rank 0.
- ``ElasticCommit``: commit an elastic state (``keras_caffe.distributed.elastic``)
  every N iterations, for ``fit`` under ``horovodrun --min-np``.
"""

import importlib

from keras_caffe.backends import is_tensorflow, require_tensorflow_backend
from keras_caffe.callbacks.caffe_logger import CaffeLogger
from keras_caffe.callbacks.snapshot import CaffeSnapshot, restore_snapshot
from keras_caffe.callbacks.yellowfin import YellowFinMonitor

#: Horovod's callbacks (TensorFlow's backend only) -> the module defining each,
#: imported when the name is first reached (PEP 562).
TENSORFLOW_ONLY = {
    "BroadcastGlobalState": "keras_caffe.callbacks.distributed",
    "MetricAverage": "keras_caffe.callbacks.distributed",
    "ElasticCommit": "keras_caffe.callbacks.elastic",
}

__all__ = ["CaffeLogger", "CaffeSnapshot", "restore_snapshot", "YellowFinMonitor",
           *(TENSORFLOW_ONLY if is_tensorflow() else ())]


def __getattr__(name):
    module = TENSORFLOW_ONLY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    require_tensorflow_backend(f"{__name__}.{name} (Horovod)")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # found in the module's namespace from now on
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))

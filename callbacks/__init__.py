"""Keras callbacks for keras-caffe training (installed as ``keras_caffe.callbacks``).

- ``YellowFinMonitor``: YellowFin's tuned rate, momentum and statistics in the
  logs, for History, CSVLogger and TensorBoard.
"""

from keras_caffe.callbacks.yellowfin import YellowFinMonitor

__all__ = ["YellowFinMonitor"]

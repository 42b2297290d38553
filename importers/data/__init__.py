"""Caffe's data layers as ``tf.data``: the pipeline engine (resumable,
shardable ``DataPipeline``s), record sources (LMDB, LevelDB, HDF5, image
lists), image decoding, Caffe's ``TransformationParameter`` and the errors a
running pipeline raises."""

from keras_caffe.backends import require_tensorflow_backend

# Built on TensorFlow: on another Keras backend, one line saying so (keras_caffe.backends).
require_tensorflow_backend("keras_caffe.importers.data (Caffe's data layers as tf.data)")

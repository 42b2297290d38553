"""Caffe's data layers as ``tf.data``: the pipeline engine (resumable,
shardable ``DataPipeline``s), record sources (LMDB, LevelDB, HDF5, image
lists), image decoding, Caffe's ``TransformationParameter`` and the errors a
running pipeline raises."""

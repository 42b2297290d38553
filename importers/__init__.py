"""Readers for Caffe's files (installed as ``keras_caffe.importers``).

- ``protofile``: text (.prototxt) and binary (.caffemodel, .binaryproto,
  .solverstate) protocol buffer files, with errors that name file:line:column.
- ``solver``: solver files, upgraded from the legacy ``solver_type`` enum.
- ``import_model``: a Caffe net (+ weights) -> a Keras model, through one
  registered converter per layer type (``layer_types/``). ``import_net``
  also returns the filtered net and its blobs (an ``ImportedNet``), and
  ``layer_summary`` lists its layers as ``keras-caffe import`` does.
- ``net_pipeline`` / ``layer_pipeline``: the data layers (LMDB Data,
  ImageData, HDF5Data, DummyData, MemoryData, Input) as ``DataPipeline``s
  with Caffe's batches, resumable and shardable: ``.dataset()`` is the
  ``tf.data.Dataset``, and iterating the pipeline yields the batches.
- ``pooling_rule``: a block in which Pooling layers follow a Caffe fork's
  output-size rule (darknet2caffe's nets need caffe-yolov3's).
- ``save_snapshot`` / ``load_snapshot``: ``_iter_N`` snapshots in Caffe's
  formats (.caffemodel + .solverstate, binary or HDF5) and ours.
"""

from keras_caffe.importers.net.importing import ImportedNet, caffe_layers, import_model, import_net, load_into
from keras_caffe.importers.net.export import export_caffemodel, param_multipliers
from keras_caffe.importers.layer_types.pooling import pooling_rule
from keras_caffe.importers.formats.netfile import filter_net, net_state, read_net
from keras_caffe.importers.data.pipeline_core import DataPipeline
from keras_caffe.importers.data.pipelines import layer_pipeline, net_pipeline, pipeline_errors
from keras_caffe.importers.formats.protofile import parse_text, read_binary, read_text
from keras_caffe.importers.net.registry import (
    converter,
    registered_types,
    unregister_converter,
)
from keras_caffe.importers.snapshots.files import SnapshotError, load_snapshot, save_snapshot
from keras_caffe.importers.formats.solver_file import read_solver
from keras_caffe.importers.net.summary import LayerSummary, layer_summary
from keras_caffe.importers.net.compile_args import training_args
from keras_caffe.importers.net.weights import load_weights

__all__ = [
    "import_model", "export_caffemodel", "param_multipliers", "caffe_layers", "load_into", "load_weights", "read_net", "filter_net",
    "net_state", "parse_text", "read_binary", "read_text", "read_solver", "converter",
    "registered_types", "unregister_converter", "training_args", "save_snapshot",
    "load_snapshot", "SnapshotError", "layer_pipeline", "net_pipeline", "pipeline_errors",
    "DataPipeline", "import_net", "ImportedNet", "layer_summary", "LayerSummary", "pooling_rule",
]

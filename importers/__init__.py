"""Caffe's files and nets on the Keras side (installed as ``keras_caffe.importers``).

The subpackages, lowest first (a module imports its own and those before it):

- ``formats``: Caffe's files as protocol buffers, no Keras: text (.prototxt)
  and binary (.caffemodel, .binaryproto, .solverstate) files with errors
  that name file:line:column (``protofile``), the legacy-format upgrade, the
  forks' fields, HDF5 files, solver files (``solver_file``), which kind a
  misplaced file is (``file_kind``), atomic output files.
- ``layer_types``: one unit per Caffe layer type (its checks, shape rule,
  cost, Keras build and, for data layers, pipeline), registered with
  ``layer_types.base.layer_type``.
- ``net``: a ``NetParameter`` <-> a ``keras.Model``. ``import_model`` builds
  the model through the registered layer types (``importing``, ``graph``);
  ``import_net`` also returns the filtered net and its blobs (an
  ``ImportedNet``); ``registry`` adds users' own layer types
  (``register_layer_type``); ``blobs`` answers questions about a model's
  Caffe layers (``caffe_layers``, ``param_multipliers``); ``export`` writes
  .caffemodel files (``export_caffemodel``); ``layer_summary`` lists the
  layers as ``keras-caffe import`` does; ``training_args`` gives the
  compile arguments for training.
- ``data``: the data layers (LMDB Data, ImageData, HDF5Data, DummyData,
  MemoryData, Input, ...) as ``DataPipeline``s with Caffe's batches,
  resumable and shardable (``net_pipeline`` / ``layer_pipeline``):
  ``.dataset()`` is the ``tf.data.Dataset``, and iterating the pipeline
  yields the batches.
- ``snapshots``: ``save_snapshot`` / ``load_snapshot``, ``_iter_N`` snapshots
  in Caffe's formats (.caffemodel + .solverstate, binary or HDF5) and ours.

``pooling_rule``: a block in which Pooling layers follow a Caffe fork's
output-size rule (darknet2caffe's nets need caffe-yolov3's).

The registry's decorator was called ``converter`` (and its inverse
``unregister_converter``) before the vocabulary became "layer type": both
names remain, the same functions as ``register_layer_type`` and
``unregister_layer_type``.
"""

from keras_caffe.importers.net.importing import ImportedNet, import_model, import_net, load_into
from keras_caffe.importers.net.blobs import caffe_layers, param_multipliers
from keras_caffe.importers.net.export import export_caffemodel
from keras_caffe.importers.layer_types.pooling import pooling_rule
from keras_caffe.importers.formats.netfile import filter_net, net_state, read_net
from keras_caffe.importers.formats.protofile import parse_text, read_binary, read_text
from keras_caffe.importers.net.registry import (
    converter,
    register_layer_type,
    registered_types,
    unregister_converter,
    unregister_layer_type,
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
    "load_snapshot", "SnapshotError", "import_net", "ImportedNet", "layer_summary", "LayerSummary", "pooling_rule",
    "register_layer_type", "unregister_layer_type",
]

#: The data layers as tf.data (TensorFlow's backend only): imported on first
#: use, so the rest of the importers runs on every Keras backend; on another
#: backend ``keras_caffe.importers.data`` raises TensorFlowRequirementError.
_DATA = {
    "DataPipeline": "keras_caffe.importers.data.pipeline_core",
    "layer_pipeline": "keras_caffe.importers.data.pipelines",
    "net_pipeline": "keras_caffe.importers.data.pipelines",
    "pipeline_errors": "keras_caffe.importers.data.pipelines",
}


def __getattr__(name):
    if name not in _DATA:
        raise AttributeError(f"module 'keras_caffe.importers' has no attribute {name!r}")
    import importlib  # here: the data layers import TensorFlow (TensorFlow optional)

    value = getattr(importlib.import_module(_DATA[name]), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_DATA))

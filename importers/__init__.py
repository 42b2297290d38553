"""Readers for Caffe's files (installed as ``keras_caffe.importers``).

- ``protofile``: text (.prototxt) and binary (.caffemodel, .binaryproto,
  .solverstate) protocol buffer files, with errors that name file:line:column.
- ``solver``: solver files, upgraded from the legacy ``solver_type`` enum.
- ``import_model``: a Caffe net (+ weights) -> a Keras model, through one
  registered converter per layer type (``converters/``).
"""

from keras_caffe.importers.api import caffe_layers, import_model, load_into
from keras_caffe.importers.export import export_caffemodel, param_multipliers
from keras_caffe.importers.netfile import filter_net, net_state, read_net
from keras_caffe.importers.protofile import parse_text, read_binary, read_text
from keras_caffe.importers.registry import (
    converter,
    registered_types,
    unregister_converter,
)
from keras_caffe.importers.solver import read_solver
from keras_caffe.importers.training import training_args
from keras_caffe.importers.weights import load_weights

__all__ = [
    "import_model", "export_caffemodel", "param_multipliers", "caffe_layers", "load_into", "load_weights", "read_net", "filter_net",
    "net_state", "parse_text", "read_binary", "read_text", "read_solver", "converter",
    "registered_types", "unregister_converter", "training_args",
]

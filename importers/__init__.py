"""Readers for Caffe's files (installed as ``keras_caffe.importers``).

- ``protofile``: text (.prototxt) and binary (.caffemodel, .binaryproto,
  .solverstate) protocol buffer files, with errors that name file:line:column.
- ``solver``: solver files, upgraded from the legacy ``solver_type`` enum.
"""

from keras_caffe.importers.protofile import parse_text, read_binary, read_text
from keras_caffe.importers.solver import read_solver

__all__ = ["parse_text", "read_binary", "read_text", "read_solver"]

"""Caffe's files as protocol buffers, no Keras: text (.prototxt) and binary
(.caffemodel, .binaryproto, .solverstate) messages with errors that name
file:line:column, the legacy-format upgrade, tolerant parsing of the forks'
fields, HDF5 files, solver files, where relative paths are looked for,
atomic output files, and the marks of keras-caffe's own snapshot files
(``snapshot_marks``)."""

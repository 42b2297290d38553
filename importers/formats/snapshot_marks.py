"""How keras-caffe marks its own additions to Caffe's snapshot files, so
that the readers tell the files apart: ``file_kind`` (which kind of file a
misplaced one is) and the snapshot formats (``keras_caffe.importers.snapshots``)
that write and read them."""

#: SolverState field number of our JSON in Caffe's binary solverstates (far
#: above caffe.proto's 1-4 and outside protobuf's reserved 19000-19999);
#: ``snapshots.caffe_format`` writes it.
EXTRA_FIELD = 1_000_001
#: The ``format`` attribute of our Keras-format solverstate (``snapshots.keras_format``).
KERAS_FORMAT = "keras-caffe-snapshot"

"""A Caffe ``NetParameter`` <-> a ``keras.Model``: the graph walk over the
layer types' units (``keras_caffe.importers.layer_types``), shared
parameters, weights in and out, BatchNorm folding, the memory budget, the
layer summary, compile arguments for training, and ``.keras`` files that
carry their net."""

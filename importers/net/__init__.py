"""A Caffe ``NetParameter`` <-> a ``keras.Model``: the graph walk over the
layer types' units (``keras_caffe.importers.layer_types``) and the registry
of users' own (``registry``), shared parameters, weights in and out,
queries over a model's Caffe layers (``blobs``), .caffemodel export,
BatchNorm folding, the memory budget, the layer summary, compile arguments
for training, ``.keras`` files that carry their net, and where
``import_model`` meets Large Model Support without importing it
(``lms_hook``)."""

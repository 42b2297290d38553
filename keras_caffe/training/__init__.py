"""Caffe's training loop: ``Solver`` (``keras-caffe train``) and its set-up
(options, placement on workers and devices, nets and optimizer, LMS,
fine-tuning weights, snapshot files), its compiled step, signals, progress,
the resume state snapshots carry, and ``caffe test``'s scoring and ``caffe
time``'s timing. Caffe's log lines (``keras_caffe.caffe_log``) and the random
states snapshots carry (``keras_caffe.importers.snapshots.random_states``) live
outside: ``keras_caffe.callbacks`` uses them on every backend."""

from keras_caffe.backends import require_tensorflow_backend

# Built on TensorFlow: on another Keras backend, one line saying so (keras_caffe.backends).
require_tensorflow_backend("keras_caffe.training (Caffe's training loop: Solver, keras-caffe train)")

"""The optimizer configurations the data-parallel tests train on one device
and on several (support/mirrored_worker.py on TensorFlow,
support/jax_data_parallel_case.py and jax_local_sums_case.py on JAX): Caffe's
six solvers and YellowFin, each with ``iter_size`` 2, clipping that clips,
weight decay and ``lr_mult`` 0 and 2. Imports nothing: the workers load it
before their backend starts."""

CLIP = 0.05
SHARED = dict(iter_size=2, clip_gradients=CLIP, weight_decay=0.01,
              lr_mult={"*ip1/bias": 0.0, "*ip2/kernel": 2.0})
#: case -> (keras_caffe optimizer's name, its own arguments)
CASES = {
    "sgd": ("SGD", dict(learning_rate=0.1, momentum=0.9)),
    "nesterov": ("Nesterov", dict(learning_rate=0.1, momentum=0.9)),
    "adagrad": ("AdaGrad", dict(learning_rate=0.1)),
    "rmsprop": ("RMSProp", dict(learning_rate=0.01, rms_decay=0.9)),
    "adadelta": ("AdaDelta", dict(learning_rate=1.0, momentum=0.9)),
    "adam": ("Adam", dict(learning_rate=0.01)),
    "yellowfin": ("YellowFin", dict(learning_rate=0.1)),
}

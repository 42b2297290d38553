"""Which process writes snapshots and log lines: rank 0 under Horovod, and
any process that is not one of several workers.

Horovod (``keras_caffe.distributed``) runs on Keras's TensorFlow backend
only, so on JAX and PyTorch every process is the chief and
``keras_caffe.distributed`` is never imported.
"""

from keras_caffe.backends import is_tensorflow


def is_chief():
    """True on rank 0 under Horovod, and in any process not running under it."""
    if not is_tensorflow():
        return True
    # TensorFlow optional: keras_caffe.distributed needs TensorFlow's backend
    from keras_caffe.distributed.context import is_chief as rank_zero

    return rank_zero()

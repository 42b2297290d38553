"""Which process writes snapshots and log lines: rank 0 of several processes,
and any process that is not one of several workers.

Several processes are Horovod's ranks on Keras's TensorFlow backend
(``keras_caffe.distributed``, never imported on the other backends) and JAX's
multi-process runtime on the JAX backend (``jax.distributed.initialize``,
which ``keras.distribution.initialize`` runs). On PyTorch every process is
the chief.
"""

from keras_caffe.backends import backend_name


def _horovod_rank_zero():
    # TensorFlow optional: keras_caffe.distributed needs TensorFlow's backend
    from keras_caffe.distributed.context import is_chief as rank_zero

    return rank_zero()


def _jax_process_zero():
    # JAX optional: installed only where Keras runs on JAX. jax.process_index()
    # is 0 in a process running alone (no jax.distributed.initialize).
    import jax

    return jax.process_index() == 0


#: Each backend's test for rank 0; backends not named run one process each.
_RANK_ZERO = {"tensorflow": _horovod_rank_zero, "jax": _jax_process_zero}


def is_chief():
    """True on rank 0 under Horovod or JAX's multi-process runtime, and in any
    process running alone."""
    return _RANK_ZERO.get(backend_name(), lambda: True)()

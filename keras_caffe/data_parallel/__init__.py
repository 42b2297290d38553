"""Data-parallel training through Keras's own ``keras.distribution`` on the
JAX backend, with Caffe's semantics: one host with several devices
(``keras.distribution.DataParallel``) and several hosts (JAX's multi-process
runtime, started by ``initialize``). docs/distributed.md, "JAX".

On TensorFlow, ``keras_caffe.distributed`` (Horovod, MirroredStrategy) is
the data-parallel path; this package refuses other backends in one line.
"""

from keras_caffe.backends import require_jax_backend

require_jax_backend("keras_caffe.data_parallel (keras.distribution's data parallelism)")

from keras_caffe.data_parallel.processes import (  # noqa: E402
    data_parallel,
    initialize,
    process_share,
)

from keras_caffe.data_parallel.local_sums import (  # noqa: E402
    LocalSums,
    local_sums_step,
    with_local_sums,
)

__all__ = ["initialize", "process_share", "data_parallel", "LocalSums", "with_local_sums",
           "local_sums_step"]

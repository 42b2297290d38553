"""Several JAX processes training as one (several hosts, or one process per
accelerator): JAX's multi-process runtime started with timeouts a job can
live with, one random seed for all, each process's share of the data, and
the ``DataParallel`` distribution over every process's devices.

The chief (``jax.process_index() == 0``) alone writes snapshots and log
lines (``keras_caffe.callbacks.chief``); every process can resume from them.
"""

import jax
import keras
import numpy as np
from jax.experimental import multihost_utils

from keras_caffe._checks import check_int
from keras_caffe.errors import ArgumentError

#: Seconds JAX's runtime waits, by default here: for a silent peer's
#: heartbeat before it ends the job (JAX's own default is 100), for every
#: process at shutdown (300), and for every process to join at start (300).
HEARTBEAT_TIMEOUT, SHUTDOWN_TIMEOUT, INITIALIZATION_TIMEOUT = 30, 60, 300


def initialize(coordinator, num_processes, process_id, *, seed=None, local_device_ids=None,
               heartbeat_timeout=HEARTBEAT_TIMEOUT, shutdown_timeout=SHUTDOWN_TIMEOUT,
               initialization_timeout=INITIALIZATION_TIMEOUT):
    """Join this process to a job of ``num_processes`` (run first thing, on
    every process, before any JAX computation).

    What ``keras.distribution.initialize`` does, and what it cannot pass:

    - ``coordinator``: ``"host:port"`` of process 0 (the coordination
      service it starts); ``process_id`` in ``[0, num_processes)``;
      ``local_device_ids`` this process's devices (default: all it sees).
    - ``heartbeat_timeout``: a process killed or cut off ends the job in
      about this many seconds (every survivor aborts; JAX's default waits
      100 s); ``shutdown_timeout``, ``initialization_timeout`` likewise.
    - ``seed``: every process's Keras seed (``keras.utils.set_random_seed``),
      so initial weights and dropout draws agree; None draws one on process 0
      and sends it to all (Caffe's ``random_seed: -1``).

    On CPU the collectives are Gloo's. Returns the seed."""
    owner = "keras_caffe.data_parallel.initialize"
    num_processes = check_int(owner, "num_processes", num_processes, low=1)
    process_id = check_int(owner, "process_id", process_id, low=0)
    if process_id >= num_processes:
        raise ArgumentError(owner, "process_id",
                            f"must be below num_processes ({num_processes}), got {process_id}")
    for name, value in (("heartbeat_timeout", heartbeat_timeout),
                        ("shutdown_timeout", shutdown_timeout),
                        ("initialization_timeout", initialization_timeout)):
        check_int(owner, name, value, low=1)
    if not isinstance(coordinator, str) or ":" not in coordinator:
        raise ArgumentError(owner, "coordinator", f"must be 'host:port', got {coordinator!r}")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=coordinator, num_processes=num_processes, process_id=process_id,
        local_device_ids=local_device_ids, initialization_timeout=initialization_timeout,
        heartbeat_timeout_seconds=heartbeat_timeout, shutdown_timeout_seconds=shutdown_timeout)
    if seed is None:
        drawn = np.array(np.random.SeedSequence().generate_state(1)[0] >> 1, np.int32)
        seed = int(multihost_utils.broadcast_one_to_all(drawn))
    keras.utils.set_random_seed(seed)
    return seed


def data_parallel(devices=None):
    """``keras.distribution.DataParallel`` over ``devices`` (default: every
    device of every process), taking numpy input: each process passes its
    own rows (``process_share``) and Keras's JAX trainer puts each global
    batch together in process order."""
    devices = devices if devices is not None else keras.distribution.list_devices()
    return keras.distribution.DataParallel(devices=devices,
                                           auto_shard_dataset=jax.process_count() == 1)


def process_share(array, global_batch):
    """This process's rows of ``array``: of each global batch of
    ``global_batch`` rows, its contiguous slice (process ``p`` of ``P`` takes
    rows ``[p B/P, (p+1) B/P)``), in the order Keras's JAX trainer puts them
    back. ``fit`` then takes ``batch_size=global_batch // P``; a last partial
    batch is refused (as Caffe's data layers never give one)."""
    owner = "keras_caffe.data_parallel.process_share"
    count, index = jax.process_count(), jax.process_index()
    global_batch = check_int(owner, "global_batch", global_batch, low=1)
    array = np.asarray(array)
    if global_batch % count:
        raise ArgumentError(owner, "global_batch",
                            f"must be a multiple of the {count} processes, got {global_batch}")
    if array.shape[0] % global_batch:
        raise ArgumentError(owner, "array",
                            f"has {array.shape[0]} rows, not a multiple of global_batch "
                            f"({global_batch})")
    local = global_batch // count
    batches = array.reshape((-1, global_batch) + array.shape[1:])
    return batches[:, index * local:(index + 1) * local].reshape((-1,) + array.shape[1:])

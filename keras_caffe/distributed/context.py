"""Who am I among the workers: ``init``, ``rank``, ``size``, ``is_chief``.

Without Horovod (or before ``init``) the process is a single worker: rank 0
of 1, the chief. These functions never import Horovod unless ``init`` is
called, so single-process code may call them freely.
"""

import os
from dataclasses import dataclass

from keras_caffe.distributed._hvd import horovod, loaded
from keras_caffe.errors import DistributedError

#: Environment variables ``horovodrun`` sets in each worker.
LAUNCHER_VARIABLES = ("HOROVOD_RANK", "HOROVOD_SIZE")
#: Added per rank to the seed component of Keras's random-generator states
#: (and to ``init(seed=...)``), so each worker draws its own dropout masks
#: and augmentations from a state rank 0 can checkpoint.
RANK_SEED_STRIDE = 1000003


@dataclass(frozen=True)
class Worker:
    """This process among the workers."""

    rank: int
    size: int
    local_rank: int
    local_size: int
    seed: int | None

    @property
    def is_chief(self):
        return self.rank == 0


def launched():
    """Whether this process was started by ``horovodrun`` (its environment says so)."""
    return all(name in os.environ for name in LAUNCHER_VARIABLES)


def init(seed=None, gpus="one_per_local_rank"):
    """Start Horovod in this process.

    - ``hvd.init()`` (Gloo under ``horovodrun --gloo``; a single worker when
      not launched by ``horovodrun``).
    - GPUs: with ``gpus="one_per_local_rank"`` (default) each process sees one
      GPU, ``local_rank mod #GPUs``, with memory growth on; ``gpus=None``
      leaves device visibility alone. Must run before TensorFlow touches a
      device.
    - Seeds: with ``seed`` given, ``keras.utils.set_random_seed(seed +
      RANK_SEED_STRIDE * rank)``: each worker draws its own random numbers
      (dropout, augmentation), while weights come from rank 0 through
      ``broadcast_state`` (the Caffe2 rule: identical parameters everywhere).

    Returns a ``Worker``. Raises ``HorovodUnavailableError`` (one line, how to
    install) without Horovod.
    """
    import keras
    import tensorflow as tf

    if gpus not in ("one_per_local_rank", None):
        raise DistributedError(f"init: `gpus` must be 'one_per_local_rank' or None, got {gpus!r}")
    hvd = horovod()
    hvd.init()
    if gpus == "one_per_local_rank":
        physical = tf.config.list_physical_devices("GPU")
        if physical:
            mine = physical[hvd.local_rank() % len(physical)]
            try:
                for gpu in physical:
                    tf.config.experimental.set_memory_growth(gpu, True)
                tf.config.set_visible_devices(mine, "GPU")
            except RuntimeError as err:
                raise DistributedError(
                    "keras_caffe.distributed.init() must run before TensorFlow initializes "
                    f"its devices (call it first in the script): {err}") from None
    if seed is not None:
        keras.utils.set_random_seed(int(seed) + RANK_SEED_STRIDE * hvd.rank())
    return worker(seed)


def worker(seed=None):
    """This process as a ``Worker`` (rank 0 of 1 without Horovod)."""
    hvd = loaded()
    if hvd is None:
        return Worker(0, 1, 0, 1, seed)
    return Worker(hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size(), seed)


def rank():
    return worker().rank


def size():
    return worker().size


def local_rank():
    return worker().local_rank


def is_chief():
    """True on rank 0, and in any process not running under Horovod: the one
    that writes snapshots and logs."""
    return worker().rank == 0


def active():
    """Whether Horovod is initialized with more than one worker."""
    return worker().size > 1

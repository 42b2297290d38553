"""The machine's memory and speed, as keras-caffe's checks and plans count them.

``host_memory``: the smallest of RAM, the cgroup's ``memory.max`` and the
process's ``RLIMIT_DATA``/``RLIMIT_AS`` (what a file read or an imported net
must fit in before it is allocated); ``compute_device``: ``"CPU"`` or the
accelerator Keras's backend computes on; ``device_memory``: that
accelerator's memory, or on a CPU the host's; ``gpu_rates``: the host link
and matmul rate LMS plans with (TensorFlow's backend, as LMS).

The queries are the backend's (``keras_caffe.backend_devices``: TensorFlow's
``tf.config``, JAX's ``jax.devices()`` and ``memory_stats()``, PyTorch's
``torch.cuda``), chosen by Keras's backend and imported only inside a query,
so reading Caffe's files (``keras_caffe.importers.formats``) imports none of
them and TensorFlow is optional.
"""

import functools
import os
import resource
import time

from keras_caffe.backend_devices import QUERIES
from keras_caffe.backends import backend_name, require_tensorflow_backend


def fmt_bytes(n):
    """``n`` bytes as the memory checks print them: ``1.50 GiB``."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def compute_device():
    """``"CPU"``, or the accelerator Keras's backend computes on: ``"GPU"``
    (a JAX ``"TPU"``)."""
    return _queries().compute_device()


def device_memory():
    """``(bytes or None, where)``: the memory activations must fit in.

    On an accelerator (untested here: no GPU was available when this was
    written), the backend's answer (``keras_caffe.backend_devices``:
    TensorFlow's logical GPU ``memory_limit``, JAX's ``memory_stats``,
    ``torch.cuda``), else ``nvidia-smi``'s total, else ``None`` with a
    ``where`` saying it is unknown. On the CPU: the smallest of physical RAM,
    the cgroup's ``memory.max`` and the process's ``RLIMIT_DATA`` /
    ``RLIMIT_AS``.
    """
    kind = compute_device()
    if kind == "CPU":
        return host_memory()
    return _queries().accelerator_memory(kind)


def _queries():
    """The device queries of Keras's backend (read without importing Keras)."""
    return QUERIES[backend_name()]


def host_memory():
    """``(bytes or None, where)``: the smallest of physical RAM, the cgroup's
    ``memory.max`` and the process's ``RLIMIT_DATA`` / ``RLIMIT_AS``."""
    limits = []
    try:
        limits.append((os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "host RAM"))
    except (ValueError, OSError):
        pass
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            text = f.read().strip()
        if text.isdigit():
            limits.append((int(text), "cgroup memory.max"))
    except OSError:
        pass
    for name in ("RLIMIT_DATA", "RLIMIT_AS"):
        soft = resource.getrlimit(getattr(resource, name))[0]
        if soft != resource.RLIM_INFINITY:
            limits.append((soft, name))
    if not limits:
        return None, "host memory unknown"
    return min(limits)


@functools.lru_cache(maxsize=1)
def gpu_rates():
    """``(host link bytes/s, device multiply-adds/s)``, measured once on the
    GPU: a 64 MiB round trip to the host and back, and a 4096^2 matmul
    (untested here: no GPU was available when this was written). Large
    Model Support's, on TensorFlow's backend as LMS."""
    require_tensorflow_backend("keras_caffe.devices.gpu_rates (Large Model Support's plan)")
    import tensorflow as tf  # here, not at the top: TensorFlow optional

    with tf.device("/GPU:0"):
        x = tf.random.uniform((16 * 2 ** 20,))
        a = tf.random.uniform((4096, 4096))

    def round_trip():
        with tf.device("/CPU:0"):
            h = tf.identity(x)
        with tf.device("/GPU:0"):
            return tf.reduce_sum(tf.identity(h))

    def matmul():
        with tf.device("/GPU:0"):
            return tf.reduce_sum(tf.matmul(a, a))

    link = _best_time(round_trip)
    macs = _best_time(matmul)
    return 2 * x.shape[0] * 4 / link, 4096 ** 3 / macs


def _best_time(fn):
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        fn().numpy()
        best = min(best, time.perf_counter() - start)
    return best

"""The machine's memory and speed, as keras-caffe's checks and plans count them.

``host_memory``: the smallest of RAM, the cgroup's ``memory.max`` and the
process's ``RLIMIT_DATA``/``RLIMIT_AS`` (what a file read or an imported net
must fit in before it is allocated); ``device_memory``: the GPU's memory,
or on a CPU the host's; ``gpu_rates``: the host link and matmul rate LMS
plans with. TensorFlow is imported only by the GPU queries, so reading
Caffe's files (``keras_caffe.importers.formats``) does not need it.
"""

import functools
import os
import resource
import subprocess
import time


def fmt_bytes(n):
    """``n`` bytes as the memory checks print them: ``1.50 GiB``."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def compute_device():
    """``"GPU"`` when TensorFlow sees one, else ``"CPU"``."""
    import tensorflow as tf  # here, not at the top: formats/ reads host_memory without TensorFlow

    return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"


def device_memory():
    """``(bytes or None, where)``: the memory activations must fit in.

    GPU (untested here: no GPU was available when this was written): the
    first logical GPU's ``memory_limit`` if one is configured, else the
    total from ``nvidia-smi``. CPU: the smallest of physical RAM, the
    cgroup's ``memory.max`` and the process's ``RLIMIT_DATA`` / ``RLIMIT_AS``.
    """
    if compute_device() == "GPU":
        import tensorflow as tf  # here, not at the top: formats/ reads host_memory without TensorFlow

        gpus = tf.config.list_physical_devices("GPU")
        try:
            configs = tf.config.get_logical_device_configuration(gpus[0])
        except (ValueError, RuntimeError):
            configs = None
        if configs and getattr(configs[0], "memory_limit", None):
            return int(configs[0].memory_limit) * 2 ** 20, "GPU:0 logical memory_limit"
        total = _nvidia_smi_total()
        if total:
            return total, "GPU:0 memory (nvidia-smi)"
        return None, "GPU:0 memory unknown"
    return host_memory()


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


def _nvidia_smi_total():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                              "nounits", "-i", "0"], capture_output=True, text=True, timeout=10)
        return int(float(out.stdout.strip().splitlines()[0])) * 2 ** 20
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


@functools.lru_cache(maxsize=1)
def gpu_rates():
    """``(host link bytes/s, device multiply-adds/s)``, measured once on the
    GPU: a 64 MiB round trip to the host and back, and a 4096^2 matmul
    (untested here: no GPU was available when this was written)."""
    import tensorflow as tf  # here, not at the top: formats/ reads host_memory without TensorFlow

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

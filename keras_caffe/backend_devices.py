"""What each Keras backend says about the device it computes on, for
``keras_caffe.devices``: one class per backend, ``QUERIES[backend]``.

- ``compute_device()``: ``"CPU"``, or the accelerator the backend computes
  on: ``"GPU"`` (a JAX ``"TPU"``).
- ``accelerator_memory(kind)``: ``(bytes or None, where)`` of the first
  accelerator: TensorFlow: the logical GPU's configured ``memory_limit``,
  else ``nvidia-smi``'s total; JAX: the device's ``memory_stats()``
  ``bytes_limit`` (what its allocator may take), else ``nvidia-smi``;
  PyTorch: ``torch.cuda.mem_get_info``'s total, else
  ``get_device_properties``' ``total_memory``, else ``nvidia-smi``. Where
  none answers, ``None`` and a ``where`` saying what was asked.

Each backend's module is imported inside its queries only, so reading
Caffe's files and the command line's start-up import none of them, and
TensorFlow stays optional. PyTorch's Apple ``mps`` device counts as the
CPU: its memory is the host's.
"""

import subprocess


def nvidia_smi_total():
    """GPU 0's total memory in bytes from ``nvidia-smi``, or None."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,"
                              "nounits", "-i", "0"], capture_output=True, text=True, timeout=10)
        return int(float(out.stdout.strip().splitlines()[0])) * 2 ** 20
    except (OSError, ValueError, IndexError, subprocess.SubprocessError):
        return None


def _from_nvidia_smi(kind, asked):
    """nvidia-smi's answer for a GPU whose backend gave none (``asked`` says
    what was asked), else ``(None, "<kind>:0 memory unknown (...)")``."""
    total = nvidia_smi_total() if kind == "GPU" else None
    if total:
        return total, f"{kind}:0 memory (nvidia-smi)"
    tried = f"{asked}; no nvidia-smi answer" if kind == "GPU" else asked
    return None, f"{kind}:0 memory unknown ({tried})"


class TensorFlowDevices:
    """TensorFlow's ``tf.config``."""

    @staticmethod
    def compute_device():
        import tensorflow as tf  # here, not at the top: TensorFlow optional

        return "GPU" if tf.config.list_logical_devices("GPU") else "CPU"

    @staticmethod
    def accelerator_memory(kind):
        import tensorflow as tf  # here, not at the top: TensorFlow optional

        gpus = tf.config.list_physical_devices("GPU")
        try:
            configs = tf.config.get_logical_device_configuration(gpus[0])
        except (ValueError, RuntimeError):
            configs = None
        if configs and getattr(configs[0], "memory_limit", None):
            return int(configs[0].memory_limit) * 2 ** 20, "GPU:0 logical memory_limit"
        total = nvidia_smi_total()
        if total:
            return total, "GPU:0 memory (nvidia-smi)"
        return None, "GPU:0 memory unknown"


class JaxDevices:
    """JAX's ``jax.devices()`` (the default backend's) and ``memory_stats()``."""

    @staticmethod
    def compute_device():
        import jax  # here, not at the top: the backend is imported only when asked

        platform = jax.devices()[0].platform
        return "CPU" if platform == "cpu" else platform.upper()

    @staticmethod
    def accelerator_memory(kind):
        import jax  # here, not at the top: the backend is imported only when asked

        device = jax.devices()[0]
        try:
            stats = device.memory_stats() if hasattr(device, "memory_stats") else None
        except (NotImplementedError, RuntimeError):  # a plugin without the statistics
            stats = None
        limit = (stats or {}).get("bytes_limit")
        if limit:
            return int(limit), f"{kind}:0 memory (JAX memory_stats bytes_limit)"
        return _from_nvidia_smi(kind, "JAX's device reports no memory_stats bytes_limit")


class TorchDevices:
    """PyTorch's ``torch.cuda``."""

    @staticmethod
    def compute_device():
        import torch  # here, not at the top: the backend is imported only when asked

        return "GPU" if torch.cuda.is_available() else "CPU"

    @staticmethod
    def accelerator_memory(kind):
        import torch  # here, not at the top: the backend is imported only when asked

        try:
            return int(torch.cuda.mem_get_info(0)[1]), "GPU:0 memory (torch.cuda.mem_get_info)"
        except (RuntimeError, AssertionError):  # AssertionError: a build without CUDA
            pass
        try:
            total = getattr(torch.cuda.get_device_properties(0), "total_memory", None)
        except (RuntimeError, AssertionError):
            total = None
        if total:
            return int(total), "GPU:0 memory (torch.cuda.get_device_properties)"
        return _from_nvidia_smi(kind, "torch.cuda gives neither mem_get_info nor "
                                      "get_device_properties' total_memory")


#: The Keras backend -> its queries.
QUERIES = {"tensorflow": TensorFlowDevices, "jax": JaxDevices, "torch": TorchDevices}

"""Which CPU kernels TensorFlow runs in this process: oneDNN's or Eigen's.

TensorFlow turns its oneDNN kernels on by default on x86 CPUs with
AVX-512-class features (AVX512_VNNI, AVX512_BF16, AMX) and runs Eigen's
elsewhere (AMD and Intel CPUs with AVX2 only); ``TF_ENABLE_ONEDNN_OPTS=0``
or ``=1`` overrides the default. The two families differ in which ops they
implement (Eigen's ``Conv2DBackpropInput`` refuses dilation > 1) and in
their temporary memory (Eigen's forward convolution packs the whole batch's
im2col matrix), so LMS and the test suite ask which one is in use.

These are questions about TensorFlow and its kernels: on the other Keras
backends (JAX, PyTorch) they answer without importing TensorFlow (no
oneDNN, no CPU tuning, nothing pooled), and keras-caffe's layers there run
their ``keras.ops`` formulas only. TensorFlow is asked inside each query, on
its backend only, so that importing this module (the command line does it
before TensorFlow's start-up is quietened) imports no TensorFlow.
"""

import functools
import os
import platform

from keras_caffe.backends import is_tensorflow


@functools.lru_cache(maxsize=1)
def onednn_enabled():
    """True when TensorFlow's oneDNN CPU kernels are on in this process.

    TensorFlow exposes no public call for this; its own answer (the one it
    logs as "oneDNN custom operations are on") is read where it exists,
    else ``TF_ENABLE_ONEDNN_OPTS``, else False (Eigen, the family with the
    larger temporaries, so LMS's accounting stays on the safe side).
    False on the other Keras backends, TensorFlow not asked.
    """
    if not is_tensorflow():
        return False
    try:
        # here, not at the top: TensorFlow optional (asked on its backend only)
        from tensorflow.python.util import _pywrap_util_port
        return bool(_pywrap_util_port.IsMklEnabled())
    except (ImportError, AttributeError):
        return os.environ.get("TF_ENABLE_ONEDNN_OPTS", "").strip().lower() in ("1", "true")


#: Set to 0, keras-caffe's CPU tuning is off: layers keep TensorFlow's own
#: gradients, the optimizer's update is not XLA-compiled and TensorFlow's
#: CPU memory is not pooled (to compare, or to rule keras-caffe's choices
#: out). Read when a model or step is traced, and by ``pool_cpu_memory``.
CPU_TUNING = "KERAS_CAFFE_CPU_TUNING"


def tuning_off():
    """True when ``KERAS_CAFFE_CPU_TUNING`` is 0."""
    return os.environ.get(CPU_TUNING, "").strip() == "0"


def cpu_only():
    """True when no GPU is visible (so everything runs on CPU kernels,
    oneDNN's or Eigen's) and ``KERAS_CAFFE_CPU_TUNING`` is not 0: then what
    TensorFlow does slowly on both CPU families is done otherwise (the
    large InnerProduct's input gradient,
    ``keras_caffe.layers.tensorflow_kernels.large_kernel_matmul``; the optimizer update
    as one XLA program, ``keras_caffe.training.step``). False on the other
    Keras backends: the tuning is TensorFlow's."""
    if tuning_off() or not is_tensorflow():
        return False
    import tensorflow as tf  # here, not at the top: TensorFlow optional (its backend only)

    return not tf.config.list_logical_devices("GPU")


def eigen_cpu():
    """True when a layer's ops run on Eigen's CPU kernels: oneDNN off and no
    GPU visible. Layers whose TensorFlow gradient kernels are slow there
    (``MaxPoolGrad``, ``Conv2DBackpropFilter``) then use their own backward
    (``keras_caffe.layers.pooling.max_pool``,
    ``keras_caffe.layers.tensorflow_kernels.own_backward_conv``), unless the environment
    variable ``KERAS_CAFFE_CPU_TUNING`` is 0. Asked when a layer is traced,
    so a model built after the variable changes follows it."""
    return not onednn_enabled() and cpu_only()


#: TensorFlow's own switch (``ProcessState::GetCPUAllocator``) for a BFC pool
#: allocator on its CPU device, read once, when the device is created.
POOLED_CPU_ALLOCATOR = "TF_CPU_ALLOCATOR_USE_BFC"


def pool_cpu_memory(lms=False, start=False):
    """Before TensorFlow creates its CPU device: on Eigen's kernels, have it
    keep freed tensor memory in a pool (``TF_CPU_ALLOCATOR_USE_BFC=true``), as
    its oneDNN builds already do (their CPU allocator is a BFC pool too).
    Returns whether the variable was set here. The command line and
    ``Solver`` call it first thing. With ``start``, TensorFlow's devices are
    created at once and the variable is taken out of the environment again,
    so child processes (LMS's among them) make their own choice; the
    command line cannot start them here (``--cpu-devices`` splits the CPU
    first) and takes the variable out when its command returns.

    Without a pool TensorFlow's Eigen CPU device takes every tensor from
    ``malloc``, and glibc serves blocks over 32 MiB with a fresh ``mmap``
    each time: page faults and zeroed pages on every write of a large
    tensor. CaffeNet's fc6 kernel gradient (a 151 MB tensor) took 77-86 ms
    that way and 18-22 ms pooled, oneDNN's time (TF 2.21, 2-core AMD EPYC);
    a CaffeNet training iteration 612-698 against 745-849 ms.

    Left alone: a value the user set (either way), oneDNN's kernels (pooled
    already), ``KERAS_CAFFE_CPU_TUNING=0``, and ``lms``: Large Model
    Support on the CPU plans for freed activations to go back to the system
    (``keras_caffe.lms.execution.return_freed_blocks``), which a pool does not do
    (under a memory ceiling the pool's fragmentation failed
    tests/lms/test_lms_ceiling.py's step). Without effect once the process has
    run a TensorFlow op. Nothing on the other Keras backends."""
    if not is_tensorflow() or lms or tuning_off() or POOLED_CPU_ALLOCATOR in os.environ \
            or onednn_enabled():
        return False
    os.environ[POOLED_CPU_ALLOCATOR] = "true"
    if start:
        import tensorflow as tf  # here, not at the top: TensorFlow optional (its backend only)

        tf.config.list_logical_devices("CPU")  # creates the CPU device, which reads it
        del os.environ[POOLED_CPU_ALLOCATOR]
    return True


def cpu_kernels():
    """``"oneDNN"`` or ``"Eigen"``."""
    return "oneDNN" if onednn_enabled() else "Eigen"


def cpu_model():
    """The CPU's model name (``/proc/cpuinfo``), or the platform's word for it:
    for the machine line of benchmarks."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":  # `python -m keras_caffe.kernels`: prints oneDNN or Eigen
    print(cpu_kernels())

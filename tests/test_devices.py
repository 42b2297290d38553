"""The device and memory queries (keras_caffe/devices.py, one helper over
the backends' own queries in keras_caffe/backend_devices.py): on this
machine's CPU, each backend's branch answers for real; on a GPU that
reports no memory (a fake device, monkeypatched in), the answer says
"unknown" and ``import_model``'s memory budget logs one line saying it is
off, never a crash. Runs on every backend (tests/support/tiers.py BACKENDS):
each backend's own checks run in its own venv."""

import logging

import keras
import pytest

import keras_caffe
from keras_caffe import backend_devices, devices
from keras_caffe.errors import TensorFlowRequirementError
from keras_caffe.importers.net import memory_budget

BACKEND = keras.backend.backend()
GIB = 2 ** 30


def only_on(backend):
    return pytest.mark.skipif(BACKEND != backend, reason=f"{backend}'s queries, on its backend")


@pytest.fixture
def no_nvidia_smi(monkeypatch):
    """nvidia-smi gives no answer (as on this machine, whatever the test's host)."""
    monkeypatch.setattr(backend_devices, "nvidia_smi_total", lambda: None)


@pytest.fixture
def fresh_warnings():
    """The memory budget's once-per-process warning, as in a new process."""
    memory_budget._say_unknown.cache_clear()
    yield
    memory_budget._say_unknown.cache_clear()


def test_the_backends_own_queries_answer_on_this_cpu():
    """The helper asks the backend Keras runs (its class in QUERIES), which
    finds no accelerator here: the device memory is the host's."""
    assert devices._queries() is backend_devices.QUERIES[BACKEND]
    assert backend_devices.QUERIES[BACKEND].compute_device() == "CPU"
    assert devices.compute_device() == "CPU"
    assert devices.device_memory() == devices.host_memory()
    limit, where = devices.host_memory()
    assert limit > 0 and where in ("host RAM", "cgroup memory.max", "RLIMIT_DATA", "RLIMIT_AS")


@only_on("tensorflow")
def test_tensorflow_sees_the_cpu_only():
    import tensorflow as tf

    assert tf.config.list_logical_devices("GPU") == []
    assert backend_devices.TensorFlowDevices.compute_device() == "CPU"


@only_on("jax")
def test_jax_cpu_device_reports_no_memory_stats(no_nvidia_smi):
    """JAX's CPU device answers memory_stats() with None: the helper gives
    the host's memory for it, and asked as an accelerator, says unknown."""
    import jax

    assert jax.devices()[0].platform == "cpu" and jax.devices()[0].memory_stats() is None
    assert backend_devices.JaxDevices.compute_device() == "CPU"
    assert backend_devices.JaxDevices.accelerator_memory("CPU") == (
        None, "CPU:0 memory unknown (JAX's device reports no memory_stats bytes_limit)")


class FakeJaxGpu:
    """A JAX device on a GPU whose memory_stats() is ``stats``."""

    platform = "gpu"
    id = 0

    def __init__(self, stats):
        self.stats = stats

    def memory_stats(self):
        return self.stats


@only_on("jax")
@pytest.mark.parametrize("stats, answer", [
    ({"bytes_limit": 40 * GIB, "bytes_in_use": 0},
     (40 * GIB, "GPU:0 memory (JAX memory_stats bytes_limit)")),
    (None, (None, "GPU:0 memory unknown (JAX's device reports no memory_stats bytes_limit; "
                  "no nvidia-smi answer)")),
    ({"bytes_in_use": 0}, (None, "GPU:0 memory unknown (JAX's device reports no memory_stats "
                                 "bytes_limit; no nvidia-smi answer)")),
])
def test_jax_gpu_memory_from_memory_stats(stats, answer, monkeypatch, no_nvidia_smi):
    import jax

    monkeypatch.setattr(jax, "devices", lambda *args: [FakeJaxGpu(stats)])
    assert devices.compute_device() == "GPU"
    assert devices.device_memory() == answer


@only_on("jax")
def test_jax_gpu_memory_falls_back_to_nvidia_smi(monkeypatch):
    import jax

    monkeypatch.setattr(jax, "devices", lambda *args: [FakeJaxGpu(None)])
    monkeypatch.setattr(backend_devices, "nvidia_smi_total", lambda: 80 * GIB)
    assert devices.device_memory() == (80 * GIB, "GPU:0 memory (nvidia-smi)")


@only_on("torch")
def test_torch_cpu_build_has_no_cuda(no_nvidia_smi):
    """This PyTorch has no CUDA: the CPU; asked as an accelerator, torch.cuda
    refuses both queries, and the answer is unknown."""
    import torch

    assert not torch.cuda.is_available()
    assert backend_devices.TorchDevices.compute_device() == "CPU"
    assert backend_devices.TorchDevices.accelerator_memory("GPU") == (
        None, "GPU:0 memory unknown (torch.cuda gives neither mem_get_info nor "
              "get_device_properties' total_memory; no nvidia-smi answer)")


def _refuse(*args):
    raise RuntimeError("CUDA error: no CUDA-capable device is detected")


@only_on("torch")
@pytest.mark.parametrize("mem_get_info, properties, answer", [
    (lambda device: (3 * GIB, 24 * GIB), None,
     (24 * GIB, "GPU:0 memory (torch.cuda.mem_get_info)")),
    (_refuse, type("Properties", (), {"total_memory": 16 * GIB}),
     (16 * GIB, "GPU:0 memory (torch.cuda.get_device_properties)")),
    (_refuse, type("Properties", (), {}),
     (None, "GPU:0 memory unknown (torch.cuda gives neither mem_get_info nor "
            "get_device_properties' total_memory; no nvidia-smi answer)")),
])
def test_torch_gpu_memory(mem_get_info, properties, answer, monkeypatch, no_nvidia_smi):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        (lambda device: properties()) if properties else _refuse)
    assert devices.compute_device() == "GPU"
    assert devices.device_memory() == answer


def _tensorflow_gpu(monkeypatch):
    import tensorflow as tf

    gpu = tf.config.PhysicalDevice(name="/physical_device:GPU:0", device_type="GPU")
    monkeypatch.setattr(tf.config, "list_logical_devices",
                        lambda kind=None: [tf.config.LogicalDevice("/device:GPU:0", "GPU")])
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu])
    monkeypatch.setattr(tf.config, "get_logical_device_configuration", lambda device: None)
    return "GPU:0 memory unknown"


def _jax_gpu(monkeypatch):
    import jax

    monkeypatch.setattr(jax, "devices", lambda *args: [FakeJaxGpu(None)])
    return ("GPU:0 memory unknown (JAX's device reports no memory_stats bytes_limit; "
            "no nvidia-smi answer)")


def _torch_gpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", _refuse)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: object())
    return ("GPU:0 memory unknown (torch.cuda gives neither mem_get_info nor "
            "get_device_properties' total_memory; no nvidia-smi answer)")


@pytest.fixture
def gpu_without_memory(monkeypatch, no_nvidia_smi):
    """This backend's query finds a GPU (a fake device) that reports no
    memory; the answer's ``where``."""
    return {"tensorflow": _tensorflow_gpu, "jax": _jax_gpu, "torch": _torch_gpu}[BACKEND](
        monkeypatch)


def test_unknown_device_memory_turns_the_budget_off_with_one_warning(
        gpu_without_memory, caplog, fresh_warnings, golden):
    """On a GPU whose memory nobody reports, the budget has no limit and logs
    one warning saying it is off, once per process; import_model imports."""
    assert devices.compute_device() == "GPU"
    assert devices.device_memory() == (None, gpu_without_memory)
    with caplog.at_level(logging.WARNING, logger="keras_caffe.importers"):
        budget = memory_budget.MemoryBudget()
        memory_budget.MemoryBudget()
    assert (budget.limit, budget.where) == (None, gpu_without_memory)
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == [
        ("keras_caffe.importers", "WARNING",
         f"keras-caffe: {gpu_without_memory}: import_model's memory budget is off (a layer "
         "too large for the device is not refused before it is allocated)")]
    model = keras_caffe.import_model(golden / "forward" / "lenet" / "deploy_used.prototxt")
    assert model.output_shape == (None, 10)


def test_known_device_memory_logs_nothing(caplog, fresh_warnings):
    with caplog.at_level(logging.WARNING, logger="keras_caffe.importers"):
        budget = memory_budget.MemoryBudget()
    assert (budget.limit, budget.where) == devices.host_memory() and caplog.records == []


@pytest.mark.skipif(BACKEND == "tensorflow", reason="the refusal on JAX and PyTorch")
def test_gpu_rates_are_large_model_supports_on_tensorflow():
    with pytest.raises(TensorFlowRequirementError) as err:
        devices.gpu_rates()
    assert str(err.value) == (
        f"keras_caffe.devices.gpu_rates (Large Model Support's plan) needs Keras's TensorFlow "
        f"backend and the backend is {BACKEND!r}: run with KERAS_BACKEND=tensorflow "
        f"(TensorFlow >= 2.16: pip install 'keras-caffe[tensorflow]'); on {BACKEND} "
        "keras-caffe offers the solvers, schedules, importer, snapshots and callbacks "
        "(docs/backends.md)")

"""Where the Solver trains: this process among the Horovod workers (or
alone) and its share of the training data, the devices of a
``tf.distribute.MirroredStrategy`` (``devices=``, ``keras-caffe train --gpu
0,1``) and the device that runs the tests, from the Solver's arguments and
the solver file's ``solver_mode`` / ``device_id``. One engine at a time:
several devices are refused under Horovod and with LMS."""

import contextlib

import tensorflow as tf

from keras_caffe.distributed.context import Worker, worker
from keras_caffe.errors import ArgumentError, DistributedError, SolverError
from keras_caffe.proto import caffe_pb2


def choose_worker(distributed):
    """This process as a ``Worker``: Horovod's rank and size with
    ``distributed="auto"``, rank 0 of 1 with False."""
    return worker() if distributed == "auto" else Worker(0, 1, 0, 1, None)


def data_shard(me, shard_index, num_shards):
    """``(index, count)`` of the training data this worker reads: the given
    shard, else its rank among the workers."""
    if shard_index is None and num_shards is None:
        return me.rank, me.size
    return shard_index, num_shards


def mirrored_devices(devices, me, lms):
    """``(full device names, MirroredStrategy or None)``: a strategy for
    more than one device; several devices under Horovod with more than one
    worker or with ``lms`` are refused."""
    resolved = resolve_devices(devices)
    if len(resolved) > 1 and me.size > 1:
        raise DistributedError(
            f"Solver: devices={list(devices)} (tf.distribute.MirroredStrategy) under Horovod "
            f"with {me.size} workers: use one engine at a time (horovodrun with one "
            "device per worker, or several devices in one process)")
    if len(resolved) > 1 and lms:
        raise ArgumentError("Solver", "lms", "is not supported with several devices")
    return resolved, (tf.distribute.MirroredStrategy(resolved) if len(resolved) > 1 else None)


def strategy_scope(strategy):
    """The MirroredStrategy's scope with several devices; else nothing."""
    return strategy.scope() if strategy is not None else contextlib.nullcontext()


def main_device(param, source, devices):
    """The device that runs the tests (and, with several devices, holds the
    sum): the first of ``devices``, else the solver file's GPU
    ``device_id`` in GPU mode, else the CPU (no GPU, or CPU mode)."""
    if devices:
        return devices[0]
    gpus = tf.config.list_logical_devices("GPU")
    if param.solver_mode == caffe_pb2.SolverParameter.GPU and gpus:
        index = param.device_id if param.HasField("device_id") else 0
        if index >= len(gpus):
            raise SolverError(source, f"device_id: {index}, but only {len(gpus)} "
                                      "GPU(s) are visible")
        return gpus[index].name
    return "/CPU:0" if not gpus or param.solver_mode == caffe_pb2.SolverParameter.CPU \
        else gpus[0].name


def describe(me, devices, strategy):
    """The engine, as the "Solver scaffolding done" line ends: the
    MirroredStrategy's devices, or Horovod's workers, or nothing alone."""
    if strategy is not None:
        return (f", {len(devices)} devices (MirroredStrategy: {', '.join(devices)}), "
                f"global batch x{len(devices)}")
    if me.size > 1:
        return f", {me.size} workers (Horovod), global batch x{me.size}"
    return ""


def resolve_devices(devices):
    """``devices`` as the full names of TensorFlow's logical devices (``[]``
    for None); names that match no device raise ``ArgumentError`` naming
    them and the devices found."""
    if devices is None:
        return []
    if isinstance(devices, str) or not all(isinstance(d, str) for d in devices) or not devices:
        raise ArgumentError("Solver", "devices", f"must be a non-empty list of device names "
                                                 f"such as ['GPU:0', 'GPU:1'], got {devices!r}")
    found = {_device_key(d.name): d.name for d in tf.config.list_logical_devices()}
    missing = [d for d in devices if _device_key(d) not in found]
    if missing:
        raise ArgumentError("Solver", "devices", f"{', '.join(missing)}: no such device; "
                                                 f"devices found: {_found_text(found.values())}")
    resolved = [found[_device_key(d)] for d in devices]
    if len(set(resolved)) != len(resolved):
        raise ArgumentError("Solver", "devices", f"lists a device twice: {list(devices)}")
    return resolved


def _device_key(name):
    try:
        spec = tf.DeviceSpec.from_string(name if "/" in name else f"/device:{name}")
    except (ValueError, TypeError):
        return None
    return (spec.device_type or "").upper(), spec.device_index or 0


def _found_text(names):
    return ", ".join(n.split("device:")[-1] for n in names) or "none"

"""``keras-caffe train --devices CPU:0,CPU:1``: Caffe's solver on two devices
of one process (MirroredStrategy), as ``caffe train -gpu 0,1``.

LeNet on the digits LMDB (examples/lenet_solver/make_data.py), no random
crop, mirror or shuffle: two devices with batch 32 and iter_size 2 must end
where one device with batch 64 and iter_size 2 ends (device d reads batches
d, d+2, ...: together what the single device reads), with clip_gradients
clipping the summed gradient. Each run is a fresh process (``--cpu-devices
2`` splits the CPU before TensorFlow starts): the two-device run a new
interpreter, the others forked (``forked.run``) from a process that has
imported TensorFlow but not started it, so the resumed run is checked
against a run of another interpreter.
"""

import runpy
import shutil

import numpy as np
import pytest

from support import REPO
from support.forked import run as run_forked
from support.horovod_jobs import caffemodel, check, environment, python

LENET = REPO / "examples" / "lenet_solver"
CLI = ["-m", "keras_caffe.cli"]
SOLVER = """net: "{net}"
test_iter: 2
test_interval: 5
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 5
max_iter: 10
snapshot: 5
snapshot_prefix: "snap/lenet"
solver_mode: CPU
random_seed: 1701
clip_gradients: 1.0
iter_size: 2
"""
TWO = ["--cpu-devices", "2", "--devices", "CPU:0,CPU:1"]


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    root = tmp_path_factory.mktemp("lenet_mirrored")
    runpy.run_path(str(LENET / "make_data.py"))["main"](
        ["--train", "640", "--test", "100", "--out", str(root)])
    text = (LENET / "lenet_train_test.prototxt").read_text()
    for batch in (32, 64):
        (root / f"net{batch}.prototxt").write_text(
            text.replace("batch_size: 64", f"batch_size: {batch}"))
        (root / f"solver{batch}.prototxt").write_text(SOLVER.format(net=f"net{batch}.prototxt"))
    return root


def python_forked(args, cwd, env=None):
    """``support.horovod_jobs.python``, forked."""
    return run_forked([*map(str, args)], cwd=cwd, env=environment(**(env or {})), timeout=240,
                      merge=True)


def train(cwd, solver, *extra, fresh=False):
    """``keras-caffe train``: forked, or (``fresh``) a new interpreter."""
    cwd.mkdir(exist_ok=True)
    args = [*CLI, "train", "--solver", solver, "--log-format", "caffe", *extra]
    return python(args, cwd=cwd) if fresh else python_forked(args, cwd)


def final_loss(log):
    line = [x for x in log.splitlines() if "Iteration 10, loss = " in x][-1]
    return float(line.rsplit("= ", 1)[1])


@pytest.fixture(scope="module")
def runs(lenet):
    two = check(train(lenet / "two", lenet / "solver32.prototxt", *TWO, fresh=True)).stdout
    one = check(train(lenet / "one", lenet / "solver64.prototxt")).stdout
    return two, one


@pytest.mark.kernels
def test_two_devices_train_like_one_with_twice_the_batch(lenet, runs):
    log2, log1 = runs
    assert "2 devices (MirroredStrategy: /device:CPU:0, /device:CPU:1), global batch x2" in log2
    two = caffemodel(lenet / "two" / "snap" / "lenet_iter_10.caffemodel")
    one = caffemodel(lenet / "one" / "snap" / "lenet_iter_10.caffemodel")
    assert sorted(two) == sorted(one) == ["conv1", "conv2", "ip1", "ip2"]
    start = caffemodel(lenet / "one" / "snap" / "lenet_iter_5.caffemodel")
    assert max(np.abs(a - b).max() for a, b in zip(one["ip1"], start["ip1"])) > 1e-4
    for name in one:
        for a, b in zip(two[name], one[name]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert final_loss(log2) == pytest.approx(final_loss(log1), rel=1e-5)


def test_resumed_two_device_run_equals_uninterrupted(lenet, runs):
    resumed = lenet / "two_resumed"
    resumed.mkdir()
    shutil.copytree(lenet / "two" / "snap", resumed / "snap")
    for suffix in ("caffemodel", "solverstate"):
        (resumed / "snap" / f"lenet_iter_10.{suffix}").unlink()
    check(train(resumed, lenet / "solver32.prototxt", *TWO, "--snapshot",
                "snap/lenet_iter_5.solverstate"))
    whole = caffemodel(lenet / "two" / "snap" / "lenet_iter_10.caffemodel")
    again = caffemodel(resumed / "snap" / "lenet_iter_10.caffemodel")
    for name in whole:
        for a, b in zip(whole[name], again[name]):
            np.testing.assert_array_equal(a, b)


def error_of(result):
    assert result.returncode == 2, result.stdout[-3000:]
    assert "Traceback" not in result.stdout
    return [x for x in result.stdout.splitlines() if x.startswith("keras-caffe: error:")]


def test_gpu_that_does_not_exist_is_a_clean_error(lenet):
    got = error_of(train(lenet / "gpu7", lenet / "solver32.prototxt", "--gpu", "7"))
    assert got == ["keras-caffe: error: --gpu 7: no GPU 7; GPUs found: none"]
    got = error_of(train(lenet / "gpu7", lenet / "solver32.prototxt", "-gpu", "all"))
    assert got == ["keras-caffe: error: --gpu all: no GPU found"]


def test_device_that_does_not_exist_is_a_clean_error(lenet):
    got = error_of(train(lenet / "cpu9", lenet / "solver32.prototxt", "--devices", "CPU:0,CPU:9"))
    assert got == ["keras-caffe: error: --devices CPU:9: no such device; devices found: CPU:0"]


def test_gpu_with_horovod_is_refused(lenet):
    result = python_forked([*CLI, "train", "--solver", lenet / "solver32.prototxt", "--gpu",
                            "0,1"], cwd=lenet, env={"HOROVOD_RANK": "0", "HOROVOD_SIZE": "2"})
    got = error_of(result)
    assert got and "under horovodrun: use one engine at a time" in got[0]

"""keras_caffe.kernels.pool_cpu_memory: on Eigen's CPU kernels the command
line and ``Solver`` have TensorFlow pool its CPU memory (its own
``TF_CPU_ALLOCATOR_USE_BFC``), as its oneDNN builds do; never under LMS,
``KERAS_CAFFE_CPU_TUNING=0`` or a value the user set. Each case runs in a
fresh process (TensorFlow reads the variable once, when it creates the CPU
device), and checks what TensorFlow did, not only the variable: a pooled CPU
device reports allocator statistics, malloc's does not. Each child names
its kernels (``TF_ENABLE_ONEDNN_OPTS``), so one pass of the suite covers
both families. The children are forked (``forked.run``) from a process that
has imported TensorFlow but made no device yet: TensorFlow makes its CPU
device, and reads the variable, in the child."""

import json
import os

import pytest

from support.forked import run as run_forked
from support import GOLDEN

VAR = "TF_CPU_ALLOCATOR_USE_BFC"
REPORT = """
import json, os
import tensorflow as tf
from keras_caffe.kernels import onednn_enabled
tf.ones((4, 4))  # the CPU device exists from here on
try:
    tf.config.experimental.get_memory_info("CPU:0")
    pooled = True
except ValueError as err:
    assert "Allocator stats not available" in str(err), err
    pooled = False
print(json.dumps({"value": os.environ.get("%s"), "pooled": pooled,
                  "onednn": onednn_enabled(), "returned": RETURNED}))
""" % VAR


def child(first, onednn, **env):
    """Run ``first`` (Python setting ``RETURNED``), then REPORT, in a fresh process."""
    environ = {k: v for k, v in os.environ.items() if k not in (VAR, "KERAS_CAFFE_CPU_TUNING")}
    environ.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
                   TF_ENABLE_ONEDNN_OPTS=onednn, **env)
    done = run_forked(["-c", first + REPORT], timeout=300, env=environ)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


POOL = "from keras_caffe.kernels import pool_cpu_memory\nRETURNED = pool_cpu_memory()\n"


def test_eigen_kernels_get_the_pool():
    got = child(POOL, "0")
    assert got == {"value": "true", "pooled": True, "onednn": False, "returned": True}


def test_eigen_without_the_call_keeps_malloc():
    """The control: TensorFlow's own default on Eigen's kernels."""
    got = child("import keras_caffe\nRETURNED = None\n", "0")
    assert got == {"value": None, "pooled": False, "onednn": False, "returned": None}


@pytest.mark.parametrize("first, env", [
    ("from keras_caffe.kernels import pool_cpu_memory\nRETURNED = pool_cpu_memory(lms=True)\n", {}),
    (POOL, {"KERAS_CAFFE_CPU_TUNING": "0"}),
    (POOL, {VAR: "false"}),
], ids=["lms", "tuning-off", "user-said-no"])
def test_left_alone(first, env):
    got = child(first, "0", **env)
    assert got == {"value": env.get(VAR), "pooled": False, "onednn": False, "returned": False}


def test_onednn_is_pooled_already_and_left_alone():
    got = child(POOL, "1")
    assert got == {"value": None, "pooled": True, "onednn": True, "returned": False}


SOLVER = GOLDEN / "timing" / "lenet_dummy_solver.prototxt"


@pytest.mark.parametrize("lms", [False, True])
def test_the_solver_pools_unless_lms(lms):
    """``Solver`` asks first thing, with or without an LMS for its train net."""
    first = (f"import os\nos.chdir({str(SOLVER.parent)!r})\n"
             "import keras_caffe\n"
             f"lms = keras_caffe.LMS(1000) if {lms} else None\n"
             f"solver = keras_caffe.Solver({SOLVER.name!r}, lms=lms, log=None)\n"
             "RETURNED = solver.iter\n")
    got = child(first, "0")
    # the devices started pooled, and the variable is gone again: child processes
    # (an LMS run's among them) choose for themselves
    assert got == {"value": None, "pooled": not lms, "onednn": False, "returned": 0}


@pytest.mark.parametrize("lms", [False, True])
def test_the_command_line_pools_unless_lms(lms):
    """``keras-caffe train`` (one iteration) decides before the solver does
    (the Solver's own call then finds the variable set and leaves it)."""
    args = ["train", "--solver", SOLVER.name, "--max-iter", "1"] + (["--lms", "1000"] if lms else [])
    first = (f"import os\nos.chdir({str(SOLVER.parent)!r})\n"
             "from keras_caffe.cli import main\n"
             f"RETURNED = main({args!r})\n")
    got = child(first, "0")
    # main takes the variable out when the command returns
    assert got == {"value": None, "pooled": not lms, "onednn": False, "returned": 0}

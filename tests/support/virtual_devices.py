"""What the tests of keras-caffe's solvers on N virtual JAX CPU devices share
(tests/distributed/test_jax_data_parallel.py, test_jax_local_sums.py): the
module mark, the cases and tolerances, a case script started in a process of
its own with N devices, and the check that N devices trained like one."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest

JAX_ONLY = pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="keras.distribution.DataParallel over virtual CPU devices: JAX backend only")

CASES = ["sgd", "nesterov", "adagrad", "rmsprop", "adadelta", "adam", "yellowfin"]
DEVICES = [2, 4]
# rtol 1e-5 per element; an element that passes near 0 (AdaGrad's first
# steps are +-lr) needs an atol: beyond rtol's share, at most 2.3e-8 was
# measured on the weights, 1.8e-10 on the optimizer's slots (sums of squares,
# accumulators just reset).
RTOL, WEIGHT_ATOL, STATE_ATOL = 1e-5, 1e-7, 1e-9


def start(script, out, devices, *args):
    """``script out *args`` in a new JAX process seeing ``devices`` CPU devices."""
    env = dict(os.environ, KERAS_BACKEND="jax",
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    return subprocess.Popen([sys.executable, str(script), str(out), *map(str, args)], cwd=out,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(process, label):
    """Wait for ``process``; the test fails with its output if it failed."""
    stdout, stderr = process.communicate(timeout=600)
    if process.returncode != 0:
        pytest.fail(f"{label} failed ({process.returncode}):\n{stdout}\n{stderr}")


def parts(arrays, case, way, part):
    """The arrays a case script saved as ``case/way/part/<i>``, in order."""
    prefix = f"{case}/{way}/{part}/"
    keys = sorted((k for k in arrays.files if k.startswith(prefix)),
                  key=lambda k: int(k.rsplit("/", 1)[1]))
    return [arrays[k] for k in keys]


def check_like_one_device(result, arrays, case, way):
    """N devices' weights and optimizer state (``many_*``) against one
    device's (``one_*``): integers exactly, floats to RTOL and the atols;
    the frozen bias (lr_mult 0) still zero."""
    assert result["devices"] >= 2
    one, many = parts(arrays, case, way, "one_w"), parts(arrays, case, way, "many_w")
    assert len(one) == len(many) == 6
    for a, b, path in zip(many, one, result["cases"][case]["variables"]):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=WEIGHT_ATOL, err_msg=path)
    one_o, many_o = parts(arrays, case, way, "one_o"), parts(arrays, case, way, "many_o")
    assert len(one_o) == len(many_o) > 0
    for a, b in zip(many_o, one_o):
        if b.dtype.kind in "iu":  # iterations, iter_size's micro-steps, YellowFin's skips
            np.testing.assert_array_equal(a, b)
        else:
            np.testing.assert_allclose(a, b, rtol=RTOL, atol=STATE_ATOL)
    assert result["cases"][case][way]["frozen_bias_max"] == 0.0

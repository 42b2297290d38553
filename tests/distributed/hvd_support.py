"""Running real multi-process Horovod jobs from the tests.

``horovodrun(args, np=2)`` starts ``horovodrun -np N -H localhost:N --gloo``
with this interpreter, bounded by a timeout (a hang fails the test). Tests
that need Horovod call ``require_horovod()``: it skips where Horovod is not
installed unless ``KERAS_CAFFE_EXPECT_HOROVOD=1``, which ``make test`` and
``make test-compat`` set (both build Horovod with ``keras-caffe
install-horovod``): there a missing Horovod fails.
"""

import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
FIT_WORKER = HERE / "fit_worker.py"
QUIET = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": ""}


def have_horovod():
    return importlib.util.find_spec("horovod") is not None


def require_horovod():
    if have_horovod():
        return
    if os.environ.get("KERAS_CAFFE_EXPECT_HOROVOD") == "1":
        pytest.fail("Horovod is not installed but KERAS_CAFFE_EXPECT_HOROVOD=1")
    pytest.skip("Horovod not installed (keras-caffe install-horovod builds it; make test does)")


def horovodrun_exe():
    return str(Path(sys.executable).parent / "horovodrun")


def environment(**extra):
    env = dict(os.environ)
    env.update(QUIET)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _cwd(cwd):
    """A child's working directory: never the repository root, where ``-c``
    and ``-m`` would import the source tree instead of the installed wheel."""
    return cwd if cwd is not None else tempfile.gettempdir()


def horovodrun(args, np=2, timeout=240, env=None, cwd=None):
    """``horovodrun -np {np}`` running ``python args...``; returns the
    CompletedProcess (stdout and stderr merged into ``.stdout``)."""
    command = [horovodrun_exe(), "-np", str(np), "-H", f"localhost:{np}", "--gloo",
               sys.executable, *map(str, args)]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=environment(**(env or {})), cwd=_cwd(cwd))


def discovery_script(path, *hosts, when=None):
    """An executable host-discovery script at ``path`` printing ``hosts``
    (``"localhost:1"``...); ``when={host: file}`` lists a host only while
    ``file`` exists. Horovod runs every name that resolves to this machine
    locally (no ssh), so ``localhost`` and ``127.0.0.1`` are two "hosts"
    here: one can be blacklisted after its worker dies while the other
    carries on."""
    when = when or {}
    lines = ["#!/bin/sh"]
    for host in hosts:
        name = host.split(":")[0]
        if name in when:
            lines.append(f"[ -e '{when[name]}' ] && echo {host}")
        else:
            lines.append(f"echo {host}")
    path = Path(path)
    path.write_text("\n".join(lines) + "\nexit 0\n")
    path.chmod(0o755)
    return path


def horovodrun_elastic(args, discovery, np=2, min_np=1, max_np=2, timeout=240, env=None,
                       cwd=None):
    """An elastic ``horovodrun`` (``--min-np``/``--max-np``, a host-discovery
    script) running ``python args...``; ``--network-interface lo`` so a job
    may start on one host."""
    command = [horovodrun_exe(), "-np", str(np), "--min-np", str(min_np), "--max-np", str(max_np),
               "--host-discovery-script", str(discovery), "--network-interface", "lo", "--gloo",
               sys.executable, *map(str, args)]
    return subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env=environment(**(env or {})), cwd=_cwd(cwd))


def python(args, timeout=240, env=None, cwd=None):
    """``python args...`` in a fresh process (no Horovod launcher)."""
    return subprocess.run([sys.executable, *map(str, args)], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=environment(**(env or {})), cwd=_cwd(cwd))


def check(result):
    if result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}:\n{result.stdout[-6000:]}")
    return result


def caffemodel(path):
    """``{layer: [blobs as arrays]}`` of a caffemodel a job wrote (either format)."""
    from keras_caffe.importers.weights import load_weights

    return {name: [np.asarray(b) for b in blobs] for name, blobs in load_weights(path).items()}

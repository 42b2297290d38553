"""What the Horovod build compiles against: the TensorFlow of this
interpreter, and whether to build NCCL's GPU collectives.

NCCL (``HOROVOD_GPU_OPERATIONS=NCCL``) is built, with ``gpu="auto"``, only
when all three hold: TensorFlow is a CUDA build
(``tf.sysconfig.get_build_info()["is_cuda_build"]``; ``tensorflow-cpu`` is
not), a CUDA toolkit's ``nvcc`` is found (``HOROVOD_CUDA_HOME``,
``CUDA_HOME``, ``CUDA_PATH``, ``/usr/local/cuda``, then ``PATH``), and
``nccl.h`` is found (``HOROVOD_NCCL_INCLUDE``, ``HOROVOD_NCCL_HOME/include``,
the toolkit's ``include``, ``/usr/include``). Otherwise the build is
Gloo-only (CPU collectives), and Horovod's ``HOROVOD_GPU*`` variables are
removed from the build's environment so that CMake cannot turn GPU
operations on. ``gpu="nccl"`` requires all three; ``gpu="none"`` never
builds them.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from keras_caffe.errors import HorovodBuildError

#: TensorFlow releases this patch set is written for (the package's floor to
#: the newest tested).
SUPPORTED = ((2, 16), (2, 21))
GPU_MODES = ("auto", "nccl", "none")
#: Horovod's build variables that turn GPU operations on.
GPU_VARIABLES = ("HOROVOD_GPU", "HOROVOD_GPU_OPERATIONS", "HOROVOD_GPU_ALLREDUCE",
                 "HOROVOD_GPU_ALLGATHER", "HOROVOD_GPU_BROADCAST", "HOROVOD_GPU_ALLTOALL",
                 "HOROVOD_GPU_REDUCESCATTER")

#: What the build compiles against, asked of TensorFlow in a fresh process:
#: besides the version and headers, what the build cache's key
#: (``cache.components``) needs: the distribution(s) installing the
#: ``tensorflow`` package (``tensorflow``, ``tensorflow-cpu``, ...), the git
#: version, and the compile and link flags (the C++11 ABI, the C++ standard,
#: Eigen's alignment), with ``lib``, TensorFlow's own folder, to tell its path
#: from the flags' meaning.
PROBE = r"""
import json, tensorflow as tf
info = tf.sysconfig.get_build_info()
def owners():  # the installed distributions whose files hold the tensorflow imported
    import os, re
    from importlib import metadata
    here = os.path.realpath(tf.__file__)
    for dist in metadata.distributions():
        name = dist.metadata["Name"] or ""
        if (re.search(r"tensorflow|tf[-_]nightly", name, re.I)
                and re.search(r"^tensorflow/__init__\.py,", dist.read_text("RECORD") or "", re.M)
                and os.path.realpath(dist.locate_file("tensorflow/__init__.py")) == here):
            yield f"{name} {dist.version}"
try:
    distributions = sorted(set(owners()))
except Exception:  # metadata that does not parse: the key names no distribution
    distributions = []
flags = lambda name: list(getattr(tf.sysconfig, name, lambda: [])())
print(json.dumps({"version": tf.version.VERSION, "include": tf.sysconfig.get_include(),
                  "cuda": bool(info.get("is_cuda_build")),
                  "cuda_version": info.get("cuda_version"),
                  "git_version": getattr(tf.version, "GIT_VERSION", None),
                  "lib": getattr(tf.sysconfig, "get_lib", lambda: None)(),
                  "compile_flags": flags("get_compile_flags"),
                  "link_flags": flags("get_link_flags"),
                  "distributions": distributions}))
"""


@dataclass(frozen=True)
class TensorFlowInfo:
    version: str
    include: str
    cuda: bool
    cuda_version: object = None
    git_version: str = None
    lib: str = None
    compile_flags: tuple = ()
    link_flags: tuple = ()
    distributions: tuple = ()

    @property
    def release(self):
        match = re.match(r"(\d+)\.(\d+)", self.version)
        return (int(match[1]), int(match[2])) if match else None


@dataclass(frozen=True)
class GpuChoice:
    """``nccl``: build NCCL operations; ``reason``: one line saying why (not)."""

    nccl: bool
    reason: str
    cuda_home: str = None
    nccl_include: str = None


def probe_tensorflow(python=None, environ=None):
    """The TensorFlow that ``python`` (this interpreter) imports, asked in a
    fresh process; ``HorovodBuildError`` when it does not import."""
    env = dict(os.environ if environ is None else environ, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([python or sys.executable, "-c", PROBE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        error = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise HorovodBuildError(
            f"TensorFlow does not import in {python or sys.executable} ({error}): "
            "install TensorFlow first, Horovod compiles against it")
    fields = json.loads(lines[-1])
    for name in ("compile_flags", "link_flags", "distributions"):
        fields[name] = tuple(fields[name])
    return TensorFlowInfo(**fields)


def _dotted(release):
    return ".".join(map(str, release))


def check_supported(info, allow_untested=False):
    """None if ``info``'s release is in ``SUPPORTED``; a warning line when it
    is not and ``allow_untested``; else ``HorovodBuildError``."""
    low, high = SUPPORTED
    if info.release is not None and low <= info.release <= high:
        return None
    message = (f"TensorFlow {info.version} is outside {_dotted(low)}-{_dotted(high)}, "
               "the releases keras-caffe's Horovod patches are written and tested for")
    if allow_untested:
        return f"warning: {message}; building anyway (--any-tensorflow)"
    raise HorovodBuildError(f"{message}: install a TensorFlow in that range, or pass "
                            "--any-tensorflow to try anyway")


def find_cuda_home(environ):
    """The CUDA toolkit directory holding ``bin/nvcc``, or None."""
    candidates = [environ.get(name) for name in ("HOROVOD_CUDA_HOME", "CUDA_HOME", "CUDA_PATH")]
    candidates.append("/usr/local/cuda")
    nvcc = shutil.which("nvcc", path=environ.get("PATH", ""))
    if nvcc:
        candidates.append(str(Path(nvcc).resolve().parent.parent))
    for home in filter(None, candidates):
        if (Path(home) / "bin" / "nvcc").is_file():
            return home
    return None


def find_nccl_header(environ, cuda_home):
    """The directory holding ``nccl.h``, or None."""
    candidates = [environ.get("HOROVOD_NCCL_INCLUDE")]
    if environ.get("HOROVOD_NCCL_HOME"):
        candidates.append(str(Path(environ["HOROVOD_NCCL_HOME"]) / "include"))
    if cuda_home:
        candidates.append(str(Path(cuda_home) / "include"))
    candidates.append("/usr/include")
    for directory in filter(None, candidates):
        if (Path(directory) / "nccl.h").is_file():
            return directory
    return None


def choose_gpu(info, mode="auto", environ=None):
    """``GpuChoice`` for ``mode`` (``GPU_MODES``); ``HorovodBuildError`` when
    ``mode="nccl"`` and something NCCL needs is missing."""
    if mode not in GPU_MODES:
        raise HorovodBuildError(f"--gpu {mode!r}: expected one of {', '.join(GPU_MODES)}")
    if mode == "none":
        return GpuChoice(False, "Gloo only: --gpu none")
    environ = os.environ if environ is None else environ
    cuda_home = find_cuda_home(environ)
    nccl_include = find_nccl_header(environ, cuda_home)
    missing = [what for what, ok in (
        (f"TensorFlow {info.version} is not a CUDA build", info.cuda),
        ("no CUDA toolkit (nvcc) found", cuda_home),
        ("nccl.h not found (set HOROVOD_NCCL_HOME)", nccl_include),
    ) if not ok]
    if not missing:
        return GpuChoice(True, f"NCCL: TensorFlow is a CUDA build, CUDA toolkit {cuda_home}, "
                               "nccl.h found", cuda_home, nccl_include)
    if mode == "nccl":
        raise HorovodBuildError(f"--gpu nccl: {'; '.join(missing)}")
    return GpuChoice(False, f"Gloo only (no NCCL): {'; '.join(missing)}")

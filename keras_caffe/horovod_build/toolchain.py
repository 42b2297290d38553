"""The tools a Horovod build needs, checked before anything is downloaded.

Horovod 0.28.1's setup.py drives CMake (>= 3.13, Unix Makefiles, so
``make``) with a C++17 compiler, and compiles a Python extension (so
``Python.h``). CMake 4 refuses the ``cmake_minimum_required(VERSION
2.8.12)`` of the gloo copy inside the sdist unless
``CMAKE_POLICY_VERSION_MINIMUM`` is set.
"""

import os
import re
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from keras_caffe.errors import HorovodBuildError

CMAKE_MINIMUM = (3, 13)
#: tool -> the Debian/Ubuntu package that provides it
APT_PACKAGES = {"cmake": "cmake", "make": "make", "g++": "g++", "Python.h": "python3-dev"}


@dataclass(frozen=True)
class Toolchain:
    """``compiler``: the C++ compiler's path (``$CXX`` or ``g++`` on PATH),
    which the build passes on as ``CXX`` so that CMake compiles with exactly
    it; ``compiler_version``: its ``--version`` output (``version_text``).
    ``c_compiler``: ``$CC`` or ``cc`` on PATH (or None), which CMake finds for
    the bundled gloo (``project(gloo CXX C)``). The build cache's key names
    both (``cache.components``)."""

    cmake: str
    cmake_version: tuple
    compiler: str
    python_include: str
    compiler_version: str = ""
    c_compiler: str = None
    c_compiler_version: str = ""


def cmake_version(cmake):
    """``cmake --version``'s ``(major, minor, patch)``; None if it does not run."""
    try:
        out = subprocess.run([cmake, "--version"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=60).stdout
    except OSError:
        return None
    match = re.search(r"version\s+(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(part or 0) for part in match.groups()) if match else None


def version_text(program):
    """``program --version``'s output (stdout and stderr), its non-empty lines
    stripped and joined with `` | ``; None when it does not run."""
    try:
        result = subprocess.run([program, "--version"], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return " | ".join(line.strip() for line in result.stdout.splitlines() if line.strip())


def _dotted(version):
    return ".".join(map(str, version))


def _cmake_problem(version, environ):
    """A sentence when this CMake cannot build Horovod's sources, else None."""
    if version < CMAKE_MINIMUM:
        return (f"cmake {_dotted(version)} is older than {_dotted(CMAKE_MINIMUM)}, which "
                "Horovod needs: apt-get install -y cmake (or pip install 'cmake<4')")
    if version >= (4, 0) and not environ.get("CMAKE_POLICY_VERSION_MINIMUM"):
        return (f"cmake {_dotted(version)} refuses the cmake_minimum_required(VERSION 2.8.12) "
                "of Horovod's bundled gloo: set CMAKE_POLICY_VERSION_MINIMUM=3.5 or use "
                "cmake 3.x (apt-get install -y cmake)")
    return None


def check(environ=None):
    """The ``Toolchain``, or ``HorovodBuildError`` with one line naming what
    is missing and the ``apt-get install`` that adds it."""
    environ = os.environ if environ is None else environ
    path = environ.get("PATH", "")
    cmake = shutil.which("cmake", path=path)
    compiler_name = environ.get("CXX") or "g++"
    compiler = shutil.which(compiler_name, path=path)
    include = sysconfig.get_paths()["include"]
    found = {"cmake": cmake, "make": shutil.which("make", path=path), "g++": compiler,
             "Python.h": include if (Path(include) / "Python.h").is_file() else None}
    missing = [tool for tool, where in found.items() if where is None]
    if missing:
        names = ", ".join(compiler_name if tool == "g++" else tool for tool in missing)
        packages = " ".join(APT_PACKAGES[tool] for tool in missing)
        raise HorovodBuildError(f"building Horovod needs {names}, not found: "
                                f"apt-get install -y {packages}")
    version = cmake_version(cmake)
    if version is None:
        raise HorovodBuildError(f"{cmake} --version prints no version: apt-get install -y cmake")
    problem = _cmake_problem(version, environ)
    if problem:
        raise HorovodBuildError(problem)
    compiler_version = version_text(compiler)
    if compiler_version is None:
        raise HorovodBuildError(f"{compiler} --version does not run: apt-get install -y g++")
    c_compiler = shutil.which(environ.get("CC") or "cc", path=path)
    return Toolchain(cmake, version, compiler, include, compiler_version, c_compiler,
                     (c_compiler and version_text(c_compiler)) or "")

"""The build cache of ``keras-caffe install-horovod``: verified wheels, kept
under a key that names everything that shapes the binary.

A successful build (compiled, installed, ``horovod.tensorflow`` imported with
Gloo) leaves its wheel in ``<cache>/horovod/<key>/`` beside a
``manifest.json`` that names each part of the key in plain words (``<cache>``:
``--cache-dir``, else ``$KERAS_CAFFE_CACHE``, else ``~/.cache/keras-caffe``).
The next ``install-horovod`` whose plan has the same key installs that wheel
(``pip install --no-deps --no-index --force-reinstall``) and runs the same
check a fresh build does; an entry that fails it is removed and Horovod is
built from source.

The key (``components``, ``key_of``) is a sha256 over: the sdist's sha256,
the patch set's content (``patches.fingerprint``), TensorFlow's
distribution, version (and git version), compile and link flags (C++11 ABI,
C++ standard) and CUDA build, the Python version and ABI, the platform and
libc, the C++ compiler (the path the build passes as ``CXX``, where it
resolves to, its ``--version``), the C compiler CMake finds for gloo, CMake's
version, the GPU choice (with nvcc's version and nccl.h's sha256 for NCCL)
and the build's variables (``HOROVOD_*``, ``CMAKE_*``, ``CXXFLAGS``, ...;
not ``MAKEFLAGS``, which sets only the parallelism). TensorFlow's own folder
is written ``<tensorflow>`` in flags and variables, so two environments with
the same TensorFlow share an entry, and one with another TensorFlow never
does.

An entry is written in a temporary folder (``.tmp-<key>-*``) and renamed to
``<key>`` only once complete, so an interrupted build never leaves an entry
that looks complete; only ``<key>`` folders whose manifest hashes back to
their name and whose wheel has the manifest's sha256 are ever used. A
failed build stores nothing.
"""

import datetime
import hashlib
import importlib.metadata
import json
import os
import platform
import re
import shutil
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from keras_caffe.horovod_build import patches, sdist, toolchain

#: Bumped when the build's procedure changes in a way no other component
#: shows (how the wheel is made), so older entries stop matching.
FORMAT = 1
ENVIRONMENT = "KERAS_CAFFE_CACHE"
SUBDIRECTORY = "horovod"
MANIFEST = "manifest.json"
KEY_LENGTH = 16
TEMP_PREFIX = ".tmp-"
OLD_PREFIX = ".old-"
#: Temporary folders this old are left-overs of an interrupted build.
STALE_SECONDS = 24 * 3600
#: The build environment's variables in the key: those with these prefixes
#: and these names (what CMake, the compilers and Horovod's setup.py read).
KEY_PREFIXES = ("HOROVOD_", "CMAKE_")
KEY_VARIABLES = ("CC", "CXX", "CFLAGS", "CXXFLAGS", "CPPFLAGS", "LDFLAGS", "CPATH",
                 "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "LIBRARY_PATH", "CUDA_HOME",
                 "CUDA_PATH", "CUDACXX", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
#: ... except these, which set only how many jobs compile at once.
NOT_IN_KEY = ("CMAKE_BUILD_PARALLEL_LEVEL",)
_KEY_NAME = re.compile(rf"[0-9a-f]{{{KEY_LENGTH}}}")
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


def default_directory(environ=None):
    environ = os.environ if environ is None else environ
    return Path(environ.get(ENVIRONMENT) or Path.home() / ".cache" / "keras-caffe")


def python_identity():
    """The interpreter's part of the key: version, implementation, ABI
    (``SOABI``), platform and libc."""
    libc = " ".join(filter(None, platform.libc_ver())) or "libc unknown"
    return {"Python": f"{platform.python_version()} {sys.implementation.name}, "
                      f"{sysconfig.get_config_var('SOABI')}",
            "platform": f"{sysconfig.get_platform()}, {libc}"}


def _gpu(gpu):
    if not gpu.nccl:
        return "Gloo only (no NCCL)"
    nvcc = Path(gpu.cuda_home or "") / "bin" / "nvcc"
    header = Path(gpu.nccl_include or "") / "nccl.h"
    nccl = sdist.sha256_of(header) if header.is_file() else "not found"
    return (f"NCCL; CUDA toolkit {gpu.cuda_home}, nvcc --version: "
            f"{toolchain.version_text(str(nvcc))}; {header} sha256 {nccl}")


def build_variables(plan, environ=None):
    """The variables of ``plan``'s build environment that the key holds."""
    return {name: value for name, value in sorted(plan.environment(environ).items())
            if (name in KEY_VARIABLES or name.startswith(KEY_PREFIXES))
            and name not in NOT_IN_KEY}


def components(plan, environ=None, python=None, patch_set=None, sdist_sha256=None):
    """What shapes the binary ``plan`` builds, as ``{plain words: value}``:
    the key is their hash (``key_of``), the manifest lists them."""
    info, tools = plan.tensorflow, plan.tools
    patch_set = patches.PATCHES if patch_set is None else patch_set

    def local(text):  # TensorFlow's own folder, wherever this environment has it
        return text.replace(info.lib, "<tensorflow>") if info.lib else text

    c_compiler = ("none found" if not tools.c_compiler else
                  f"{tools.c_compiler} ({os.path.realpath(tools.c_compiler)}): "
                  f"{tools.c_compiler_version}")
    return {
        "cache format": str(FORMAT),
        "Horovod sdist": f"{sdist.FILENAME}, sha256 {sdist_sha256 or sdist.SHA256}",
        "patch set": f"{', '.join(patch.name for patch in patch_set)}; content sha256 "
                     f"{patches.fingerprint(patch_set)}",
        "TensorFlow distribution": ", ".join(info.distributions) or "none found",
        "TensorFlow version": info.version + (f" ({info.git_version})" if info.git_version
                                              else ""),
        "TensorFlow compile flags": local(" ".join(info.compile_flags)),
        "TensorFlow link flags": local(" ".join(info.link_flags)),
        "TensorFlow CUDA build": f"yes, CUDA {info.cuda_version}" if info.cuda else "no",
        **(python_identity() if python is None else python),
        "C++ compiler": f"{tools.compiler} ({os.path.realpath(tools.compiler)})",
        "C++ compiler --version": tools.compiler_version,
        "C compiler": c_compiler,
        "CMake": ".".join(map(str, tools.cmake_version)),
        "GPU": _gpu(plan.gpu),
        "build variables": local(" ".join(f"{name}={value}" for name, value in
                                          build_variables(plan, environ).items())),
    }


def key_of(parts):
    """The key: the first 16 hex digits of the sha256 of ``parts`` as JSON."""
    text = json.dumps(parts, sort_keys=True, ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:KEY_LENGTH]


def elapsed(seconds):
    """``9 s``, ``5 min 21 s``."""
    seconds = round(seconds)
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60} s"


def keras_caffe_version():
    """The installed keras-caffe's version, for the manifest: from the
    package's metadata, as ``keras-caffe --version`` reads TensorFlow's and
    Keras's (not ``keras_caffe.__version__``: the build sits below the
    package root, which imports the public API)."""
    try:
        return importlib.metadata.version("keras-caffe")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "not installed"


def _compiler_words(parts):
    """``g++ 12.2.0`` from the ``--version`` line the key holds."""
    first = parts.get("C++ compiler --version", "").split(" | ")[0]
    versions = _VERSION.findall(first)
    name = first.split()[0] if first.split() else "?"
    return f"{name} {versions[-1]}" if versions else name


@dataclass
class Entry:
    key: str
    path: Path
    manifest: dict

    @property
    def wheel(self):
        return self.path / self.manifest["wheel"]

    def summary(self):
        """``built 2026-11-27 with g++ 12.2.0 against tensorflow-cpu 2.16.2``."""
        parts = self.manifest["components"]
        tensorflow = parts.get("TensorFlow distribution", "none found")
        if tensorflow == "none found":
            tensorflow = f"TensorFlow {parts.get('TensorFlow version', '?').split(' (')[0]}"
        return (f"built {self.manifest.get('built', '?')[:10]} with {_compiler_words(parts)} "
                f"against {tensorflow}")


def _fsync(path, directory=False):
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class BuildCache:
    """The entries under ``root`` (``<cache>/horovod``), one folder per key."""

    def __init__(self, root):
        self.root = Path(root)

    @classmethod
    def at(cls, directory=None, environ=None):
        """The cache under ``directory`` (``--cache-dir``), else
        ``$KERAS_CAFFE_CACHE``, else ``~/.cache/keras-caffe``."""
        base = Path(directory) if directory else default_directory(environ)
        return cls(base.expanduser() / SUBDIRECTORY)

    def lookup(self, key):
        """``(entry, None)`` for a complete entry; ``(None, why)`` for a
        ``key`` folder that is not one; ``(None, None)`` when there is none.
        Temporary folders are never looked at."""
        path = self.root / key
        if not _KEY_NAME.fullmatch(key) or not path.is_dir():
            return None, None
        try:
            manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None, f"no {MANIFEST}"
        except (OSError, ValueError) as err:
            return None, f"{MANIFEST} unreadable: {err}"
        if not isinstance(manifest, dict) or not isinstance(manifest.get("components"), dict):
            return None, f"{MANIFEST} names no key components"
        if manifest.get("key") != key or key_of(manifest["components"]) != key:
            return None, f"its {MANIFEST} is for another key"
        wheel = manifest.get("wheel")
        if not isinstance(wheel, str) or "/" in wheel or not (path / wheel).is_file():
            return None, f"the wheel {wheel!r} is missing"
        if sdist.sha256_of(path / wheel) != manifest.get("wheel sha256"):
            return None, f"{wheel}'s sha256 differs from the manifest's"
        return Entry(key, path, manifest), None

    def remove(self, key):
        """Remove ``key``'s entry: renamed aside first, so nothing ever sees
        half of it."""
        path = self.root / key
        if not path.exists():
            return
        try:
            aside = Path(tempfile.mkdtemp(prefix=f"{OLD_PREFIX}{key}-", dir=self.root))
            os.rename(path, aside / key)
        except OSError:  # a cache folder that cannot be written: remove what can be
            shutil.rmtree(path, ignore_errors=True)
        else:
            shutil.rmtree(aside, ignore_errors=True)

    def manifests(self):
        """``{key: manifest}`` of the entries that have a readable manifest."""
        found = {}
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.iterdir()):
            if _KEY_NAME.fullmatch(path.name):
                try:
                    manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                if isinstance(manifest, dict) and isinstance(manifest.get("components"), dict):
                    found[path.name] = manifest
        return found

    def why_missing(self, parts):
        """Why no entry matches ``parts``: the cache is empty, or the entry
        nearest to them and the components it differs in."""
        nearest = None
        for key, manifest in self.manifests().items():
            other = manifest["components"]
            differ = [name for name in dict.fromkeys([*parts, *other])
                      if parts.get(name) != other.get(name)]
            if nearest is None or len(differ) < len(nearest[1]):
                nearest = key, differ
        if nearest is None:
            return f"no cached build in {self.root}"
        return (f"no cached build for this key; the nearest, {nearest[0]}, differs in "
                f"{', '.join(nearest[1])}")

    def store(self, key, parts, wheel, build_seconds, replace=False):
        """Keep ``wheel`` as ``key``'s entry, with its manifest; the entry.

        Written in a temporary folder, flushed, then renamed to ``key``. An
        existing complete entry is kept unless ``replace`` (``--no-cache``),
        which puts the new one in its place (the old one renamed aside
        first). Raises ``OSError``; then no ``key`` folder was created.
        """
        wheel = Path(wheel)
        self.root.mkdir(parents=True, exist_ok=True)
        self._remove_stale()
        temp = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{key}-", dir=self.root))
        try:
            shutil.copyfile(wheel, temp / wheel.name)
            manifest = {
                "key": key,
                "what": "Horovod wheel built by keras-caffe install-horovod; the key is the "
                        "sha256 of the components below",
                "Horovod": sdist.VERSION,
                "wheel": wheel.name,
                "wheel sha256": sdist.sha256_of(temp / wheel.name),
                "built": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                "build time": elapsed(build_seconds),
                "keras-caffe": keras_caffe_version(),
                "components": parts,
            }
            (temp / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n",
                                         encoding="utf-8")
            for name in (wheel.name, MANIFEST):
                _fsync(temp / name)
            os.chmod(temp, 0o755)  # mkdtemp's 0700
            final = self.root / key
            if final.exists():
                existing, _ = self.lookup(key)
                if existing is not None and not replace:
                    return existing
                self.remove(key)
            try:
                os.rename(temp, final)
            except OSError:  # another install stored the same key meanwhile
                existing, _ = self.lookup(key)
                if existing is None:
                    raise
                return existing
            _fsync(self.root, directory=True)
            return Entry(key, final, manifest)
        finally:
            if temp.exists():
                shutil.rmtree(temp, ignore_errors=True)

    def _remove_stale(self):
        """Temporary folders left by interrupted builds more than a day ago."""
        now = time.time()
        for path in self.root.iterdir():
            if path.name.startswith((TEMP_PREFIX, OLD_PREFIX)):
                try:
                    if now - path.stat().st_mtime > STALE_SECONDS:
                        shutil.rmtree(path, ignore_errors=True)
                except OSError:
                    pass

"""``keras-caffe install-horovod``: the patch engine, the sdist's sha256, the
tool checks, the plan ``--dry-run`` prints and the TensorFlow range.

No network and no compiler: the patch set runs on verbatim excerpts of
Horovod 0.28.1's sdist (tests/horovod_build/sdist_excerpts/SOURCES.md); tools are
stub executables on a PATH of their own; TensorFlow is a stub package on
PYTHONPATH, which only the plan's TensorFlow probe (a child process) sees.
The build cache's tests run the whole command with pip faked
(``FakePip``): ``pip wheel`` writes a "wheel" holding the source of a stub
``horovod.tensorflow``, ``pip install`` of it puts that stub on PYTHONPATH,
and the real check (``build._verify``, a child process) imports it.
The shipped patch set is also applied to the real sdist when
``KERAS_CAFFE_HOROVOD_SDIST`` names it (the Makefile downloads it once);
with ``KERAS_CAFFE_EXPECT_HOROVOD=1`` its absence fails.
The build's progress is read from the recorded output of a real build
(tests/horovod_build/build_output/SOURCES.md), fed line by line with a fake
clock, and replayed by a stub ``cmake`` under a real ``pip wheel --verbose``
(the stub-compiler build).
"""

import dataclasses
import errno
import hashlib
import io
import json
import os
import platform
import re
import shutil
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

import pytest

import keras_caffe
from keras_caffe import cli
from keras_caffe.errors import HorovodBuildError
from keras_caffe.horovod_build import build, cache, patches, progress, sdist, toolchain

EXCERPTS = Path(__file__).resolve().parent / "sdist_excerpts"
XLA_OPS = "horovod/tensorflow/xla_mpi_ops.cc"
MPI_OPS = "horovod/tensorflow/mpi_ops.cc"
GROUP_TABLE = "horovod/common/group_table.h"
#: tests/horovod_build/sdist_excerpts/SOURCES.md: file -> its 1-based line ranges
EXCERPT_LINES = {XLA_OPS: [(15, 36), (226, 232), (274, 282)], MPI_OPS: [(45, 68), (228, 237)],
                 "horovod/common/common.h": [(17, 27)], GROUP_TABLE: [(14, 22)],
                 "horovod/common/ops/cuda/CMakeLists.txt": [(1, 23)]}
NAMES = ["xla-builder-include", "absl-statusor", "gpu-stream-handle", "gcc13-missing-headers",
         "cuda-standard-gcc14"]


@pytest.fixture
def source(tmp_path):
    """A copy of the excerpts, laid out like the sdist."""
    root = tmp_path / "horovod-0.28.1"
    shutil.copytree(EXCERPTS, root)
    return root


def _texts(root):
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


# -- the patch engine ---------------------------------------------------------

def test_every_edit_applies_once_to_the_sdist_text(source):
    before = _texts(source)
    assert patches.apply_patches(source) == NAMES
    after = _texts(source)
    for patch in patches.PATCHES:
        for edit in patch.edits:
            assert before[edit.path].count(edit.old) == 1
            assert after[edit.path].count(edit.new) == 1
    xla = after[XLA_OPS]
    assert ('#if __has_include("tensorflow/compiler/xla/client/xla_builder.h")\n'
            '#include "tensorflow/compiler/xla/client/xla_builder.h"\n#else\n'
            '#include "xla/hlo/builder/xla_builder.h"\n#endif\n') in xla
    assert xla.count("::xla::StatusOr") == 0 and xla.count("absl::StatusOr<::xla::XlaOp>") == 2
    mpi = after[MPI_OPS]
    # the forward declaration became a file-local definition after stream.h;
    # the call sites are untouched
    assert "GpuStreamHandle AsGpuStreamValue(Stream* stream);" not in mpi
    assert mpi.count("static inline GpuStreamHandle AsGpuStreamValue(Stream* stream) {") == 1
    assert mpi.index('#include "tensorflow/compiler/xla/stream_executor/stream.h"') < \
        mpi.index("static inline GpuStreamHandle")
    assert mpi.count("stream_executor::gpu::AsGpuStreamValue(device_context->stream())") == 1
    assert "#include <memory>\n#include <stdexcept>\n#include <string>\n" in after[
        "horovod/common/common.h"]
    assert 'VERSION_GREATER_EQUAL "14")\n  set(CMAKE_CUDA_STANDARD 14)' in after[
        "horovod/common/ops/cuda/CMakeLists.txt"]
    unchanged = set(before) - {e.path for p in patches.PATCHES for e in p.edits}
    assert unchanged == {"SOURCES.md"} and after["SOURCES.md"] == before["SOURCES.md"]


def test_already_patched_source_is_refused(source):
    patches.apply_patches(source)
    patched = _texts(source)
    with pytest.raises(HorovodBuildError) as err:
        patches.apply_patches(source)
    assert str(err.value) == (f"{XLA_OPS}: patch 'xla-builder-include', edit 1 of 1: "
                              "already applied (the source was patched before)")
    assert _texts(source) == patched


def test_drifted_source_is_refused_and_nothing_is_written(source):
    path = source / GROUP_TABLE
    path.write_text(path.read_text().replace("#include <queue>\n", ""))
    before = _texts(source)
    with pytest.raises(HorovodBuildError) as err:
        patches.apply_patches(source)
    assert str(err.value) == (
        f"{GROUP_TABLE}: patch 'gcc13-missing-headers', edit 2 of 2: the text to replace "
        "occurs 0 times, expected once (not Horovod 0.28.1's sdist?)")
    assert _texts(source) == before  # xla_mpi_ops.cc etc. matched, but were not written


def test_text_found_twice_is_refused(source):
    path = source / MPI_OPS
    path.write_text(path.read_text() * 2)
    with pytest.raises(HorovodBuildError) as err:
        patches.apply_patches(source)
    assert str(err.value) == (
        f"{MPI_OPS}: patch 'gpu-stream-handle', edit 1 of 1: the text to replace occurs "
        "2 times, expected once (not Horovod 0.28.1's sdist?)")


def test_missing_file_is_named(source):
    (source / XLA_OPS).unlink()
    with pytest.raises(HorovodBuildError) as err:
        patches.apply_patches(source)
    assert str(err.value) == (f"{XLA_OPS}: patch 'xla-builder-include', edit 1 of 1: "
                              f"the file is not in {source}")


# -- the sdist ----------------------------------------------------------------

def test_a_wrong_sdist_is_refused_by_its_sha256(tmp_path):
    fake = tmp_path / "horovod-0.28.1.tar.gz"
    fake.write_bytes(b"not horovod\n")
    digest = hashlib.sha256(b"not horovod\n").hexdigest()
    with pytest.raises(HorovodBuildError) as err:
        sdist.verify(fake)
    assert str(err.value) == (
        f"{fake}: sha256 {digest} is not Horovod 0.28.1's sdist "
        "(92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0)")
    assert sdist.verify(fake, expected=digest) == fake
    with pytest.raises(HorovodBuildError, match=r"nothing\.tar\.gz: no such file \(--sdist\)$"):
        sdist.verify(tmp_path / "nothing.tar.gz")


def _tarball(path, members):
    with tarfile.open(path, "w:gz") as archive:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_unpack_finds_the_source_root_and_refuses_escapes(tmp_path):
    good = _tarball(tmp_path / "good.tar.gz", {"horovod-0.28.1/setup.py": b"# setup\n"})
    root = sdist.unpack(good, tmp_path / "a")
    assert root == tmp_path / "a" / "horovod-0.28.1" and (root / "setup.py").read_text() == "# setup\n"
    other = _tarball(tmp_path / "other.tar.gz", {"horovod-0.27.0/setup.py": b""})
    with pytest.raises(HorovodBuildError) as err:
        sdist.unpack(other, tmp_path / "b")
    assert str(err.value) == f"{other}: no horovod-0.28.1/setup.py inside"
    evil = _tarball(tmp_path / "evil.tar.gz", {"../escaped.txt": b"x"})
    with pytest.raises(HorovodBuildError, match=r"evil\.tar\.gz: cannot unpack"):
        sdist.unpack(evil, tmp_path / "c")
    assert not (tmp_path / "escaped.txt").exists()


def test_download_command_never_takes_a_wheel_or_dependencies(tmp_path):
    command = sdist.download_command(tmp_path)
    assert command[1:] == ["-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                           "--dest", str(tmp_path), "horovod==0.28.1"]


# -- tools --------------------------------------------------------------------

def _stub(directory, name, output=""):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(f"#!/bin/sh\necho '{output}'\n")
    path.chmod(0o755)


@pytest.fixture
def tools(tmp_path):
    """A PATH holding stub cmake 3.25.1, make and g++."""
    bin_dir = tmp_path / "bin"
    _stub(bin_dir, "cmake", "cmake version 3.25.1")
    _stub(bin_dir, "make")
    _stub(bin_dir, "g++")
    return bin_dir


def test_tools_found(tools):
    found = toolchain.check({"PATH": str(tools)})
    assert found.cmake_version == (3, 25, 1)
    assert (found.cmake, found.compiler) == (str(tools / "cmake"), str(tools / "g++"))


def test_cmake_4_needs_the_policy_variable(tools):
    _stub(tools, "cmake", "cmake version 4.0.2")
    with pytest.raises(HorovodBuildError) as err:
        toolchain.check({"PATH": str(tools)})
    assert str(err.value) == (
        "cmake 4.0.2 refuses the cmake_minimum_required(VERSION 2.8.12) of Horovod's bundled "
        "gloo: set CMAKE_POLICY_VERSION_MINIMUM=3.5 or use cmake 3.x (apt-get install -y cmake)")
    found = toolchain.check({"PATH": str(tools), "CMAKE_POLICY_VERSION_MINIMUM": "3.5"})
    assert found.cmake_version == (4, 0, 2)


def test_old_cmake_is_refused(tools):
    _stub(tools, "cmake", "cmake version 3.10.2")
    with pytest.raises(HorovodBuildError) as err:
        toolchain.check({"PATH": str(tools)})
    assert str(err.value) == ("cmake 3.10.2 is older than 3.13, which Horovod needs: "
                              "apt-get install -y cmake (or pip install 'cmake<4')")


def test_missing_compiler_names_the_apt_packages(tools):
    (tools / "g++").unlink()
    with pytest.raises(HorovodBuildError) as err:
        toolchain.check({"PATH": str(tools)})
    assert str(err.value) == "building Horovod needs g++, not found: apt-get install -y g++"
    (tools / "cmake").unlink()
    with pytest.raises(HorovodBuildError) as err:
        toolchain.check({"PATH": str(tools), "CXX": "clang++"})
    assert str(err.value) == ("building Horovod needs cmake, clang++, not found: "
                              "apt-get install -y cmake g++")


# -- the plan (--dry-run) and the TensorFlow range ----------------------------

STUB_TF = """
import types
version = types.SimpleNamespace(VERSION={version!r}, GIT_VERSION="v{version}-0-g0123456789")
sysconfig = types.SimpleNamespace(
    get_include=lambda: {include!r}, get_lib=lambda: {lib!r},
    get_build_info=lambda: {{"is_cuda_build": {cuda!r}}},
    get_compile_flags=lambda: ["-I{include}", "-D_GLIBCXX_USE_CXX11_ABI={abi}", "--std=c++17"],
    get_link_flags=lambda: ["-L{lib}", "-l:libtensorflow_framework.so.2"])
"""


@pytest.fixture
def machine(tmp_path, tools, monkeypatch):
    """This process's environment made a stub machine: stub tools on PATH, a
    CUDA toolkit and nccl.h of stubs, TensorFlow's headers dir with its
    bundled HighwayHash/FarmHash; ``machine(version, cuda)`` writes the stub
    TensorFlow that the plan's probe imports."""
    toolkit = tmp_path / "cuda"
    _stub(toolkit / "bin", "nvcc")
    nccl = tmp_path / "nccl"
    nccl.mkdir()
    (nccl / "nccl.h").write_text("")
    lib = tmp_path / "site-packages" / "tensorflow"
    include = lib / "include"
    for relative in ("external/highwayhash", "external/farmhash_archive/src"):
        (include / relative).mkdir(parents=True)
    # None of the caller's build variables (the key holds every HOROVOD_* and
    # CMAKE_* one)
    for name in [*os.environ]:
        if name.startswith(("HOROVOD_", "CMAKE_")) or name in ("CXXFLAGS", "CXX", "CC",
                                                               "CFLAGS", "LDFLAGS"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setenv("HOROVOD_CUDA_HOME", str(toolkit))
    monkeypatch.setenv("HOROVOD_NCCL_INCLUDE", str(nccl))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "stubs"))
    monkeypatch.setenv("KERAS_CAFFE_CACHE", str(tmp_path / "cache"))

    def make(version="2.21.0", cuda=False, abi=1):
        package = tmp_path / "stubs" / "tensorflow"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            STUB_TF.format(version=version, include=str(include), lib=str(lib), cuda=cuda,
                           abi=abi))
        return {"toolkit": toolkit, "include": include, "lib": lib}

    return make


def _dry_run(capsys, *extra):
    rc = cli.main(["install-horovod", "--dry-run", "--sdist", "/nowhere/h.tar.gz", *extra])
    captured = capsys.readouterr()
    return rc, captured.out.splitlines(), captured.err


def test_dry_run_plans_gloo_only_without_a_cuda_tensorflow(machine, capsys, monkeypatch):
    where = machine("2.21.0", cuda=False)
    monkeypatch.setenv("HOROVOD_GPU_OPERATIONS", "NCCL")  # the user's: removed for this build
    rc, lines, err = _dry_run(capsys, "--jobs", "3")
    assert rc == 0, err
    assert lines[0].startswith("TensorFlow 2.21.0 (") and lines[0].endswith(
        f"headers {where['include']})")
    assert lines[2] == "GPU: Gloo only (no NCCL): TensorFlow 2.21.0 is not a CUDA build"
    assert lines[3] == ("sdist: /nowhere/h.tar.gz "
                        "(sha256 92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0)")
    assert [line.split(":")[0].strip() for line in lines[5:10]] == [
        "xla-builder-include", "absl-statusor", "gpu-stream-handle (GPU builds)",
        "gcc13-missing-headers", "cuda-standard-gcc14 (GPU builds)"]
    env = lines[lines.index("environment:") + 1:]
    assert env[:7] == [
        "  HOROVOD_WITH_TENSORFLOW=1", "  HOROVOD_WITH_GLOO=1", "  HOROVOD_WITHOUT_MPI=1",
        "  HOROVOD_WITHOUT_PYTORCH=1", "  HOROVOD_WITHOUT_MXNET=1", "  MAKEFLAGS=-j3",
        f"  CXXFLAGS=-I{where['include']}/external/highwayhash "
        f"-I{where['include']}/external/farmhash_archive/src"]
    # the compiler the tool check found (and the cache key names) is the one CMake uses
    assert env[7] == f"  CXX={os.environ['PATH']}/g++"
    assert env[8] == "  unset HOROVOD_GPU_OPERATIONS"
    assert "--no-deps --no-build-isolation --no-cache-dir" in env[9]


def test_dry_run_plans_nccl_with_cuda_tensorflow_nvcc_and_nccl_h(machine, capsys):
    where = machine("2.18.1", cuda=True)
    rc, lines, err = _dry_run(capsys)
    assert rc == 0, err
    assert lines[0].startswith("TensorFlow 2.18.1 (")
    assert lines[2] == (f"GPU: NCCL: TensorFlow is a CUDA build, CUDA toolkit {where['toolkit']}, "
                        "nccl.h found")
    assert "  HOROVOD_GPU_OPERATIONS=NCCL" in lines
    assert f"  HOROVOD_CUDA_HOME={where['toolkit']}" in lines
    rc, lines, err = _dry_run(capsys, "--gpu", "none")
    assert lines[2] == "GPU: Gloo only: --gpu none" and "  HOROVOD_GPU_OPERATIONS=NCCL" not in lines


def test_gpu_nccl_says_what_is_missing(machine, capsys, monkeypatch):
    machine("2.21.0", cuda=False)
    monkeypatch.delenv("HOROVOD_NCCL_INCLUDE")
    monkeypatch.setenv("HOROVOD_NCCL_HOME", "/nowhere")
    rc, _, err = _dry_run(capsys, "--gpu", "nccl")
    assert rc == 2
    # /usr/include may hold a real nccl.h on a CUDA machine
    assert err.startswith("keras-caffe: error: --gpu nccl: TensorFlow 2.21.0 is not a CUDA build")


@pytest.mark.parametrize("version", ["2.15.1", "2.22.0"])
def test_tensorflow_outside_the_tested_range_is_refused(machine, capsys, version):
    machine(version)
    rc, lines, err = _dry_run(capsys)
    assert (rc, lines) == (2, [])
    assert err == (f"keras-caffe: error: TensorFlow {version} is outside 2.16-2.21, the releases "
                   "keras-caffe's Horovod patches are written and tested for: install a "
                   "TensorFlow in that range, or pass --any-tensorflow to try anyway\n")
    rc, lines, err = _dry_run(capsys, "--any-tensorflow")
    assert rc == 0
    assert lines[0] == (f"warning: TensorFlow {version} is outside 2.16-2.21, the releases "
                        "keras-caffe's Horovod patches are written and tested for; building "
                        "anyway (--any-tensorflow)")


def test_a_tensorflow_that_does_not_import_is_named(machine, capsys, tmp_path):
    machine()
    (tmp_path / "stubs" / "tensorflow" / "__init__.py").write_text("raise ImportError('broken')\n")
    rc, _, err = _dry_run(capsys)
    assert rc == 2
    assert err.startswith("keras-caffe: error: TensorFlow does not import in ")
    assert err.endswith("(ImportError: broken): install TensorFlow first, Horovod compiles "
                        "against it\n")


# -- the real sdist -----------------------------------------------------------

def test_patch_set_applies_to_the_real_sdist(tmp_path):
    """KERAS_CAFFE_HOROVOD_SDIST: PyPI's horovod-0.28.1.tar.gz (the Makefile
    sets it); every edit matches the real files exactly once."""
    path = os.environ.get("KERAS_CAFFE_HOROVOD_SDIST")
    if not path or not Path(path).is_file():
        if os.environ.get("KERAS_CAFFE_EXPECT_HOROVOD") == "1":
            pytest.fail(f"KERAS_CAFFE_HOROVOD_SDIST={path!r} is not Horovod 0.28.1's sdist "
                        "but KERAS_CAFFE_EXPECT_HOROVOD=1")
        pytest.skip("KERAS_CAFFE_HOROVOD_SDIST not set (make test sets it)")
    root = sdist.unpack(sdist.verify(path), tmp_path)
    for name, ranges in EXCERPT_LINES.items():  # the fixtures are verbatim slices
        lines = (root / name).read_text().splitlines(keepends=True)
        assert (EXCERPTS / name).read_text() == "".join(
            "".join(lines[first - 1:last]) for first, last in ranges), name
    assert patches.apply_patches(root) == NAMES
    mpi = (root / MPI_OPS).read_text()
    assert mpi.count("stream_executor::gpu::AsGpuStreamValue(") == 12  # call sites, untouched
    with pytest.raises(HorovodBuildError, match="already applied"):
        patches.apply_patches(root)


# -- the build cache ------------------------------------------------------------

GOOD_WHEEL = "def gloo_built():\n    return True\n\n\ndef nccl_built():\n    return False\n"
BROKEN_WHEEL = "raise ImportError('undefined symbol: _ZN10tensorflow8OpKernelD2Ev')\n"
WHEEL = "horovod-0.28.1-cp311-cp311-linux_x86_64.whl"
GXX = "g++ (Debian 12.2.0-14) 12.2.0"
COMPONENTS = ["cache format", "Horovod sdist", "patch set", "TensorFlow distribution",
              "TensorFlow version", "TensorFlow compile flags", "TensorFlow link flags",
              "TensorFlow CUDA build", "Python", "platform", "C++ compiler",
              "C++ compiler --version", "C compiler", "CMake", "GPU", "build variables"]


class FakePip:
    """``build._run_logged``, the way every pip command runs: ``pip wheel``
    writes ``WHEEL`` holding ``self.wheel`` and exits ``self.build_rc``;
    ``pip install <x.whl>`` installs the wheel's text as the stub
    ``horovod.tensorflow`` on PYTHONPATH; other installs (the runtime
    requirements) do nothing."""

    def __init__(self, stubs, sdist_path, root):
        self.stubs, self.sdist, self.root = stubs, sdist_path, root
        self.wheel = GOOD_WHEEL
        self.build_rc = 0
        self.commands = []

    def __call__(self, command, log, env=None, cwd=None, verbose=False, meter=None):
        self.commands.append(command)
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"$ {' '.join(command)}\n")
        if command[3] == "wheel":
            if self.build_rc == 0:
                directory = Path(command[command.index("--wheel-dir") + 1])
                directory.mkdir(parents=True, exist_ok=True)
                (directory / WHEEL).write_text(self.wheel)
            return self.build_rc
        if command[-1].endswith(".whl"):
            package = self.stubs / "horovod"
            package.mkdir(parents=True, exist_ok=True)
            (package / "__init__.py").write_text("")
            (package / "tensorflow.py").write_text(Path(command[-1]).read_text())
        return 0

    def builds(self):
        return [command for command in self.commands if command[3] == "wheel"]

    def wheel_installs(self):
        return [command[-1] for command in self.commands if command[-1].endswith(".whl")]


@pytest.fixture
def fake_build(machine, tools, tmp_path, monkeypatch):
    """The stub machine (TensorFlow 2.21.0, g++ 12.2.0) with pip faked, a
    local sdist made of the excerpts (``sdist.verify`` accepts it), the cache
    in tmp_path/cache (``$KERAS_CAFFE_CACHE``) and temporary build folders
    in tmp_path/tmp."""
    machine()
    _stub(tools, "g++", GXX)
    members = {f"horovod-0.28.1/{path.relative_to(EXCERPTS).as_posix()}": path.read_bytes()
               for path in EXCERPTS.rglob("*") if path.is_file()}
    members["horovod-0.28.1/setup.py"] = b"# the build is faked\n"
    archive = _tarball(tmp_path / "horovod-0.28.1.tar.gz", members)
    monkeypatch.setattr(sdist, "verify", lambda path: Path(path))
    pip = FakePip(tmp_path / "stubs", archive, tmp_path / "cache" / "horovod")
    monkeypatch.setattr(build, "_run_logged", pip)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return pip


def _install(capsys, pip, *extra):
    """``keras-caffe install-horovod`` on the fake machine: (rc, the lines
    saying how Horovod was installed, stderr); ``pip.commands`` restarts."""
    pip.commands.clear()
    rc = cli.main(["install-horovod", "--sdist", str(pip.sdist), "--jobs", "2", *extra])
    captured = capsys.readouterr()
    said = [line for line in captured.out.splitlines() if line.startswith("Horovod 0.28.1: ")]
    return rc, said, captured.err


def _entries(root):
    return sorted(path.name for path in root.iterdir()) if root.is_dir() else []


def _sha256(text):
    return hashlib.sha256(text.encode()).hexdigest()


def test_a_build_is_cached_once_and_the_next_run_installs_it(fake_build, capsys):
    pip, root = fake_build, fake_build.root
    rc, said, err = _install(capsys, pip)
    assert rc == 0, err
    [key] = _entries(root)  # exactly one entry, no temporary folder left
    assert said[0] == f"Horovod 0.28.1: no cached build in {root}: building from source"
    assert re.fullmatch(rf"Horovod 0\.28\.1: built from source in \d+ s; cached as {key} in "
                        rf"{re.escape(str(root))}", said[1]), said
    assert len(pip.builds()) == 1
    assert sorted(os.listdir(root / key)) == ["horovod-0.28.1-cp311-cp311-linux_x86_64.whl",
                                              "manifest.json"]
    assert (root / key / WHEEL).read_text() == GOOD_WHEEL
    built = json.loads((root / key / "manifest.json").read_text())["built"][:10]

    rc, lines, err = cli.main(["install-horovod", "--dry-run"]), *capsys.readouterr()
    assert rc == 0, err
    assert (f"cache: {root / key}: a cached build (built {built} with g++ 12.2.0 against "
            "TensorFlow 2.21.0), installed and checked instead of building (--no-cache builds)"
            ) in lines.splitlines()

    rc, said, err = _install(capsys, pip)
    assert rc == 0, err
    assert pip.builds() == []
    assert pip.commands[-1] == [sys.executable, "-m", "pip", "install", "--no-deps",
                                "--no-index", "--force-reinstall", str(root / key / WHEEL)]
    assert re.fullmatch(rf"Horovod 0\.28\.1: cached build {key} \(built {built} with g\+\+ "
                        r"12\.2\.0 against TensorFlow 2\.21\.0\) installed in \d+ s", said[0]), said
    assert len(said) == 1 and _entries(root) == [key]


def test_the_manifest_names_each_key_component(fake_build, capsys, tools, tmp_path):
    root = fake_build.root
    rc, _, err = _install(capsys, fake_build)
    assert rc == 0, err
    [key] = _entries(root)
    manifest = json.loads((root / key / "manifest.json").read_text())
    parts = manifest["components"]
    assert manifest["key"] == key == cache.key_of(parts)
    assert (manifest["Horovod"], manifest["wheel"]) == ("0.28.1", WHEEL)
    assert manifest["wheel sha256"] == _sha256(GOOD_WHEEL)
    assert manifest["keras-caffe"] == keras_caffe.__version__  # read from its metadata
    assert list(parts) == COMPONENTS
    assert parts["Horovod sdist"] == f"horovod-0.28.1.tar.gz, sha256 {sdist.SHA256}"
    assert parts["patch set"] == f"{', '.join(NAMES)}; content sha256 {patches.fingerprint()}"
    assert parts["TensorFlow distribution"] == "none found"  # a stub, no dist-info
    assert parts["TensorFlow version"] == "2.21.0 (v2.21.0-0-g0123456789)"
    # TensorFlow's folder is named, not where this environment keeps it
    assert parts["TensorFlow compile flags"] == ("-I<tensorflow>/include "
                                                 "-D_GLIBCXX_USE_CXX11_ABI=1 --std=c++17")
    assert parts["TensorFlow link flags"] == "-L<tensorflow> -l:libtensorflow_framework.so.2"
    assert parts["TensorFlow CUDA build"] == "no"
    assert parts["Python"].startswith(f"{platform.python_version()} cpython, cpython-")
    assert parts["C++ compiler"] == f"{tools}/g++ ({tools}/g++)"
    assert parts["C++ compiler --version"] == GXX
    assert parts["C compiler"] == "none found"  # no cc on the stub PATH
    assert (parts["CMake"], parts["GPU"]) == ("3.25.1", "Gloo only (no NCCL)")
    assert parts["build variables"] == (
        f"CXX={tools}/g++ CXXFLAGS=-I<tensorflow>/include/external/highwayhash "
        "-I<tensorflow>/include/external/farmhash_archive/src "
        f"HOROVOD_CUDA_HOME={tmp_path}/cuda HOROVOD_NCCL_INCLUDE={tmp_path}/nccl "
        "HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITHOUT_PYTORCH=1 "
        "HOROVOD_WITH_GLOO=1 HOROVOD_WITH_TENSORFLOW=1")  # not MAKEFLAGS: -j changes nothing
    rc, lines, err = cli.main(["install-horovod", "--dry-run"]), *capsys.readouterr()
    lines = lines.splitlines()
    start = lines.index(f"cache key {key}: the sha256 of")
    assert lines[start + 1:] == [f"  {name}: {value}" for name, value in parts.items()]


def test_the_key_changes_with_each_component_and_only_then(machine, tools, tmp_path,
                                                          monkeypatch):
    machine()
    _stub(tools, "g++", GXX)

    def plan(gpu="auto", jobs=2, **variables):
        return build.make_plan(gpu=gpu, jobs=jobs, environ=dict(os.environ, **variables))

    base = plan()
    key = base.key
    assert cache.key_of(cache.components(base)) == key
    # the same build: again, other jobs, variables that change no binary, and the
    # same TensorFlow installed in another folder
    assert [plan().key, plan(jobs=7).key, plan(OMP_NUM_THREADS="3").key,
            plan(CMAKE_BUILD_PARALLEL_LEVEL="5").key] == [key] * 4
    elsewhere = tmp_path / "other-venv" / "tensorflow"
    for relative in ("external/highwayhash", "external/farmhash_archive/src"):
        (elsewhere / "include" / relative).mkdir(parents=True)
    (tmp_path / "stubs" / "tensorflow" / "__init__.py").write_text(STUB_TF.format(
        version="2.21.0", include=str(elsewhere / "include"), lib=str(elsewhere), cuda=False,
        abi=1))
    assert plan().key == key
    first = patches.PATCHES[0]
    reworded = (dataclasses.replace(first, why="other words"), *patches.PATCHES[1:])
    assert cache.key_of(cache.components(base, patch_set=reworded)) == key

    def other(**changes):
        return cache.key_of(cache.components(base, **changes))

    def tensorflow(**changes):
        return other_plan(tensorflow=dataclasses.replace(base.tensorflow, **changes))

    def other_plan(**changes):
        return cache.key_of(cache.components(dataclasses.replace(base, **changes)))

    edited = dataclasses.replace(first, edits=(dataclasses.replace(
        first.edits[0], new=first.edits[0].new + "// one more line\n"),))
    python = cache.python_identity()
    keys = {
        "sdist sha256": other(sdist_sha256="0" * 64),
        "patch content": other(patch_set=(edited, *patches.PATCHES[1:])),
        "patch set": other(patch_set=patches.PATCHES[:-1]),
        "Python": other(python={**python, "Python": "3.12.3 cpython, cpython-312-x86_64-linux-gnu"}),
        "platform": other(python={**python, "platform": "linux-aarch64, glibc 2.36"}),
        "TensorFlow distribution": tensorflow(distributions=("tensorflow-cpu 2.21.0",)),
        "TensorFlow link flags": tensorflow(link_flags=("-L/x", "-ltensorflow_framework")),
        "TensorFlow git version": tensorflow(git_version="v2.21.0-1-gfedcba9876"),
    }
    machine("2.20.0")
    keys["TensorFlow version"] = plan().key
    machine(abi=0)
    keys["CXX11 ABI"] = plan().key
    machine(cuda=True)
    keys["CUDA TensorFlow, NCCL"] = plan().key
    keys["CUDA TensorFlow, --gpu none"] = plan(gpu="none").key
    machine()
    _stub(tools, "g++", "g++ (Debian 12.3.0-1) 12.3.0")
    keys["compiler version"] = plan().key
    _stub(tools, "g++", GXX)
    _stub(tmp_path / "bin2", "g++", GXX)  # the same output, another compiler
    keys["compiler path"] = plan(CXX=str(tmp_path / "bin2" / "g++")).key
    _stub(tools, "cc", "cc (Debian 12.2.0-14) 12.2.0")
    keys["C compiler"] = plan().key
    (tools / "cc").unlink()
    _stub(tools, "cmake", "cmake version 3.28.3")
    keys["cmake version"] = plan().key
    _stub(tools, "cmake", "cmake version 3.25.1")
    keys["CXXFLAGS"] = plan(CXXFLAGS="-O3").key
    keys["LDFLAGS"] = plan(LDFLAGS="-fuse-ld=gold").key
    keys["HOROVOD_BUILD_ARCH_FLAGS"] = plan(HOROVOD_BUILD_ARCH_FLAGS="-mavx2").key
    keys["CMAKE_POLICY_VERSION_MINIMUM"] = plan(CMAKE_POLICY_VERSION_MINIMUM="3.5").key
    assert plan().key == key  # the machine as it was
    assert key not in keys.values(), [name for name, value in keys.items() if value == key]
    assert len(set(keys.values())) == len(keys)


def test_a_miss_names_what_differs_from_the_nearest_entry(fake_build, machine, capsys):
    rc, _, err = _install(capsys, fake_build)
    assert rc == 0, err
    [key] = _entries(fake_build.root)
    machine("2.20.0")
    rc, said, err = _install(capsys, fake_build)
    assert rc == 0, err
    assert said[0] == (f"Horovod 0.28.1: no cached build for this key; the nearest, {key}, "
                       "differs in TensorFlow version: building from source")
    assert len(fake_build.builds()) == 1 and len(_entries(fake_build.root)) == 2


def test_a_half_written_entry_is_never_used(fake_build, capsys):
    pip, root = fake_build, fake_build.root
    rc, _, err = _install(capsys, pip)
    assert rc == 0, err
    [key] = _entries(root)
    # a store interrupted before its rename: complete content, in its temporary folder
    temp = root / f".tmp-{key}-interrupted"
    os.rename(root / key, temp)
    rc, said, err = _install(capsys, pip)
    assert rc == 0, err
    assert said[0] == f"Horovod 0.28.1: no cached build in {root}: building from source"
    assert len(pip.builds()) == 1 and _entries(root) == [temp.name, key]
    # a folder under the key's name with half of an entry is removed, never used
    (root / key / "manifest.json").unlink()
    rc, said, err = _install(capsys, pip)
    assert said[0] == (f"Horovod 0.28.1: cached build {key} is incomplete (no manifest.json): "
                       "removed; building from source")
    assert len(pip.builds()) == 1 and _entries(root) == [temp.name, key]
    with open(root / key / WHEEL, "a") as wheel:
        wheel.write("# truncated, or changed\n")
    rc, said, err = _install(capsys, pip)
    assert said[0] == (f"Horovod 0.28.1: cached build {key} is incomplete ({WHEEL}'s sha256 "
                       "differs from the manifest's): removed; building from source")
    assert len(pip.builds()) == 1
    # a day later the interrupted store's folder is removed
    old = time.time() - 2 * cache.STALE_SECONDS
    os.utime(temp, (old, old))
    rc, _, err = _install(capsys, pip, "--no-cache")
    assert rc == 0, err
    assert _entries(root) == [key]


def test_a_store_that_fails_midway_leaves_no_entry(fake_build, capsys, monkeypatch):
    pip, root = fake_build, fake_build.root

    def full_disk(path, directory=False):
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(cache, "_fsync", full_disk)  # after the wheel and manifest are written
        rc, said, err = _install(capsys, pip)
    assert rc == 0, err  # Horovod is installed all the same
    assert re.fullmatch(r"Horovod 0\.28\.1: built from source in \d+ s; warning: not cached "
                        r"\(\[Errno 28\] No space left on device\)", said[1]), said
    assert _entries(root) == []  # neither an entry nor its temporary folder
    rc, said, err = _install(capsys, pip)
    assert said[0] == f"Horovod 0.28.1: no cached build in {root}: building from source"
    assert len(pip.builds()) == 1 and len(_entries(root)) == 1


def test_a_cached_build_that_fails_its_check_is_removed_and_rebuilt(fake_build, capsys):
    pip, root = fake_build, fake_build.root
    rc, _, err = _install(capsys, pip)
    assert rc == 0, err
    [key] = _entries(root)
    # a consistent entry (its wheel has the manifest's sha256) that no longer
    # imports: only the check tells
    (root / key / WHEEL).write_text(BROKEN_WHEEL)
    manifest = json.loads((root / key / "manifest.json").read_text())
    manifest["wheel sha256"] = _sha256(BROKEN_WHEEL)
    (root / key / "manifest.json").write_text(json.dumps(manifest))
    rc, said, err = _install(capsys, pip)
    assert rc == 0, err
    assert said[0] == (
        f"Horovod 0.28.1: cached build {key} (built {manifest['built'][:10]} with g++ 12.2.0 "
        "against TensorFlow 2.21.0) failed its check (Horovod installed but `import "
        "horovod.tensorflow` fails or reports no Gloo: ImportError: undefined symbol: "
        "_ZN10tensorflow8OpKernelD2Ev): removed; building from source")
    installs = pip.wheel_installs()
    assert installs[0] == str(root / key / WHEEL) and len(installs) == 2
    assert len(pip.builds()) == 1
    assert _entries(root) == [key] and (root / key / WHEEL).read_text() == GOOD_WHEEL


def test_no_cache_builds_and_replaces_the_entry(fake_build, capsys):
    pip, root = fake_build, fake_build.root
    rc, _, err = _install(capsys, pip)
    assert rc == 0, err
    [key] = _entries(root)
    pip.wheel = GOOD_WHEEL + "# built again\n"
    rc, said, err = _install(capsys, pip, "--no-cache")
    assert rc == 0, err
    assert said[0] == f"Horovod 0.28.1: --no-cache: building from source (then cached as {key})"
    assert said[1].endswith(f"cached as {key} in {root}")
    [built] = pip.wheel_installs()  # the new wheel, from the build folder
    assert len(pip.builds()) == 1 and built.endswith(f"/wheel/{WHEEL}")
    assert _entries(root) == [key] and (root / key / WHEEL).read_text() == pip.wheel


def test_a_failed_build_stores_nothing(fake_build, capsys):
    pip, root = fake_build, fake_build.root
    pip.build_rc = 1
    rc, _, err = _install(capsys, pip)
    assert rc == 2 and "keras-caffe: error: the Horovod build failed" in err
    assert _entries(root) == []
    pip.build_rc, pip.wheel = 0, BROKEN_WHEEL  # it compiles, but does not import
    rc, _, err = _install(capsys, pip)
    assert rc == 2
    assert err.endswith("keras-caffe: error: Horovod installed but `import horovod.tensorflow` "
                        "fails or reports no Gloo: ImportError: undefined symbol: "
                        "_ZN10tensorflow8OpKernelD2Ev\n")
    assert _entries(root) == []


# -- the build's progress ---------------------------------------------------------

OUTPUT = Path(__file__).resolve().parent / "build_output"
#: the recorded ``pip wheel --verbose`` lines (build_output/SOURCES.md)
RECORDED = (OUTPUT / "pip_wheel_verbose.log").read_text().splitlines(keepends=True)
TREE = "src/horovod-0.28.1/build/temp.linux-x86_64-cpython-311/RelWithDebInfo"


def _write_steps(tree):
    """The recorded build tree's compile steps, as build.make files under ``tree``."""
    for row in (OUTPUT / "build_make_steps.txt").read_text().splitlines():
        relative, line = row.split("\t")
        path = Path(tree) / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as out:
            out.write(f"\t{line}\n")


def _recorded(work):
    """The recorded output as a build in ``work`` prints it, with its build
    tree's compile steps written there."""
    _write_steps(Path(work) / TREE)
    return [line.replace("<work>", str(work)) for line in RECORDED]


class Clock:
    """A fake monotonic clock: ``now`` seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_the_recorded_tree_counts_the_files_the_build_compiled(tmp_path):
    """The total is the recorded tree's 101 compile steps: the 101 files
    the real build compiled; a tree without steps gives no total."""
    _write_steps(tmp_path / "tree")
    compiled = [line for line in RECORDED if re.match(r"\s*\[\s*\d+%\] Building CXX object ",
                                                      line)]
    assert progress.count_compile_steps(tmp_path / "tree") == len(compiled) == 101
    (tmp_path / "empty").mkdir()
    assert progress.count_compile_steps(tmp_path / "empty") is None


def test_progress_lines_without_a_terminal(tmp_path):
    """The recorded build, one line a second: a line when CMake starts, at
    the first file, at each 10% of the files (files 11, 21, ... of 101)
    and when the wheel is made; nothing for pip's and the compiler's other
    lines."""
    lines, clock, out = _recorded(tmp_path), Clock(), io.StringIO()
    meter = progress.BuildProgress(out, tty=False, clock=clock)
    for second, line in enumerate(lines):
        clock.now = second
        meter.feed(line)
    meter.finish()
    assert lines[12].startswith("  -- Could not find CCache") and "[  0%]" in lines[42]
    assert out.getvalue().splitlines() == [
        "building Horovod: CMake is configuring, 12 s",
        "building Horovod: compiling file 1/101, 42 s",
        "building Horovod: compiling file 11/101, 53 s",
        "building Horovod: compiling file 21/101, 1 min 3 s",
        "building Horovod: compiling file 31/101, 1 min 13 s",
        "building Horovod: compiling file 41/101, 1 min 23 s",
        "building Horovod: compiling file 51/101, 1 min 33 s",
        "building Horovod: compiling file 61/101, 1 min 43 s",
        "building Horovod: compiling file 71/101, 1 min 53 s",
        "building Horovod: compiling file 81/101, 2 min 7 s",
        "building Horovod: compiling file 91/101, 2 min 17 s",
        "building Horovod: compiling file 101/101, 2 min 27 s",
        "building Horovod: 101/101 files compiled, making the wheel, 2 min 30 s",
    ]
    # the lines named: the n-th file's start, setuptools' install
    starts = [i for i, line in enumerate(lines) if "] Building CXX object " in line]
    assert [starts[n - 1] for n in (1, 11, 21, 31, 41, 51, 61, 71, 81, 91, 101)] == [
        42, 53, 63, 73, 83, 93, 103, 113, 127, 137, 147]
    assert lines[150] == "  installing to build/bdist.linux-x86_64/wheel\n"


def test_never_silent_for_30_s_without_a_terminal(tmp_path):
    """Without a new stage or 10%, a line after 30 s without one: while pip
    prepares, while CMake configures, and during a long last file."""
    lines, clock, out = _recorded(tmp_path), Clock(), io.StringIO()
    meter = progress.BuildProgress(out, tty=False, clock=clock)
    meter.feed(lines[11])  # running build_ext
    for now in (10, 29.9, 30, 45, 59.9):
        clock.now = now
        meter.tick()
    clock.now = 70
    meter.feed(lines[12])  # CMake starts
    for now in (99.9, 100, 129, 130):
        clock.now = now
        meter.tick()
    for line in lines[13:148]:  # up to the last file's start
        meter.feed(line)
    for now in (159, 160, 190):
        clock.now = now
        meter.tick()
    assert out.getvalue().splitlines() == [
        "building Horovod: pip is preparing the build, 30 s",
        "building Horovod: CMake is configuring, 1 min 10 s",
        "building Horovod: CMake is configuring, 1 min 40 s",
        "building Horovod: CMake is configuring, 2 min 10 s",
        "building Horovod: compiling file 1/101, 2 min 10 s",
        *[f"building Horovod: compiling file {n}/101, 2 min 10 s" for n in range(11, 102, 10)],
        "building Horovod: compiling file 101/101, 2 min 40 s",
        "building Horovod: compiling file 101/101, 3 min 10 s",
    ]


def test_on_a_terminal_one_line_is_rewritten(tmp_path):
    """On a terminal: the line is redrawn when its text changes (a new line
    of output, a new second), padded over a longer one, and ended by
    ``finish``."""
    lines, clock, out = _recorded(tmp_path), Clock(), io.StringIO()
    meter = progress.BuildProgress(out, tty=True, clock=clock)
    meter.feed(lines[11])  # running build_ext
    meter.tick()  # the same second: nothing
    clock.now = 1.5
    meter.tick()
    meter.feed(lines[12])  # CMake starts
    meter.feed(lines[41])  # the build tree, of 101 files: the same text, not redrawn
    clock.now = 61
    meter.feed(lines[42])  # the first file
    meter.finish()
    assert out.getvalue() == (
        "\rbuilding Horovod: pip is preparing the build, 0 s"
        "\rbuilding Horovod: pip is preparing the build, 2 s"
        "\rbuilding Horovod: CMake is configuring, 2 s" + " " * 6 +
        "\rbuilding Horovod: compiling file 1/101, 1 min 1 s\n")


STUB_CMAKE = """#!{python}
# cmake for the stub-compiler build: --version; configure (CMake's recorded
# configure lines, the recorded compile steps written into the build tree,
# the working directory); --build (the recorded build lines; with
# {fail} holding N, N of them, then make's error).
import sys
from pathlib import Path

if sys.argv[1:] == ["--version"]:
    print("cmake version 3.25.1")
    sys.exit(0)
lines = [line[2:] for line in Path({recorded!r}).read_text().splitlines(keepends=True)]
first = next(i for i, line in enumerate(lines) if line.startswith("-- "))
written = next(i for i, line in enumerate(lines) if line.startswith("-- Build files"))
end = max(i for i, line in enumerate(lines) if line.startswith("[100%]"))
if sys.argv[1] != "--build":
    for row in Path({steps!r}).read_text().splitlines():
        relative, line = row.split("\\t")
        path = Path.cwd() / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a") as out:
            out.write(line + "\\n")
    sys.stdout.writelines(lines[first:written])
    print("-- Build files have been written to:", Path.cwd())
    sys.exit(0)
build = [line.replace("<work>", "/stub") for line in lines[written + 1:end + 1]]
fail = Path({fail!r})
count = int(fail.read_text()) if fail.is_file() else len(build)
sys.stdout.writelines(build[:count])
if count < len(build):
    print("make: *** [Makefile:136: all] Error 2")
    sys.exit(2)
"""

STUB_SETUP = """# Horovod's setup.py runs CMake in its build folder, then packs the wheel:
# here the stub cmake on PATH, and a pure package (the stub horovod.tensorflow).
import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithCMake(build_py):
    def run(self):
        tree = os.path.join(HERE, "build", "RelWithDebInfo")
        os.makedirs(tree, exist_ok=True)
        for command in (["cmake", HERE], ["cmake", "--build", "."]):
            subprocess.check_call(command, cwd=tree)
        super().run()


setup(name="horovod", version="0.28.1", packages=["horovod", "horovod.tensorflow"],
      cmdclass={"build_py": BuildWithCMake})
"""


class StubCompilerPip(FakePip):
    """``pip wheel`` runs for real (``build._run_logged`` as shipped) on an
    sdist whose setup.py runs the stub cmake; ``pip install`` of the wheel
    unpacks it onto PYTHONPATH; other installs do nothing."""

    def __init__(self, stubs, sdist_path, root, run):
        super().__init__(stubs, sdist_path, root)
        self.run = run

    def __call__(self, command, log, env=None, cwd=None, verbose=False, meter=None):
        self.commands.append(command)
        if command[3] == "wheel":
            return self.run(command, log, env=env, cwd=cwd, verbose=verbose, meter=meter)
        if command[-1].endswith(".whl"):
            with zipfile.ZipFile(command[-1]) as wheel:
                wheel.extractall(self.stubs)
        return 0


@pytest.fixture
def stub_compiler_build(machine, tools, tmp_path, monkeypatch):
    """The stub machine with a stub cmake that replays the recorded build,
    a local sdist of the excerpts with a setup.py that runs it, and the
    real ``pip wheel --verbose``; no progress line for silence
    (``QUIET_SECONDS``) during the run, so the lines are the build's."""
    machine()
    _stub(tools, "g++", GXX)
    fail = tmp_path / "cmake.fail"
    (tools / "cmake").write_text(STUB_CMAKE.format(
        python=sys.executable, recorded=str(OUTPUT / "pip_wheel_verbose.log"),
        steps=str(OUTPUT / "build_make_steps.txt"), fail=str(fail)))
    members = {f"horovod-0.28.1/{path.relative_to(EXCERPTS).as_posix()}": path.read_bytes()
               for path in EXCERPTS.rglob("*") if path.is_file()}
    members.update({"horovod-0.28.1/setup.py": STUB_SETUP.encode(),
                    "horovod-0.28.1/horovod/__init__.py": b"",
                    "horovod-0.28.1/horovod/tensorflow/__init__.py": GOOD_WHEEL.encode()})
    archive = _tarball(tmp_path / "horovod-0.28.1.tar.gz", members)
    monkeypatch.setattr(sdist, "verify", lambda path: Path(path))
    pip = StubCompilerPip(tmp_path / "stubs", archive, tmp_path / "cache" / "horovod",
                          build._run_logged)
    pip.fail = fail
    monkeypatch.setattr(build, "_run_logged", pip)
    monkeypatch.setattr(progress, "QUIET_SECONDS", 10 ** 6)
    monkeypatch.setenv("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return pip


TIME = r"(\d+ min )?\d+ s"


def _progress_lines(out):
    return [line for line in out.splitlines() if line.startswith("building Horovod: ")]


def test_a_stub_compiler_build_prints_its_progress(stub_compiler_build, capsys, tmp_path):
    """The whole command, with the real pip wheel and the stub cmake: the
    progress lines of the recorded build (not a terminal), and the full
    output in the build log."""
    pip = stub_compiler_build
    rc = cli.main(["install-horovod", "--sdist", str(pip.sdist), "--jobs", "2",
                   "--keep-build-dir"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err + captured.out[-3000:]
    expected = ["CMake is configuring"] + [
        f"compiling file {n}/101" for n in (1, *range(11, 102, 10))] + [
        "101/101 files compiled, making the wheel"]
    found = _progress_lines(captured.out)
    assert len(found) == len(expected), found
    for line, words in zip(found, expected):
        assert re.fullmatch(rf"building Horovod: {words}, {TIME}", line), (line, words)
    assert re.search(r"Horovod 0\.28\.1: built from source in \d+ s; cached as ",
                     captured.out)
    [work] = (tmp_path / "tmp").glob("keras-caffe-horovod-*")
    log = (work / "build.log").read_text()
    compiled = re.findall(r"^  \[\s*\d+%\] Building CXX object (\S+)$", log, re.M)
    assert len(compiled) == 101 and compiled[-1] == (
        "horovod/tensorflow/CMakeFiles/tensorflow.dir/xla_mpi_ops.cc.o")
    assert "  -- Build files have been written to: " in log and "  running build_py\n" in log


def test_a_failed_stub_compiler_build_names_its_log(stub_compiler_build, capsys, tmp_path):
    """A compile that fails after the 30th recorded build line (the 29th
    file's start): the progress so far, the log's end on stderr and the error naming the log, which
    holds the whole output."""
    pip = stub_compiler_build
    pip.fail.write_text("30")
    rc = cli.main(["install-horovod", "--sdist", str(pip.sdist), "--jobs", "2"])
    captured = capsys.readouterr()
    assert rc == 2
    [work] = (tmp_path / "tmp").glob("keras-caffe-horovod-*")  # kept
    log = work / "build.log"
    assert f"with 2 jobs (log: {log})" in captured.out
    assert captured.err.endswith("keras-caffe: error: the Horovod build failed (its end "
                                 f"above); the log: {log}\n")
    # on stderr, the log's 25 lines before setup.py's traceback (the build's last
    # 24, recorded lines 48-71, and make's error) and the exception's line
    assert captured.err.splitlines()[-28:-1] == [
        *(line.replace("<work>", "/stub").rstrip("\n") for line in RECORDED[48:72]),
        "  make: *** [Makefile:136: all] Error 2",
        "  [the traceback is left out here: it is in the log]",
        "  subprocess.CalledProcessError: Command '['cmake', '--build', '.']' returned "
        "non-zero exit status 2."]
    found = _progress_lines(captured.out)
    assert [re.sub(rf", {TIME}$", "", line) for line in found] == [
        "building Horovod: CMake is configuring", "building Horovod: compiling file 1/101",
        "building Horovod: compiling file 11/101", "building Horovod: compiling file 21/101"]
    text = log.read_text()
    assert len(re.findall(r"\] Building CXX object ", text)) == 29
    assert "  make: *** [Makefile:136: all] Error 2\n" in text
    assert cache.BuildCache.at(tmp_path / "cache").manifests() == {}


def test_verbose_shows_the_build_output_instead_of_progress(stub_compiler_build, capsys):
    """--verbose: the build's own lines on stdout (all 101 files), no progress line."""
    pip = stub_compiler_build
    rc = cli.main(["install-horovod", "--sdist", str(pip.sdist), "--jobs", "2", "--verbose"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err + captured.out[-3000:]
    assert _progress_lines(captured.out) == []
    assert len(re.findall(r"^  \[\s*\d+%\] Building CXX object ", captured.out, re.M)) == 101
    assert "  -- Build files have been written to: " in captured.out

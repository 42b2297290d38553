"""``keras-caffe install-horovod``: the patch engine, the sdist's sha256, the
tool checks, the plan ``--dry-run`` prints and the TensorFlow range.

No network and no compiler: the patch set runs on verbatim excerpts of
Horovod 0.28.1's sdist (tests/horovod_sdist_excerpts/SOURCES.md); tools are
stub executables on a PATH of their own; TensorFlow is a stub package on
PYTHONPATH, which only the plan's TensorFlow probe (a child process) sees.
The shipped patch set is also applied to the real sdist when
``KERAS_CAFFE_HOROVOD_SDIST`` names it (the Makefile downloads it once);
with ``KERAS_CAFFE_EXPECT_HOROVOD=1`` its absence fails.
"""

import hashlib
import io
import os
import shutil
import tarfile
from pathlib import Path

import pytest

from keras_caffe import cli
from keras_caffe.errors import HorovodBuildError
from keras_caffe.horovod_build import patches, sdist, toolchain

EXCERPTS = Path(__file__).resolve().parent / "horovod_sdist_excerpts"
XLA_OPS = "horovod/tensorflow/xla_mpi_ops.cc"
MPI_OPS = "horovod/tensorflow/mpi_ops.cc"
GROUP_TABLE = "horovod/common/group_table.h"
#: tests/horovod_sdist_excerpts/SOURCES.md: file -> its 1-based line ranges
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
version = types.SimpleNamespace(VERSION={version!r})
sysconfig = types.SimpleNamespace(get_include=lambda: {include!r},
                                  get_build_info=lambda: {{"is_cuda_build": {cuda!r}}})
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
    include = tmp_path / "tf_include"
    for relative in ("external/highwayhash", "external/farmhash_archive/src"):
        (include / relative).mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tools))
    monkeypatch.setenv("HOROVOD_CUDA_HOME", str(toolkit))
    monkeypatch.setenv("HOROVOD_NCCL_INCLUDE", str(nccl))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "stubs"))
    for name in ("CXXFLAGS", "CXX", "HOROVOD_GPU_OPERATIONS", "CMAKE_POLICY_VERSION_MINIMUM"):
        monkeypatch.delenv(name, raising=False)

    def make(version="2.21.0", cuda=False):
        package = tmp_path / "stubs" / "tensorflow"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(
            STUB_TF.format(version=version, include=str(include), cuda=cuda))
        return {"toolkit": toolkit, "include": include}

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
    assert env[7] == "  unset HOROVOD_GPU_OPERATIONS"
    assert "--no-deps --no-build-isolation --no-cache-dir" in env[8]


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

"""keras-caffe's patch set for Horovod 0.28.1's sdist, as exact text edits.

Each ``Edit`` replaces one exact piece of text (``old``) in one file with
``new``. Applying refuses, naming the file and the edit, when ``new`` is
already there (the source was patched before) or when ``old`` is not found
exactly once (the source drifted: another Horovod, an edited file). Nothing
is written unless every edit of the set matches; then each patched file is
written through a temporary file and a rename.

Why each patch (docs/horovod.md has the long form):

- ``xla-builder-include``: TensorFlow 2.19 moved ``xla_builder.h`` from
  ``xla/client/`` to ``xla/hlo/builder/``; CMake always compiles
  ``xla_mpi_ops.cc`` (``HOROVOD_ENABLE_XLA_OPS`` is a runtime switch), so
  without it no build works on TensorFlow >= 2.19, CPU or GPU.
- ``absl-statusor``: spell ``::xla::StatusOr`` as ``absl::StatusOr``, what
  XLA's alias has named since TensorFlow 2.13 and what newer XLA uses alone.
- ``gpu-stream-handle``: TensorFlow 2.21 no longer exports
  ``stream_executor::gpu::AsGpuStreamValue``, which ``mpi_ops.cc`` declares
  and calls in GPU builds; a file-local definition returns the CUDA/HIP
  stream from ``Stream::platform_specific_handle()`` (public in 2.16-2.21).
- ``gcc13-missing-headers``: two headers GCC 13's libstdc++ no longer pulls
  in transitively (Horovod PR #3957).
- ``cuda-standard-gcc14``: nvcc in C++11 mode fails on GCC 14's headers;
  C++14 there (Horovod PR #4313). CMake reads it only in CUDA builds.

conda-forge's horovod-feedstock recipe patches the same problems; these
edits are keras-caffe's own, written against the sdist's text.
"""

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from keras_caffe.errors import HorovodBuildError


@dataclass(frozen=True)
class Edit:
    """Replace ``old`` (found exactly once) with ``new`` in ``path``
    (relative to the unpacked sdist's root)."""

    path: str
    old: str
    new: str


@dataclass(frozen=True)
class Patch:
    """A named group of edits; ``gpu_only``: compiled only in CUDA/ROCm
    builds (applied to every build all the same: one source for both)."""

    name: str
    why: str
    edits: tuple
    gpu_only: bool = False


XLA_OPS = "horovod/tensorflow/xla_mpi_ops.cc"
MPI_OPS = "horovod/tensorflow/mpi_ops.cc"

XLA_BUILDER = Patch(
    "xla-builder-include",
    "TensorFlow >= 2.19 ships xla_builder.h under xla/hlo/builder/",
    (Edit(XLA_OPS,
          '#include "tensorflow/compiler/tf2xla/xla_op_registry.h"\n'
          '#include "tensorflow/compiler/xla/client/xla_builder.h"\n',
          '#include "tensorflow/compiler/tf2xla/xla_op_registry.h"\n'
          '// keras-caffe: TensorFlow 2.19 moved xla_builder.h to xla/hlo/builder/.\n'
          '#if __has_include("tensorflow/compiler/xla/client/xla_builder.h")\n'
          '#include "tensorflow/compiler/xla/client/xla_builder.h"\n'
          '#else\n'
          '#include "xla/hlo/builder/xla_builder.h"\n'
          '#endif\n'),),
)

ABSL_STATUSOR = Patch(
    "absl-statusor",
    "::xla::StatusOr is an alias of absl::StatusOr, which newer XLA uses alone",
    (Edit(XLA_OPS,
          '#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"\n',
          '#include "absl/status/statusor.h"\n'
          '#include "tensorflow/compiler/tf2xla/xla_op_kernel.h"\n'),
     Edit(XLA_OPS,
          "  ::xla::StatusOr<::xla::XlaOp> BuildAllreduceCustomCall(\n",
          "  absl::StatusOr<::xla::XlaOp> BuildAllreduceCustomCall(\n"),
     Edit(XLA_OPS,
          "::xla::StatusOr<::xla::XlaOp> HVDAllreduceOp::BuildAllreduceCustomCall(\n",
          "absl::StatusOr<::xla::XlaOp> HVDAllreduceOp::BuildAllreduceCustomCall(\n")),
)

GPU_STREAM = Patch(
    "gpu-stream-handle",
    "TensorFlow 2.21 no longer exports stream_executor::gpu::AsGpuStreamValue",
    (Edit(MPI_OPS,
          "// Forward declaration of AsGpuStreamValue\n"
          "namespace stream_executor {\n"
          "namespace gpu {\n"
          "GpuStreamHandle AsGpuStreamValue(Stream* stream);\n"
          "} // namespace stream_executor\n"
          "} // namespace gpu\n"
          "#if TENSORFLOW_VERSION >= 2011000000\n"
          '#include "tensorflow/compiler/xla/stream_executor/stream.h"\n'
          "#else\n"
          '#include "tensorflow/stream_executor/stream.h"\n'
          "#endif // TENSORFLOW_VERSION >= 2011000000\n",
          "#if TENSORFLOW_VERSION >= 2011000000\n"
          '#include "tensorflow/compiler/xla/stream_executor/stream.h"\n'
          "#else\n"
          '#include "tensorflow/stream_executor/stream.h"\n'
          "#endif // TENSORFLOW_VERSION >= 2011000000\n"
          "\n"
          "// keras-caffe: TensorFlow 2.21 no longer exports AsGpuStreamValue; a\n"
          "// file-local one reads the CUDA/HIP stream from the public\n"
          "// Stream::platform_specific_handle() (TensorFlow >= 2.16).\n"
          "namespace stream_executor {\n"
          "namespace gpu {\n"
          "static inline GpuStreamHandle AsGpuStreamValue(Stream* stream) {\n"
          "  return reinterpret_cast<GpuStreamHandle>(\n"
          "      stream->platform_specific_handle().stream);\n"
          "}\n"
          "} // namespace gpu\n"
          "} // namespace stream_executor\n"),),
    gpu_only=True,
)

GCC13_HEADERS = Patch(
    "gcc13-missing-headers",
    "GCC 13's libstdc++ no longer includes <stdexcept> and <string> transitively",
    (Edit("horovod/common/common.h",
          "#include <memory>\n#include <string>\n",
          "#include <memory>\n#include <stdexcept>\n#include <string>\n"),
     Edit("horovod/common/group_table.h",
          "#include <queue>\n#include <unordered_map>\n",
          "#include <queue>\n#include <string>\n#include <unordered_map>\n")),
)

CUDA_STANDARD = Patch(
    "cuda-standard-gcc14",
    "nvcc in C++11 mode fails on GCC 14's headers",
    (Edit("horovod/common/ops/cuda/CMakeLists.txt",
          "set(CMAKE_CUDA_STANDARD_REQUIRED ON)\n",
          "set(CMAKE_CUDA_STANDARD_REQUIRED ON)\n"
          "# keras-caffe: nvcc -std=c++11 fails on GCC 14's headers.\n"
          'if(CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL "14")\n'
          "  set(CMAKE_CUDA_STANDARD 14)\n"
          "endif()\n"),),
    gpu_only=True,
)

#: The set `keras-caffe install-horovod` applies, in order.
PATCHES = (XLA_BUILDER, ABSL_STATUSOR, GPU_STREAM, GCC13_HEADERS, CUDA_STANDARD)


def fingerprint(patches=PATCHES):
    """sha256 of what the patch set does to the source: each patch's name and
    every edit's file, old and new text, in order (not the ``why`` prose).
    The build cache's key (``cache.components``) holds it, so a changed edit
    never reuses a build made with the old one."""
    content = [[patch.name, patch.gpu_only, [[edit.path, edit.old, edit.new]
                                             for edit in patch.edits]] for patch in patches]
    return hashlib.sha256(json.dumps(content).encode("utf-8")).hexdigest()


def _label(patch, index):
    return f"patch {patch.name!r}, edit {index + 1} of {len(patch.edits)}"


def patched_text(text, edit, where):
    """``text`` with ``edit`` applied; ``HorovodBuildError`` naming ``where``
    (file and edit) unless ``edit.old`` occurs exactly once and ``edit.new``
    is not there yet."""
    if edit.new in text:
        raise HorovodBuildError(f"{where}: already applied (the source was patched before)")
    count = text.count(edit.old)
    if count != 1:
        raise HorovodBuildError(
            f"{where}: the text to replace occurs {count} times, expected once "
            "(not Horovod 0.28.1's sdist?)")
    return text.replace(edit.old, edit.new, 1)


def apply_patches(root, patches=PATCHES):
    """Apply ``patches`` under the directory ``root``: all or nothing.

    Returns the names of the patches applied, in order. Raises
    ``HorovodBuildError`` naming the file and the edit that does not match
    (``patch 'x', edit 2 of 3: horovod/...: ...``); then no file is changed.
    """
    root = Path(root)
    texts = {}
    for patch in patches:
        for index, edit in enumerate(patch.edits):
            where = f"{edit.path}: {_label(patch, index)}"
            if edit.path not in texts:
                texts[edit.path] = _read(root, edit.path, where)
            texts[edit.path] = patched_text(texts[edit.path], edit, where)
    for path, text in texts.items():
        _write_atomically(root / path, text)
    return [patch.name for patch in patches]


def _read(root, path, where):
    try:
        return (root / path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HorovodBuildError(f"{where}: the file is not in {root}") from None


def _write_atomically(path, text):
    """``text`` over ``path`` through a temporary file and a rename, keeping
    the file's mode; an ``OSError`` names ``path``, not the temporary file."""
    # here, not at the top: keras_caffe.importers' package imports TensorFlow, and
    # keras_caffe.horovod_build imports without it (loaded only when a patch is written)
    from keras_caffe.importers.formats.atomic import user_error

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except OSError as err:
        raise user_error(err, tmp, str(path)) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)

"""Reading Caffe solver files (``solver.prototxt``)."""

import os

from keras_caffe.errors import SolverError
from keras_caffe.importers.protofile import parse_text, read_text
from keras_caffe.proto import caffe_pb2

# The legacy ``solver_type`` enum, by value, as the ``type`` strings Caffe's
# UpgradeSolverType maps them to.
_LEGACY_SOLVER_TYPES = ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam")


def read_solver(solver):
    """Return ``(SolverParameter, source)`` for a solver file path or text.

    ``solver`` is a path (str or os.PathLike), prototxt text, or a
    ``SolverParameter`` already parsed. A string is taken as a path when it
    names an existing file, and as prototxt text when it holds a newline or a
    colon; anything else is reported as a missing file. The legacy
    ``solver_type`` enum is upgraded to ``type`` as Caffe does.
    """
    if isinstance(solver, caffe_pb2.SolverParameter):
        param, source = solver, "<SolverParameter>"
    elif isinstance(solver, os.PathLike) or (
        isinstance(solver, str) and (os.path.isfile(solver) or not _looks_like_text(solver))
    ):
        source = os.fspath(solver)
        param = read_text(source, caffe_pb2.SolverParameter)
    elif isinstance(solver, str):
        source = "<solver text>"
        param = parse_text(solver, caffe_pb2.SolverParameter, source=source)
    else:
        raise TypeError(
            "solver must be a path, prototxt text or a SolverParameter, "
            f"got {type(solver).__name__}"
        )
    return _upgrade(param, source), source


def _looks_like_text(s):
    return "\n" in s or ":" in s


def _upgrade(param, source):
    if not param.HasField("solver_type"):
        return param
    if param.HasField("type"):
        raise SolverError(
            source, "both the legacy `solver_type` enum and `type` are set; keep only `type`"
        )
    upgraded = caffe_pb2.SolverParameter()
    upgraded.CopyFrom(param)
    upgraded.type = _LEGACY_SOLVER_TYPES[param.solver_type]
    upgraded.ClearField("solver_type")
    return upgraded

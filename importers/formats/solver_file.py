"""Reading Caffe solver files (``solver.prototxt``)."""

from keras_caffe.errors import ProtoParseError, SolverError
from keras_caffe.importers.formats.file_kind import not_a_solver
from keras_caffe.importers.formats.protofile import read_message, text_of
from keras_caffe.importers.formats.tolerant import unknown_field
from keras_caffe.proto import caffe_pb2

# The legacy ``solver_type`` enum, by value, as the ``type`` strings Caffe's
# UpgradeSolverType maps them to.
_LEGACY_SOLVER_TYPES = ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam")


def read_solver(solver):
    """Return ``(SolverParameter, source)`` for a solver file path or text.

    ``solver`` is a path (str or os.PathLike), prototxt text, or a
    ``SolverParameter`` already parsed (see ``protofile.read_message`` for how a
    string is told apart). The legacy
    ``solver_type`` enum is upgraded to ``type`` as Caffe does. A net file
    (fields no solver has) is refused saying so (``file_kind.not_a_solver``).
    """
    try:
        param, source = read_message(solver, caffe_pb2.SolverParameter, "<solver text>")
    except ProtoParseError as err:
        if unknown_field(err) is None:
            raise
        text, source = text_of(solver, caffe_pb2.SolverParameter, "<solver text>")
        wrong_kind = not_a_solver(text)
        if wrong_kind:
            raise ProtoParseError(source, wrong_kind) from None
        raise
    return _upgrade(param, source), source


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

"""Telling Caffe's file kinds apart, to say which one a misplaced file is.

A solver file given where a net is expected parses as a net with unknown
fields and no layers; a net file given as a solver fails on its first
field; a solverstate read as weights, or weights as a solverstate, is
refused as corrupt. The readers ask here, on those paths only, what the
file is, and say so with where it goes instead.

Text: a file is a solver file when, read as a ``SolverParameter`` (unknown
fields skipped), it sets fields no net has (``net``, ``train_net``,
``base_lr``, ``solver_type``...) and, read as a ``NetParameter``, it sets no
field only nets have (``layer``, ``layers``, ``name``, ``input``...); a net
file the other way round. Binary: a walk of the top-level fields (no parse)
says whether every one is a ``SolverState`` field of the right wire type,
``iter`` among them (a solverstate: a NetParameter's field 1 is its name, a
string, where a SolverState's is ``iter``, a number), or a ``NetParameter``
field, ``layer`` or ``layers`` among them (weights). HDF5: Caffe's
solverstate has ``/iter`` and ``/history``, ours its ``format`` attribute,
Caffe's weights ``/data``.
"""

from google.protobuf import text_format

from keras_caffe.errors import ProtoParseError
from keras_caffe.importers.formats.protofile import parse_binary, top_level_fields
from keras_caffe.importers.formats.snapshot_marks import EXTRA_FIELD, KERAS_FORMAT
from keras_caffe.proto import caffe_pb2

_NET_FIELDS = set(caffe_pb2.NetParameter.DESCRIPTOR.fields_by_name)
_SOLVER_FIELDS = set(caffe_pb2.SolverParameter.DESCRIPTOR.fields_by_name)
#: Fields that only a solver file (only a net file) has.
SOLVER_ONLY = frozenset(_SOLVER_FIELDS - _NET_FIELDS)
NET_ONLY = frozenset(_NET_FIELDS - _SOLVER_FIELDS)
#: The most field names a message lists, the most telling first.
_LISTED = 5
_TELLING = ("net", "net_param", "train_net", "train_net_param", "test_net", "base_lr", "type",
            "solver_type", "lr_policy", "max_iter", "layer", "layers", "input", "input_shape",
            "input_dim", "name")

SOLVERSTATE_NOT_WEIGHTS = (
    "this is a solverstate (a snapshot's solver state), not Caffe weights: resume from it "
    "with `keras-caffe train --snapshot` (Python: Solver.restore or load_snapshot)")
WEIGHTS_NOT_SOLVERSTATE = (
    "this is a Caffe weights file (a net's layers and blobs), not a solverstate: start from "
    "it with `keras-caffe train --weights` (Python: Solver.copy_from, or import_model's "
    "weights)")


def _set_fields(text, message, names):
    """The fields of ``names`` that prototxt ``text`` sets when read as a
    ``message`` skipping unknown fields, the most telling first (``_TELLING``,
    then by name); [] when it does not parse."""
    proto = message()
    try:
        text_format.Parse(text, proto, allow_unknown_field=True)
    except text_format.ParseError:
        return []
    found = [field.name for field, _ in proto.ListFields() if field.name in names]
    return sorted(found, key=lambda name: (_TELLING.index(name) if name in _TELLING
                                           else len(_TELLING), name))


def _listed(names):
    shown = ", ".join(names[:_LISTED])
    return shown + (", ..." if len(names) > _LISTED else "")


def not_a_net(text):
    """Why prototxt ``text`` given as a net is a solver file, or None."""
    solver = _set_fields(text, caffe_pb2.SolverParameter, SOLVER_ONLY)
    if not solver or _set_fields(text, caffe_pb2.NetParameter, NET_ONLY):
        return None
    return (f"this is a solver file (it sets {_listed(solver)}), not a net: give it to "
            "`keras-caffe train --solver` (Python: keras_caffe.Solver)")


def not_a_solver(text):
    """Why prototxt ``text`` given as a solver is a net file, or None."""
    net = _set_fields(text, caffe_pb2.NetParameter, NET_ONLY)
    if not net or _set_fields(text, caffe_pb2.SolverParameter, SOLVER_ONLY):
        return None
    return (f"this is a net file (it sets {_listed(net)}), not a solver: give it to "
            "`keras-caffe import` (Python: import_model), or name it in a solver file's `net`")


def is_solverstate(data):
    """Whether binary ``data`` is a Caffe solverstate (ours or Caffe's)."""
    names = top_level_fields(data, caffe_pb2.SolverState, {EXTRA_FIELD: "keras-caffe state"})
    return bool(names) and "iter" in names


def is_weights(data):
    """Whether binary ``data`` is a Caffe weights file (a NetParameter with layers)."""
    names = top_level_fields(data, caffe_pb2.NetParameter)
    return bool(names) and ("layer" in names or "layers" in names)


def solverstate_not_weights(data, source):
    """``SOLVERSTATE_NOT_WEIGHTS`` naming the weights file the solverstate
    ``data`` names (its ``learned_net``), when it parses."""
    try:
        state = parse_binary(data, caffe_pb2.SolverState, source)
    except ProtoParseError:
        return SOLVERSTATE_NOT_WEIGHTS
    if not state.learned_net:
        return SOLVERSTATE_NOT_WEIGHTS
    return f"{SOLVERSTATE_NOT_WEIGHTS}; its weights are in {state.learned_net!r}"


def hdf5_kind(f):
    """``"solverstate"`` for an open HDF5 file holding Caffe's solverstate
    datasets (``/iter``, ``/history``) or our Keras-format solverstate,
    ``"weights"`` for Caffe's weights (``/data``), else None."""
    stamp = f.attrs.get("format")
    ours = isinstance(stamp, (str, bytes)) and stamp in (KERAS_FORMAT, KERAS_FORMAT.encode())
    if ours or ("iter" in f and "history" in f):
        return "solverstate"
    return "weights" if "data" in f else None

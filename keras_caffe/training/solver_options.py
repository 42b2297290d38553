"""The Solver's options, checked: its keyword arguments (``log``,
``distributed``, ``elastic``, ``commit_every``, ``snapshot_format``) and the
solver file's numbers, each refused with the project's own error naming it;
``max_iter`` given in place of the file's."""

from keras_caffe._checks import check_int
from keras_caffe.errors import KerasCaffeError, SolverError
from keras_caffe.importers.formats.solver_file import read_solver
from keras_caffe.proto import caffe_pb2

#: The ``log`` modes: Caffe's log lines, a progress bar, nothing.
LOGS = ("caffe", "progress", None)
#: The solver file's ``snapshot_format`` -> the Solver's ``snapshot_format``.
_FORMATS = {caffe_pb2.SolverParameter.BINARYPROTO: "caffe",
            caffe_pb2.SolverParameter.HDF5: "caffe_hdf5"}


def check_modes(log, distributed):
    """``log`` one of ``LOGS``, ``distributed`` ``"auto"`` or False."""
    if log not in LOGS:
        raise KerasCaffeError(f"Solver: log must be one of {LOGS}, got {log!r}")
    if distributed not in ("auto", False):
        raise KerasCaffeError(f"Solver: distributed must be 'auto' or False, got "
                              f"{distributed!r}")


def read_param(solver, max_iter=None):
    """``(SolverParameter, source)`` of ``solver``, with ``max_iter`` (an
    integer >= 1) in place of the file's when given; the caller's message
    is left alone."""
    param, source = read_solver(solver)
    if max_iter is None:
        return param, source
    copy = caffe_pb2.SolverParameter()
    copy.CopyFrom(param)
    copy.max_iter = check_int("Solver", "max_iter", max_iter, low=1)
    return copy, source


def check_param(param, source):
    """The solver file's counts: no negative iteration counts, every
    ``test_iter`` > 0, ``iter_size`` >= 1; else ``SolverError``."""
    if param.max_iter < 0:
        raise SolverError(source, f"max_iter must be >= 0, got {param.max_iter}")
    for field in ("display", "test_interval", "snapshot", "average_loss"):
        if getattr(param, field) < 0:
            raise SolverError(source, f"{field} must be >= 0, got {getattr(param, field)}")
    if any(n <= 0 for n in param.test_iter):
        raise SolverError(source, "every test_iter must be > 0")
    if param.iter_size < 1:
        raise SolverError(source, f"iter_size must be >= 1, got {param.iter_size}")


def elastic_option(elastic, commit_every, shard_index, num_shards):
    """``elastic`` if it is a bool, ``commit_every`` None or an integer >= 1,
    and no shard is given with ``elastic`` (the ranks change)."""
    if not isinstance(elastic, bool):
        raise KerasCaffeError(f"Solver: elastic must be True or False, got {elastic!r}")
    if commit_every is not None and (isinstance(commit_every, bool) or not isinstance(
            commit_every, int) or commit_every < 1):
        raise KerasCaffeError(f"Solver: commit_every must be an integer >= 1, got "
                              f"{commit_every!r}")
    if elastic and (shard_index is not None or num_shards is not None):
        raise KerasCaffeError("Solver: elastic training shards the data by the workers' ranks, "
                              "which change; do not give shard_index / num_shards")
    return elastic


def snapshot_format(given, param):
    """The snapshots' format: ``given``, else the file's ``snapshot_format``."""
    chosen = given or _FORMATS[param.snapshot_format]
    if chosen not in ("caffe", "caffe_hdf5", "keras"):
        raise KerasCaffeError(f"Solver: snapshot_format must be 'caffe', 'caffe_hdf5' or "
                              f"'keras', got {chosen!r}")
    return chosen

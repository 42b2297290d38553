"""A Caffe solver file -> a keras-caffe optimizer with its lr schedule."""

from keras_caffe.errors import ArgumentError, SolverError
from keras_caffe.importers.formats.solver_file import read_solver
from keras_caffe.optimizers import SOLVERS
from keras_caffe.optimizers.base import CaffeOptimizer
from keras_caffe.schedules import schedule_from_param

# Caffe CHECKs that these solvers get no momentum.
_NO_MOMENTUM = ("AdaGrad", "RMSProp")


def optimizer_from_solver(solver, **overrides) -> CaffeOptimizer:
    """Build the optimizer (and its schedule) a Caffe solver file describes.

    ``solver`` is a path to a ``solver.prototxt``, its text, or a parsed
    ``SolverParameter``. Read: ``type`` (or the legacy ``solver_type``),
    ``base_lr``, ``lr_policy`` with its fields, ``momentum``, ``momentum2``,
    ``delta``, ``rms_decay``, ``weight_decay``, ``regularization_type``,
    ``clip_gradients`` and ``iter_size``. ``overrides`` are passed to the
    optimizer's constructor and win over the file (for example ``lr_mult``
    and ``decay_mult``, which Caffe keeps in the net, not the solver).
    The file's float fields are float32, as in Caffe (``float32_fields``):
    the optimizer computes with them as read, and ``get_config``/``repr``
    show them as written (``momentum=0.9``).

    Raises ``ProtoParseError`` (file:line:column) for a syntax error and
    ``SolverError`` naming the file for content Caffe would refuse.
    """
    param, source = read_solver(solver)
    cls = SOLVERS.get(param.type)
    if cls is None:
        raise SolverError(
            source, f"unknown solver type {param.type!r}; valid types: {', '.join(SOLVERS)}"
        )
    if param.type in _NO_MOMENTUM and param.momentum != 0:
        raise SolverError(
            source, f"momentum cannot be used with {param.type} (Caffe refuses it); "
            f"got momentum: {param.momentum:g}"
        )
    kwargs = {
        "learning_rate": schedule_from_param(param, source),
        "weight_decay": param.weight_decay,
        "regularization_type": param.regularization_type,
        "clip_gradients": param.clip_gradients if param.clip_gradients >= 0 else None,
        "iter_size": param.iter_size,
        "float32_fields": True,  # caffe.proto's float fields
    }
    kwargs.update({field: getattr(param, field) for field in cls.solver_fields})
    kwargs.update(overrides)
    try:
        return cls(**kwargs)
    except ArgumentError as err:
        if err.argument in overrides:
            raise
        raise SolverError(source, str(err)) from None

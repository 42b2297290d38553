"""Large Model Support for the Solver's train net: the ``lms=`` argument,
else the enclosing ``with keras_caffe.LMS(...)`` block's, checked and
attached to the imported train net (``keras_caffe.lms.policy.attach``: the
plan comes from ``keras-caffe analyze``'s prediction for the net)."""

from keras_caffe.errors import KerasCaffeError
from keras_caffe.lms import policy
from keras_caffe.training.net_building import level_and_stages


def requested(lms):
    """Whether the Solver trains under LMS: ``lms`` given, or a ``with LMS`` block."""
    return lms is not None or policy.current() is not None


def attach(imported, lms, state, *, data_format, jit_compile):
    """Apply ``lms`` (else the ``with`` block's, else nothing) to the
    imported train net of ``NetState`` ``state``; an ``lms`` that is not a
    ``keras_caffe.LMS`` is refused."""
    if lms is not None and not isinstance(lms, policy.LMS):
        raise KerasCaffeError(f"Solver: lms must be a keras_caffe.LMS or None, got {lms!r}")
    lms = lms if lms is not None else policy.current()
    if lms is None:
        return
    level, stages = level_and_stages(state)
    policy.attach(imported, lms, phase="TRAIN", level=level, stages=stages,
                  data_format=data_format, jit_compile=jit_compile)

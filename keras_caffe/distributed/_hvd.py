"""Horovod, imported on first use: ``keras_caffe.distributed`` imports without it."""

import importlib
import sys

# HorovodUnavailableError: defined in keras_caffe.errors, re-exported here
from keras_caffe.errors import DistributedError, HorovodUnavailableError  # noqa: F401

INSTALL_HINT = (
    "keras_caffe.distributed needs Horovod 0.28.1 built for TensorFlow with Gloo: "
    "run `keras-caffe install-horovod` (builds it against the installed TensorFlow "
    "2.16 to 2.21; needs cmake, make, g++)"
)


def horovod():
    """``horovod.tensorflow``, or ``HorovodUnavailableError``."""
    try:
        return importlib.import_module("horovod.tensorflow")
    except ImportError as err:
        raise HorovodUnavailableError(f"{INSTALL_HINT} ({err})") from None


def loaded():
    """``horovod.tensorflow`` if something already imported and initialized
    it, else None. Never imports Horovod (cheap, safe without it)."""
    hvd = sys.modules.get("horovod.tensorflow")
    if hvd is None:
        return None
    try:
        return hvd if hvd.is_initialized() else None
    except Exception:  # noqa: BLE001 - a half-imported Horovod counts as absent
        return None


def initialized(owner=None):
    """``horovod.tensorflow``, initialized; else ``HorovodUnavailableError``
    (not installed) or ``DistributedError`` (``init()`` not called), the
    latter's message prefixed with ``owner``."""
    hvd = loaded()
    if hvd is None:
        horovod()
        prefix = f"{owner}: " if owner else ""
        raise DistributedError(f"{prefix}Horovod is not initialized: call "
                               "keras_caffe.distributed.init() first")
    return hvd


def horovod_elastic():
    """``horovod.common.elastic`` (Horovod's elastic ``State`` and ``run_fn``;
    no TensorFlow, no Keras), or ``HorovodUnavailableError``."""
    try:
        return importlib.import_module("horovod.common.elastic")
    except ImportError as err:
        raise HorovodUnavailableError(f"{INSTALL_HINT} ({err})") from None

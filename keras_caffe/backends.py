"""Which Keras backend keras-caffe runs on, and what each one offers.

The core (the solvers, YellowFin, the lr policies, the importer and
exporter, ``analyze``, snapshot files and the callbacks) runs on every Keras
backend keras-caffe supports: TensorFlow, JAX and PyTorch. Caffe's training
loop (``Solver``, ``keras-caffe train``), the tf.data data layers, Large Model
Support and data-parallel training (Horovod, MirroredStrategy) are built on
TensorFlow and need its backend: ``require_tensorflow_backend`` says so in
one line naming the backend and what to do.

``backend_name`` reads the backend as Keras will (``KERAS_BACKEND``, else
the ``backend`` of ``$KERAS_HOME/keras.json`` or ``~/.keras/keras.json``,
else ``tensorflow``) without importing Keras, so that ``import keras_caffe``
can check it first and the command line can answer ``--help`` at once.
Once Keras is imported, its own ``keras.backend.backend()`` is the answer.
"""

import importlib.util
import json
import os
import sys

from keras_caffe._require import INSTALL, require_tensorflow
from keras_caffe.errors import BackendRequirementError, TensorFlowRequirementError

#: The Keras backends keras-caffe runs on -> the module each one imports.
SUPPORTED = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}
#: pip's extra that installs each backend (setup.cfg's extras_require).
EXTRAS = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def _keras_dir():
    """Keras's configuration folder, as ``keras/src/backend/config.py`` finds it."""
    if "KERAS_HOME" in os.environ:
        return os.environ["KERAS_HOME"]
    home = os.path.expanduser("~")
    return os.path.join(home if os.access(home, os.W_OK) else "/tmp", ".keras")


def backend_name():
    """The backend Keras runs (or will run) on: ``"tensorflow"``, ``"jax"``,
    ``"torch"`` or another of Keras's."""
    keras = sys.modules.get("keras")
    if keras is not None and hasattr(keras, "backend"):
        return keras.backend.backend()
    name = "tensorflow"
    try:
        with open(os.path.join(_keras_dir(), "keras.json")) as file:
            name = json.load(file).get("backend", name)
    except (OSError, ValueError, AttributeError):
        pass  # as Keras: an unreadable keras.json leaves the default
    return os.environ.get("KERAS_BACKEND", name)


def is_tensorflow():
    """Whether the backend is TensorFlow (where the TensorFlow-only features run)."""
    return backend_name() == "tensorflow"


def _where_chosen():
    return "KERAS_BACKEND" if "KERAS_BACKEND" in os.environ else "Keras's default or keras.json"


def require_backend():
    """Raise ``BackendRequirementError`` unless the backend is one keras-caffe
    supports and its package is installed (TensorFlow: >= 2.16). Imports
    nothing: run first thing by ``import keras_caffe``."""
    name = backend_name()
    if name not in SUPPORTED:
        raise BackendRequirementError(
            f"keras-caffe runs on the Keras backends {', '.join(SUPPORTED)}; "
            f"this Keras is set to {name!r} ({_where_chosen()}): "
            f"set KERAS_BACKEND to one of them")
    if name == "tensorflow":
        try:
            require_tensorflow()
        except TensorFlowRequirementError as err:
            others = [b for b in SUPPORTED if b != name and importlib.util.find_spec(SUPPORTED[b])]
            if err.found is None and others:
                raise TensorFlowRequirementError(
                    f"{err} (Keras's backend is 'tensorflow', from {_where_chosen()}; "
                    f"installed here: {', '.join(others)}: KERAS_BACKEND={others[0]} "
                    f"runs keras-caffe's core on it)") from None
            raise
        return
    if importlib.util.find_spec(SUPPORTED[name]) is None:
        raise BackendRequirementError(
            f"Keras's backend is {name!r} ({_where_chosen()}) and {SUPPORTED[name]} is "
            f"not installed: pip install 'keras-caffe[{EXTRAS[name]}]'")


def require_tensorflow_backend(feature):
    """Raise ``TensorFlowRequirementError`` unless the backend is TensorFlow:
    ``feature`` (e.g. ``"keras_caffe.Solver"``) is built on TensorFlow."""
    name = backend_name()
    if name != "tensorflow":
        raise TensorFlowRequirementError(
            f"{feature} needs Keras's TensorFlow backend and the backend is {name!r}: "
            f"run with KERAS_BACKEND=tensorflow (TensorFlow >= 2.16: {INSTALL}); "
            f"on {name} keras-caffe offers the solvers, schedules, importer, snapshots "
            f"and callbacks (docs/backends.md)")


def require_jax_backend(feature):
    """Raise ``BackendRequirementError`` unless the backend is JAX: ``feature``
    (e.g. ``"keras_caffe.data_parallel"``) is built on JAX's runtime."""
    name = backend_name()
    if name != "jax":
        raise BackendRequirementError(
            f"{feature} needs Keras's JAX backend and the backend is {name!r}: run with "
            f"KERAS_BACKEND=jax (pip install 'keras-caffe[jax]'); on tensorflow, "
            f"keras_caffe.distributed trains on several devices and workers "
            f"(Horovod, MirroredStrategy; docs/distributed.md)")

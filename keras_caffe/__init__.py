"""keras-caffe: Caffe-style training native in Keras 3 (TensorFlow backend).

- ``SGD``, ``Nesterov``, ``AdaGrad``, ``RMSProp``, ``AdaDelta``, ``Adam``:
  Caffe's solvers as Keras optimizers, with Caffe's exact semantics.
- ``keras_caffe.schedules``: Caffe's lr policies as ``LearningRateSchedule``.
- ``optimizer_from_solver``: a ``solver.prototxt`` -> optimizer + schedule.
- ``YellowFin``: the momentum auto-tuner (Zhang & Mitliagkas), with Caffe's
  weight decay and multipliers; ``keras_caffe.callbacks.YellowFinMonitor``.
- ``import_model`` / ``export_caffemodel``: Caffe nets <-> Keras models.
- ``Solver`` / ``get_solver``: a Caffe solver file trained end to end
  (``keras-caffe train``), pycaffe's solver API.
- ``LMS``: Large Model Support, recomputing or staging large activations
  so nets train beyond the device's memory.
- ``keras_caffe.distributed``: data-parallel training with Horovod's ring
  all-reduce.

``keras_caffe.callbacks`` and ``keras_caffe.distributed`` load on first use
(``import keras_caffe`` is enough to reach them).
"""

__version__ = "0.1.0"

# The command line hides TensorFlow's start-up log lines unless --verbose
# (a library import is left alone): before anything imports TensorFlow.
from keras_caffe._cli_quiet import quiet_cli_start

quiet_cli_start()

# Then, before keras or numpy: without a TensorFlow >= 2.16 this import
# raises a one-line TensorFlowRequirementError naming what to install.
from keras_caffe import _require  # noqa: F401

from keras_caffe import initializers, layers, losses, schedules  # registers the serializables .keras files name
from keras_caffe.errors import (
    ArgumentError,
    CaffeImportError,
    DistributedError,
    GraphError,
    HorovodBuildError,
    KerasCaffeError,
    LayerError,
    ProtoParseError,
    SolverError,
    TensorFlowRequirementError,
    UnknownLayerError,
    UnsafeLayerError,
    WeightsError,
)
from keras_caffe.optimizers import (
    SGD,
    AdaDelta,
    AdaGrad,
    Adam,
    CaffeOptimizer,
    Nesterov,
    RMSProp,
    YellowFin,
)
from keras_caffe.importers import export_caffemodel, import_model, param_multipliers
from keras_caffe.importers.layer_types.base import DuplicateConverterError
from keras_caffe.importers.snapshot_io import SnapshotError
from keras_caffe.distributed._hvd import HorovodUnavailableError
from keras_caffe.lms import LMS
from keras_caffe.lms_graph import LayerLimitError
from keras_caffe.optimizers.from_solver import optimizer_from_solver
from keras_caffe.solver import Solver, get_solver

#: Every exception keras-caffe raises on purpose. ``KerasCaffeError`` (a
#: ``ValueError``) is the base of all but two ``ImportError``s:
#: ``TensorFlowRequirementError`` and ``HorovodUnavailableError``.
ERRORS = (
    "KerasCaffeError", "ArgumentError", "ProtoParseError", "SolverError", "CaffeImportError",
    "UnknownLayerError", "UnknownLayerTypeError", "UnsafeLayerError", "GraphError",
    "LayerError", "LayerLimitError", "WeightsError", "SnapshotError", "DuplicateConverterError",
    "DistributedError", "HorovodBuildError", "TensorFlowRequirementError",
    "HorovodUnavailableError",
)

__all__ = [
    "SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam", "CaffeOptimizer", "YellowFin",
    "optimizer_from_solver", "Solver", "get_solver", "schedules", "import_model",
    "export_caffemodel", "param_multipliers", "layers", "LMS", *ERRORS,
]

#: Loaded when first reached as attributes (PEP 562), so ``import
#: keras_caffe`` stays as fast as it is: name -> module that defines it.
_LAZY = {
    "callbacks": "keras_caffe.callbacks",
    "distributed": "keras_caffe.distributed",
    "importers": "keras_caffe.importers",
    "UnknownLayerTypeError": "keras_caffe.importers.analyze.core",
}


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'keras_caffe' has no attribute {name!r}")
    import importlib

    loaded = importlib.import_module(module)
    return loaded if module == f"keras_caffe.{name}" else getattr(loaded, name)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))

"""keras-caffe: Caffe-style training native in Keras 3.

On every Keras backend (TensorFlow, JAX, PyTorch):

- ``SGD``, ``Nesterov``, ``AdaGrad``, ``RMSProp``, ``AdaDelta``, ``Adam``:
  Caffe's solvers as Keras optimizers, with Caffe's exact semantics.
- ``keras_caffe.schedules``: Caffe's lr policies as ``LearningRateSchedule``.
- ``optimizer_from_solver``: a ``solver.prototxt`` -> optimizer + schedule.
- ``YellowFin``: the momentum auto-tuner (Zhang & Mitliagkas), with Caffe's
  weight decay and multipliers; ``keras_caffe.callbacks.YellowFinMonitor``.
- ``import_model`` / ``export_caffemodel``: Caffe nets <-> Keras models.

On the TensorFlow backend only (elsewhere they raise
``TensorFlowRequirementError`` saying so; ``keras_caffe.backends``):

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
from keras_caffe._cli_quiet import quiet_cli_start, started_as_cli

quiet_cli_start()

# Then, before keras or numpy: Keras's backend must be TensorFlow (>= 2.16),
# JAX or PyTorch, installed; else a one-line BackendRequirementError (or its
# subclass TensorFlowRequirementError) naming what to set or install.
from keras_caffe.backends import is_tensorflow, require_backend, require_tensorflow_backend

require_backend()

#: Every exception keras-caffe raises on purpose. ``KerasCaffeError`` (a
#: ``ValueError``) is the base of all but two ``ImportError``s:
#: ``BackendRequirementError`` (with its subclass ``TensorFlowRequirementError``)
#: and ``HorovodUnavailableError``.
#: ``DuplicateConverterError`` is ``DuplicateLayerTypeError``'s former name
#: (the same class).
ERRORS = (
    "KerasCaffeError", "ArgumentError", "ProtoParseError", "SolverError", "CaffeImportError",
    "UnknownLayerError", "UnknownLayerTypeError", "UnsafeLayerError", "GraphError",
    "LayerError", "LayerLimitError", "LayerValueError", "WeightsError", "SnapshotError", "DuplicateLayerTypeError",
    "DuplicateConverterError", "DistributedError", "HorovodBuildError", "BackendRequirementError",
    "TensorFlowRequirementError", "HorovodUnavailableError",
)

#: The names that need Keras's TensorFlow backend -> the module defining each.
TENSORFLOW_ONLY = {
    "Solver": "keras_caffe.training.solver",
    "get_solver": "keras_caffe.training.solver",
    "LMS": "keras_caffe.lms.policy",
    "distributed": "keras_caffe.distributed",
}

__all__ = [
    "SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam", "CaffeOptimizer", "YellowFin",
    "optimizer_from_solver", "schedules", "import_model", "export_caffemodel",
    "param_multipliers", "layers", *ERRORS,
    *([name for name in TENSORFLOW_ONLY if name != "distributed"] if is_tensorflow() else []),
]

#: The public API (``keras_caffe._api``, which imports TensorFlow): imported
#: here for a library ``import keras_caffe``; the command line imports it
#: after parsing its arguments (``keras_caffe.cli.main``) and reaches these
#: names through ``__getattr__``.
if not started_as_cli():
    from keras_caffe._api import *  # noqa: E402,F401,F403

    if is_tensorflow():
        from keras_caffe._api_tensorflow import *  # noqa: E402,F401,F403

#: Loaded when first reached as attributes (PEP 562), so ``import
#: keras_caffe`` stays as fast as it is: name -> module that defines it.
_LAZY = {
    "analysis": "keras_caffe.analysis",  # docs/architecture.md: keras_caffe.analysis.analyze
    "callbacks": "keras_caffe.callbacks",
    "importers": "keras_caffe.importers",
    "UnknownLayerTypeError": "keras_caffe.analysis.core",
}
#: The names ``keras_caffe._api`` defines (its ``__all__``).
_API = (set(__all__) | {"initializers", "losses"}) - set(_LAZY) - set(TENSORFLOW_ONLY)


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None and name in _API:
        module = "keras_caffe._api"
    if module is None and name in TENSORFLOW_ONLY:
        require_tensorflow_backend(f"keras_caffe.{name}")
        module = "keras_caffe._api_tensorflow" if name != "distributed" else TENSORFLOW_ONLY[name]
    if module is None:
        raise AttributeError(f"module 'keras_caffe' has no attribute {name!r}")
    import importlib

    loaded = importlib.import_module(module)
    value = loaded if module == f"keras_caffe.{name}" else getattr(loaded, name)
    if module.startswith("keras_caffe._api"):
        globals()[name] = value  # found in the module's namespace from now on
    return value


def __dir__():
    tensorflow_only = set(TENSORFLOW_ONLY) if is_tensorflow() else set()
    return sorted(set(globals()) | set(_LAZY) | _API | tensorflow_only)

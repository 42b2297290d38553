"""keras-caffe's public API on every Keras backend, imported together.

``keras_caffe/__init__.py`` takes its names from here: at once for a
library ``import keras_caffe``; in the command line only once the arguments
are parsed and the input files found (``keras_caffe.cli.main``), so
``--help``, ``--version``, a usage error or a missing file answers without
waiting for TensorFlow. The names that need the TensorFlow backend are in
``keras_caffe._api_tensorflow``.
"""

from keras_caffe import initializers, layers, losses, schedules  # registers the serializables .keras files name
from keras_caffe.errors import (
    ArgumentError,
    CaffeImportError,
    DistributedError,
    DuplicateConverterError,
    DuplicateLayerTypeError,
    GraphError,
    HorovodBuildError,
    BackendRequirementError,
    KerasCaffeError,
    LayerError,
    LayerLimitError,
    LayerValueError,
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
from keras_caffe.importers.snapshots.file_io import SnapshotError
from keras_caffe.errors import HorovodUnavailableError
from keras_caffe.optimizers.from_solver import optimizer_from_solver

__all__ = [
    "initializers", "layers", "losses", "schedules",
    "ArgumentError", "CaffeImportError", "DistributedError", "GraphError", "HorovodBuildError",
    "KerasCaffeError", "LayerError", "ProtoParseError", "SolverError",
    "TensorFlowRequirementError", "UnknownLayerError", "UnsafeLayerError", "WeightsError",
    "SGD", "AdaDelta", "AdaGrad", "Adam", "CaffeOptimizer", "Nesterov", "RMSProp", "YellowFin",
    "export_caffemodel", "import_model", "param_multipliers", "DuplicateLayerTypeError",
    "DuplicateConverterError",
    "SnapshotError", "HorovodUnavailableError", "LayerLimitError", "LayerValueError",
    "BackendRequirementError",
    "optimizer_from_solver",
]

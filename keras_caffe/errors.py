"""keras-caffe's exception types.

Every error keras-caffe raises for bad input is a ``KerasCaffeError``, a
``ValueError`` subclass, and its message names the file, line, layer or
argument at fault.
"""


class KerasCaffeError(ValueError):
    """Base class of keras-caffe's errors for bad input."""


class ArgumentError(KerasCaffeError):
    """A constructor or function argument has a bad value.

    ``argument`` is the argument's name.
    """

    def __init__(self, owner, argument, message):
        self.owner = owner
        self.argument = argument
        self.detail = message
        super().__init__(f"{owner}: `{argument}` {message}")


class CaffeImportError(KerasCaffeError):
    """Base class of the errors importing a Caffe net or its weights."""


class ProtoParseError(CaffeImportError):
    """A prototxt or binary Caffe file could not be parsed.

    ``source`` is the file (or ``"<text>"``), ``line``/``column`` are 1-based
    (``None`` for binary files).
    """

    def __init__(self, source, message, line=None, column=None):
        self.source = source
        self.line = line
        self.column = column
        where = str(source)
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        super().__init__(f"{where}: {message}")


class SolverError(KerasCaffeError):
    """A solver file parsed but describes something Caffe would refuse."""

    def __init__(self, source, message):
        self.source = source
        super().__init__(f"{source}: {message}")


class UnknownLayerError(CaffeImportError):
    """Layer types the importer does not build (none registered, or one that
    ``analyze`` only sizes); ``types`` lists all of them, ``notes`` the net's
    other refusals (its Python layers) and reasons, so one error names
    everything that stops the import."""

    def __init__(self, source, types, known, notes=()):
        self.source = source
        self.types = sorted(types)
        self.known = sorted(known)
        self.notes = list(notes)
        super().__init__(
            f"{source}: unsupported layer type(s) {', '.join(self.types)}; "
            + "".join(f"{note}; " for note in self.notes)
            + f"supported: {', '.join(self.known)}"
        )


class DuplicateLayerTypeError(KerasCaffeError):
    """A layer type registered twice (``keras_caffe.importers.register_layer_type``)."""


#: The name of ``DuplicateLayerTypeError`` before the registry's vocabulary
#: became "layer type" (the same class).
DuplicateConverterError = DuplicateLayerTypeError


class UnsafeLayerError(CaffeImportError):
    """A layer that would run user code (``Python``) is refused."""


class GraphError(CaffeImportError):
    """The net's wiring is wrong: a bottom nobody produces, a cycle."""


class LayerError(CaffeImportError):
    """A layer's parameters, shapes or input values are invalid; names the layer.

    Also constructible from its message alone, so it keeps its type when
    Keras re-raises it from inside a layer's call (Keras rebuilds an
    exception as ``type(e)(message)`` to add the call's arguments)."""

    def __init__(self, layer, message=None):
        if message is not None:
            self.layer = layer
            super().__init__(f"layer {layer!r}: {message}")
            return
        text = str(layer)
        KerasCaffeError.__init__(self, text)
        self.layer = text.split("'")[1] if text.count("'") >= 2 else None


class LayerLimitError(LayerError):
    """A layer over Large Model Support's hard limit (``keras_caffe.lms``)."""


class LayerValueError(LayerError):
    """A layer's input values break one of Caffe's run-time CHECKs (an index
    outside the batch), found when the layer runs
    (``keras_caffe.layers.value_checks``)."""


class WeightsError(CaffeImportError):
    """A weights file is unreadable or does not fit the net."""


class DistributedError(KerasCaffeError):
    """Data-parallel training went wrong: ranks disagree (model shapes,
    arguments), or a worker was lost during a collective."""


class HorovodBuildError(KerasCaffeError):
    """``keras-caffe install-horovod`` cannot build Horovod: a missing tool, a
    TensorFlow outside the tested range, an sdist whose sha256 is not the
    pinned one, a patch that does not match the source (naming the file and
    the edit), or a failed compile (naming the log)."""


class BackendRequirementError(ImportError):
    """``import keras_caffe`` found Keras set to a backend keras-caffe does not
    run on, or that backend's package missing (``keras_caffe.backends``).
    Raised before Keras is imported; the message is one line saying what to
    set or install."""

    def __init__(self, message, found=None):
        self.found = found
        super().__init__(message)


class TensorFlowRequirementError(BackendRequirementError):
    """``import keras_caffe`` on the TensorFlow backend found no TensorFlow, or
    one older than 2.16; or a TensorFlow-only feature (``Solver``, the data
    layers, LMS, Horovod, MirroredStrategy) was used on another backend.

    The message is one line naming what to do (the pip command, or
    ``KERAS_BACKEND=tensorflow``). ``found`` is ``None`` when no TensorFlow
    is installed, else ``(distribution, version)``.
    """


class HorovodUnavailableError(ImportError):
    """Horovod is not installed (or not built for TensorFlow). The message is
    one line saying how to install it (``keras-caffe install-horovod``)."""

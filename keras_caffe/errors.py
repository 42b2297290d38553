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
        super().__init__(f"{owner}: `{argument}` {message}")


class ProtoParseError(KerasCaffeError):
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

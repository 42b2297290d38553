"""The explicit registry of layer converters: one small function per type.

A converter turns one Caffe layer into Keras layers::

    @converter("ReLU")
    def relu(layer, bottoms, ctx):
        '''layer: LayerParameter; bottoms: [Blob]; returns the tops, [Blob].'''
        return [ctx.apply(keras.layers.ReLU(...), bottoms[0])]

Registering a type twice is an error (``DuplicateConverterError``); users
register converters for their own types the same way. The Keras layers a
converter creates are named after the Caffe layer (``layer.name``).
"""

from keras_caffe.errors import KerasCaffeError

_CONVERTERS = {}


class DuplicateConverterError(KerasCaffeError):
    """A layer type already has a converter."""


def converter(*layer_types):
    """Decorator: register the function as the converter of ``layer_types``."""
    if not layer_types or not all(isinstance(t, str) and t for t in layer_types):
        raise TypeError("converter() takes one or more layer type strings")

    def register(fn):
        for layer_type in layer_types:
            if layer_type in _CONVERTERS:
                old = _CONVERTERS[layer_type]
                raise DuplicateConverterError(
                    f"layer type {layer_type!r} already has a converter "
                    f"({old.__module__}.{old.__qualname__}); unregister_converter() it first"
                )
            _CONVERTERS[layer_type] = fn
        return fn

    return register


def unregister_converter(layer_type):
    """Remove and return the converter of ``layer_type``."""
    return _CONVERTERS.pop(layer_type)


def get_converter(layer_type):
    _load_builtin()
    return _CONVERTERS.get(layer_type)


def is_builtin(layer_type):
    """Whether keras-caffe itself converts ``layer_type`` (not a user's
    converter): its converter reads every field the schema gives the type."""
    fn = get_converter(layer_type)
    return fn is not None and fn.__module__.startswith("keras_caffe.")


def registered_types():
    """The supported layer types, sorted."""
    _load_builtin()
    return sorted(_CONVERTERS)


def _load_builtin():
    # Importing the package registers every built-in converter.
    import keras_caffe.importers.converters  # noqa: F401

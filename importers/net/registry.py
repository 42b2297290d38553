"""Converters for users' own layer types, in the registry of layer types.

A converter turns one Caffe layer into Keras layers::

    @converter("MyLayer")
    def my_layer(layer, bottoms, ctx):
        '''layer: LayerParameter; bottoms: [Blob]; returns the tops, [Blob].'''
        return [ctx.apply(keras.layers.ReLU(...), bottoms[0])]

It is registered beside keras-caffe's own units (``keras_caffe.importers.
layer_types``); registering a type twice is an error
(``DuplicateConverterError``). The Keras layers a converter creates are
named after the Caffe layer (``layer.name``).
"""

from keras_caffe.importers.layer_types import base
from keras_caffe.importers.layer_types.base import DuplicateConverterError  # noqa: F401


def converter(*layer_types):
    """Decorator: register the function as the converter of ``layer_types``."""
    if not layer_types or not all(isinstance(t, str) and t for t in layer_types):
        raise TypeError("converter() takes one or more layer type strings")

    def register(fn):
        base.load_builtin()
        base._register(layer_types, base.Converter(fn))
        return fn

    return register


def unregister_converter(layer_type):
    """Remove the converter of ``layer_type``; returns the function (or, for
    a built-in type, its ``LayerType`` unit)."""
    removed = base.remove(layer_type)
    return removed.fn if isinstance(removed, base.Converter) else removed


def get_converter(layer_type):
    """The ``LayerType`` unit of ``layer_type`` (a user's converter is one
    too), or None."""
    return base.unit(layer_type)


def is_builtin(layer_type):
    """Whether keras-caffe itself converts ``layer_type`` (not a user's
    converter): its converter reads every field the schema gives the type."""
    found = base.unit(layer_type)
    return found is not None and found.builtin and found.build is not None


def origin(layer_type):
    """Where ``layer_type`` comes from (BVLC Caffe, a fork, or a user's
    converter), or None for an unknown type."""
    found = base.unit(layer_type)
    return None if found is None else found.origin


def registered_types():
    """The layer types the importer converts, sorted."""
    return sorted(t for t, found in base.units().items() if found.build is not None)

"""Users' own layer types, in the registry of layer types.

A layer type's build function turns one Caffe layer into Keras layers::

    @register_layer_type("MyLayer")
    def my_layer(layer, bottoms, ctx):
        '''layer: LayerParameter; bottoms: [Blob]; returns the tops, [Blob].'''
        return [ctx.apply(keras.layers.ReLU(...), bottoms[0])]

It is registered beside keras-caffe's own units (``keras_caffe.importers.
layer_types``, each a ``LayerType`` class registered with
``layer_types.base.layer_type``); registering a type twice is an error
(``DuplicateLayerTypeError``). The Keras layers a build function creates
are named after the Caffe layer (``layer.name``). Without a shape rule,
``analyze`` cannot size the type; a full ``LayerType`` unit gives one.

``converter`` and ``unregister_converter`` are the names these functions
had before the vocabulary became "layer type": the same functions, kept
for code written against them (as is ``DuplicateConverterError``).
"""

from keras_caffe.errors import DuplicateConverterError, DuplicateLayerTypeError  # noqa: F401
from keras_caffe.importers.layer_types import base


def register_layer_type(*layer_types):
    """Decorator: register the function as the build function of the Caffe
    layer types ``layer_types`` (strings)."""
    if not layer_types or not all(isinstance(t, str) and t for t in layer_types):
        raise TypeError("register_layer_type() takes one or more layer type strings")

    def register(fn):
        base.load_builtin()
        base._register(layer_types, base.FunctionLayerType(fn))
        return fn

    return register


def unregister_layer_type(layer_type):
    """Remove ``layer_type`` from the registry; returns its build function
    (or, for a built-in type, its ``LayerType`` unit)."""
    removed = base.remove(layer_type)
    return removed.fn if isinstance(removed, base.FunctionLayerType) else removed


#: The former names (aliases: the same functions).
converter = register_layer_type
unregister_converter = unregister_layer_type


def get_layer_type(layer_type):
    """The ``LayerType`` unit of ``layer_type`` (a user's build function is
    one too), or None."""
    return base.unit(layer_type)


def is_builtin(layer_type):
    """Whether keras-caffe itself builds ``layer_type`` (not a user's layer
    type): its unit reads every field the schema gives the type."""
    found = base.unit(layer_type)
    return found is not None and found.builtin and found.build is not None


def origin(layer_type):
    """Where ``layer_type`` comes from (BVLC Caffe, a fork, or a user's
    registration), or None for an unknown type."""
    found = base.unit(layer_type)
    return None if found is None else found.origin


def registered_types():
    """The layer types the importer builds, sorted."""
    return sorted(t for t, found in base.units().items() if found.build is not None)

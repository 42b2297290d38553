"""The built-in converters; importing this package registers them all."""

from keras_caffe.importers.converters import (  # noqa: F401
    activations,
    fork_layers,
    losses,
    normalization,
    permute,
    reductions,
    shape,
    simple,
    structure,
)

"""The Caffe layer types keras-caffe knows: one ``LayerType`` unit each
(``base`` says what a unit holds); importing a module registers its units."""

from keras_caffe.importers.layer_types.base import (  # noqa: F401
    BVLC,
    Example,
    LayerType,
    Shapes,
    layer_type,
    unit,
    units,
)

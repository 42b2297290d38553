"""BVLC types that ``analyze`` sizes but the importer does not build, each
with the reason (``analyze_only``); ``import`` lists them as unknown types.

- InfogainLoss (infogain_loss_layer.cpp): its H matrix comes from a
  binaryproto file (``infogain_loss_param.source``) or a third bottom; not
  built yet.
- HDF5Output (hdf5_output_layer.cpp): writes its bottoms to an HDF5 file on
  every forward pass; a Keras model does not write files from inside its
  graph (save the outputs you need from ``model.predict`` instead).
- Parameter (parameter_layer.hpp): its top is its learnable blob, of
  ``parameter_param.shape`` exactly, with no batch axis; every tensor of a
  Keras model has one.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import LayerType, Shapes, layer_type, need_bottoms


@layer_type("InfogainLoss")
class InfogainLoss(LayerType):
    """The infogain loss ``-sum_k H[label, k] log(p_k) / N``: sized, not built."""

    analyze_only = ("its H matrix comes from a binaryproto file or a third bottom, which the "
                    "importer does not read yet")
    build = None

    def shapes(self, layer, bottoms, state):
        if len(bottoms) not in (2, 3):
            raise LayerError(layer.name, f"(InfogainLoss) takes 2 or 3 bottoms, got "
                                         f"{len(bottoms)}")
        # A second top holds the probabilities.
        return Shapes([()] + [tuple(bottoms[0])] * (len(layer.top) > 1))


@layer_type("HDF5Output")
class HDF5Output(LayerType):
    """Writes its bottoms to an HDF5 file: sized (no tops), not built."""

    analyze_only = ("it writes files from inside the net; save the outputs from "
                    "model.predict instead")
    build = None

    def shapes(self, layer, bottoms, state):
        return Shapes([])


@layer_type("Parameter")
class Parameter(LayerType):
    """A learnable blob as a top: sized (top and weight of its shape), not built."""

    analyze_only = ("its top is a learnable blob without a batch axis, and every tensor of a "
                    "Keras model has one; make the blob a weight of the layer that reads it")
    build = None

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 0)
        shape = tuple(int(d) for d in layer.parameter_param.shape.dim)
        if any(d <= 0 for d in shape):
            raise LayerError(layer.name, f"(Parameter) shape dims must be positive, got {shape}")
        return Shapes([shape], [shape])

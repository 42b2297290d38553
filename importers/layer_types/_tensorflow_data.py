"""The data layer types built on ``tf.data``, and their stand-ins on Keras's
other backends.

The modules in ``MODULES`` build their layers' batches with ``tf.data``
(``keras_caffe.importers.data``) and import TensorFlow, which runs on
TensorFlow's backend only. On JAX or PyTorch ``base.load_builtin`` leaves
them unimported and registers a ``StandIn`` for each of their types
instead, with the same origin, so that a net with such a layer imports and
is analyzed as it is on TensorFlow when ``input_shapes`` gives the shapes
of all its tops: the layer becomes Keras Inputs, as a deploy net's (on
TensorFlow too, the source is then not read). Without them, the shapes
would have to be read by the tf.data layer itself: ``TensorFlowRequirementError``
naming the layer, its type and what to do instead.
"""

from keras_caffe.backends import backend_name, is_tensorflow, require_tensorflow_backend
from keras_caffe.errors import TensorFlowRequirementError
from keras_caffe.importers.layer_types._data import DataLayer
from keras_caffe.importers.layer_types.base import BVLC, C3D, SEGNET, _register

#: Module of this package -> {layer type: origin} of the units it registers
#: (tests/importers/net/test_backend_support.py checks it against them on TensorFlow).
MODULES = {
    "data_db": {"Data": BVLC},
    "data_dense_images": {"DenseImageData": SEGNET},
    "data_dummy": {"DummyData": BVLC},
    "data_hdf5": {"HDF5Data": BVLC},
    "data_images": {"ImageData": BVLC},
    "data_memory": {"MemoryData": BVLC},
    "data_video": {"VideoData": C3D},
}


class StandIn(DataLayer):
    """A tf.data data layer type on a backend other than TensorFlow: its tops
    are Keras Inputs of the shapes ``input_shapes`` gives."""

    #: Every top given in ``input_shapes``: ``source_shapes`` is not asked.
    reads_source = True

    def __init__(self, layer_type, origin):
        self.types = (layer_type,)
        self.origin = origin

    def source_shapes(self, layer, net_source):
        tops = ", ".join(repr(top) for top in layer.top)
        raise TensorFlowRequirementError(
            f"layer {layer.name!r} ({layer.type}) finds its tops' shapes through "
            f"keras_caffe.importers.data (tf.data), which needs Keras's TensorFlow backend, "
            f"and the backend is {backend_name()!r}: give the shapes of top(s) {tops} with "
            "input_shapes={top: shape without the batch} to import it as Inputs (as a deploy "
            "net's), or run with KERAS_BACKEND=tensorflow")

    def pipeline(self, layer, ctx):
        require_tensorflow_backend(f"layer {layer.name!r} ({layer.type})'s tf.data pipeline")


def stand_in_for_tensorflow():
    """On a backend other than TensorFlow, register a ``StandIn`` for each
    type of ``MODULES``; the modules ``base.load_builtin`` must leave
    unimported (none on TensorFlow)."""
    if is_tensorflow():
        return set()
    for types in MODULES.values():
        for layer_type, origin in types.items():
            _register((layer_type,), StandIn(layer_type, origin))
    return set(MODULES)

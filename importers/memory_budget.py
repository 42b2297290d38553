"""One memory budget for what an imported net asks for, checked before it is
allocated.

A prototxt can ask for more than the machine has while staying under the
per-blob element limit (``graph.MAX_ELEMENTS``): ``num_output: 1000000000``,
a 30000 x 30000 InnerProduct, a DummyData batch of 10^9. Without a check,
TensorFlow's ``ResourceExhaustedError`` (or the kernel's OOM killer) ends
the import or the first batch. The importer instead keeps, layer by layer,
as the shape rules give the sizes and before the layer's Keras weights
exist:

- the net's weights so far: every weight blob stays allocated, and LMS
  moves activations, never weights, so their sum must fit;
- the layer itself: its inputs, outputs (the batch included) and weights
  are needed at once to compute it, and no LMS plan can split one layer
  (LMS's own hard limit counts twice that, for training's gradients).

Both in float32 bytes, against ``keras_caffe.lms_exec.device_memory()``:
the GPU's memory, or on CPU the smallest of RAM, the cgroup limit and
RLIMIT_DATA / RLIMIT_AS. The whole net's activations may exceed it: that
is what LMS is for, and LMS checks it when it plans.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import count
from keras_caffe.lms_graph import fmt_bytes as fmt

#: Bytes per value: Caffe's blobs and the imported weights are float32.
VALUE_BYTES = 4


class MemoryBudget:
    """The running total of an import's weights and the per-layer check."""

    def __init__(self, limit=None, where=None):
        if limit is None:
            from keras_caffe.lms_exec import device_memory

            limit, where = device_memory()
        self.limit, self.where, self.weights = limit, where, 0

    def check(self, layer, bottom_shapes, shapes):
        """Refuse ``layer`` (its ``Shapes`` from the unit's rule) with a
        ``LayerError`` naming it and the bytes, before it is built."""
        if self.limit is None:
            return
        weights = sum(count(w) for w in shapes.weights) * VALUE_BYTES
        self.weights += weights
        if weights and self.weights > self.limit:
            raise LayerError(layer.name, f"({layer.type}) its weights ({fmt(weights)}) bring the "
                             f"net's weights to {fmt(self.weights)}, more than the "
                             f"{fmt(self.limit)} of {self.where}; refusing to allocate")
        blobs = sum(count(s) for s in (*bottom_shapes, *shapes.tops) if s)
        need = blobs * VALUE_BYTES + weights
        if need > self.limit:
            raise LayerError(layer.name, f"({layer.type}) needs {fmt(need)} at once (inputs and "
                             f"outputs for the batch, and weights), more than the "
                             f"{fmt(self.limit)} of {self.where}; no LMS plan can split one "
                             "layer: refusing to allocate")

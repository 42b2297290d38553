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

Both in float32 bytes, against ``keras_caffe.devices.device_memory()``:
the accelerator's memory as Keras's backend reports it (TensorFlow, JAX or
PyTorch), or on CPU the smallest of RAM, the cgroup limit and
RLIMIT_DATA / RLIMIT_AS. The whole net's activations may exceed it: that
is what LMS is for, and LMS checks it when it plans. An accelerator whose
memory nobody reports leaves the check off, and the import logs one
warning saying so (``UNKNOWN``), once per process.

A data layer's batches are made by its ``tf.data`` pipeline in host memory
(``keras_caffe.importers.data.pipelines``), which holds more than one batch at
once: the batch it is making (``LOAD_COPIES`` batch-sized tensors at the
peak of a load) and the one the net still reads. ``check_pipeline`` refuses
a batch whose pipeline cannot fit in host memory
(``keras_caffe.devices.host_memory``), naming the layer, its tops' shapes
and the bytes: the importer for each layer whose pipeline makes the net's
data (not a deploy net's Input, which the caller feeds), ``net_pipeline``
and ``layer_pipeline`` for all their layers together, before anything is
read or filled. ``reads_ahead`` says whether a pipeline that fits may also
let tf.data's AUTOTUNE make batches in parallel and buffer them ahead: only
where its worst case fits too; otherwise each batch is made when the net
asks for it.
"""

import functools
import logging

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import count, fmt as fmt_shape, unit
from keras_caffe.devices import device_memory, fmt_bytes as fmt, host_memory

#: Bytes per value: Caffe's blobs and the imported weights are float32.
VALUE_BYTES = 4
#: Batch-sized float32 tensors one batch's load holds at its peak: DummyData's
#: sparse gaussian filler holds the values, the mask and their product; a
#: transform step (a crop's or mirror's gather, a mean, a scale) or a layout
#: transpose holds its input and its output, beside the records it read.
LOAD_COPIES = 3
#: The warning an import logs (``keras_caffe.importers``) when the device's
#: memory is unknown; ``{where}`` is ``device_memory()``'s.
UNKNOWN = ("keras-caffe: {where}: import_model's memory budget is off (a layer too large "
           "for the device is not refused before it is allocated)")
LOG = logging.getLogger("keras_caffe.importers")


class MemoryBudget:
    """The running total of an import's weights and the per-layer check."""

    def __init__(self, limit=None, where=None, host=None):
        if limit is None:
            limit, where = device_memory()
            if limit is None:
                _say_unknown(where)
        self.limit, self.where, self.weights = limit, where, 0
        #: ``(bytes or None, where)`` of host memory, for the data pipelines.
        self.host = host if host is not None else host_budget()

    def check(self, layer, bottom_shapes, shapes):
        """Refuse ``layer`` (its ``Shapes`` from the unit's rule) with a
        ``LayerError`` naming it and the bytes, before it is built; a layer
        whose pipeline makes the net's data, also its pipeline."""
        if self.limit is not None:
            self._check_layer(layer, bottom_shapes, shapes)
        found = unit(layer.type)
        if getattr(found, "data_layer", False) and not getattr(found, "net_input", False):
            check_pipeline([(layer, dict(zip(layer.top, shapes.tops)))], *self.host)

    def _check_layer(self, layer, bottom_shapes, shapes):
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


@functools.lru_cache(maxsize=None)
def _say_unknown(where):
    """Log ``UNKNOWN`` for ``where``, the first time only."""
    LOG.warning(UNKNOWN.format(where=where))


def host_budget():
    """``(bytes or None, where)``: the host memory the data pipelines must fit in."""
    return host_memory()


def batch_bytes(shapes):
    """The float32 bytes of one batch of blobs of Caffe ``shapes`` (batch first)."""
    return sum(count(s) for s in shapes if s) * VALUE_BYTES


def pipeline_need(nbytes):
    """Bytes a pipeline making batches of ``nbytes`` one at a time holds at
    once: ``LOAD_COPIES`` batches while it makes one, and the one the net reads."""
    return (LOAD_COPIES + 1) * nbytes


def ram_budget(limit):
    """The bytes tf.data's AUTOTUNE may grow its buffers to (its
    ``options.autotune.ram_budget``): half of ``limit``, as its default is
    half of the RAM (None, its default, where ``limit`` is unknown)."""
    return None if limit is None else limit // 2


def reads_ahead(nbytes, limit, cores):
    """Whether a pipeline of batches of ``nbytes`` may let AUTOTUNE make
    batches in parallel and read ahead: its worst case -- a load at its peak
    on each of the ``cores``, its buffers within ``ram_budget(limit)``, and
    the batch the net reads -- fits in ``limit`` (None: unknown, as before)."""
    return limit is None or (cores * LOAD_COPIES + 1) * nbytes <= limit - ram_budget(limit)


def check_pipeline(layers, limit, where):
    """Refuse a pipeline of data ``layers`` (``[(LayerParameter, {top: Caffe
    shape, batch first})]``, read together) whose batches it cannot make in
    ``limit`` bytes of host memory, with a ``LayerError`` naming the (first)
    layer, the tops' shapes and the bytes, before anything is allocated."""
    tops = [(top, shape) for _, shapes in layers for top, shape in shapes.items() if shape]
    nbytes = batch_bytes([shape for _, shape in tops])
    need = pipeline_need(nbytes)
    if limit is None or need <= limit:
        return
    first = layers[0][0]
    others = ", ".join(repr(layer.name) for layer, _ in layers[1:])
    whose, its = (f"with data layer(s) {others}, read together: a batch of their tops", "their") \
        if others else ("a batch of its tops", "its")
    listed = ", ".join(f"{top!r} {fmt_shape(shape)}" for top, shape in tops)
    raise LayerError(first.name, f"({first.type}) {whose} ({listed}) is {fmt(nbytes)}; {its} "
                                 f"pipeline needs {fmt(need)} at once ({LOAD_COPIES} batches' "
                                 "worth while it makes one, and the one the net reads), more "
                                 f"than the {fmt(limit)} of {where}: refusing to allocate")

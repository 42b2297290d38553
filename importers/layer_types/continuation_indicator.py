"""ContinuationIndicator: the ``cont`` blob of LSTM/RNN nets in the CRNN/LRCN
Caffe ports (src/caffe/layers/continuation_indicator_layer.cpp, e.g.
dlunion/CC4.0 and intel/caffe; ``continuation_indicator_param { time_step
batch_size }``, in CC4.0's src/caffe/proto/caffe.proto).

``Forward_cpu`` writes a (time_step, N) blob, 0 in its first row and 1
elsewhere: every stream starts its sequence at step 0 and continues it.
Without a bottom (the layer as first written, ``ExactNumBottomBlobs() ==
0``) N is ``batch_size``; CC4.0's version also takes one bottom and then N
is that bottom's first axis (``bottom[0]->num()``), whatever ``batch_size``
says. ``LayerSetUp`` requires ``time_step`` and N to be positive.

The bottomless form has no input to hang a Keras layer on: its top is a
constant tensor, which the layers that read it (LSTM, RNN, ...) take in as
a constant of the model (it survives ``to_json`` and ``.keras`` files). A
constant is no Keras tensor, so that top cannot itself be a model output.
"""

from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    LRCN,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.recurrent import ContinuationIndicator as KerasIndicator


def _geometry(layer, bottoms):
    """(time_step, N), as ``LayerSetUp``/``Reshape`` find them."""
    p = layer.continuation_indicator_param
    need_bottoms(layer, bottoms, 0, 1)
    if p.time_step <= 0:
        raise LayerError(layer.name, "(ContinuationIndicator) continuation_indicator_param."
                                     f"time_step must be positive, got {p.time_step}")
    if bottoms:
        shape = tuple(bottoms[0])
        if not shape:
            raise LayerError(layer.name, "(ContinuationIndicator) its bottom must have a first "
                                         f"axis (the batch), got shape {fmt(shape)}")
        return p.time_step, shape[0]
    if p.batch_size <= 0:
        raise LayerError(layer.name, "(ContinuationIndicator) without a bottom needs a positive "
                                     f"continuation_indicator_param.batch_size, got {p.batch_size}")
    return p.time_step, p.batch_size


@layer_type("ContinuationIndicator")
class ContinuationIndicator(LayerType):
    """The (time_step, N) sequence-continuation blob: 0 at step 0, 1 after;
    N is batch_size, or the bottom's first axis when it has one."""

    origin = LRCN
    examples = (
        Example("continuation_indicator_param { time_step: 4 batch_size: 9 }", [(3, 5)]),
        Example("continuation_indicator_param { time_step: 1 }", [(2, 3, 4, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        return Shapes([_geometry(layer, bottoms)])

    def build(self, layer, bottoms, ctx):
        steps, batch = _geometry(layer, ctx.bottom_shapes)
        if not bottoms:
            return [Blob(ops.convert_to_tensor(KerasIndicator.values(steps, batch)))]
        indicator = KerasIndicator(steps, name=ctx.keras_name(layer.name))
        return [Blob(indicator(bottoms[0].tensor))]

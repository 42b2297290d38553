"""LSTMUnit (BVLC: lstm_unit_layer.cpp): the cell step BVLC's LSTM unrolls
into, also written directly in hand-unrolled recurrent nets."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.lstm_unit import LSTMUnit as KerasLSTMUnit


@layer_type("LSTMUnit")
class LSTMUnit(LayerType):
    """Bottoms c_prev (1, N, H), x (1, N, 4H) (gates i, f, o, g), cont (1, N);
    tops c and h, (1, N, H) each (LSTMUnitLayer::Reshape's checks)."""

    examples = (Example("", [(1, 3, 4), (1, 3, 16), (1, 3)], tops=2),)

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 3)
        c, x, cont = (tuple(b) for b in bottoms)
        if len(c) != 3 or c[0] != 1:
            raise LayerError(layer.name, f"(LSTMUnit) bottom 0 (c_prev) must be (1, N, H), got "
                                         f"{fmt(c)}")
        if x != (1, c[1], 4 * c[2]):
            raise LayerError(layer.name, f"(LSTMUnit) bottom 1 (the gates) must be "
                                         f"{fmt((1, c[1], 4 * c[2]))} for c_prev {fmt(c)}, got "
                                         f"{fmt(x)}")
        if cont != (1, c[1]):
            raise LayerError(layer.name, f"(LSTMUnit) bottom 2 (cont) must be {fmt((1, c[1]))}, "
                                         f"got {fmt(cont)}")
        if len(layer.top) != 2:
            raise LayerError(layer.name, "(LSTMUnit) has two tops, c and h")
        return Shapes([c, c], [], 4 * count(c))

    def build(self, layer, bottoms, ctx):
        tensors = [ctx.caffe_order(b, layer).tensor for b in bottoms]
        return [ctx.same_layout(t, ctx.caffe_order(bottoms[0], layer))
                for t in KerasLSTMUnit(name=ctx.keras_name(layer.name))(tensors)]

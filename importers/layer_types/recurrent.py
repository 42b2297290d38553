"""LSTM and RNN (BVLC: src/caffe/layers/recurrent_layer.cpp, lstm_layer.cpp,
lstm_unit_layer.cpp, rnn_layer.cpp; include/caffe/layers/recurrent_layer.hpp).

Bottoms, in Caffe's order: x (T, N, ...), cont (T, N), optionally x_static
(N, ...), and with ``recurrent_param { expose_hidden: true }`` h_0 (and c_0
for LSTM), each (1, N, num_output). Tops: the output (T, N, num_output) and,
with ``expose_hidden``, h_T (and c_T), (1, N, num_output). A static input is
present when there is one bottom more than the minimum
(``RecurrentLayer::LayerSetUp``: ``bottom.size() > 2 + num_hidden_exposed``).

The learnable blobs are those of the unrolled net in its layer order
(``FillUnrolledNet``): LSTM W_xc (4H, D), b_c (4H,), [W_xc_static (4H, S)],
W_hc (4H, H); RNN W_xh (H, D), b_h (H,), [W_xh_static (H, S)], W_hh (H, H),
W_ho (H, H), b_o (H,), where D flattens x's axes after the second (the
unrolled InnerProduct over axis 2) and S x_static's after the first (axis
1). ``weight_filler`` fills the matrices, ``bias_filler`` the biases.
The Keras layers are ``keras_caffe.layers.recurrent.LSTM`` / ``RNN``.
"""

import math

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import Example, LayerType, Shapes, fmt, layer_type
from keras_caffe.initializers import from_filler
from keras_caffe.layers import recurrent


class _Recurrent(LayerType):
    """The checks, shapes and construction LSTM and RNN share; subclasses
    name their Keras layer, state blobs and blob layout."""

    keras_class = None
    #: The recurrent state blobs: ``expose_hidden``'s bottoms after the
    #: inputs and tops after the output (``RecurrentInputBlobNames``).
    states = ("h_0",)
    #: Tops with expose_hidden (``OutputBlobNames`` + ``RecurrentOutputBlobNames``).
    top_names = ("h", "h_T")

    def _blobs(self, size, features, static):
        """[(Caffe shape, is a bias)] in the unrolled net's parameter order."""
        raise NotImplementedError

    def _macs(self, steps, streams, size, features, static):
        raise NotImplementedError

    def _geometry(self, layer, bottoms):
        """``RecurrentLayer::LayerSetUp``/``Reshape``'s checks, and those of
        the unrolled net's InnerProducts: (T, N, H, D, S or None)."""
        p = layer.recurrent_param
        kind = layer.type
        if p.num_output <= 0:
            raise LayerError(layer.name, f"({kind}) recurrent_param.num_output must be positive, "
                                         f"got {p.num_output}")
        exposed = len(self.states) if p.expose_hidden else 0
        low = 2 + exposed
        if not low <= len(bottoms) <= low + 1:
            names = ", ".join(("x", "cont", "[x_static]") + self.states[:exposed])
            hidden = "with" if p.expose_hidden else "without"
            raise LayerError(layer.name, f"({kind}) {hidden} expose_hidden takes {low} or "
                                         f"{low + 1} bottoms ({names}), got {len(bottoms)}")
        if len(layer.top) != 1 + exposed:
            hidden = "with" if p.expose_hidden else "without"
            raise LayerError(layer.name, f"({kind}) {hidden} expose_hidden has {1 + exposed} "
                                         f"top(s) ({', '.join(self.top_names[:1 + exposed])}), "
                                         f"got {len(layer.top)}")
        x = tuple(bottoms[0])
        if len(x) < 2:
            raise LayerError(layer.name, f"({kind}) bottom x must have at least 2 axes "
                                         f"(T, N, ...), got shape {fmt(x)}")
        if len(x) < 3:
            raise LayerError(layer.name, f"({kind}) bottom x {fmt(x)} has no axis after "
                                         "(T, N): the input InnerProduct is over axis 2")
        steps, streams = x[:2]
        if tuple(bottoms[1]) != (steps, streams):
            raise LayerError(layer.name, f"({kind}) bottom cont must have shape (T, N) = "
                                         f"{fmt((steps, streams))}, got {fmt(bottoms[1])}")
        static = None
        if len(bottoms) > low:
            shape = tuple(bottoms[2])
            if len(shape) < 2 or shape[0] != streams:
                raise LayerError(layer.name, f"({kind}) bottom x_static must have shape "
                                             f"(N, ...) with N = {streams} and at least 2 axes "
                                             f"(its InnerProduct is over axis 1), got {fmt(shape)}")
            static = math.prod(shape[1:])
        want = (1, streams, p.num_output)
        for name, shape in zip(self.states[:exposed], bottoms[len(bottoms) - exposed:]):
            if tuple(shape) != want:
                raise LayerError(layer.name, f"({kind}) bottom {name} must have shape "
                                             f"(1, N, num_output) = {fmt(want)}, got {fmt(shape)}")
        return steps, streams, p.num_output, math.prod(x[2:]), static

    def shapes(self, layer, bottoms, state):
        steps, streams, size, features, static = self._geometry(layer, bottoms)
        tops = [(steps, streams, size)] + [(1, streams, size)] * (len(layer.top) - 1)
        weights = [shape for shape, _ in self._blobs(size, features, static)]
        return Shapes(tops, weights, self._macs(steps, streams, size, features, static))

    def build(self, layer, bottoms, ctx):
        p = layer.recurrent_param
        steps, streams, size, features, static = self._geometry(layer, ctx.bottom_shapes)
        initializers = [from_filler(p.bias_filler if bias else p.weight_filler, shape)
                        for shape, bias in self._blobs(size, features, static)]
        keras_layer = self.keras_class(
            size, static_input=static is not None, expose_hidden=p.expose_hidden,
            blob_initializers=initializers, name=ctx.keras_name(layer.name), caffe_name=layer.name)
        inputs = [ctx.caffe_order(b, layer).tensor for b in bottoms]
        outputs = ctx.apply(keras_layer, inputs)
        outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        return [Blob(t) for t in outputs]


@layer_type("LSTM")
class LSTM(_Recurrent):
    """BVLC's LSTM: x, cont, [x_static], [h_0, c_0 with expose_hidden]; top
    h (T, N, num_output), [h_T, c_T]; blobs W_xc, b_c, [W_xc_static], W_hc
    with gates i, f, o, g; the hidden state is reset where cont is 0."""

    keras_class = recurrent.LSTM
    states = ("h_0", "c_0")
    top_names = ("h", "h_T", "c_T")
    examples = (
        Example("recurrent_param { num_output: 3 weight_filler { type: 'uniform' min: -0.1 "
                "max: 0.1 } }", [(4, 2, 5), (4, 2)]),
        Example("recurrent_param { num_output: 2 expose_hidden: true }",
                [(3, 2, 2, 2), (3, 2), (2, 4), (1, 2, 2), (1, 2, 2)], tops=3),
    )

    def _blobs(self, size, features, static):
        rows = 4 * size
        blobs = [((rows, features), False), ((rows,), True)]
        if static is not None:
            blobs.append(((rows, static), False))
        return blobs + [((rows, size), False)]

    def _macs(self, steps, streams, size, features, static):
        rows = 4 * size
        return (steps * streams * rows * (features + size)
                + (streams * rows * static if static is not None else 0))


@layer_type("RNN")
class RNN(_Recurrent):
    """BVLC's RNN: x, cont, [x_static], [h_0 with expose_hidden]; top
    o = tanh(W_ho h + b_o) (T, N, num_output), [h_T]; blobs W_xh, b_h,
    [W_xh_static], W_hh, W_ho, b_o; the hidden state is reset where cont is 0."""

    keras_class = recurrent.RNN
    states = ("h_0",)
    top_names = ("o", "h_T")
    examples = (
        Example("recurrent_param { num_output: 3 weight_filler { type: 'gaussian' std: 0.1 } }",
                [(4, 2, 5), (4, 2)]),
        Example("recurrent_param { num_output: 2 expose_hidden: true }",
                [(3, 2, 4), (3, 2), (2, 3), (1, 2, 2)], tops=2),
    )

    def _blobs(self, size, features, static):
        blobs = [((size, features), False), ((size,), True)]
        if static is not None:
            blobs.append(((size, static), False))
        return blobs + [((size, size), False), ((size, size), False), ((size,), True)]

    def _macs(self, steps, streams, size, features, static):
        return (steps * streams * size * (features + 2 * size)
                + (streams * size * static if static is not None else 0))

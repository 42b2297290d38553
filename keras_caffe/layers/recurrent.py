"""Caffe's recurrent layers over its time-major T x N blobs: BVLC's LSTM and
RNN (src/caffe/layers/recurrent_layer.cpp, lstm_layer.cpp,
lstm_unit_layer.cpp, rnn_layer.cpp) and the recurrent forks'
ContinuationIndicator (the ``cont`` blob they read).

Caffe unrolls LSTM and RNN into a net of InnerProduct, Scale, Eltwise and
LSTMUnit layers (``FillUnrolledNet``); here one Keras layer steps over the
time axis (``keras.ops.scan``) with the same blobs, in the same order and
shapes, and the same arithmetic:

- the input projection ``W_x x_t + b`` of every step is computed first (the
  unrolled net's ``x_transform``, an InnerProduct over axis 2, so x's axes
  after the second are flattened); a static input adds
  ``W_x_static x_static`` (x_static flattened after its first axis) to
  every step;
- at step t the previous hidden state is multiplied by ``cont_t`` (0 starts
  a new sequence for that stream, 1 continues it; Caffe's ``h_conted``);
- LSTM (gates i, f, o, g in that order along the 4H axis): ``c_t = cont_t *
  sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)``, ``h_t = sigmoid(o) *
  tanh(c_t)``; the top is h;
- RNN: ``h_t = tanh(W_hh (cont_t h_{t-1}) + W_xh x_t + b_h)``, the top is
  ``o_t = tanh(W_ho h_t + b_o)``.

Without ``expose_hidden`` the first step starts from zeros: Caffe's state
after ``Reset()`` (Caffe also carries h_T, c_T over to the next forward pass
of the same net, which a stateless Keras model cannot; a sequence that
starts with ``cont = 0``, as Caffe's nets feed it, does not read them). With
``expose_hidden`` the inputs h_0 (and c_0) of shape (1, N, num_output) start
the steps and h_T (and c_T) are extra outputs. As in Caffe, no gradient
flows into cont, h_0 or c_0, nor from the h_T / c_T tops (Caffe shares only
their data with the unrolled net, never their diffs).
"""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import CaffeBlobs, register


class _Recurrent(CaffeBlobs, keras.layers.Layer):
    """What LSTM and RNN share: the inputs ``[x, cont, (x_static), (h_0,
    (c_0))]`` (Caffe's bottom order), the blobs in Caffe's shapes (no layout
    conversion), the scan over the time axis (axis 0)."""

    #: Rows of the input projection per output (LSTM: 4 gates).
    gates = 1
    #: The recurrent state blobs (``expose_hidden``'s extra inputs and outputs).
    states = ("h",)

    def __init__(self, num_output, static_input=False, expose_hidden=False,
                 blob_initializers=None, **kwargs):
        super().__init__(**kwargs)
        self.num_output = int(num_output)
        self.static_input = bool(static_input)
        self.expose_hidden = bool(expose_hidden)
        count = len(self._blob_specs(1, 1))
        initializers = list(blob_initializers or [])
        if initializers and len(initializers) != count:
            raise ValueError(f"{type(self).__name__} needs {count} blob initializers, got "
                             f"{len(initializers)}")
        self.blob_initializers = [keras.initializers.get(i) for i in initializers] or [
            keras.initializers.get("glorot_uniform" if len(shape) == 2 else "zeros")
            for _, shape in self._blob_specs(1, 1)]

    # -- blobs ------------------------------------------------------------

    def _blob_specs(self, features, static_features):
        """[(name, Caffe shape)] in Caffe's order (``FillUnrolledNet``'s
        ``param { name }``s in layer order)."""
        raise NotImplementedError

    def build(self, input_shapes):
        x_shape = input_shapes[0]
        features = math.prod(int(d) for d in x_shape[2:])
        static = (math.prod(int(d) for d in input_shapes[2][1:]) if self.static_input else 0)
        self._blobs = []
        for (name, shape), init in zip(self._blob_specs(features, static),
                                       self.blob_initializers):
            self._blobs.append(self.add_weight(name=name, shape=shape, initializer=init))

    def caffe_variables(self):
        return list(self._blobs)

    # -- forward ----------------------------------------------------------

    def _split(self, inputs):
        inputs = list(inputs)
        x, cont = inputs[0], inputs[1]
        static = inputs[2] if self.static_input else None
        hidden = inputs[2 + self.static_input:] if self.expose_hidden else []
        return x, cont, static, hidden

    def call(self, inputs):
        x, cont, static, hidden = self._split(inputs)
        blobs = [self.blob(b) for b in self._blobs]
        n = x.shape[1]
        x = ops.reshape(x, (-1, n, blobs[0].shape[1]))
        dtype = x.dtype
        projected = ops.matmul(x, ops.transpose(ops.cast(blobs[0], dtype))) + blobs[1]
        rest = blobs[2:]
        if self.static_input:
            flat = ops.reshape(ops.cast(static, dtype), (n, -1))
            projected = projected + ops.matmul(flat, ops.transpose(rest[0]))[None]
            rest = rest[1:]
        cont = ops.stop_gradient(ops.cast(ops.reshape(cont, (-1, n)), dtype))
        if hidden:
            start = tuple(ops.stop_gradient(ops.reshape(ops.cast(h, dtype), (n, self.num_output)))
                          for h in hidden)
        else:
            start = tuple(ops.zeros((n, self.num_output), dtype) for _ in self.states)
        # Keras's scan emits per step a structure like its carry: the states.
        final, steps = ops.scan(self._stepper(rest), start, (projected, cont))
        top = self._top(steps[0], rest)
        if not self.expose_hidden:
            return top
        return [top] + [ops.stop_gradient(state)[None] for state in final]

    def _stepper(self, blobs):
        """The step function ``(state, (projected x_t, cont_t)) -> (state, state)``."""
        raise NotImplementedError

    def _top(self, hidden, blobs):
        """The output from the hidden states of all steps (T, N, H)."""
        return hidden

    def compute_output_shape(self, input_shapes):
        x_shape = input_shapes[0]
        top = (x_shape[0], x_shape[1], self.num_output)
        if not self.expose_hidden:
            return top
        return [top] + [(1, x_shape[1], self.num_output) for _ in self.states]

    def get_config(self):
        config = super().get_config()
        config.update(num_output=self.num_output, static_input=self.static_input,
                      expose_hidden=self.expose_hidden,
                      blob_initializers=[keras.initializers.serialize(i)
                                         for i in self.blob_initializers])
        return config


@register
class LSTM(_Recurrent):
    """BVLC Caffe's LSTM (lstm_layer.cpp, lstm_unit_layer.cpp): blobs W_xc
    (4H, D), b_c (4H,), [W_xc_static (4H, S)], W_hc (4H, H); gates i, f, o,
    g along the 4H axis; tops h, [h_T, c_T]."""

    caffe_type = "LSTM"
    gates = 4
    states = ("h", "c")

    def _blob_specs(self, features, static_features):
        rows = 4 * self.num_output
        specs = [("W_xc", (rows, features)), ("b_c", (rows,))]
        if self.static_input:
            specs.append(("W_xc_static", (rows, static_features)))
        return specs + [("W_hc", (rows, self.num_output))]

    def _stepper(self, blobs):
        w_hc = ops.transpose(blobs[0])
        size = self.num_output

        def step(state, inputs):
            h, c = state
            projected, cont = inputs
            cont = cont[:, None]
            gate = projected + ops.matmul(cont * h, w_hc)
            i = ops.sigmoid(gate[:, :size])
            f = cont * ops.sigmoid(gate[:, size:2 * size])
            o = ops.sigmoid(gate[:, 2 * size:3 * size])
            g = ops.tanh(gate[:, 3 * size:])
            c = f * c + i * g
            h = o * ops.tanh(c)
            return (h, c), (h, c)

        return step


@register
class RNN(_Recurrent):
    """BVLC Caffe's RNN (rnn_layer.cpp): blobs W_xh (H, D), b_h (H,),
    [W_xh_static (H, S)], W_hh (H, H), W_ho (H, H), b_o (H,); tanh hidden
    state, top o = tanh(W_ho h + b_o), [h_T]."""

    caffe_type = "RNN"

    def _blob_specs(self, features, static_features):
        size = self.num_output
        specs = [("W_xh", (size, features)), ("b_h", (size,))]
        if self.static_input:
            specs.append(("W_xh_static", (size, static_features)))
        return specs + [("W_hh", (size, size)), ("W_ho", (size, size)), ("b_o", (size,))]

    def _stepper(self, blobs):
        w_hh = ops.transpose(blobs[0])

        def step(state, inputs):
            (h,) = state
            projected, cont = inputs
            h = ops.tanh(projected + ops.matmul(cont[:, None] * h, w_hh))
            return (h,), (h,)

        return step

    def _top(self, hidden, blobs):
        w_ho, b_o = blobs[1], blobs[2]
        return ops.tanh(ops.matmul(hidden, ops.transpose(w_ho)) + b_o)


@register
class ContinuationIndicator(keras.layers.Layer):
    """The recurrent forks' ContinuationIndicator
    (src/caffe/layers/continuation_indicator_layer.cpp in CRNN/LRCN ports,
    e.g. dlunion/CC4.0): a (time_step, N) blob of 0 in its first row and 1
    elsewhere (every stream starts a sequence at step 0). Called on a
    tensor, N is that tensor's first axis (CC4.0's ``bottom[0]->num()``);
    ``constant(time_step, batch_size)`` is the bottomless form."""

    def __init__(self, time_step, **kwargs):
        super().__init__(**kwargs)
        self.time_step = int(time_step)

    def call(self, x):
        n = ops.shape(x)[0]
        first = ops.zeros((1, n), self.compute_dtype)
        later = ops.ones((self.time_step - 1, n), self.compute_dtype)
        return ops.concatenate([first, later], axis=0)

    def compute_output_shape(self, input_shape):
        return (self.time_step, input_shape[0])

    @staticmethod
    def values(time_step, batch_size):
        """The indicator as a numpy array (the bottomless form's values)."""
        out = np.ones((int(time_step), int(batch_size)), np.float32)
        out[0] = 0
        return out

    def get_config(self):
        config = super().get_config()
        config.update(time_step=self.time_step)
        return config

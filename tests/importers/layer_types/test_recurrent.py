"""BVLC Caffe's LSTM and RNN against numpy ports of their unrolled nets.

The references follow ``LSTMLayer::FillUnrolledNet`` (src/caffe/layers/
lstm_layer.cpp) with ``LSTMUnitLayer::Forward_cpu`` (lstm_unit_layer.cpp)
and ``RNNLayer::FillUnrolledNet`` (rnn_layer.cpp), run as
``RecurrentLayer::Forward_cpu`` (recurrent_layer.cpp) runs them: the input
InnerProduct over all steps (``x_transform``), the static input's
InnerProduct added to every step, then per step ``h_conted = cont_t *
h_{t-1}`` (a Scale over axis 0), the recurrent InnerProduct, the Eltwise sum
and the LSTMUnit (gates i, f, o, g) or the TanH neurons.
"""

import re

import keras
import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, load_into
from keras_caffe.analysis import analyze
from keras_caffe.importers.net.blobs import caffe_layers
from support import DATA_FORMATS, NETS, run_layers, to_keras_layout
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

DATA = NETS


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def caffe_tanh(x):
    """lstm_unit_layer.cpp's tanh: 2 sigmoid(2x) - 1."""
    return 2.0 * sigmoid(2.0 * x) - 1.0


def _projections(x, cont, w_x, b, static, w_static):
    """x_transform (InnerProduct over axis 2, with bias) and the static
    input's InnerProduct over axis 1 (no bias), added to every step."""
    steps, streams = cont.shape
    projected = x.reshape(steps, streams, -1).astype(np.float64) @ w_x.T + b
    if static is not None:
        projected = projected + (static.reshape(streams, -1) @ w_static.T)[None]
    return projected


def lstm_reference(x, cont, blobs, static=None, h0=None, c0=None):
    """The unrolled LSTM: blobs W_xc, b_c, [W_xc_static], W_hc. Returns
    (h (T, N, H), h_T (1, N, H), c_T (1, N, H))."""
    blobs = [np.asarray(b, np.float64) for b in blobs]
    w_static = blobs[2] if static is not None else None
    w_hc = blobs[-1]
    size = w_hc.shape[1]
    projected = _projections(x, cont, blobs[0], blobs[1], static, w_static)
    streams = cont.shape[1]
    h = np.zeros((streams, size)) if h0 is None else np.asarray(h0, np.float64)[0]
    c = np.zeros((streams, size)) if c0 is None else np.asarray(c0, np.float64)[0]
    out = []
    for t in range(cont.shape[0]):
        cont_t = cont[t].astype(np.float64)
        h_conted = cont_t[:, None] * h                    # h_conted_{t-1}
        gate = h_conted @ w_hc.T + projected[t]           # gate_input_t
        # LSTMUnitLayer::Forward_cpu, per stream n and hidden unit d
        i = sigmoid(gate[:, :size])
        f = np.where(cont_t[:, None] == 0, 0.0, cont_t[:, None] * sigmoid(gate[:, size:2 * size]))
        o = sigmoid(gate[:, 2 * size:3 * size])
        g = caffe_tanh(gate[:, 3 * size:])
        c = f * c + i * g
        h = o * caffe_tanh(c)
        out.append(h)
    return np.stack(out), h[None], c[None]


def rnn_reference(x, cont, blobs, static=None, h0=None):
    """The unrolled RNN: blobs W_xh, b_h, [W_xh_static], W_hh, W_ho, b_o.
    Returns (o (T, N, H), h_T (1, N, H))."""
    blobs = [np.asarray(b, np.float64) for b in blobs]
    w_static = blobs[2] if static is not None else None
    w_hh, w_ho, b_o = blobs[-3:]
    size = w_hh.shape[0]
    projected = _projections(x, cont, blobs[0], blobs[1], static, w_static)
    h = np.zeros((cont.shape[1], size)) if h0 is None else np.asarray(h0, np.float64)[0]
    out = []
    for t in range(cont.shape[0]):
        h_conted = cont[t].astype(np.float64)[:, None] * h
        h = np.tanh(h_conted @ w_hh.T + projected[t])     # h_neuron_t
        out.append(np.tanh(h @ w_ho.T + b_o))             # o_neuron_t
    return np.stack(out), h[None]


def lstm_blobs(rng, size, features, static=None, scale=0.5):
    rows = 4 * size
    blobs = [rng.standard_normal((rows, features)), rng.standard_normal(rows)]
    if static is not None:
        blobs.append(rng.standard_normal((rows, static)))
    blobs.append(rng.standard_normal((rows, size)))
    return [(scale * b).astype(np.float32) for b in blobs]


def rnn_blobs(rng, size, features, static=None, scale=0.5):
    blobs = [rng.standard_normal((size, features)), rng.standard_normal(size)]
    if static is not None:
        blobs.append(rng.standard_normal((size, static)))
    blobs += [rng.standard_normal((size, size)), rng.standard_normal((size, size)),
              rng.standard_normal(size)]
    return [(scale * b).astype(np.float32) for b in blobs]


def recurrent_layer(kind, bottoms, tops, params):
    return (f'layer {{ name: "rec" type: "{kind}" '
            + "".join(f'bottom: "{b}" ' for b in bottoms)
            + "".join(f'top: "{t}" ' for t in tops)
            + f"recurrent_param {{ {params} }} }}\n")


# Per-sample resets: stream 0 restarts at step 2, stream 1 at steps 1 and 3,
# stream 2 never restarts after step 0; a non-binary value scales the state.
RESETS = np.array([[0, 0, 0], [1, 0, 1], [0, 1, 1], [1, 0, 1], [1, 1, 0.5]], np.float32)

CASES = {
    "plain": dict(steps=4, streams=2, x_tail=(3,), static=None,
                  cont=np.array([[0, 0], [1, 1], [1, 1], [1, 1]], np.float32)),
    "resets": dict(steps=5, streams=3, x_tail=(2, 2), static=None, cont=RESETS),
    "static": dict(steps=4, streams=2, x_tail=(3,), static=(2, 3),
                   cont=np.array([[0, 0], [1, 1], [0, 1], [1, 1]], np.float32)),
    "one_step": dict(steps=1, streams=3, x_tail=(4,), static=None,
                     cont=np.array([[0, 1, 0]], np.float32)),
}


def _case_inputs(case, rng):
    x = rng.standard_normal((case["steps"], case["streams"], *case["x_tail"])).astype(np.float32)
    inputs = {"x": x, "cont": case["cont"]}
    if case["static"] is not None:
        inputs["x_static"] = rng.standard_normal(
            (case["streams"], *case["static"])).astype(np.float32)
    return inputs


@pytest.mark.layer_type("LSTM")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_lstm_matches_the_unrolled_net(data_format, name):
    case = CASES[name]
    rng = np.random.default_rng(len(name))
    inputs = _case_inputs(case, rng)
    features = int(np.prod(case["x_tail"]))
    static = int(np.prod(case["static"])) if case["static"] else None
    blobs = lstm_blobs(rng, 3, features, static)
    text = recurrent_layer("LSTM", list(inputs), ["h"], "num_output: 3")
    got = run_layers(text, inputs, {"rec": blobs}, data_format)["h"]
    want, _, _ = lstm_reference(inputs["x"], inputs["cont"], blobs, inputs.get("x_static"))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("RNN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_rnn_matches_the_unrolled_net(data_format, name):
    case = CASES[name]
    rng = np.random.default_rng(10 + len(name))
    inputs = _case_inputs(case, rng)
    features = int(np.prod(case["x_tail"]))
    static = int(np.prod(case["static"])) if case["static"] else None
    blobs = rnn_blobs(rng, 4, features, static)
    text = recurrent_layer("RNN", list(inputs), ["o"], "num_output: 4")
    got = run_layers(text, inputs, {"rec": blobs}, data_format)["o"]
    want, _ = rnn_reference(inputs["x"], inputs["cont"], blobs, inputs.get("x_static"))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("LSTM")
def test_a_reset_starts_the_stream_afresh():
    """After cont = 0 at step t a stream's outputs are those of a sequence
    that starts at t: what came before does not leak through h or c."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 2, 3)).astype(np.float32)
    cont = np.array([[0, 0], [1, 1], [1, 0], [1, 1], [1, 1]], np.float32)
    blobs = lstm_blobs(rng, 2, 3)
    text = recurrent_layer("LSTM", ["x", "cont"], ["h"], "num_output: 2")
    full = run_layers(text, {"x": x, "cont": cont}, {"rec": blobs}, "channels_first")["h"]
    tail = run_layers(text, {"x": x[2:], "cont": cont[2:]}, {"rec": blobs}, "channels_first")["h"]
    np.testing.assert_allclose(full[2:, 1], tail[:, 1], rtol=1e-6, atol=1e-6)
    assert not np.allclose(full[2:, 0], tail[:, 0], atol=1e-3)  # stream 0 continues


@pytest.mark.layer_type("LSTM")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("with_static", [False, True])
def test_lstm_expose_hidden(data_format, with_static):
    """h_0, c_0 start the steps (after x_static when there is one); the tops
    h_T and c_T are the last step's states."""
    rng = np.random.default_rng(4)
    steps, streams, size = 3, 2, 3
    inputs = {"x": rng.standard_normal((steps, streams, 4)).astype(np.float32),
              "cont": np.array([[1, 0], [1, 1], [0, 1]], np.float32)}
    if with_static:
        inputs["x_static"] = rng.standard_normal((streams, 5)).astype(np.float32)
    inputs["h0"] = rng.standard_normal((1, streams, size)).astype(np.float32)
    inputs["c0"] = rng.standard_normal((1, streams, size)).astype(np.float32)
    blobs = lstm_blobs(rng, size, 4, 5 if with_static else None)
    text = recurrent_layer("LSTM", list(inputs), ["h", "h_T", "c_T"],
                           f"num_output: {size} expose_hidden: true")
    got = run_layers(text, inputs, {"rec": blobs}, data_format)
    h, h_t, c_t = lstm_reference(inputs["x"], inputs["cont"], blobs, inputs.get("x_static"),
                                 inputs["h0"], inputs["c0"])
    for name, want in (("h", h), ("h_T", h_t), ("c_T", c_t)):
        assert got[name].shape == want.shape, name
        np.testing.assert_allclose(got[name], want, rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.layer_type("RNN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("with_static", [False, True])
def test_rnn_expose_hidden(data_format, with_static):
    rng = np.random.default_rng(5)
    steps, streams, size = 4, 2, 2
    inputs = {"x": rng.standard_normal((steps, streams, 3)).astype(np.float32),
              "cont": np.array([[1, 1], [1, 0], [0, 1], [1, 1]], np.float32)}
    if with_static:
        inputs["x_static"] = rng.standard_normal((streams, 2, 2)).astype(np.float32)
    inputs["h0"] = rng.standard_normal((1, streams, size)).astype(np.float32)
    blobs = rnn_blobs(rng, size, 3, 4 if with_static else None)
    text = recurrent_layer("RNN", list(inputs), ["o", "h_T"],
                           f"num_output: {size} expose_hidden: true")
    got = run_layers(text, inputs, {"rec": blobs}, data_format)
    o, h_t = rnn_reference(inputs["x"], inputs["cont"], blobs, inputs.get("x_static"),
                           inputs["h0"])
    np.testing.assert_allclose(got["o"], o, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["h_T"], h_t, rtol=1e-5, atol=1e-5)


def _input_layer(shapes):
    tops = "".join(f'top: "{name}" ' for name in shapes)
    dims = "".join("shape { " + " ".join(f"dim: {d}" for d in s) + " } " for s in shapes.values())
    return f'layer {{ name: "in" type: "Input" {tops}input_param {{ {dims}}} }}\n'


@pytest.mark.layer_type("LSTM")
@pytest.mark.layer_type("RNN")
@pytest.mark.parametrize("kind, blob_shapes, macs", [
    # T=5, N=2, D=3*2, S=4, H=3: x_transform, the static InnerProduct once,
    # and per step the recurrent InnerProduct (RNN: and W_ho).
    ("LSTM", [(12, 6), (12,), (12, 4), (12, 3)], 5 * 2 * 12 * (6 + 3) + 2 * 12 * 4),
    ("RNN", [(3, 6), (3,), (3, 4), (3, 3), (3, 3), (3,)], 5 * 2 * 3 * (6 + 3 + 3) + 2 * 3 * 4),
])
def test_blobs_shapes_and_cost(kind, blob_shapes, macs):
    text = (_input_layer({"x": (5, 2, 3, 2), "cont": (5, 2), "s": (2, 4)})
            + recurrent_layer(kind, ["x", "cont", "s"], ["y"], "num_output: 3"))
    model = import_model(text, data_format="channels_first")
    assert caffe_layers(model)["rec"].caffe_blob_shapes() == blob_shapes
    row = analyze(text, batch=None).layers[-1]
    assert list(row.weight_shapes) == blob_shapes
    assert row.tops == (("y", (5, 2, 3)),)
    assert row.forward_flops == 2 * macs


@pytest.mark.layer_type("LSTM")
def test_fillers_fill_the_blobs():
    """weight_filler fills W_xc and W_hc, bias_filler b_c (each with its own
    blob's fan-in, as the unrolled InnerProducts do)."""
    text = (_input_layer({"x": (2, 1, 4), "cont": (2, 1)})
            + recurrent_layer("LSTM", ["x", "cont"], ["h"],
                              "num_output: 2 weight_filler { type: 'constant' value: 0.25 } "
                              "bias_filler { type: 'constant' value: -1 }"))
    blobs = caffe_layers(import_model(text))["rec"].caffe_blobs()
    assert [b.shape for b in blobs] == [(8, 4), (8,), (8, 2)]
    assert np.all(blobs[0] == 0.25) and np.all(blobs[1] == -1) and np.all(blobs[2] == 0.25)


def _gradient_case(kind):
    rng = np.random.default_rng(6)
    steps, streams, size = 3, 2, 2
    inputs = {"x": rng.standard_normal((steps, streams, 3)).astype(np.float32),
              "cont": np.array([[0, 0], [1, 0], [1, 1]], np.float32),
              "x_static": rng.standard_normal((streams, 2)).astype(np.float32)}
    make = lstm_blobs if kind == "LSTM" else rnn_blobs
    blobs = make(rng, size, 3, 2)
    weights = rng.standard_normal((steps, streams, size))
    return inputs, blobs, weights


@pytest.mark.layer_type("LSTM")
@pytest.mark.layer_type("RNN")
@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_weight_gradients_match_finite_differences(kind):
    """d sum(w * top) / d blob from Keras against central differences of the
    float64 numpy reference, for every entry of every blob."""
    inputs, blobs, weights = _gradient_case(kind)
    text = _input_layer({k: v.shape for k, v in inputs.items()}) + recurrent_layer(
        kind, list(inputs), ["y"], "num_output: 2")
    model = import_model(text, data_format="channels_first")
    load_into(model, {"rec": blobs})
    variables = caffe_layers(model)["rec"].caffe_variables()
    top_diff = np.asarray(weights, np.float32)
    _, got = gradients(lambda *feeds: weighted_sum(model(list(feeds)), top_diff),
                       list(inputs.values()), variables)

    reference = lstm_reference if kind == "LSTM" else rnn_reference

    def objective(values):
        return float(np.sum(reference(inputs["x"], inputs["cont"], values,
                                      inputs["x_static"])[0] * weights))

    eps = 1e-6
    for i, blob in enumerate(blobs):
        want = np.zeros(blob.shape)
        for index in np.ndindex(blob.shape):
            plus = [np.asarray(b, np.float64).copy() for b in blobs]
            minus = [np.asarray(b, np.float64).copy() for b in blobs]
            plus[i][index] += eps
            minus[i][index] -= eps
            want[index] = (objective(plus) - objective(minus)) / (2 * eps)
        np.testing.assert_allclose(got[i], want, rtol=1e-3, atol=1e-4, err_msg=f"blob {i}")


@pytest.mark.layer_type("LSTM")
def test_no_gradient_into_cont_and_the_initial_state():
    """Caffe backpropagates into x and x_static only: cont is refused
    (``Cannot backpropagate to sequence indicators``) and h_0 / c_0 share
    only their data with the unrolled net."""
    rng = np.random.default_rng(7)
    inputs = {"x": rng.standard_normal((2, 2, 3)).astype(np.float32),
              "cont": np.ones((2, 2), np.float32),
              "h0": rng.standard_normal((1, 2, 2)).astype(np.float32),
              "c0": rng.standard_normal((1, 2, 2)).astype(np.float32)}
    text = _input_layer({k: v.shape for k, v in inputs.items()}) + recurrent_layer(
        "LSTM", list(inputs), ["h", "h_T", "c_T"], "num_output: 2 expose_hidden: true")
    model = import_model(text, data_format="channels_first")
    load_into(model, {"rec": lstm_blobs(rng, 2, 3)})
    grads, _ = gradients(lambda *feeds: sum(ops.sum(v) for v in model(list(feeds)).values()),
                         list(inputs.values()))
    assert grads[0] is not None and np.any(grads[0] != 0)  # x
    for g in grads[1:]:
        assert g is None or not np.any(g)


def _bad(text, message):
    with pytest.raises(LayerError, match=re.escape(message)):
        import_model(text, data_format="channels_first")
    with pytest.raises(LayerError, match=re.escape(message)):
        analyze(text, batch=None)


@pytest.mark.layer_type("LSTM")
@pytest.mark.layer_type("RNN")
@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_bad_parameters_name_the_layer(kind):
    good = {"x": (4, 2, 3), "cont": (4, 2)}
    _bad(_input_layer(good) + recurrent_layer(kind, ["x", "cont"], ["y"], "num_output: 0"),
         f"layer 'rec': ({kind}) recurrent_param.num_output must be positive, got 0")
    _bad(_input_layer({"x": (4, 2, 3), "cont": (4, 3)})
         + recurrent_layer(kind, ["x", "cont"], ["y"], "num_output: 2"),
         f"layer 'rec': ({kind}) bottom cont must have shape (T, N) = (4, 2), got (4, 3)")
    _bad(_input_layer({"x": (4, 2, 3), "cont": (4, 2, 1)})
         + recurrent_layer(kind, ["x", "cont"], ["y"], "num_output: 2"),
         f"layer 'rec': ({kind}) bottom cont must have shape (T, N) = (4, 2), got (4, 2, 1)")
    _bad(_input_layer({"x": (4,), "cont": (4, 2)})
         + recurrent_layer(kind, ["x", "cont"], ["y"], "num_output: 2"),
         f"layer 'rec': ({kind}) bottom x must have at least 2 axes (T, N, ...), got shape (4,)")
    _bad(_input_layer({"x": (4, 2), "cont": (4, 2)})
         + recurrent_layer(kind, ["x", "cont"], ["y"], "num_output: 2"),
         f"layer 'rec': ({kind}) bottom x (4, 2) has no axis after (T, N): the input "
         "InnerProduct is over axis 2")
    _bad(_input_layer({"x": (4, 2, 3), "cont": (4, 2), "s": (3, 5)})
         + recurrent_layer(kind, ["x", "cont", "s"], ["y"], "num_output: 2"),
         f"layer 'rec': ({kind}) bottom x_static must have shape (N, ...) with N = 2 and at "
         "least 2 axes (its InnerProduct is over axis 1), got (3, 5)")
    _bad(_input_layer({"x": (4, 2, 3), "cont": (4, 2), "a": (1,), "b": (1,)})
         + recurrent_layer(kind, ["x", "cont", "a", "b"], ["y"], "num_output: 2"),
         f"layer 'rec': ({kind}) without expose_hidden takes 2 or 3 bottoms "
         "(x, cont, [x_static]), got 4")


@pytest.mark.layer_type("LSTM")
def test_lstm_expose_hidden_needs_its_bottoms_and_tops():
    shapes = {"x": (4, 2, 3), "cont": (4, 2), "h0": (1, 2, 2), "c0": (1, 2, 2)}
    params = "num_output: 2 expose_hidden: true"
    _bad(_input_layer(shapes) + recurrent_layer("LSTM", ["x", "cont"], ["h", "hT", "cT"], params),
         "layer 'rec': (LSTM) with expose_hidden takes 4 or 5 bottoms "
         "(x, cont, [x_static], h_0, c_0), got 2")
    _bad(_input_layer(shapes) + recurrent_layer("LSTM", ["x", "cont", "h0"], ["h", "hT", "cT"],
                                                params),
         "layer 'rec': (LSTM) with expose_hidden takes 4 or 5 bottoms "
         "(x, cont, [x_static], h_0, c_0), got 3")
    _bad(_input_layer(shapes) + recurrent_layer("LSTM", list(shapes), ["h"], params),
         "layer 'rec': (LSTM) with expose_hidden has 3 top(s) (h, h_T, c_T), got 1")
    _bad(_input_layer(shapes) + recurrent_layer("LSTM", ["x", "cont"], ["h", "hT"],
                                                "num_output: 2"),
         "layer 'rec': (LSTM) without expose_hidden has 1 top(s) (h), got 2")
    _bad(_input_layer({**shapes, "c0": (1, 2, 3)})
         + recurrent_layer("LSTM", list(shapes), ["h", "hT", "cT"], params),
         "layer 'rec': (LSTM) bottom c_0 must have shape (1, N, num_output) = (1, 2, 2), "
         "got (1, 2, 3)")


@pytest.mark.layer_type("RNN")
def test_rnn_expose_hidden_needs_its_bottoms_and_tops():
    shapes = {"x": (4, 2, 3), "cont": (4, 2), "h0": (2, 2)}
    params = "num_output: 2 expose_hidden: true"
    _bad(_input_layer(shapes) + recurrent_layer("RNN", ["x", "cont"], ["o", "hT"], params),
         "layer 'rec': (RNN) with expose_hidden takes 3 or 4 bottoms (x, cont, [x_static], "
         "h_0), got 2")
    _bad(_input_layer(shapes) + recurrent_layer("RNN", list(shapes), ["o"], params),
         "layer 'rec': (RNN) with expose_hidden has 2 top(s) (o, h_T), got 1")
    _bad(_input_layer(shapes) + recurrent_layer("RNN", list(shapes), ["o", "hT"], params),
         "layer 'rec': (RNN) bottom h_0 must have shape (1, N, num_output) = (1, 2, 2), "
         "got (2, 2)")


@pytest.mark.layer_type("LSTM")
@pytest.mark.layer_type("ContinuationIndicator")
@pytest.mark.filterwarnings("ignore:.*no weights for layer")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_crnn_style_file_imports_and_runs(data_format):
    """tests/nets/crnn_lstm_deploy.prototxt: the sequence half of a
    CRNN-style deploy net (column features reshaped to T x N x D, a
    bottomless ContinuationIndicator, two stacked LSTMs, per-step classifier)."""
    path = DATA / "crnn_lstm_deploy.prototxt"
    text = path.read_text()
    report = analyze(text, batch=None)
    rows = {r.name: r for r in report.layers}
    assert rows["indicator"].tops == (("indicator", (6, 1)),)
    assert rows["lstm1"].weight_shapes == ((32, 16), (32,), (32, 8))
    assert rows["lstm2"].weight_shapes == ((32, 8), (32,), (32, 8))
    assert rows["fc"].tops == (("fc", (6, 1, 5)),)
    model = import_model(text, data_format=data_format, outputs=["seq", "lstm1", "probs"])
    rng = np.random.default_rng(8)
    lstm1 = lstm_blobs(rng, 8, 16)
    load_into(model, {"lstm1": lstm1})
    features = rng.standard_normal((6, 1, 4, 4)).astype(np.float32)
    out = model(to_keras_layout(features, data_format))
    seq = keras.ops.convert_to_numpy(out["seq"])
    if data_format == "channels_last":
        seq = np.moveaxis(seq, -1, 1)
    assert seq.shape == (6, 1, 16)
    lstm = keras.ops.convert_to_numpy(out["lstm1"])
    if data_format == "channels_last":
        lstm = np.moveaxis(lstm, -1, 1)
    cont = np.ones((6, 1), np.float32)
    cont[0] = 0
    want, _, _ = lstm_reference(seq, cont, lstm1)
    np.testing.assert_allclose(lstm, want, rtol=1e-5, atol=1e-5)
    probs = keras.ops.convert_to_numpy(out["probs"])
    if data_format == "channels_last":
        probs = np.moveaxis(probs, -1, 1)
    assert probs.shape == (6, 1, 5)
    np.testing.assert_allclose(probs.sum(axis=2), 1, rtol=1e-5)


@pytest.mark.layer_type("LSTM")
@pytest.mark.filterwarnings("ignore:.*no weights for layer")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_caption_style_file_imports_and_runs(data_format):
    """tests/nets/lstm_caption_lm.prototxt: an LRCN captioning
    language model in the style of BVLC's coco_caption example (words
    through Embed, an image feature as the LSTM's static input, cont fed by
    the caller, per-step word scores)."""
    text = (DATA / "lstm_caption_lm.prototxt").read_text()
    rng = np.random.default_rng(9)
    model = import_model(text, data_format=data_format, outputs=["embedded", "lstm", "probs"])
    blobs = lstm_blobs(rng, 6, 5, 7)
    load_into(model, {"lstm": blobs})
    words = rng.integers(0, 10, size=(4, 2)).astype(np.float32)
    cont = np.array([[0, 0], [1, 1], [1, 0], [1, 1]], np.float32)
    image = rng.standard_normal((2, 7)).astype(np.float32)
    out = model([words, cont, image])
    embedded = keras.ops.convert_to_numpy(out["embedded"])
    lstm = keras.ops.convert_to_numpy(out["lstm"])
    if data_format == "channels_last":
        embedded, lstm = np.moveaxis(embedded, -1, 1), np.moveaxis(lstm, -1, 1)
    want, _, _ = lstm_reference(embedded, cont, blobs, image)
    np.testing.assert_allclose(lstm, want, rtol=1e-5, atol=1e-5)
    probs = keras.ops.convert_to_numpy(out["probs"])
    if data_format == "channels_last":
        probs = np.moveaxis(probs, -1, 1)
    assert probs.shape == (4, 2, 10)


@pytest.mark.layer_type("RNN")
def test_saved_config_rebuilds_the_model():
    """The Keras layer is serializable (get_config / from_config)."""
    rng = np.random.default_rng(10)
    inputs = {"x": rng.standard_normal((3, 2, 4)).astype(np.float32),
              "cont": np.array([[0, 0], [1, 0], [1, 1]], np.float32)}
    text = _input_layer({k: v.shape for k, v in inputs.items()}) + recurrent_layer(
        "RNN", list(inputs), ["o"], "num_output: 3")
    model = import_model(text, data_format="channels_first")
    load_into(model, {"rec": rnn_blobs(rng, 3, 4)})
    clone = keras.models.model_from_json(model.to_json())
    clone.set_weights(model.get_weights())
    feed = list(inputs.values())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(clone(feed)),
                               keras.ops.convert_to_numpy(model(feed)), rtol=1e-6)


@pytest.mark.layer_type("LSTM")
@pytest.mark.layer_type("Permute")
@pytest.mark.layer_type("ContinuationIndicator")
@pytest.mark.filterwarnings("ignore:.*no weights for layer")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_a_whole_crnn_from_the_image(data_format):
    """CRNN's layout end to end: the image's convolution map (N, C, H, W),
    Permute { order: 3 0 1 2 } to (W, N, C, H) (the width becomes T),
    Reshape to T x N x D, ContinuationIndicator on the image (N from its
    first axis), LSTM: the LSTM equals BVLC's unrolled net on that sequence."""
    text = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 5 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "permuted" type: "Permute" bottom: "conv1" top: "permuted"
  permute_param { order: 3 order: 0 order: 1 order: 2 } }
layer { name: "seq" type: "Reshape" bottom: "permuted" top: "seq"
  reshape_param { shape { dim: 0 dim: 0 dim: -1 } } }
layer { name: "indicator" type: "ContinuationIndicator" bottom: "data" top: "indicator"
  continuation_indicator_param { time_step: 6 } }
layer { name: "lstm1" type: "LSTM" bottom: "seq" bottom: "indicator" top: "lstm1"
  recurrent_param { num_output: 7 } }
"""
    rows = {r.name: r for r in analyze(text, batch=None).layers}
    assert rows["permuted"].tops == (("permuted", (6, 2, 5, 4)),)
    assert rows["lstm1"].tops == (("lstm1", (6, 2, 7)),)
    model = import_model(text, data_format=data_format, outputs=["conv1", "seq", "lstm1"])
    rng = np.random.default_rng(11)
    blobs = lstm_blobs(rng, 7, 20)
    load_into(model, {"lstm1": blobs})
    image = rng.standard_normal((2, 3, 4, 6)).astype(np.float32)
    out = {k: keras.ops.convert_to_numpy(v)
           for k, v in model(to_keras_layout(image, data_format)).items()}
    conv = np.moveaxis(out["conv1"], -1, 1) if data_format == "channels_last" else out["conv1"]
    seq = np.moveaxis(out["seq"], -1, 1) if data_format == "channels_last" else out["seq"]
    np.testing.assert_array_equal(seq, np.transpose(conv, (3, 0, 1, 2)).reshape(6, 2, 20))
    lstm = np.moveaxis(out["lstm1"], -1, 1) if data_format == "channels_last" else out["lstm1"]
    cont = np.ones((6, 2), np.float32)
    cont[0] = 0
    want, _, _ = lstm_reference(seq, cont, blobs)
    np.testing.assert_allclose(lstm, want, rtol=1e-5, atol=1e-5)

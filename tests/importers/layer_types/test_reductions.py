"""ArgMax, Reduction, MVN: one-layer nets against numpy ports of Caffe's loops."""

import keras
import numpy as np
import pytest
from google.protobuf import text_format

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob, Context
from keras_caffe.importers.layer_types import unit
from keras_caffe.layers.reductions import MVN, ArgMax, Reduction
from keras_caffe.proto import caffe_pb2
from support import DATA_FORMATS, run_layers

RNG = np.random.RandomState(0)


def randn(*shape, scale=1.0):
    return np.asarray(RNG.randn(*shape) * scale, np.float32)


def layer_text(kind, param, name="out", **p):
    fields = " ".join(f"{k}: {str(v).lower() if isinstance(v, bool) else v}" for k, v in p.items())
    return (f'layer {{ name: "{name}" type: "{kind}" bottom: "data" top: "{name}" '
            f'{param} {{ {fields} }} }}')


def run_on_flat(kind, param_text, x_nchw):
    """A unit's ``build`` applied directly to a "flat" blob (channels-last,
    flattened) of ``x_nchw``.

    Returns the top in Caffe's layout (flat tops are put back in Caffe's order).
    """
    layer = caffe_pb2.LayerParameter()
    text_format.Parse(f'name: "out" type: "{kind}" {param_text}', layer)
    ctx = Context("channels_last", "TEST", "<test>")
    n, c, h, w = x_nchw.shape
    inputs = keras.Input((h, w, c))
    flat = Blob(keras.layers.Flatten()(inputs), "flat", (c, h, w))
    found = unit(kind)
    ctx.layer, ctx.bottom_shapes = layer, [(n, c * h * w)]
    ctx.shapes = found.shapes(layer, ctx.bottom_shapes, None)
    top = found.build(layer, [flat], ctx)[0]
    if top.layout == "flat":
        top = ctx.caffe_order(top, layer)
    model = keras.Model(inputs, top.tensor)
    y = keras.ops.convert_to_numpy(model(np.moveaxis(x_nchw, 1, -1)))
    return np.moveaxis(y, -1, 1) if top.layout == "nhwc" else y


# -- ArgMax -----------------------------------------------------------------------


def ranked(values, top_k):
    """Caffe's partial_sort of (value, index) pairs with std::greater: ties, larger index first."""
    return sorted(((v, j) for j, v in enumerate(values)), reverse=True)[:top_k]


def argmax_reference(x, top_k, out_max_val, axis=None):
    """ArgMaxLayer::Forward_cpu."""
    if axis is None:
        n = x.shape[0]
        flat = x.reshape(n, -1)
        out = np.zeros((n, 2 if out_max_val else 1, top_k) + (1,) * (max(x.ndim, 3) - 3))
        for i in range(n):
            for j, (value, index) in enumerate(ranked(flat[i], top_k)):
                out[i, 0, j] = index
                if out_max_val:
                    out[i, 1, j] = value
        return out
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape[:-1] + (top_k,))
    for where in np.ndindex(*moved.shape[:-1]):
        out[where] = [v if out_max_val else j for v, j in ranked(moved[where], top_k)]
    return np.moveaxis(out, -1, axis)


ARGMAX_CASES = {
    # name: (input shape, params)
    "flattened_top1": ((2, 3, 4, 5), dict()),
    "flattened_top3_values": ((2, 3, 4, 5), dict(top_k=3, out_max_val=True)),
    "flattened_2d": ((3, 10), dict(top_k=2)),
    "flattened_2d_values": ((3, 10), dict(top_k=4, out_max_val=True)),
    "flattened_3d": ((2, 3, 6), dict(top_k=2)),
    "channels": ((2, 5, 3, 4), dict(axis=1)),                    # FCN's per-pixel class
    "channels_top2_values": ((2, 5, 3, 4), dict(axis=1, top_k=2, out_max_val=True)),
    "height": ((2, 3, 4, 5), dict(axis=2, top_k=2)),
    "last_axis": ((2, 3, 4, 5), dict(axis=-1, top_k=3)),
    "last_axis_values": ((2, 3, 4, 5), dict(axis=3, out_max_val=True)),
    "2d_axis1": ((3, 7), dict(axis=1, top_k=2)),
    "batch_axis": ((3, 2, 2, 2), dict(axis=0, top_k=2)),
}


@pytest.mark.layer_type("ArgMax")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", list(ARGMAX_CASES))
def test_argmax(case, data_format):
    shape, p = ARGMAX_CASES[case]
    x = randn(*shape)
    y = run_layers(layer_text("ArgMax", "argmax_param", **p), {"data": x},
                   data_format=data_format)["out"]
    axis = p.get("axis")
    expected = argmax_reference(x, p.get("top_k", 1), p.get("out_max_val", False),
                                None if axis is None else axis % len(shape))
    assert y.shape == expected.shape
    np.testing.assert_array_equal(y, expected)  # indices and copied values: exact


@pytest.mark.layer_type("ArgMax")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("p", [dict(top_k=3), dict(top_k=3, out_max_val=True),
                               dict(axis=1, top_k=3), dict(axis=3, top_k=2)])
def test_argmax_ties_rank_the_larger_index_first(p, data_format):
    x = np.zeros((2, 3, 2, 2), np.float32)
    x[0, 0, 0, 0] = x[0, 2, 1, 1] = x[0, 1, 0, 1] = 5.0   # three-way tie in sample 0
    x[1, :, 1, 0] = 2.0                                   # a tie across channels
    y = run_layers(layer_text("ArgMax", "argmax_param", **p), {"data": x},
                   data_format=data_format)["out"]
    expected = argmax_reference(x, p["top_k"], p.get("out_max_val", False), p.get("axis"))
    np.testing.assert_array_equal(y, expected)
    if "axis" not in p:
        assert list(y[0, 0, :, 0]) == [11, 5, 0]  # Caffe order (c, h, w): 2*4+3, 1*4+1, 0


@pytest.mark.layer_type("ArgMax")
@pytest.mark.parametrize("param_text, axis", [("argmax_param { top_k: 4 out_max_val: true }", None),
                                              ("argmax_param { axis: 1 top_k: 2 }", 1),
                                              ("argmax_param { axis: 0 }", 0)])
def test_argmax_on_a_flattened_channels_last_blob(param_text, axis):
    """Indices count in Caffe's (C, H, W) order, not the channels-last flattening."""
    x = randn(2, 3, 4, 5)
    y = run_on_flat("ArgMax", param_text, x)
    p = caffe_pb2.ArgMaxParameter()
    text_format.Parse(param_text[len("argmax_param { "):-2], p)
    expected = argmax_reference(x.reshape(2, -1), p.top_k, p.out_max_val, axis)
    np.testing.assert_array_equal(y, expected)


ARGMAX_ERRORS = {
    "top_k_zero": (dict(top_k=0), r"\(ArgMax\) top_k must be at least 1"),
    "top_k_past_axis": (dict(axis=1, top_k=4), r"\(ArgMax\) top_k 4 exceeds axis 1's size 3"),
    "top_k_past_count": (dict(top_k=50),
                         r"\(ArgMax\) top_k 50 exceeds the 48 values per sample"),
    "axis_out_of_range": (dict(axis=4), r"\(ArgMax\) axis 4 is out of range for a 4-D blob"),
    "negative_axis_out_of_range": (dict(axis=-5), r"\(ArgMax\) axis -5 is out of range"),
}


@pytest.mark.layer_type("ArgMax")
@pytest.mark.parametrize("case", list(ARGMAX_ERRORS))
def test_argmax_bad_parameters(case):
    p, message = ARGMAX_ERRORS[case]
    with pytest.raises(LayerError, match=f"layer 'out': {message}"):
        run_layers(layer_text("ArgMax", "argmax_param", **p), {"data": np.zeros((1, 3, 4, 4))})


# -- Reduction --------------------------------------------------------------------


def reduction_reference(x, operation, axis, coeff):
    """ReductionLayer::Forward_cpu: each of count(0, axis) rows of count(axis) values."""
    axis %= x.ndim
    rows = x.reshape(*x.shape[:axis], -1).astype(np.float64)
    if operation == "ASUM":
        rows = np.abs(rows)
    elif operation == "SUMSQ":
        rows = rows**2
    total = rows.sum(axis=-1)
    if operation == "MEAN":
        coeff = np.float32(coeff) / np.float32(rows.shape[-1])
    return total * coeff


@pytest.mark.layer_type("Reduction")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("operation", ["SUM", "ASUM", "SUMSQ", "MEAN"])
@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1, -3])
def test_reduction(axis, operation, data_format):
    x = randn(2, 3, 4, 5)
    coeff = {"SUM": 1.0, "ASUM": -0.5, "SUMSQ": 2.0, "MEAN": 3.0}[operation]
    p = dict(operation=operation, axis=axis, coeff=coeff)
    y = run_layers(layer_text("Reduction", "reduction_param", **p), {"data": x},
                   data_format=data_format)["out"]
    expected = reduction_reference(x, operation, axis, coeff)
    assert y.shape == expected.shape  # Caffe keeps the axes before `axis`: () for axis 0
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("Reduction")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape, axis", [((3, 6), 1), ((3, 6), 0), ((2, 3, 7), 2),
                                         ((2, 3, 7), 1), ((2, 3, 4, 5, 2), 3)])
def test_reduction_other_ranks(shape, axis, data_format):
    x = randn(*shape)
    y = run_layers(layer_text("Reduction", "reduction_param", operation="MEAN", axis=axis),
                   {"data": x}, data_format=data_format)["out"]
    np.testing.assert_allclose(y, reduction_reference(x, "MEAN", axis, 1.0), rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Reduction")
def test_reduction_defaults_sum_everything_to_a_scalar():
    x = randn(3, 2, 2, 2)
    y = run_layers('layer { name: "out" type: "Reduction" bottom: "data" top: "out" }',
                   {"data": x})["out"]
    assert y.shape == ()
    np.testing.assert_allclose(y, x.astype(np.float64).sum(), rtol=1e-5)


@pytest.mark.layer_type("Reduction")
@pytest.mark.parametrize("param_text, axis", [("reduction_param { operation: SUMSQ axis: 1 }", 1),
                                              ("reduction_param { operation: MEAN }", 0)])
def test_reduction_on_a_flattened_channels_last_blob(param_text, axis):
    x = randn(2, 3, 4, 5)
    y = run_on_flat("Reduction", param_text, x)
    operation = "SUMSQ" if "SUMSQ" in param_text else "MEAN"
    np.testing.assert_allclose(y, reduction_reference(x, operation, axis, 1.0), rtol=1e-5)


@pytest.mark.layer_type("Reduction")
@pytest.mark.parametrize("axis", [4, -5])
def test_reduction_axis_out_of_range(axis):
    with pytest.raises(LayerError,
                       match=rf"layer 'out': \(Reduction\) axis {axis} is out of range for a 4-D"):
        run_layers(layer_text("Reduction", "reduction_param", axis=axis),
                   {"data": np.zeros((1, 3, 4, 4))})


# -- MVN ----------------------------------------------------------------------------


def mvn_reference(x, normalize_variance=True, across_channels=False, eps=1e-9):
    """MVNLayer::Forward_cpu: rows of num (or num * channels) over legacy 4-D shapes."""
    num = x.shape[0] if across_channels else x.shape[0] * (x.shape[1] if x.ndim > 1 else 1)
    rows = x.reshape(num, -1).astype(np.float64)
    y = rows - rows.mean(axis=1, keepdims=True)
    if normalize_variance:
        std = np.sqrt((y**2).mean(axis=1, keepdims=True))
        y = y / (std + np.float32(eps))  # eps on the standard deviation
    return y.reshape(x.shape)


@pytest.mark.layer_type("MVN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("normalize_variance", [True, False])
@pytest.mark.parametrize("across_channels", [False, True])
@pytest.mark.parametrize("eps", [None, 0.5])
def test_mvn(eps, across_channels, normalize_variance, data_format):
    x = randn(2, 3, 4, 5, scale=3.0) + 1.5
    p = dict(normalize_variance=normalize_variance, across_channels=across_channels)
    if eps is not None:
        p["eps"] = eps
    y = run_layers(layer_text("MVN", "mvn_param", **p), {"data": x}, data_format=data_format)["out"]
    expected = mvn_reference(x, normalize_variance, across_channels, 1e-9 if eps is None else eps)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.layer_type("MVN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_mvn_adds_eps_to_the_standard_deviation(data_format):
    x = randn(2, 3, 4, 4, scale=0.1)
    y = run_layers(layer_text("MVN", "mvn_param", eps=0.25), {"data": x},
                   data_format=data_format)["out"]
    centred = x - x.mean(axis=(2, 3), keepdims=True)
    var = (centred**2).mean(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(y, centred / (np.sqrt(var) + 0.25), rtol=1e-4, atol=1e-6)
    assert not np.allclose(y, centred / np.sqrt(var + 0.25), rtol=1e-2)


@pytest.mark.layer_type("MVN")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape", [(4, 6), (2, 3, 7)])
@pytest.mark.parametrize("across_channels", [False, True])
def test_mvn_other_ranks(shape, across_channels, data_format):
    """2-D without across_channels: one value per (num, channel), so all zeros."""
    x = randn(*shape) + 2.0
    y = run_layers(layer_text("MVN", "mvn_param", across_channels=across_channels), {"data": x},
                   data_format=data_format)["out"]
    np.testing.assert_allclose(y, mvn_reference(x, True, across_channels), rtol=1e-4, atol=1e-5)


@pytest.mark.layer_type("MVN")
@pytest.mark.parametrize("across_channels", [False, True])
def test_mvn_on_a_flattened_channels_last_blob(across_channels):
    """Caffe sees (N, C*H*W): per-channel statistics are per value, across_channels per sample."""
    x = randn(2, 3, 4, 5) + 1.0
    param = f"mvn_param {{ across_channels: {str(across_channels).lower()} }}"
    y = run_on_flat("MVN", param, x)
    np.testing.assert_allclose(y, mvn_reference(x.reshape(2, -1), True, across_channels),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.layer_type("MVN")
def test_mvn_refuses_more_than_4_axes():
    with pytest.raises(LayerError, match=r"layer 'out': \(MVN\) needs at most 4 axes"):
        run_layers(layer_text("MVN", "mvn_param"), {"data": np.zeros((1, 2, 3, 4, 5))})


# -- serialization ---------------------------------------------------------------------


@pytest.mark.parametrize("cls, kwargs", [
    (ArgMax, dict(top_k=3, out_max_val=True, axis=None)),
    (ArgMax, dict(top_k=1, axis=2)),
    (Reduction, dict(operation="MEAN", axes=(2, 3), coeff=0.5)),
    (MVN, dict(normalize_variance=False, eps=1e-3, axes=(1, 2))),
])
def test_layers_serialize(cls, kwargs):
    layer = cls(**kwargs, name="layer")
    clone = keras.layers.deserialize(keras.layers.serialize(layer))
    assert type(clone) is cls
    assert clone.get_config() == layer.get_config()

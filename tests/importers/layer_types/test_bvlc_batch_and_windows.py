"""BVLC's SPP, Im2col, BatchReindex and Filter against numpy ports of their
Forward_cpu (BVLC Caffe master 9b891540: spp_layer.cpp with pooling_layer.cpp,
im2col_layer.cpp with util/im2col.cpp, batch_reindex_layer.cpp,
filter_layer.cpp)."""

import math
import re

import keras
import numpy as np
import pytest

from support import caffe_numpy
from keras_caffe.errors import LayerError, LayerValueError
from keras_caffe.analysis import analyze
from keras_caffe.proto import caffe_pb2
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels


def spp_reference(x, height, pool):
    """SPPLayer::Forward_cpu: per level a PoolingLayer of GetPoolingParam's
    kernel ceil(H / bins), stride kernel, pad (kernel * bins - H + 1) / 2;
    flattened and concatenated (one level: the pooling's top itself)."""
    n, c, h, w = x.shape
    tops = []
    for level in range(height):
        bins = 2 ** level
        kh, kw = math.ceil(h / bins), math.ceil(w / bins)
        layer = caffe_pb2.LayerParameter(name="p", type="Pooling", top=["p"])
        p = layer.pooling_param
        p.pool, p.kernel_h, p.kernel_w = pool, kh, kw
        p.stride_h, p.stride_w = kh, kw
        p.pad_h, p.pad_w = (kh * bins - h + 1) // 2, (kw * bins - w + 1) // 2
        tops.append(caffe_numpy.FORWARD["Pooling"](layer, [x], [])[0])
    if height == 1:
        return tops[0]
    return np.concatenate([t.reshape(n, -1) for t in tops], axis=1)


@pytest.mark.layer_type("SPP")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shape, height, pool", [
    ((2, 3, 9, 7), 3, "MAX"), ((1, 2, 6, 5), 2, "AVE"), ((2, 3, 4, 4), 1, "MAX"),
    ((1, 4, 13, 13), 3, "AVE")])
def test_spp_matches_caffe(shape, height, pool, data_format):
    x = np.random.RandomState(0).randn(*shape).astype("float32")
    got = run_layers(f'layer {{ name: "spp" type: "SPP" bottom: "x" top: "spp" '
                     f'spp_param {{ pyramid_height: {height} pool: {pool} }} }}',
                     {"x": x}, data_format=data_format)["spp"]
    want = spp_reference(x.astype(np.float64), height, caffe_pb2.PoolingParameter.PoolMethod.Value(pool))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("SPP")
def test_spp_errors_and_analyze():
    text = ('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 dim: 2 '
            'dim: 9 } } }\nlayer { name: "spp" type: "SPP" bottom: "x" top: "spp" '
            'spp_param { pyramid_height: %d } }')
    report = analyze(text % 2)
    assert report.layers[-1].tops == (("spp", (1, 3 * (1 + 4))),)
    with pytest.raises(LayerError, match=r"layer 'spp': \(SPP\) level 2 pools 2 values into 4 bins: "
                                         r"its pad 1 is not smaller than its kernel 1"):
        analyze(text % 3)
    with pytest.raises(LayerError, match=r"layer 'spp': \(SPP\) pyramid_height must be at least 1"):
        analyze(text % 0)


def im2col_reference(x, kernel, stride, pad, dilation):
    """im2col_cpu for each image: row (c * kh + i) * kw + j, column (oh, ow),
    zero outside the image."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = kernel, stride, pad, dilation
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    top = np.zeros((n, c * kh * kw, oh, ow), x.dtype)
    for ch in range(c):
        for i in range(kh):
            for j in range(kw):
                for y in range(oh):
                    for z in range(ow):
                        r, q = y * sh - ph + i * dh, z * sw - pw + j * dw
                        if 0 <= r < h and 0 <= q < w:
                            top[:, (ch * kh + i) * kw + j, y, z] = x[:, ch, r, q]
    return top


@pytest.mark.layer_type("Im2col")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, kernel, stride, pad, dilation", [
    ("kernel_size: 3", (3, 3), (1, 1), (0, 0), (1, 1)),
    ("kernel_h: 2 kernel_w: 3 stride: 2 pad: 1 dilation: 2", (2, 3), (2, 2), (1, 1), (2, 2)),
    ("kernel_size: 2 stride_h: 1 stride_w: 3 pad_h: 0 pad_w: 2", (2, 2), (1, 3), (0, 2), (1, 1)),
])
def test_im2col_matches_caffe(params, kernel, stride, pad, dilation, data_format):
    x = np.random.RandomState(1).randn(2, 3, 7, 8).astype("float32")
    got = run_layers(f'layer {{ name: "col" type: "Im2col" bottom: "x" top: "col" '
                     f'convolution_param {{ {params} }} }}', {"x": x}, data_format=data_format)
    np.testing.assert_array_equal(got["col"], im2col_reference(x, kernel, stride, pad, dilation))


@pytest.mark.layer_type("Im2col")
def test_im2col_refuses_what_caffe_does():
    text = ('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 dim: 2 '
            'dim: 4 } } }\nlayer { name: "col" type: "Im2col" bottom: "x" top: "col" '
            'convolution_param { %s } }')
    with pytest.raises(LayerError, match=r"layer 'col': \(Im2col\) the dilated kernel 5 exceeds "
                                         r"the padded input 2"):
        analyze(text % "kernel_size: 3 dilation: 2")
    with pytest.raises(LayerError, match=r"layer 'col': \(Im2col\) kernel, stride and dilation "
                                         r"must be positive"):
        analyze(text % "kernel_size: 1 stride: 0")


@pytest.mark.layer_type("BatchReindex")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_batch_reindex_gathers_samples(data_format):
    x = np.random.RandomState(2).randn(4, 3, 2, 2).astype("float32")
    permut = np.array([3, 0, 0, 2, 1, 3], np.float32)
    got = run_layers('layer { name: "r" type: "BatchReindex" bottom: "x" bottom: "p" top: "r" }',
                     {"x": x, "p": permut}, data_format=data_format)["r"]
    np.testing.assert_array_equal(got, x[[3, 0, 0, 2, 1, 3]])


REINDEX = 'layer { name: "r" type: "BatchReindex" bottom: "x" bottom: "p" top: "r" }'
OUTSIDE = {  # permut -> Caffe's complaint (BatchReindexLayer::check_batch_reindex's CHECKs)
    (1.0, 4.0, 0.0): "index 4 at position 1 of bottom 1 is outside [0, 4)",
    (-1.0, 2.0): "index -1 at position 0 of bottom 1 is outside [0, 4)",
}


@pytest.mark.layer_type("BatchReindex")
@pytest.mark.parametrize("permut", list(OUTSIDE))
def test_batch_reindex_refuses_an_index_outside_the_batch(permut):
    """Called eagerly on any backend: the project's LayerValueError naming
    the layer, the index and its position, before any gather (Keras adds
    the call's arguments around the message; the line itself is ours)."""
    x = np.zeros((4, 3), np.float32)
    with pytest.raises(LayerValueError) as raised:
        run_layers(REINDEX, {"x": x, "p": np.array(permut, np.float32)})
    lines = re.sub(r"\x1b\[[0-9;]*m", "", str(raised.value)).splitlines()  # Keras's bold
    assert (f"layer 'r': {OUTSIDE[permut]}, the batch of bottom 0 (batch_reindex_layer.cpp's "
            f"CHECK)") in lines
    assert raised.value.layer == "r"


#: The error a compiled step reports its CHECK in, per backend (PyTorch's
#: trainer runs eagerly, so there it is the LayerValueError itself).
COMPILED_ERROR = {"tensorflow": ("tensorflow", "errors", "InvalidArgumentError"),
                  "jax": ("jax", "errors", "JaxRuntimeError"),
                  "torch": ("keras_caffe", "errors", "LayerValueError")}
COMPILED_MESSAGE = {"tensorflow": "layer 'r': an index of bottom 1 is outside [0, N), N the batch "
                                  "of bottom 0 (batch_reindex_layer.cpp's CHECK)",
                    "jax": "layer 'r': index 4 at position 1 of bottom 1 is outside [0, 4), the "
                           "batch of bottom 0 (batch_reindex_layer.cpp's CHECK)"}
COMPILED_MESSAGE["torch"] = COMPILED_MESSAGE["jax"]


@pytest.mark.layer_type("BatchReindex")
def test_batch_reindex_checks_inside_a_compiled_step():
    """``predict_on_batch`` compiles the model on TensorFlow and JAX: the CHECK runs
    with the step (a graph assertion, a host callback) and its message
    names the layer; the bad index never reads past the batch silently."""
    import importlib

    from keras_caffe.importers import import_model

    model = import_model('layer { name: "input" type: "Input" top: "x" top: "p" input_param { '
                         'shape { dim: 4 dim: 3 } shape { dim: 2 } } }\n' + REINDEX)
    x, good = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([3.0, 0.0], np.float32)
    np.testing.assert_array_equal(model.predict_on_batch([x, good]), x[[3, 0]])
    module, *path = COMPILED_ERROR[keras.backend.backend()]
    expected = importlib.import_module(module)
    for name in path:
        expected = getattr(expected, name)
    with pytest.raises(expected) as raised:
        model.predict_on_batch([x, np.array([1.0, 4.0], np.float32)])
    # TensorFlow escapes the quotes of an assertion's message in its error
    assert COMPILED_MESSAGE[keras.backend.backend()] in str(raised.value).replace("\\'", "'")


@pytest.mark.layer_type("BatchReindex")
def test_batch_reindex_refuses_indices_that_are_not_1d():
    text = ('layer { name: "x" type: "Input" top: "x" top: "p" input_param { shape { dim: 4 '
            'dim: 3 } shape { dim: 2 dim: 2 } } }\n'
            'layer { name: "r" type: "BatchReindex" bottom: "x" bottom: "p" top: "r" }')
    with pytest.raises(LayerError, match=r"layer 'r': \(BatchReindex\) bottom 1 must be 1-D "
                                         r"\(the indices\), got \(2, 2\)"):
        analyze(text, batch=None)


@pytest.mark.layer_type("Filter")
@pytest.mark.skipif(keras.backend.backend() == "jax",
                    reason="Filter does not run on JAX (its unit's unsupported_backends; "
                           "test_layer_type_backends checks the refusal)")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_filter_keeps_selected_samples_in_order(data_format):
    rng = np.random.RandomState(3)
    x, y = rng.randn(5, 3, 2, 2).astype("float32"), rng.randn(5, 4).astype("float32")
    selector = np.array([0, 1, 0, 2, 1], np.float32)
    got = run_layers('layer { name: "f" type: "Filter" bottom: "x" bottom: "y" bottom: "s" '
                     'top: "fx" top: "fy" }', {"x": x, "y": y, "s": selector},
                     data_format=data_format)
    np.testing.assert_array_equal(got["fx"], x[[1, 3, 4]])
    np.testing.assert_array_equal(got["fy"], y[[1, 3, 4]])


@pytest.mark.layer_type("Filter")
def test_filter_checks_its_bottoms():
    text = ('layer { name: "x" type: "Input" top: "x" top: "s" input_param { shape { dim: 4 '
            'dim: 3 } shape { %s } } }\n'
            'layer { name: "f" type: "Filter" bottom: "x" bottom: "s" top: "fx" }')
    with pytest.raises(LayerError, match=r"layer 'f': \(Filter\) the selector \(last bottom\) "
                                         r"must be \(N,\) or \(N, 1, \.\.\.\), got \(4, 2\)"):
        analyze(text % "dim: 4 dim: 2", batch=None)
    with pytest.raises(LayerError, match=r"layer 'f': \(Filter\) bottom 0 \(4, 3\) and the "
                                         r"selector \(3,\) differ in batch size"):
        analyze(text % "dim: 3", batch=None)

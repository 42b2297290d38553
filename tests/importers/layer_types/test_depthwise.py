"""The depthwise forks' layers against a numpy depthwise convolution
(ConvolutionDepthwise: conv_dw_layer.cpp's Forward_cpu; DepthwiseConvolution:
Caffe's ConvolutionLayer, which it subclasses)."""

import numpy as np
import pytest

from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, run_layers

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def depthwise_reference(x, w, b, stride, pad, dilation):
    """conv_dw_layer.cpp Forward_cpu: top[n, c, i, j] = sum over the kernel of
    w[c, 0, u, v] * x[n, c, i*s - p + u*d, j*s - p + v*d] (0 outside), + b[c]."""
    n, c, h, wd = x.shape
    kh, kw = w.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (wd + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    padded = np.zeros((n, c, h + 2 * ph, wd + 2 * pw), np.float64)
    padded[:, :, ph:ph + h, pw:pw + wd] = x
    out = np.zeros((n, c, oh, ow))
    for u in range(kh):
        for v in range(kw):
            patch = padded[:, :, u * dh:u * dh + sh * (oh - 1) + 1:sh,
                           v * dw:v * dw + sw * (ow - 1) + 1:sw]
            out += patch * w[None, :, 0, u, v, None, None]
    if b is not None:
        out += b[None, :, None, None]
    return out


def layer(layer_type, params):
    return (f'layer {{ name: "dw" type: "{layer_type}" bottom: "data" top: "dw" '
            f"convolution_param {{ {params} }} }}\n")


@pytest.mark.layer_type("ConvolutionDepthwise")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params, stride, pad, dilation, bias", [
    ("num_output: 5 kernel_size: 3 pad: 1", (1, 1), (1, 1), (1, 1), True),
    # num_output and group are ignored by the fork: the top has the channels.
    ("num_output: 1 group: 1 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 "
     "pad_w: 0 bias_term: false", (2, 1), (1, 0), (1, 1), False),
    ("kernel_size: 3 dilation: 2 stride: 2", (2, 2), (0, 0), (2, 2), True),
])
def test_convolution_depthwise_matches_the_fork(data_format, params, stride, pad, dilation, bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 9, 8)).astype(np.float32)
    kernel = (3, 2) if "kernel_w: 2" in params else (3, 3)
    w = rng.standard_normal((5, 1, *kernel)).astype(np.float32)
    b = rng.standard_normal(5).astype(np.float32)
    weights = {"dw": [w, b] if bias else [w]}
    got = run_layers(layer("ConvolutionDepthwise", params), {"data": x}, weights,
                     data_format)["dw"]
    want = depthwise_reference(x, w, b if bias else None, stride, pad, dilation)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.layer_type("ConvolutionDepthwise")
def test_convolution_depthwise_blobs_and_analyze():
    text = ('layer { name: "in" type: "Input" top: "data" input_param { shape { dim: 1 dim: 8 '
            'dim: 6 dim: 6 } } }\n' + layer("ConvolutionDepthwise", "num_output: 8 kernel_size: 3"))
    model = import_model(text)
    dw = model.get_layer("dw")
    assert dw.caffe_blob_shapes() == [(8, 1, 3, 3), (8,)]
    row = analyze(text).layers[-1]
    assert row.weight_shapes == ((8, 1, 3, 3), (8,))
    assert row.tops == (("dw", (1, 8, 4, 4)),)
    assert row.forward_flops == 2 * 8 * 4 * 4 * 9


@pytest.mark.layer_type("DepthwiseConvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_depthwise_convolution_is_convolution(data_format):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    params = "num_output: 4 group: 4 kernel_size: 3 pad: 1 stride: 2"
    got = run_layers(layer("DepthwiseConvolution", params), {"data": x}, {"dw": [w, b]},
                     data_format)["dw"]
    np.testing.assert_allclose(got, depthwise_reference(x, w, b, (2, 2), (1, 1), (1, 1)),
                               rtol=1e-5, atol=1e-5)

"""BVLC Caffe's Convolution and Deconvolution over 3 spatial axes (N, C, D,
H, W) against numpy ports of its C++:

- conv_layer.cpp ``ConvolutionLayer::Forward_cpu`` ->
  base_conv_layer.cpp ``forward_cpu_gemm`` (util/im2col.cpp
  ``im2col_nd_cpu``: input cell ``o * stride - pad + k * dilation`` per
  axis, 0 outside; one GEMM per group) and ``forward_cpu_bias``;
  ``compute_output_shape``: ``(in + 2 pad - (dilation (k - 1) + 1)) /
  stride + 1``;
- deconv_layer.cpp ``DeconvolutionLayer::Forward_cpu`` ->
  ``backward_cpu_gemm`` (W^T x per group, then ``col2im_nd_cpu``'s
  scatter-add) and ``forward_cpu_bias``; output ``stride (in - 1) +
  dilation (k - 1) + 1 - 2 pad``.

base_conv_layer.cpp ``LayerSetUp`` reads ``kernel_size`` / ``pad`` /
``stride`` / ``dilation`` as one value or one per spatial axis (and
kernel_h/_w only for 2 axes). pooling_layer.cpp ``Reshape`` refuses
anything but 4-D blobs (``CHECK_EQ(4, bottom[0]->num_axes())``).
"""

import itertools
import math

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, load_into
from keras_caffe.analysis import analyze
from keras_caffe.importers.net.weights import load_weights
from keras_caffe.proto import caffe_pb2
from support import DATA_FORMATS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import backward

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

F = np.float32


def _cells(size, kernel, stride, pad, dilation, out):
    """For each kernel tap: the slices of a zero-padded volume (``pad``
    before, enough after) holding im2col_nd's input cell ``o * stride - pad
    + tap * dilation`` of every output cell ``o``."""
    for tap in itertools.product(*(range(k) for k in kernel)):
        yield tap, tuple(slice(t * d, t * d + s * (o - 1) + 1, s)
                         for t, d, s, o in zip(tap, dilation, stride, out))


def _padded(volume, size, kernel, stride, pad, dilation, out):
    far = [max(0, (o - 1) * s + d * (k - 1) + 1 - n - p)
           for n, k, s, p, d, o in zip(size, kernel, stride, pad, dilation, out)]
    padded = np.zeros((volume.shape[0], *(n + p + f for n, p, f in zip(size, pad, far))))
    padded[(slice(None), *(slice(p, p + n) for p, n in zip(pad, size)))] = volume
    return padded


def im2col_nd(x, kernel, stride, pad, dilation):
    """im2col_nd_cpu on one (C, *spatial) blob: rows (c, *tap), columns the
    output cells."""
    c, size = x.shape[0], x.shape[1:]
    out = [(n + 2 * p - (d * (k - 1) + 1)) // s + 1
           for n, k, s, p, d in zip(size, kernel, stride, pad, dilation)]
    padded = _padded(x, size, kernel, stride, pad, dilation, out)
    col = np.zeros((c, *kernel, *out))
    for tap, cells in _cells(size, kernel, stride, pad, dilation, out):
        col[(slice(None), *tap)] = padded[(slice(None), *cells)]
    return col.reshape(c * math.prod(kernel), -1), out


def col2im_nd(col, channels, size, kernel, stride, pad, dilation):
    """col2im_nd_cpu: scatter-add the columns onto a (C, *size) blob."""
    cols = [(n + 2 * p - (d * (k - 1) + 1)) // s + 1
            for n, k, s, p, d in zip(size, kernel, stride, pad, dilation)]
    col = col.reshape(channels, *kernel, *cols)
    padded = _padded(np.zeros((channels, *size)), size, kernel, stride, pad, dilation, cols)
    for tap, cells in _cells(size, kernel, stride, pad, dilation, cols):
        padded[(slice(None), *cells)] += col[(slice(None), *tap)]
    return padded[(slice(None), *(slice(p, p + n) for p, n in zip(pad, size)))]


def conv_forward(x, w, b, stride, pad, dilation, group):
    """ConvolutionLayer::Forward_cpu: per sample and group, W_g @ im2col."""
    num_output, kernel = w.shape[0], w.shape[2:]
    out_g, in_g = num_output // group, x.shape[1] // group
    tops = []
    for volume in x.astype(np.float64):
        parts = []
        for g in range(group):
            col, out = im2col_nd(volume[g * in_g:(g + 1) * in_g], kernel, stride, pad, dilation)
            parts.append(w[g * out_g:(g + 1) * out_g].reshape(out_g, -1).astype(np.float64) @ col)
        top = np.concatenate(parts)
        if b is not None:
            top += b[:, None]
        tops.append(top.reshape(num_output, *out))
    return np.stack(tops)


def deconv_forward(x, w, b, stride, pad, dilation, group):
    """DeconvolutionLayer::Forward_cpu: per sample and group, col = W_g^T x_g
    (W as (C, num_output / group, *kernel)), col2im_nd, then the bias."""
    channels, out_g, kernel = w.shape[0], w.shape[1], w.shape[2:]
    in_g, num_output = channels // group, out_g * group
    size = [s * (n - 1) + d * (k - 1) + 1 - 2 * p
            for n, k, s, p, d in zip(x.shape[2:], kernel, stride, pad, dilation)]
    tops = []
    for volume in x.astype(np.float64):
        parts = []
        for g in range(group):
            w_g = w[g * in_g:(g + 1) * in_g].reshape(in_g, -1).astype(np.float64)
            col = w_g.T @ volume[g * in_g:(g + 1) * in_g].reshape(in_g, -1)
            parts.append(col2im_nd(col, out_g, size, kernel, stride, pad, dilation))
        top = np.concatenate(parts)
        if b is not None:
            top += b.reshape(num_output, *(1,) * len(kernel))
        tops.append(top)
    return np.stack(tops)


def conv_text(params, layer_type="Convolution", name="conv"):
    return (f'layer {{ name: "{name}" type: "{layer_type}" bottom: "data" top: "{name}" '
            f"convolution_param {{ {params} }} }}\n")


def input_text(shape):
    dims = " ".join(f"dim: {d}" for d in shape)
    return f'layer {{ name: "in" type: "Input" top: "data" input_param {{ shape {{ {dims} }} }} }}\n'


def values(name, triple):
    return " ".join(f"{name}: {v}" for v in triple)


CONV_CASES = [
    # kernel / pad / stride per axis, groups
    (dict(kernel=(3, 2, 3), stride=(2, 1, 2), pad=(1, 0, 1), dilation=(1, 1, 1)), 2, True,
     (2, 4, 5, 4, 7), 6),
    # dilation per axis with a stride (run at stride 1, every stride-th kept)
    (dict(kernel=(2, 3, 2), stride=(1, 2, 2), pad=(1, 2, 0), dilation=(2, 1, 3)), 1, False,
     (1, 3, 6, 7, 8), 4),
    # group == channels (depthwise), one value for all axes
    (dict(kernel=(3, 3, 3), stride=(1, 1, 1), pad=(1, 1, 1), dilation=(1, 1, 1)), 3, True,
     (2, 3, 4, 5, 5), 6),
    # a kernel of one value, dilation 2 and stride 2 together
    (dict(kernel=(2, 2, 2), stride=(2, 2, 2), pad=(0, 0, 0), dilation=(2, 2, 2)), 1, True,
     (1, 2, 6, 5, 7), 3),
]


def case_params(geometry, group, bias, num_output):
    text = [f"num_output: {num_output}", values("kernel_size", geometry["kernel"]),
            values("stride", geometry["stride"]), values("pad", geometry["pad"]),
            values("dilation", geometry["dilation"]), f"group: {group}"]
    if not bias:
        text.append("bias_term: false")
    return " ".join(text)


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("geometry, group, bias, shape, num_output", CONV_CASES)
def test_convolution_3d_matches_caffe(data_format, geometry, group, bias, shape, num_output):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape).astype(F)
    w = rng.standard_normal((num_output, shape[1] // group, *geometry["kernel"])).astype(F)
    b = rng.standard_normal(num_output).astype(F)
    got = run_layers(conv_text(case_params(geometry, group, bias, num_output)), {"data": x},
                     {"conv": [w, b] if bias else [w]}, data_format)["conv"]
    want = conv_forward(x, w, b if bias else None, geometry["stride"], geometry["pad"],
                        geometry["dilation"], group)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


DECONV_CASES = [
    (dict(kernel=(2, 3, 4), stride=(2, 1, 2), pad=(0, 1, 1), dilation=(1, 1, 1)), 1, True,
     (2, 3, 3, 4, 3), 4),
    (dict(kernel=(3, 2, 2), stride=(1, 2, 3), pad=(1, 0, 1), dilation=(1, 2, 1)), 2, False,
     (1, 4, 3, 3, 2), 6),
]


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("geometry, group, bias, shape, num_output", DECONV_CASES)
def test_deconvolution_3d_matches_caffe(data_format, geometry, group, bias, shape, num_output):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape).astype(F)
    w = rng.standard_normal((shape[1], num_output // group, *geometry["kernel"])).astype(F)
    b = rng.standard_normal(num_output).astype(F)
    got = run_layers(conv_text(case_params(geometry, group, bias, num_output), "Deconvolution",
                               "deconv"), {"data": x}, {"deconv": [w, b] if bias else [w]},
                     data_format)["deconv"]
    want = deconv_forward(x, w, b if bias else None, geometry["stride"], geometry["pad"],
                          geometry["dilation"], group)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.layer_type("Convolution")
@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_3d_weights_from_a_caffemodel_and_back(data_format, tmp_path):
    """Blobs in Caffe's layout (num_output, C / group, kD, kH, kW) and (C,
    num_output / group, kD, kH, kW) from a binary .caffemodel; exported
    again unchanged."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 4, 4, 5, 6)).astype(F)
    blobs = {"conv": [rng.standard_normal((6, 2, 3, 1, 2)).astype(F),
                      rng.standard_normal(6).astype(F)],
             "deconv": [rng.standard_normal((6, 1, 2, 2, 3)).astype(F)]}
    saved = caffe_pb2.NetParameter()
    for name, arrays in blobs.items():
        layer = saved.layer.add(name=name)
        for array in arrays:
            proto = layer.blobs.add()
            proto.shape.dim.extend(array.shape)
            proto.data.extend(array.ravel().tolist())
    path = tmp_path / "nd.caffemodel"
    path.write_bytes(saved.SerializeToString())
    text = (input_text(x.shape)
            + conv_text("num_output: 6 kernel_size: 3 kernel_size: 1 kernel_size: 2 group: 2 "
                        "pad: 1 stride: 1 stride: 2 stride: 1")
            + 'layer { name: "deconv" type: "Deconvolution" bottom: "conv" top: "deconv" '
              'convolution_param { num_output: 6 kernel_size: 2 kernel_size: 2 kernel_size: 3 '
              'group: 6 stride: 2 bias_term: false } }\n')
    model = import_model(text, weights=path, data_format=data_format)
    got = from_keras_layout(keras.ops.convert_to_numpy(model(to_keras_layout(x, data_format))),
                            data_format)
    top = conv_forward(x, *blobs["conv"], (1, 2, 1), (1, 1, 1), (1, 1, 1), 2)
    want = deconv_forward(top, blobs["deconv"][0], None, (2, 2, 2), (0, 0, 0), (1, 1, 1), 6)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    keras_caffe.export_caffemodel(model, tmp_path / "again.caffemodel")
    again = load_weights(tmp_path / "again.caffemodel")
    for name, arrays in blobs.items():
        for mine, theirs in zip(again[name], arrays):
            np.testing.assert_array_equal(mine, theirs)


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_convolution_3d_gradients(data_format):
    """Input and weight gradients of sum(top * cotangent) against finite
    differences of Caffe's forward (linear: exact up to rounding)."""
    rng = np.random.default_rng(3)
    stride, pad, dilation = (1, 2, 1), (1, 0, 1), (2, 1, 1)
    x = rng.standard_normal((1, 4, 5, 5, 4)).astype(F)
    w = rng.standard_normal((4, 2, 2, 3, 2)).astype(F)
    b = rng.standard_normal(4).astype(F)
    text = input_text(x.shape) + conv_text(
        "num_output: 4 group: 2 kernel_size: 2 kernel_size: 3 kernel_size: 2 stride: 1 "
        "stride: 2 stride: 1 pad: 1 pad: 0 pad: 1 dilation: 2 dilation: 1 dilation: 1")
    model = import_model(text, data_format=data_format)
    layer = model.get_layer("conv")
    layer.set_caffe_blobs([w, b])
    top = conv_forward(x, w, b, stride, pad, dilation, 2)
    cotangent = rng.standard_normal(top.shape).astype(F)
    grad_x, (grad_kernel,) = backward(model, x, cotangent, data_format, [layer.kernel])
    grads = (grad_x, layer.caffe_from_keras_weights([grad_kernel])[0])
    eps = 1e-2
    for which, grad in enumerate(grads):
        probe = rng.standard_normal(x.shape if which == 0 else w.shape)
        dx, dw = (probe, 0) if which == 0 else (0, probe)
        numeric = np.sum((conv_forward(x + eps * dx, w + eps * dw, b, stride, pad, dilation, 2)
                          - conv_forward(x - eps * dx, w - eps * dw, b, stride, pad, dilation, 2))
                         * cotangent) / (2 * eps)
        assert np.sum(grad * probe) == pytest.approx(numeric, rel=1e-4, abs=1e-3)


@pytest.mark.layer_type("Deconvolution")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_deconvolution_3d_gradients(data_format):
    rng = np.random.default_rng(4)
    stride, pad, dilation = (2, 1, 2), (0, 1, 1), (1, 1, 1)
    x = rng.standard_normal((1, 2, 2, 3, 3)).astype(F)
    w = rng.standard_normal((2, 3, 2, 3, 3)).astype(F)
    b = rng.standard_normal(3).astype(F)
    text = input_text(x.shape) + conv_text(
        "num_output: 3 kernel_size: 2 kernel_size: 3 kernel_size: 3 stride: 2 stride: 1 "
        "stride: 2 pad: 0 pad: 1 pad: 1", "Deconvolution", "deconv")
    model = import_model(text, data_format=data_format)
    layer = model.get_layer("deconv")
    layer.set_caffe_blobs([w, b])
    top = deconv_forward(x, w, b, stride, pad, dilation, 1)
    cotangent = rng.standard_normal(top.shape).astype(F)
    grad_x, (grad_kernel,) = backward(model, x, cotangent, data_format, [layer.kernel])
    grads = (grad_x, layer.caffe_from_keras_weights([grad_kernel])[0])
    eps = 1e-2
    for which, grad in enumerate(grads):
        probe = rng.standard_normal(x.shape if which == 0 else w.shape)
        dx, dw = (probe, 0) if which == 0 else (0, probe)
        numeric = np.sum((deconv_forward(x + eps * dx, w + eps * dw, b, stride, pad, dilation, 1)
                          - deconv_forward(x - eps * dx, w - eps * dw, b, stride, pad, dilation,
                                           1)) * cotangent) / (2 * eps)
        assert np.sum(grad * probe) == pytest.approx(numeric, rel=1e-4, abs=1e-3)


@pytest.mark.layer_type("Convolution")
@pytest.mark.layer_type("Deconvolution")
def test_3d_shapes_and_macs_in_analyze():
    text = (input_text((2, 4, 8, 10, 12))
            + conv_text("num_output: 6 group: 2 kernel_size: 3 kernel_size: 3 kernel_size: 5 "
                        "pad: 1 pad: 0 pad: 2 stride: 2 dilation: 1 dilation: 2 dilation: 1")
            + 'layer { name: "deconv" type: "Deconvolution" bottom: "conv" top: "deconv" '
              'convolution_param { num_output: 2 kernel_size: 2 stride: 2 pad: 1 pad: 0 pad: 0 '
              'bias_term: false } }\n')
    rows = {r.name: r for r in analyze(text, batch=None).layers}
    # D: (8 + 2 - 3) / 2 + 1 = 4; H: (10 - 5) / 2 + 1 = 3; W: (12 + 4 - 5) / 2 + 1 = 6
    assert rows["conv"].tops == (("conv", (2, 6, 4, 3, 6)),)
    assert rows["conv"].weight_shapes == ((6, 2, 3, 3, 5), (6,))
    assert rows["conv"].forward_flops == 2 * (2 * 6 * 4 * 3 * 6) * 2 * 45
    # D: 2 * 3 + 2 - 2 = 6; H: 2 * 2 + 2 = 6; W: 2 * 5 + 2 = 12
    assert rows["deconv"].tops == (("deconv", (2, 2, 6, 6, 12)),)
    assert rows["deconv"].weight_shapes == ((6, 2, 2, 2, 2),)
    assert rows["deconv"].forward_flops == 2 * (2 * 6 * 4 * 3 * 6) * 2 * 8
    model = import_model(text, data_format="channels_first")
    assert model.get_layer("conv").caffe_blob_shapes() == [(6, 2, 3, 3, 5), (6,)]
    assert model.get_layer("deconv").caffe_blob_shapes() == [(6, 2, 2, 2, 2)]
    assert tuple(model.output.shape)[1:] == (2, 6, 6, 12)


@pytest.mark.layer_type("Convolution")
@pytest.mark.layer_type("Deconvolution")
def test_3d_model_saves_and_reloads(tmp_path):
    rng = np.random.default_rng(5)
    text = (input_text((1, 2, 3, 4, 4)) + conv_text("num_output: 4 kernel_size: 2 pad: 1 group: 2")
            + 'layer { name: "deconv" type: "Deconvolution" bottom: "conv" top: "deconv" '
              'convolution_param { num_output: 2 kernel_size: 2 stride: 2 group: 2 } }\n')
    model = import_model(text)
    load_into(model, {"conv": [rng.standard_normal((4, 1, 2, 2, 2)).astype(F),
                               rng.standard_normal(4).astype(F)],
                      "deconv": [rng.standard_normal((4, 1, 2, 2, 2)).astype(F),
                                 rng.standard_normal(2).astype(F)]})
    model.save(tmp_path / "m.keras")
    again = keras.models.load_model(tmp_path / "m.keras")
    x = rng.standard_normal((1, 3, 4, 4, 2)).astype(F)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(again(x)),
                               keras.ops.convert_to_numpy(model(x)), rtol=1e-6)


def error_of(text, shape):
    with pytest.raises(LayerError) as err:
        import_model(input_text(shape) + text)
    return str(err.value)


@pytest.mark.layer_type("Convolution")
@pytest.mark.parametrize("params, shape, message", [
    ("num_output: 2 kernel_size: 3 kernel_size: 3", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) kernel_size has 2 values for 3 spatial axes"),
    ("num_output: 2 kernel_size: 3 pad: 1 pad: 1", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) pad has 2 values for 3 spatial axes"),
    ("num_output: 2 kernel_size: 3 stride: 1 stride: 1 stride: 1 stride: 1", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) stride has 4 values for 3 spatial axes"),
    ("num_output: 2 kernel_size: 1 dilation: 1 dilation: 2", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) dilation has 2 values for 3 spatial axes"),
    ("num_output: 2 kernel_h: 3 kernel_w: 3", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) kernel_h/kernel_w are for 2 spatial axes, the input has 3"),
    ("num_output: 2 kernel_size: 3 stride_h: 2 stride_w: 2", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) stride_h/stride_w are for 2 spatial axes, the input has 3"),
    ("num_output: 3 kernel_size: 1 group: 2", (1, 4, 4, 4, 4),
     "layer 'conv': (Convolution) group 2 must divide the 4 input channels and num_output 3"),
    ("num_output: 2 kernel_size: 1 axis: 2", (1, 1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) over axis 2 is not supported for a 6-D blob "
     "(1, 1, 2, 4, 4, 4): only 2-D (N, C, H, W) or 3-D (N, C, D, H, W) over axis 1"),
    ("num_output: 2 kernel_size: 1", (1, 2, 3, 4, 4, 4),
     "layer 'conv': (Convolution) over axis 1 is not supported for a 6-D blob "
     "(1, 2, 3, 4, 4, 4): only 2-D (N, C, H, W) or 3-D (N, C, D, H, W) over axis 1"),
    ("num_output: 2 kernel_size: 3 kernel_size: 5 kernel_size: 3", (1, 2, 4, 4, 4),
     "layer 'conv': (Convolution) kernel extent 5 exceeds the padded input size 4 (input shape "
     "(1, 2, 4, 4, 4))"),
])
def test_convolution_3d_bad_parameters(params, shape, message):
    assert error_of(conv_text(params), shape) == message


@pytest.mark.layer_type("Deconvolution")
def test_deconvolution_3d_bad_parameters():
    assert error_of(conv_text("num_output: 2 kernel_size: 2 kernel_size: 2", "Deconvolution",
                              "deconv"), (1, 2, 3, 3, 3)) == (
        "layer 'deconv': (Deconvolution) kernel_size has 2 values for 3 spatial axes")
    assert error_of(conv_text("num_output: 2 kernel_size: 1 pad: 0 pad: 1 pad: 0",
                              "Deconvolution", "deconv"), (1, 2, 3, 2, 3)) == (
        "layer 'deconv': (Deconvolution) pad (0, 1, 0) leaves no output for input (3, 2, 3) "
        "with kernel (1, 1, 1), stride (1, 1, 1), dilation (1, 1, 1)")


@pytest.mark.layer_type("Pooling")
def test_bvlc_pooling_refuses_3d_blobs():
    """pooling_layer.cpp: ``CHECK_EQ(4, bottom[0]->num_axes())`` (C3D's
    Pooling3D pools volumes)."""
    text = ('layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" '
            'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n')
    assert error_of(text, (1, 2, 3, 4, 4)) == (
        "layer 'pool': (Pooling) needs a 4-D input (N, C, H, W), got (1, 2, 3, 4, 4)")

"""A float64 numpy interpreter of Caffe nets in the TEST phase, independent of
keras-caffe: the reference the end-to-end tests on public nets compare with.

Each layer type is a numpy port of its ``Forward_cpu`` (the source is named
in each function's docstring; BVLC Caffe master 9b891540 unless a fork is
named). Blobs are (N, C, H, W) arrays; ``run(net, inputs, weights)`` runs a
parsed ``NetParameter`` (layers of the TEST phase, in order, in-place tops
overwriting their bottoms as in Caffe) and returns every blob.
"""

import math

import numpy as np

FORWARD = {}


def forward(*types):
    def register(fn):
        for t in types:
            FORWARD[t] = fn
        return fn
    return register


def _conv_param(p):
    """kernel, stride, pad, dilation (h, w) of a ConvolutionParameter: the
    ``_h``/``_w`` fields, else the repeated field (one value or two)."""
    def pair(h, w, values, default):
        if h or w:
            return h, w
        return (values[0], values[-1]) if len(values) else (default, default)

    return (pair(p.kernel_h, p.kernel_w, p.kernel_size, 1), pair(p.stride_h, p.stride_w, p.stride, 1),
            pair(p.pad_h, p.pad_w, p.pad, 0), pair(0, 0, p.dilation, 1))


def conv2d(x, w, b, stride, pad, dilation, group):
    """conv_layer.cpp / im2col.cpp: cross-correlation, zero padding, groups."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, pad, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1
    ow = (wd + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1
    cols = np.empty((n, c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh,
                                  j * dw:j * dw + sw * (ow - 1) + 1:sw]
    og = o // group
    cols = cols.reshape(n, group, cg * kh * kw, oh * ow)
    kernels = w.reshape(group, og, cg * kh * kw)
    out = np.matmul(kernels[None], cols).reshape(n, o, oh, ow)   # (n, group, og, oh*ow)
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


@forward("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution")
def _convolution(layer, bottoms, blobs):
    """conv_layer.cpp; the depthwise forks' types are group = channels."""
    p = layer.convolution_param
    kernel, stride, pad, dilation = _conv_param(p)
    group = bottoms[0].shape[1] if "epthwise" in layer.type else p.group
    bias = blobs[1] if p.bias_term else None
    return [conv2d(x, blobs[0], bias, stride, pad, dilation, group) for x in bottoms]


@forward("Pooling")
def _pooling(layer, bottoms, blobs):
    """pooling_layer.cpp (Reshape: ceil rounding, the last window starting in
    the image; Forward_cpu MAX with its mask = h * W + w, first maximum; AVE
    dividing by the window clipped to the padded image)."""
    p = layer.pooling_param
    x = bottoms[0]
    n, c, h, w = x.shape
    if p.global_pooling:
        (kh, kw), (sh, sw), (ph, pw) = (h, w), (1, 1), (0, 0)
    else:
        kh, kw = (p.kernel_h, p.kernel_w) if p.kernel_h else (p.kernel_size, p.kernel_size)
        sh, sw = (p.stride_h, p.stride_w) if p.stride_h else (p.stride, p.stride)
        ph, pw = (p.pad_h, p.pad_w) if (p.pad_h or p.pad_w) else (p.pad, p.pad)
    rounding = math.floor if p.round_mode == 1 else math.ceil
    oh = int(rounding((h + 2 * ph - kh) / sh)) + 1
    ow = int(rounding((w + 2 * pw - kw) / sw)) + 1
    if ph or pw:
        oh -= (oh - 1) * sh >= h + ph
        ow -= (ow - 1) * sw >= w + pw
    top = np.empty((n, c, oh, ow))
    mask = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * sh - ph, j * sw - pw
            if p.pool == 0:  # MAX
                h1, w1 = min(h0 + kh, h), min(w0 + kw, w)
                h0, w0 = max(h0, 0), max(w0, 0)
                window = x[:, :, h0:h1, w0:w1].reshape(n, c, -1)
                arg = window.argmax(-1)
                top[:, :, i, j] = window.max(-1)
                mask[:, :, i, j] = (h0 + arg // (w1 - w0)) * w + w0 + arg % (w1 - w0)
            else:  # AVE
                h1, w1 = min(h0 + kh, h + ph), min(w0 + kw, w + pw)
                size = (h1 - h0) * (w1 - w0)
                h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
                top[:, :, i, j] = x[:, :, h0:h1, w0:w1].sum((2, 3)) / size
    return [top, mask][:len(layer.top)]


@forward("BatchNorm")
def _batch_norm(layer, bottoms, blobs):
    """batch_norm_layer.cpp, use_global_stats: mean and variance divided by
    the scale factor blob (0 -> 0)."""
    f = blobs[2].ravel()[0]
    f = 0.0 if f == 0 else 1.0 / f
    shape = (1, -1) + (1,) * (bottoms[0].ndim - 2)
    mean, var = (blobs[0] * f).reshape(shape), (blobs[1] * f).reshape(shape)
    return [(bottoms[0] - mean) / np.sqrt(var + layer.batch_norm_param.eps)]


@forward("Scale")
def _scale(layer, bottoms, blobs):
    """scale_layer.cpp, axis 1: a learned (C,) scale, or a second bottom."""
    x = bottoms[0]
    scale = bottoms[1] if len(bottoms) > 1 else blobs[0]
    shape = (1,) + scale.shape[-scale.ndim:] + (1,) * (x.ndim - 1 - scale.ndim)
    if len(bottoms) > 1:
        shape = scale.shape + (1,) * (x.ndim - scale.ndim)
    y = x * scale.reshape(shape)
    if layer.scale_param.bias_term:
        y = y + blobs[-1].reshape(shape)
    return [y]


@forward("BN")
def _segnet_bn(layer, bottoms, blobs):
    """caffe-segnet bn_layer.cpp, bn_mode INFERENCE: x * scale + shift."""
    return [bottoms[0] * blobs[0].reshape(1, -1, 1, 1) + blobs[1].reshape(1, -1, 1, 1)]


@forward("ReLU")
def _relu(layer, bottoms, blobs):
    """relu_layer.cpp."""
    x = bottoms[0]
    return [np.maximum(x, 0) + layer.relu_param.negative_slope * np.minimum(x, 0)]


@forward("Sigmoid")
def _sigmoid(layer, bottoms, blobs):
    """sigmoid_layer.cpp."""
    return [1 / (1 + np.exp(-bottoms[0]))]


@forward("Dropout", "Split")
def _identity(layer, bottoms, blobs):
    """dropout_layer.cpp in TEST; split_layer.cpp."""
    return [bottoms[0]] * len(layer.top)


@forward("Softmax")
def _softmax(layer, bottoms, blobs):
    """softmax_layer.cpp over ``axis``."""
    x = bottoms[0]
    e = np.exp(x - x.max(layer.softmax_param.axis, keepdims=True))
    return [e / e.sum(layer.softmax_param.axis, keepdims=True)]


@forward("LRN")
def _lrn(layer, bottoms, blobs):
    """lrn_layer.cpp, ACROSS_CHANNELS: x * (k + alpha/n * sum x^2)^-beta."""
    p = layer.lrn_param
    x = bottoms[0]
    pre = (p.local_size - 1) // 2
    sq = np.pad(x * x, ((0, 0), (pre, p.local_size - 1 - pre), (0, 0), (0, 0)))
    window = sum(sq[:, i:i + x.shape[1]] for i in range(p.local_size))
    return [x * (p.k + p.alpha / p.local_size * window) ** -p.beta]


@forward("Eltwise")
def _eltwise(layer, bottoms, blobs):
    """eltwise_layer.cpp: PROD, SUM (coeffs), MAX."""
    p = layer.eltwise_param
    if p.operation == 0:
        return [np.prod(bottoms, axis=0)]
    if p.operation == 2:
        return [np.max(bottoms, axis=0)]
    coeffs = list(p.coeff) or [1.0] * len(bottoms)
    return [sum(c * b for c, b in zip(coeffs, bottoms))]


@forward("Concat")
def _concat(layer, bottoms, blobs):
    """concat_layer.cpp."""
    return [np.concatenate(bottoms, axis=layer.concat_param.axis)]


@forward("InnerProduct")
def _inner_product(layer, bottoms, blobs):
    """inner_product_layer.cpp: axes from ``axis`` flattened, weights (out, in)."""
    p = layer.inner_product_param
    axis = p.axis % bottoms[0].ndim
    lead = bottoms[0].shape[:axis]
    x = bottoms[0].reshape(int(np.prod(lead)), -1)
    y = x @ blobs[0].reshape(blobs[0].shape[0], -1).T
    y = y + blobs[1] if p.bias_term else y
    return [y.reshape(lead + (-1,))]


@forward("Embed")
def _embed(layer, bottoms, blobs):
    """embed_layer.cpp: the weight rows of the indices, plus the bias."""
    y = blobs[0][bottoms[0].astype(int)]
    return [y + blobs[1] if layer.embed_param.bias_term else y]


@forward("LSTM")
def _lstm(layer, bottoms, blobs):
    """lstm_layer.cpp's unrolled net: ``test_recurrent.lstm_reference``."""
    from importers.layer_types.test_recurrent import lstm_reference

    static = bottoms[2] if len(bottoms) > 2 else None
    return [lstm_reference(bottoms[0], bottoms[1], blobs, static)[0]]


@forward("ShuffleChannel")
def _shuffle_channel(layer, bottoms, blobs):
    """ShuffleNet's shuffle_channel_layer.cpp: (g, C/g) -> (C/g, g)."""
    x = bottoms[0]
    n, c = x.shape[:2]
    g = layer.shuffle_channel_param.group
    return [x.reshape(n, g, c // g, *x.shape[2:]).swapaxes(1, 2).reshape(x.shape)]


@forward("Axpy")
def _axpy(layer, bottoms, blobs):
    """SENet's axpy_layer.cpp: a (N, C, 1, 1) * x + y."""
    a, x, y = bottoms
    return [a * x + y]


@forward("Upsample")
def _upsample(layer, bottoms, blobs):
    """caffe-segnet upsample_layer.cpp: each value to its mask's index in the
    top's H*W plane; the top's size is the bottom's times scale, less 1
    where pad_out_h/pad_out_w."""
    p = layer.upsample_param
    x, mask = bottoms
    n, c, h, w = x.shape
    th = p.upsample_h or h * p.scale - int(p.pad_out_h)
    tw = p.upsample_w or w * p.scale - int(p.pad_out_w)
    top = np.zeros((n, c, th * tw))
    idx = mask.reshape(n, c, -1).astype(int)
    np.put_along_axis(top, idx, x.reshape(n, c, -1), axis=2)
    return [top.reshape(n, c, th, tw)]


def run(net, inputs, weights):
    """Every blob of ``net`` (TEST phase) from ``inputs`` ({name: array}) and
    ``weights`` ({layer name: [arrays]})."""
    blobs = {k: np.asarray(v, np.float64) for k, v in inputs.items()}
    for layer in net.layer:
        if layer.type == "Input" or any(r.phase == 0 for r in layer.include):
            continue
        fn = FORWARD[layer.type]
        params = [np.asarray(b, np.float64) for b in weights.get(layer.name, [])]
        for name, value in zip(layer.top, fn(layer, [blobs[b] for b in layer.bottom], params)):
            blobs[name] = value
    return blobs


@forward("Flatten")
def _flatten(layer, bottoms, blobs):
    """flatten_layer.cpp: axes axis..end_axis into one."""
    x, p = bottoms[0], layer.flatten_param
    start, end = p.axis % x.ndim, p.end_axis % x.ndim
    return [x.reshape(x.shape[:start] + (-1,) + x.shape[end + 1:])]


@forward("Reshape")
def _reshape(layer, bottoms, blobs):
    """reshape_layer.cpp with axis 0, num_axes -1: 0 copies, -1 infers."""
    x = bottoms[0]
    dims = [x.shape[i] if d == 0 else d for i, d in enumerate(layer.reshape_param.shape.dim)]
    return [x.reshape(dims)]


@forward("Permute")
def _permute(layer, bottoms, blobs):
    """SSD's permute_layer.cpp: the listed axes first, the rest in order."""
    x = bottoms[0]
    order = list(layer.permute_param.order)
    order += [a for a in range(x.ndim) if a not in order]
    return [x.transpose(order)]


@forward("PriorBox")
def _prior_box(layer, bottoms, blobs):
    """SSD's prior_box_layer.cpp: ``test_prior_box.prior_box_reference``."""
    from importers.layer_types.test_prior_box import prior_box_reference

    p = layer.prior_box_param

    def opt(field):
        return getattr(p, field) if p.HasField(field) else None

    return [prior_box_reference(
        bottoms[0].shape[2:], bottoms[1].shape[2:], list(p.min_size), list(p.max_size),
        list(p.aspect_ratio), p.flip, p.clip, list(p.variance), opt("img_size"), opt("img_h"),
        opt("img_w"), opt("step"), opt("step_h"), opt("step_w"), p.offset)]


@forward("DetectionOutput")
def _detection_output(layer, bottoms, blobs):
    """SSD's detection_output_layer.cpp:
    ``test_detection_output.detection_output_reference`` (the fork's top,
    (1, 1, kept, 7))."""
    from keras_caffe.proto import caffe_pb2
    from importers.layer_types.test_detection_output import detection_output_reference

    p = layer.detection_output_param
    nms = p.nms_param
    return [detection_output_reference(
        *bottoms, p.num_classes, p.share_location, p.background_label_id,
        caffe_pb2.PriorBoxParameter.CodeType.Name(p.code_type), p.variance_encoded_in_target,
        p.keep_top_k, p.confidence_threshold if p.HasField("confidence_threshold") else None,
        nms.nms_threshold, nms.top_k if nms.HasField("top_k") else -1, nms.eta)]

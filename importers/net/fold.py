"""Folding BatchNorm (+ Scale) into the convolution before it, for inference.

For a Convolution whose output only a BatchNorm reads (and, optionally, a
Scale after it)::

    W' = W * gamma / sqrt(var + eps)          (per output channel)
    b' = (b - mean) * gamma / sqrt(var + eps) + beta

with Caffe's statistics ``mean = blob0 / blob2``, ``var = blob1 / blob2``
(``blob2 == 0`` means 0). Computed in float64, stored as float32.
"""

import numpy as np

from keras_caffe.errors import CaffeImportError
from keras_caffe.proto import caffe_pb2


def fold_batchnorm(net, weights, source):
    """Return ``(net, weights)`` with foldable BatchNorm/Scale layers folded."""
    if weights is None:
        raise CaffeImportError(f"{source}: fold_batchnorm needs the weights (it changes them)")
    weights = dict(weights)
    readers = {}
    for layer in net.layer:
        for bottom in layer.bottom:
            readers.setdefault(bottom, []).append(layer.name)
    by_name = {layer.name: layer for layer in net.layer}
    removed, renamed = set(), {}
    for layer in net.layer:
        if layer.type != "Convolution" or layer.name not in weights:
            continue
        chain = _chain_after(layer, net, readers, by_name)
        if not chain:
            continue
        bn, scale = chain
        if bn.name not in weights or (scale is not None and scale.name not in weights):
            continue
        weights[layer.name] = _folded(weights[layer.name], weights.pop(bn.name), bn,
                                      weights.pop(scale.name) if scale is not None else None, scale)
        removed.update(l.name for l in (bn, scale) if l is not None)
        last = scale if scale is not None else bn
        if last.top[0] != layer.top[0]:
            renamed[last.top[0]] = layer.top[0]
    folded = caffe_pb2.NetParameter()
    folded.CopyFrom(net)
    folded.ClearField("layer")
    for layer in net.layer:
        if layer.name in removed:
            continue
        new = folded.layer.add()
        new.CopyFrom(layer)
        if layer.type == "Convolution" and layer.name in weights and len(weights[layer.name]) == 2:
            new.convolution_param.bias_term = True
        for i, bottom in enumerate(new.bottom):
            new.bottom[i] = renamed.get(bottom, bottom)
    return folded, weights


def _chain_after(conv, net, readers, by_name):
    """(BatchNorm, Scale or None) reading only the conv's output, or None."""
    top = conv.top[0]
    bn_names = readers.get(top, [])
    after_conv = [name for name in bn_names if by_name[name].type == "BatchNorm"]
    if len(after_conv) != 1:
        return None
    bn = by_name[after_conv[0]]
    if bn.top[0] != top and len(readers.get(top, [])) != 1:
        return None  # someone else reads the pre-BatchNorm values
    if bn.batch_norm_param.HasField("use_global_stats") and not bn.batch_norm_param.use_global_stats:
        return None  # batch statistics even at test time: nothing to fold
    scale_names = [n for n in readers.get(bn.top[0], []) if by_name[n].type == "Scale"
                   and n != bn.name and len(by_name[n].bottom) == 1]
    scale = by_name[scale_names[0]] if len(scale_names) == 1 else None
    if scale is not None:
        p = scale.scale_param
        if p.axis != 1 or p.num_axes != 1:
            scale = None
    return bn, scale


def _folded(conv_blobs, bn_blobs, bn, scale_blobs, scale):
    w = conv_blobs[0].astype(np.float64)
    b = conv_blobs[1].astype(np.float64) if len(conv_blobs) > 1 else np.zeros(w.shape[0])
    s = float(bn_blobs[2].ravel()[0])
    factor = 0.0 if s == 0 else 1.0 / s
    mean = bn_blobs[0].astype(np.float64) * factor
    var = bn_blobs[1].astype(np.float64) * factor
    inv = 1.0 / np.sqrt(var + bn.batch_norm_param.eps)
    gamma = scale_blobs[0].astype(np.float64).ravel() if scale_blobs is not None else np.ones_like(mean)
    beta = (scale_blobs[1].astype(np.float64).ravel()
            if scale_blobs is not None and len(scale_blobs) > 1 else np.zeros_like(mean))
    multiplier = gamma * inv
    return [(w * multiplier[:, None, None, None]).astype(np.float32),
            ((b - mean) * multiplier + beta).astype(np.float32)]

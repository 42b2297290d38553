"""Correlation (FlowNet 2.0: lmb-freiburg/flownet2 src/caffe/layers/
correlation_layer.cpp for the shapes, correlation_layer.cu ``CorrelateData``
and ``CorrelateDataSubtract`` for the values; the CPU forward is
``NOT_IMPLEMENTED`` there).

``LayerSetUp`` requires ``kernel_size`` (odd) and ``max_displacement``;
``Reshape``: with the bottoms padded by ``pad``, ``border =
max_displacement + (kernel_size - 1) / 2``, the top is
``ceil((H + 2 pad - 2 border) / stride_1)`` by the same for W, with
``(2 r + 1)^2`` channels, ``r = max_displacement / stride_2``. The 2-D
layer reads neither ``do_abs`` nor ``single_direction`` (Correlation1D's):
they change nothing, as in the fork.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    FLOWNET2,
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.flownet import Correlation as KerasCorrelation
from keras_caffe.layers.flownet import correlation_size
from keras_caffe.proto import caffe_pb2


def geometry(layer, bottoms):
    """The checked parameters and the top shape."""
    need_bottoms(layer, bottoms, 2)
    p = layer.correlation_param
    for field in ("kernel_size", "max_displacement"):
        if not p.HasField(field):
            raise LayerError(layer.name, f"(Correlation) {field} is required")
    if p.kernel_size % 2 == 0:
        raise LayerError(layer.name, f"(Correlation) kernel_size must be odd, got {p.kernel_size}")
    for field in ("stride_1", "stride_2"):
        if getattr(p, field) < 1:
            raise LayerError(layer.name, f"(Correlation) {field} must be positive, got "
                                         f"{getattr(p, field)}")
    first, second = tuple(bottoms[0]), tuple(bottoms[1])
    if len(first) != 4:
        raise LayerError(layer.name, f"(Correlation) needs 4-D bottoms (N, C, H, W), got "
                                     f"{fmt(first)}")
    if first[1:] != second[1:] or (first[0] is not None and second[0] is not None
                                   and first[0] != second[0]):
        raise LayerError(layer.name, f"(Correlation) both bottoms must have one shape, got "
                                     f"{fmt(first)} and {fmt(second)}")
    args = (p.kernel_size, p.max_displacement, p.stride_1, p.pad)
    top_h, top_w = (correlation_size(n, *args) for n in first[2:])
    if top_h < 1 or top_w < 1:
        raise LayerError(layer.name, f"(Correlation) kernel_size {p.kernel_size} and "
                                     f"max_displacement {p.max_displacement} do not fit in the "
                                     f"input {fmt(first)} padded by {p.pad}")
    radius = p.max_displacement // p.stride_2
    return p, (first[0], (2 * radius + 1) ** 2, top_h, top_w)


@layer_type("Correlation")
class Correlation(LayerType):
    """FlowNetC's correlation of two feature maps: pad, kernel_size (odd),
    max_displacement, stride_1, stride_2, correlation_type MULTIPLY
    (sum of products) or SUBTRACT (sum of absolute differences), divided by
    kernel_size^2 * channels; do_abs and single_direction read by nothing."""

    origin = FLOWNET2
    examples = (
        Example("correlation_param { pad: 2 kernel_size: 1 max_displacement: 2 stride_1: 1 "
                "stride_2: 1 }", [(2, 3, 6, 7)] * 2),
        Example("correlation_param { pad: 1 kernel_size: 3 max_displacement: 2 stride_1: 2 "
                "stride_2: 2 correlation_type: SUBTRACT }", [(1, 2, 7, 6)] * 2),
    )

    def shapes(self, layer, bottoms, state):
        p, top = geometry(layer, bottoms)
        macs = count(top[1:]) * (top[0] or 1) * p.kernel_size ** 2 * bottoms[0][1]
        return Shapes([top], [], macs)

    def build(self, layer, bottoms, ctx):
        p, _ = geometry(layer, ctx.bottom_shapes)
        subtract = p.correlation_type == caffe_pb2.CorrelationParameter.SUBTRACT
        correlation = KerasCorrelation(p.kernel_size, p.max_displacement, p.stride_1,
                                       p.stride_2, p.pad, subtract=subtract,
                                       data_format=ctx.data_format,
                                       name=ctx.keras_name(layer.name))
        return [ctx.image_output(correlation([ctx.as_image(b, layer) for b in bottoms]))]

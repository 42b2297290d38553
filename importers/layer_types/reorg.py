"""Reorg (YOLOv2's passthrough; eric612/MobileNet-YOLO:
src/caffe/layers/reorg_layer.cpp and include/caffe/layers/reorg_layer.hpp's
``reorg_cpu``, darknet's ``reorg_cpu``; ncnn's ``Reorg``, OpenCV's
``ReorgLayer``).

``reorg_param { stride reverse }``. The fork's forward calls ``reorg_cpu``
with the bottom's sizes and ``forward = reverse``:

- ``reverse: false`` (YOLOv2): top ``(N, C*s^2, H/s, W/s)``; reading the
  top's memory as ``(C, H, W)`` and the bottom's as ``(C', H*s, W*s)``, ``C'
  = C/s^2``, ``top[c, h, w] = bottom[c % C', h*s + (c / C') / s, w*s + (c /
  C') % s]``: darknet's order, which is not a plain space-to-depth (OpenCV's
  Reorg computes the same; ncnn's ``mode`` 0 and 1 are the plain
  space-to-depth orders, so an ncnn model converted from darknet differs);
- ``reverse: true``: top ``(N, C/s^2, H*s, W*s)``, the same index mapping
  written the other way (not the inverse of ``reverse: false`` on the
  reorganized blob: each side reads the other through its own sizes).

Refused where the fork reads or writes outside its blobs: channels not a
multiple of ``s^2``; with ``reverse: false``, a height or width not a
multiple of ``s`` (the top is smaller than the bottom). The fork requires
``stride`` and refuses computing in place.

The gradient is the permutation's transpose, darknet's backward. The fork's
own ``Backward_cpu``/``Backward_gpu`` reorganize an internal blob (``diff_``)
that nothing writes, so the fork passes a zero gradient: a bug, not
reproduced. No weights, no multiply-adds.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    YOLO,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.yolo import Reorg as KerasReorg
from keras_caffe.layers.yolo import reorg_shape


def settings(layer, bottoms):
    """``ReorgLayer::LayerSetUp``'s checks: ``(stride, reverse)``."""
    p = layer.reorg_param

    def fail(message):
        raise LayerError(layer.name, f"(Reorg) {message}")

    need_bottoms(layer, bottoms, 1)
    if layer.top and layer.top[0] in layer.bottom:
        fail("does not compute in place (the fork refuses it); name another top")
    if not p.HasField("stride"):
        fail("reorg_param.stride is required")
    if p.stride < 1:
        fail(f"reorg_param.stride must be positive, got {p.stride}")
    shape = tuple(bottoms[0])
    if len(shape) != 4:
        fail(f"needs a 4-D input (N, C, H, W), got {fmt(shape)}")
    s = p.stride
    _, c, h, w = shape
    if c % (s * s):
        fail(f"the {c} channels are not a multiple of reorg_param.stride^2 = {s * s}")
    if not p.reverse and (h % s or w % s):
        fail(f"height {h} and width {w} must be multiples of reorg_param.stride {s} (the "
             "fork writes past its top otherwise)")
    return s, p.reverse


@layer_type("Reorg")
class Reorg(LayerType):
    """YOLOv2's Reorg (stride, reverse): darknet's space-to-depth order."""

    origin = YOLO
    examples = (
        Example("reorg_param { stride: 2 }", [(2, 8, 4, 6)]),
        Example("reorg_param { stride: 2 reverse: true }", [(1, 8, 3, 5)]),
        Example("reorg_param { stride: 3 }", [(1, 9, 6, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        stride, reverse = settings(layer, bottoms)
        return Shapes([reorg_shape(tuple(bottoms[0]), stride, reverse)])

    def build(self, layer, bottoms, ctx):
        stride, reverse = settings(layer, ctx.bottom_shapes)
        x = ctx.as_image(bottoms[0], layer)
        reorg = KerasReorg(stride, reverse, data_format=ctx.data_format,
                           name=ctx.keras_name(layer.name))
        return [ctx.image_output(reorg(x))]

"""Region (YOLOv2's region layer as the Caffe ports run it at inference:
openvinotoolkit/training_toolbox_caffe and sokeeffe/caffe_yolo
src/caffe/layers/region_layer.cpp ``RegionLayer::Forward_cpu``, darknet's
``forward_region_layer``; OpenVINO's ``RegionYolo`` with ``do_softmax``).

``region_param { classes coords num softmax }``: the bottom ``(N, num *
(coords + 1 + classes), H, W)`` holds, per anchor, the coordinates, the
objectness and the class scores, each an H x W plane. The top has the
bottom's shape: per anchor, logistic on planes 0 and 1 (x, y) and on plane
``coords`` (objectness), softmax over the ``classes`` planes after it (per
cell; with ``softmax: false`` they pass through, as darknet's forward does
without ``softmax``), the other coordinates unchanged. ``biases`` (the
anchors) are read by the detection code after the layer, not by it.

Not reproduced: OpenCV's ``RegionLayer`` (the darknet importer's) goes on to
decode the boxes with its anchors into a ``(H * W * num, 5 + classes)``
table, thresholded and NMS-ed, which no Caffe port's forward does;
duangenquan/YoloV2NCS's variant transposes the blob to cell-major order and
activates the objectness only. The field names differ across forks (ncnn
reads no Region; YoloV2NCS's field 3 is ``boxes_of_each_grid``, here
``num``).

Inference only: the ports' ``Backward_cpu`` does nothing; the Keras layer
stops its input's gradient and a ``loss_weight`` on its top is refused. No
weights, no multiply-adds.
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
from keras_caffe.layers.yolo import Region as KerasRegion


def settings(layer, bottoms):
    """The Keras layer's arguments, after the forks' implicit checks."""
    p = layer.region_param

    def fail(message):
        raise LayerError(layer.name, f"(Region) {message}")

    need_bottoms(layer, bottoms, 1)
    if p.classes < 1:
        fail(f"region_param.classes must be positive, got {p.classes}")
    if p.coords < 2:
        fail(f"region_param.coords must be at least 2 (x and y), got {p.coords}")
    if p.num < 1:
        fail(f"region_param.num must be positive, got {p.num}")
    if any(w != 0 for w in layer.loss_weight):
        fail("has no backward (the forks' does nothing), so its top cannot take a loss_weight")
    shape = tuple(bottoms[0])
    if len(shape) != 4:
        fail(f"needs a 4-D input (N, C, H, W), got {fmt(shape)}")
    size = p.coords + 1 + p.classes
    if shape[1] != p.num * size:
        fail(f"needs num * (coords + 1 + classes) = {p.num} * {size} = {p.num * size} "
             f"channels, got {shape[1]}")
    return dict(classes=p.classes, coords=p.coords, num=p.num, softmax=p.softmax)


@layer_type("Region")
class Region(LayerType):
    """YOLOv2's Region (classes, coords, num, softmax): logistic x, y and
    objectness, softmax classes, per anchor; the bottom's shape."""

    origin = YOLO
    examples = (
        Example("region_param { classes: 3 coords: 4 num: 2 }", [(2, 16, 3, 4)]),
        Example("region_param { classes: 2 coords: 4 num: 1 softmax: false }",
                [(1, 7, 2, 2)]),
    )

    def shapes(self, layer, bottoms, state):
        settings(layer, bottoms)
        return Shapes([tuple(bottoms[0])])

    def build(self, layer, bottoms, ctx):
        kwargs = settings(layer, ctx.bottom_shapes)
        x = ctx.as_image(bottoms[0], layer)
        region = KerasRegion(**kwargs, data_format=ctx.data_format,
                             name=ctx.keras_name(layer.name))
        return [ctx.image_output(region(x))]

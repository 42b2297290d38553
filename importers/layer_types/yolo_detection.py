"""YoloDetectionOutput and Yolov3DetectionOutput (eric612/MobileNet-YOLO:
src/caffe/layers/yolo_detection_output_layer.cpp and
yolov3_detection_output_layer.cpp; ncnn's tools/caffe/caffe2ncnn.cpp reads
the same parameters for its ``YoloDetectionOutput``/``Yolov3DetectionOutput``).

Bottoms: the heads, ``(N, num_box * (5 + num_classes), H, W)``: per anchor
(anchor-major channels) x, y, w, h, objectness, then the class scores.

The fork's top is ``(1, 1, num_kept, 7)``, rows ``[image_id, label, score,
xmin, ymin, xmax, ymax]`` (label = class + 1, coordinates relative to the
image, not clipped), ``num_kept`` known only after the forward. As SSD's
``DetectionOutput`` here (``detection_output.py``), the Keras top, and this
shape rule, is ``(N, 1, D, 7)``: per image, its detections in the fork's
order (by score), then rows ``[i, -1, -1, -1, -1, -1, -1]``; D is the most
candidates an image can have (YOLOv2: ``sum H*W*num_box``; YOLOv3: ``sum
H*W*num_box*num_classes``, each anchor being a candidate per class above the
threshold). ``keras_caffe.layers.ssd.caffe_detections`` gives the fork's
blob. ncnn's top drops the image id: its rows are columns 1 to 6 of these.
The forks have no ``keep_top_k``: every kept detection is a row.

Differences from the fork, all where its result is undefined or a bug:

- a batch of several images: the fork pools every image's candidates into
  one NMS and writes image id 0 on every row; here each image is its own
  (image id ``i``), the fork's result for a batch of one;
- confidence ties: the fork's ``std::sort`` leaves their order unspecified;
  here the earlier candidate (head, row, column, anchor, class) comes first,
  and so wins NMS;
- YOLOv3's ``gaussian_box`` (Gaussian YOLOv3 heads) is refused, not
  modelled; YOLOv2's ``side``, ``coords`` and ``label_map_file`` are read by
  the fork but do not change its numbers (it takes the side from the
  width, reads 4 coordinates, uses the label map for names).

Refused where the fork would read outside its blobs or parameters: YOLOv2
heads not square, more than two of them (the fork reads two), fewer than
``2 * num_box`` biases; YOLOv3 bottoms other than ``mask_group_num``
(the fork CHECKs it), ``mask``/``biases``/``anchors_scale`` too short for
the heads; channels other than ``num_box * (5 + num_classes)``.

Inference only: the forks' Backward does nothing; the Keras layers stop
their inputs' gradients and a ``loss_weight`` is refused. No weights;
``analyze`` counts no multiply-adds (a few operations per candidate and the
comparisons of NMS).
"""

import math

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    YOLO,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.yolo import YoloDetectionOutput as KerasYoloDetectionOutput
from keras_caffe.layers.yolo import Yolov3DetectionOutput as KerasYolov3DetectionOutput
from keras_caffe.layers.yolo import yolo_rows, yolov3_rows


def _heads(layer, bottoms, num_box, num_classes, fail):
    """The heads' (H, W), after the shape checks shared by both types."""
    if any(w != 0 for w in layer.loss_weight):
        fail("has no backward (the fork's does nothing), so its top cannot take a loss_weight")
    size = 5 + num_classes
    sizes = []
    for i, shape in enumerate(bottoms):
        shape = tuple(shape)
        if len(shape) != 4:
            fail(f"bottom {i} must be 4-D (N, C, H, W), got {fmt(shape)}")
        if shape[1] != num_box * size:
            fail(f"bottom {i} needs num_box * (5 + num_classes) = {num_box} * {size} = "
                 f"{num_box * size} channels, got {shape[1]}")
        if bottoms[0][0] is not None and shape[0] is not None and shape[0] != bottoms[0][0]:
            fail(f"bottom {i} has batch {shape[0]}, bottom 0 has {bottoms[0][0]}")
        sizes.append(shape[2:])
    return sizes


def yolo_settings(layer, bottoms):
    """``YoloDetectionOutputLayer::LayerSetUp``'s checks: the Keras layer's
    arguments and the heads' (H, W)."""
    p = layer.yolo_detection_output_param

    def fail(message):
        raise LayerError(layer.name, f"(YoloDetectionOutput) {message}")

    need_bottoms(layer, bottoms, 1, 2)
    if not p.HasField("num_classes"):
        fail("yolo_detection_output_param.num_classes is required")
    if p.num_classes < 1:
        fail(f"yolo_detection_output_param.num_classes must be positive, got {p.num_classes}")
    if p.num_box < 1:
        fail(f"yolo_detection_output_param.num_box must be positive, got {p.num_box}")
    if len(p.biases) < 2 * p.num_box:
        fail(f"yolo_detection_output_param.biases needs 2 * num_box = {2 * p.num_box} values "
             f"(anchor widths and heights), got {len(p.biases)}")
    sizes = _heads(layer, bottoms, p.num_box, p.num_classes, fail)
    for i, (h, w) in enumerate(sizes):
        if h != w:
            fail(f"bottom {i} must be square (the fork takes its width {w} as the side), got "
                 f"height {h}")
    kwargs = dict(num_classes=p.num_classes, num_box=p.num_box, biases=list(p.biases),
                  confidence_threshold=p.confidence_threshold, nms_threshold=p.nms_threshold)
    return kwargs, sizes


def yolov3_settings(layer, bottoms):
    """``Yolov3DetectionOutputLayer::LayerSetUp``'s checks, and the reads of
    its forward made safe: the Keras layer's arguments and the heads' (H, W)."""
    p = layer.yolov3_detection_output_param

    def fail(message):
        raise LayerError(layer.name, f"(Yolov3DetectionOutput) {message}")

    need_bottoms(layer, bottoms, 1, math.inf)
    field = "yolov3_detection_output_param"
    if not p.HasField("num_classes"):
        fail(f"{field}.num_classes is required")
    if p.num_classes < 1:
        fail(f"{field}.num_classes must be positive, got {p.num_classes}")
    if p.num_box < 1:
        fail(f"{field}.num_box must be positive, got {p.num_box}")
    if p.gaussian_box:
        fail(f"{field}.gaussian_box (Gaussian YOLOv3 heads) is not supported")
    if p.mask_group_num != len(bottoms):
        fail(f"{field}.mask_group_num {p.mask_group_num} must be the number of bottoms, "
             f"{len(bottoms)}")
    if len(p.anchors_scale) < len(bottoms):
        fail(f"{field}.anchors_scale needs one value per bottom ({len(bottoms)}), got "
             f"{len(p.anchors_scale)}")
    if any(a < 1 for a in p.anchors_scale[:len(bottoms)]):
        fail(f"{field}.anchors_scale must be positive, got {list(p.anchors_scale)}")
    group = len(p.mask) // p.mask_group_num
    need = (len(bottoms) - 1) * group + p.num_box
    if len(p.mask) < need:
        fail(f"{field}.mask needs {need} values for {len(bottoms)} bottom(s) of num_box "
             f"{p.num_box} anchors, got {len(p.mask)}")
    used = [p.mask[t * group + n] for t in range(len(bottoms)) for n in range(p.num_box)]
    if 2 * max(used) + 2 > len(p.biases):
        fail(f"{field}.biases has {len(p.biases)} values, so no anchor {max(used)} for mask")
    sizes = _heads(layer, bottoms, p.num_box, p.num_classes, fail)
    kwargs = dict(num_classes=p.num_classes, num_box=p.num_box, biases=list(p.biases),
                  mask=list(p.mask), anchors_scale=list(p.anchors_scale)[:len(bottoms)],
                  mask_group_num=p.mask_group_num,
                  confidence_threshold=p.confidence_threshold, nms_threshold=p.nms_threshold)
    return kwargs, sizes


@layer_type("YoloDetectionOutput")
class YoloDetectionOutput(LayerType):
    """YOLOv2's detections on one or two square heads (num_classes, num_box,
    biases, confidence_threshold, nms_threshold): (N, 1, D, 7) rows."""

    origin = YOLO
    examples = (
        Example("yolo_detection_output_param { num_classes: 2 num_box: 2 "
                "confidence_threshold: 0.1 nms_threshold: 0.45 "
                "biases: 1 biases: 1.5 biases: 2 biases: 1 }", [(2, 14, 3, 3)]),
        Example("yolo_detection_output_param { num_classes: 1 num_box: 1 biases: 1 biases: 1 }",
                [(1, 6, 2, 2), (1, 6, 4, 4)]),
    )

    def shapes(self, layer, bottoms, state):
        kwargs, sizes = yolo_settings(layer, bottoms)
        rows = yolo_rows(sizes, kwargs["num_box"])
        return Shapes([(bottoms[0][0], 1, rows, 7)])

    def build(self, layer, bottoms, ctx):
        kwargs, _ = yolo_settings(layer, ctx.bottom_shapes)
        inputs = [ctx.as_image(b, layer) for b in bottoms]
        keras_layer = KerasYoloDetectionOutput(**kwargs, data_format=ctx.data_format,
                                               name=ctx.keras_name(layer.name))
        return [Blob(keras_layer(inputs))]


@layer_type("Yolov3DetectionOutput")
class Yolov3DetectionOutput(LayerType):
    """YOLOv3's detections on mask_group_num heads (num_classes, num_box,
    biases, mask, anchors_scale, confidence_threshold, nms_threshold):
    (N, 1, D, 7) rows."""

    origin = YOLO
    examples = (
        Example("yolov3_detection_output_param { num_classes: 2 num_box: 2 "
                "confidence_threshold: 0.3 nms_threshold: 0.45 biases: 10 biases: 14 "
                "biases: 23 biases: 27 biases: 37 biases: 58 biases: 81 biases: 82 "
                "anchors_scale: 32 anchors_scale: 16 mask_group_num: 2 "
                "mask: 2 mask: 3 mask: 0 mask: 1 }", [(2, 14, 2, 3), (2, 14, 4, 6)]),
        Example("yolov3_detection_output_param { num_classes: 1 num_box: 1 biases: 4 "
                "biases: 6 anchors_scale: 8 mask_group_num: 1 mask: 0 }", [(1, 6, 3, 2)]),
    )

    def shapes(self, layer, bottoms, state):
        kwargs, sizes = yolov3_settings(layer, bottoms)
        rows = yolov3_rows(sizes, kwargs["num_box"], kwargs["num_classes"])
        return Shapes([(bottoms[0][0], 1, rows, 7)])

    def build(self, layer, bottoms, ctx):
        kwargs, _ = yolov3_settings(layer, ctx.bottom_shapes)
        inputs = [ctx.as_image(b, layer) for b in bottoms]
        keras_layer = KerasYolov3DetectionOutput(**kwargs, data_format=ctx.data_format,
                                                 name=ctx.keras_name(layer.name))
        return [Blob(keras_layer(inputs))]

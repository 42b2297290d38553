"""The YOLO Caffe ports' layers (eric612/MobileNet-YOLO; ncnn and OpenCV read
the same types): Reorg, Region and the YOLOv2/YOLOv3 detection outputs.

- ``Reorg`` (``reorg_layer.hpp``'s ``reorg_cpu``, darknet's ``reorg_cpu``):
  darknet's space-to-depth, with darknet's own element order (the bottom's
  memory read as ``(C / s^2, H * s, W * s)``), or its inverse with
  ``reverse``.
- ``Region`` (the ports' ``region_layer.cpp``, darknet's
  ``forward_region_layer``): per anchor, logistic on x, y and the
  objectness, softmax over the classes; the top has the bottom's shape.
- ``YoloDetectionOutput`` / ``Yolov3DetectionOutput``
  (``yolo_detection_output_layer.cpp``, ``yolov3_detection_output_layer.cpp``):
  decode every anchor of every cell, keep those above the confidence
  threshold, sort by confidence, greedy class-agnostic NMS.

The detection outputs follow SSD's ``DetectionOutput`` here
(``keras_caffe.layers.ssd``): the fork's top ``(1, 1, num_kept, 7)``,
rows ``[image_id, label, score, xmin, ymin, xmax, ymax]``, has a
data-dependent size, so the Keras top is ``(N, 1, D, 7)``, each image's rows
in the fork's order, then ``[i, -1, -1, -1, -1, -1, -1]`` padding;
``keras_caffe.layers.ssd.caffe_detections`` turns it into the fork's blob.
"""

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import check_data_format, register, top_k


def _nchw(x, data_format):
    return x if data_format == "channels_first" else ops.transpose(x, (0, 3, 1, 2))


def _from_nchw(x, data_format):
    return x if data_format == "channels_first" else ops.transpose(x, (0, 2, 3, 1))


def _softmax(x, axis):
    """Softmax over ``axis``; 1 where it has one entry (Keras warns there)."""
    if x.shape[axis] == 1:
        return ops.ones_like(x)
    return ops.softmax(x, axis=axis)


# -- Reorg -------------------------------------------------------------------------


def reorg_shape(shape, stride, reverse):
    """The Caffe top shape ``(N, C', H', W')`` of a Reorg bottom ``(N, C, H, W)``."""
    n, c, h, w = shape
    if reverse:
        return (n, c // (stride * stride), h * stride, w * stride)
    return (n, c * stride * stride, h // stride, w // stride)


@register
class Reorg(keras.layers.Layer):
    """The YOLO ports' Reorg (darknet's ``reorg_cpu``), an element permutation.

    With ``reverse`` false, as the fork's forward calls ``reorg_cpu(bottom,
    W, H, C, N, s, forward=false, top)``: the top, read as ``(C, H, W)``,
    is ``top[c, h, w] = view[c % C', h*s + (c / C') / s, w*s + (c / C') % s]``
    where ``view`` is the bottom's memory read as ``(C', H*s, W*s)``, ``C' =
    C / s^2``; the top's shape is ``(C*s^2, H/s, W/s)``. With ``reverse``, the
    same mapping written the other way (``forward=true``): the top ``(C',
    H*s, W*s)`` gets ``top_view[...] = bottom[c, h, w]``.

    The gradient is the permutation's transpose (darknet's backward); see
    the unit's docstring for the fork's own backward.
    """

    def __init__(self, stride, reverse=False, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.stride = int(stride)
        self.reverse = bool(reverse)
        self.data_format = check_data_format(data_format)
        if self.stride < 1:
            raise ValueError(f"stride must be positive, got {stride}")

    def _check(self, shape):
        n, c, h, w = shape
        s2 = self.stride * self.stride
        if c % s2 or (not self.reverse and (h % self.stride or w % self.stride)):
            raise ValueError(f"Reorg with stride {self.stride} cannot reorganize channels, "
                             f"height, width {c}, {h}, {w}")

    def _caffe_shape(self, shape):
        shape = tuple(shape)
        if self.data_format == "channels_last":
            return (shape[0], shape[3], shape[1], shape[2])
        return shape

    def call(self, x):
        n, c, h, w = self._caffe_shape(x.shape)
        self._check((n, c, h, w))
        s = self.stride
        x = _nchw(x, self.data_format)
        tc = c // (s * s)
        if self.reverse:
            # bottom (s, s, C', H, W) [dy, dx, c2, h, w] -> top (C', H, s, W, s).
            x = ops.reshape(x, (-1, s, s, tc, h, w))
            x = ops.transpose(x, (0, 3, 4, 1, 5, 2))
            x = ops.reshape(x, (-1, tc, h * s, w * s))
        else:
            # view (C', H, s, W, s) [c2, h, dy, w, dx] -> top read as (s, s, C', H, W).
            x = ops.reshape(x, (-1, tc, h, s, w, s))
            x = ops.transpose(x, (0, 3, 5, 1, 2, 4))
            x = ops.reshape(x, (-1, c * s * s, h // s, w // s))
        return _from_nchw(x, self.data_format)

    def compute_output_shape(self, input_shape):
        n, c, h, w = reorg_shape(self._caffe_shape(input_shape), self.stride, self.reverse)
        if self.data_format == "channels_last":
            return (n, h, w, c)
        return (n, c, h, w)

    def get_config(self):
        config = super().get_config()
        config.update(stride=self.stride, reverse=self.reverse, data_format=self.data_format)
        return config


# -- Region ------------------------------------------------------------------------


@register
class Region(keras.layers.Layer):
    """YOLOv2's Region layer as the Caffe ports run it (darknet's
    ``forward_region_layer`` at inference): the channels are ``num`` anchors
    of ``coords + 1 + classes`` entries; per anchor and cell, logistic on
    entries 0 and 1 (x, y) and ``coords`` (the objectness), softmax over
    the ``classes`` entries after it (``softmax``; else they pass through);
    the other coordinates pass through. The top has the bottom's shape.
    No gradient (the ports' Backward does nothing)."""

    def __init__(self, classes, coords=4, num=5, softmax=True, data_format="channels_last",
                 **kwargs):
        super().__init__(**kwargs)
        self.classes = int(classes)
        self.coords = int(coords)
        self.num = int(num)
        self.softmax = bool(softmax)
        self.data_format = check_data_format(data_format)

    def call(self, x):
        x = ops.stop_gradient(ops.cast(x, "float32"))
        size = self.coords + 1 + self.classes
        if self.data_format == "channels_first":
            h, w = x.shape[2], x.shape[3]
            v = ops.reshape(x, (-1, self.num, size, h, w))
            axis = 2
        else:
            h, w = x.shape[1], x.shape[2]
            v = ops.reshape(x, (-1, h, w, self.num, size))
            axis = 4

        def part(start, stop):
            index = [slice(None)] * 5
            index[axis] = slice(start, stop)
            return v[tuple(index)]

        pieces = [ops.sigmoid(part(0, 2)), part(2, self.coords),
                  ops.sigmoid(part(self.coords, self.coords + 1))]
        scores = part(self.coords + 1, size)
        pieces.append(_softmax(scores, axis) if self.softmax else scores)
        pieces = [p for p in pieces if p.shape[axis] != 0]
        return ops.reshape(ops.concatenate(pieces, axis=axis), ops.shape(x))

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(classes=self.classes, coords=self.coords, num=self.num,
                      softmax=self.softmax, data_format=self.data_format)
        return config


# -- the detection outputs ----------------------------------------------------------


def _heads(inputs, num_box, data_format):
    """Each head ``(N, C, H, W)`` (or NHWC) as ``(N, H, W, num_box, C / num_box)``:
    cells row by row, then anchors, the fork's order of candidates."""
    heads = []
    for x in inputs:
        x = ops.stop_gradient(ops.cast(x, "float32"))
        if data_format == "channels_first":
            c, h, w = x.shape[1:]
            x = ops.reshape(x, (-1, num_box, c // num_box, h, w))
            x = ops.transpose(x, (0, 3, 4, 1, 2))
        else:
            h, w, c = x.shape[1:]
            x = ops.reshape(x, (-1, h, w, num_box, c // num_box))
        heads.append((x, h, w))
    return heads


def _cells(h, w, num_box):
    """The column and row of each cell, broadcast to ``(1, H, W, num_box)``."""
    cols = np.broadcast_to(np.arange(w, dtype=np.float32)[None, :, None], (h, w, num_box))
    rows = np.broadcast_to(np.arange(h, dtype=np.float32)[:, None, None], (h, w, num_box))
    return ops.convert_to_tensor(cols[None]), ops.convert_to_tensor(rows[None])


def _fork_iou(box, boxes):
    """The forks' ``box_iou`` of ``box`` (B, 4) with ``boxes`` (B, K, 4), both
    (x, y, w, h): float32, overlap ``right - left`` per axis, 0 when either
    is negative, over ``w1*h1 + w2*h2 - intersection``."""
    box = box[:, None, :]

    def overlap(axis):
        c1, s1 = box[..., axis], box[..., axis + 2]
        c2, s2 = boxes[..., axis], boxes[..., axis + 2]
        left = ops.maximum(c1 - s1 / 2.0, c2 - s2 / 2.0)
        right = ops.minimum(c1 + s1 / 2.0, c2 + s2 / 2.0)
        return right - left

    ow, oh = overlap(0), overlap(1)
    inter = ops.where(ops.logical_or(ow < 0, oh < 0), ops.zeros_like(ow), ow * oh)
    union = box[..., 2] * box[..., 3] + boxes[..., 2] * boxes[..., 3] - inter
    return inter / union


def _detections(score, valid, label, boxes, nms_threshold):
    """Sort (stable: the fork's candidate order breaks ties), NMS, rows.

    ``score``, ``valid``, ``label`` (B, K) and ``boxes`` (B, K, 4) as (x, y,
    w, h). The forks' ``ApplyNms``: in score order, a candidate not yet
    suppressed is kept and suppresses every later one whose IoU with it is
    ``>= nms_threshold``. Returns ``(B, 1, K, 7)``."""
    k = score.shape[1]
    batch = ops.shape(score)[0]
    masked = ops.where(valid, score, ops.full_like(score, -np.inf))
    values, order = top_k(masked, k)
    valid = ops.take_along_axis(valid, order, axis=1)
    label = ops.take_along_axis(label, order, axis=1)
    order4 = ops.broadcast_to(order[..., None], (batch, k, 4))
    boxes = ops.take_along_axis(boxes, order4, axis=1)
    positions = ops.arange(k, dtype="int32")
    threshold = np.float32(nms_threshold)

    def cond(available, kept):
        return ops.any(available)

    def body(available, kept):
        first = ops.min(ops.where(available, positions[None], ops.full_like(available, k,
                                                                           "int32")), axis=1)
        pick = ops.equal(positions[None], first[:, None])  # nothing where none is left
        box = ops.take_along_axis(boxes, ops.broadcast_to(
            ops.minimum(first, k - 1)[:, None, None], (batch, 1, 4)), axis=1)[:, 0]
        beaten = _fork_iou(box, boxes) >= threshold
        kept = ops.logical_or(kept, pick)
        available = ops.logical_and(available, ops.logical_not(ops.logical_or(pick, beaten)))
        return available, kept

    _, kept = ops.while_loop(cond, body, (valid, ops.zeros_like(valid)))

    # Kept candidates first, in score order; then padding.
    key = ops.where(kept, k - positions[None], ops.zeros_like(positions[None]))
    _, pick = top_k(ops.cast(key, "int32"), k)
    real = ops.take_along_axis(kept, pick, axis=1)
    x, y, w, h = (ops.take_along_axis(boxes[..., i], pick, axis=1) for i in range(4))
    image_id = ops.broadcast_to(ops.cast(ops.arange(batch), "float32")[:, None], (batch, k))
    rows = ops.stack([image_id, ops.take_along_axis(label, pick, axis=1) + 1.0,
                      ops.take_along_axis(values, pick, axis=1),
                      x - w / 2.0, y - h / 2.0, x + w / 2.0, y + h / 2.0], axis=-1)
    padding = ops.concatenate([image_id[..., None], -ops.ones((batch, k, 6), "float32")],
                              axis=-1)
    return ops.where(real[..., None], rows, padding)[:, None]


def yolo_rows(sizes, num_box):
    """YOLOv2's ``D``: one candidate per anchor and cell of each head (at least 1)."""
    return max(1, sum(int(h) * int(w) * num_box for h, w in sizes))


def yolov3_rows(sizes, num_box, num_classes):
    """YOLOv3's ``D``: one candidate per anchor, cell and class of each head."""
    return max(1, sum(int(h) * int(w) * num_box * num_classes for h, w in sizes))


class _YoloOutput(keras.layers.Layer):
    """What the two detection outputs share: their heads and rows."""

    def __init__(self, num_classes, num_box, biases, confidence_threshold=0.01,
                 nms_threshold=0.45, data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        self.num_box = int(num_box)
        self.biases = [float(b) for b in biases]
        self.confidence_threshold = float(confidence_threshold)
        self.nms_threshold = float(nms_threshold)
        self.data_format = check_data_format(data_format)

    def _hw(self, shape):
        shape = tuple(shape)
        return shape[2:4] if self.data_format == "channels_first" else shape[1:3]

    def compute_output_shape(self, input_shape):
        shapes = input_shape if isinstance(input_shape[0], (list, tuple)) else [input_shape]
        return (shapes[0][0], 1, self.rows([self._hw(s) for s in shapes]), 7)

    def call(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        score, valid, label, boxes = self._candidates(_heads(inputs, self.num_box,
                                                             self.data_format))
        return _detections(score, valid, label, boxes, self.nms_threshold)

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, num_box=self.num_box, biases=self.biases,
                      confidence_threshold=self.confidence_threshold,
                      nms_threshold=self.nms_threshold, data_format=self.data_format)
        return config


@register
class YoloDetectionOutput(_YoloOutput):
    """YOLOv2's detections (eric612/MobileNet-YOLO
    ``yolo_detection_output_layer.cpp``), inference only, on one or two heads
    ``(N, num_box * (5 + num_classes), S, S)`` (square: the fork takes the
    width as the side): per cell and anchor ``n``, box ``x = (col +
    sigmoid(tx)) / S``, ``y = (row + sigmoid(ty)) / S``, ``w = exp(tw) *
    biases[2n] / S``, ``h = exp(th) * biases[2n+1] / S``; confidence
    ``sigmoid(to) * max softmax(classes)`` (the first best class), kept when
    ``>= confidence_threshold``; label = class + 1.
    ``(N, 1, D, 7)``, ``D = sum S*S*num_box``."""

    def rows(self, sizes):
        return yolo_rows(sizes, self.num_box)

    def _candidates(self, heads):
        scores, valid, labels, boxes = [], [], [], []
        bias = np.asarray(self.biases[:2 * self.num_box], np.float32).reshape(self.num_box, 2)
        for x, h, w in heads:
            side = np.float32(w)
            cols, rows = _cells(h, w, self.num_box)
            probs = _softmax(x[..., 5:5 + self.num_classes], -1)
            best = ops.max(probs, axis=-1)
            label = ops.cast(ops.argmax(probs, axis=-1), "float32")
            confidence = ops.sigmoid(x[..., 4]) * best
            box = ops.stack([(cols + ops.sigmoid(x[..., 0])) / side,
                             (rows + ops.sigmoid(x[..., 1])) / side,
                             ops.exp(x[..., 2]) * bias[:, 0] / side,
                             ops.exp(x[..., 3]) * bias[:, 1] / side], axis=-1)
            count = h * w * self.num_box
            scores.append(ops.reshape(confidence, (-1, count)))
            valid.append(ops.reshape(confidence >= np.float32(self.confidence_threshold),
                                     (-1, count)))
            labels.append(ops.reshape(label, (-1, count)))
            boxes.append(ops.reshape(box, (-1, count, 4)))
        return tuple(ops.concatenate(part, axis=1) for part in (scores, valid, labels, boxes))


@register
class Yolov3DetectionOutput(_YoloOutput):
    """YOLOv3's detections (eric612/MobileNet-YOLO
    ``yolov3_detection_output_layer.cpp``, its CPU forward), inference only,
    on heads ``t`` ``(N, num_box * (5 + num_classes), H, W)``: anchor ``n``
    of head ``t`` is ``mask[t * (len(mask) // mask_group_num) + n]``; per
    cell, anchor and class, confidence ``sigmoid(to) * sigmoid(tc)``, a
    candidate when ``> confidence_threshold``, box ``x = (col +
    sigmoid(tx)) / W``, ``y = (row + sigmoid(ty)) / H``, ``w = exp(tw) *
    anchor_w / (W * anchors_scale[t])``, ``h = exp(th) * anchor_h / (H *
    anchors_scale[t])`` (its ``correct_yolo_boxes`` is the identity here);
    label = class + 1. ``(N, 1, D, 7)``, ``D = sum H*W*num_box*num_classes``."""

    def __init__(self, num_classes, num_box, biases, mask, anchors_scale, mask_group_num=2,
                 confidence_threshold=0.01, nms_threshold=0.45, data_format="channels_last",
                 **kwargs):
        super().__init__(num_classes, num_box, biases, confidence_threshold, nms_threshold,
                         data_format, **kwargs)
        self.mask = [int(m) for m in mask]
        self.anchors_scale = [int(a) for a in anchors_scale]
        self.mask_group_num = int(mask_group_num)

    def rows(self, sizes):
        return yolov3_rows(sizes, self.num_box, self.num_classes)

    def _candidates(self, heads):
        scores, valid, labels, boxes = [], [], [], []
        group = len(self.mask) // self.mask_group_num
        labels_row = np.arange(self.num_classes, dtype=np.float32)
        for t, (x, h, w) in enumerate(heads):
            anchors = np.asarray([self.biases[2 * self.mask[t * group + n]:
                                              2 * self.mask[t * group + n] + 2]
                                  for n in range(self.num_box)], np.float32)
            net_w = np.float32(w * self.anchors_scale[t])
            net_h = np.float32(h * self.anchors_scale[t])
            cols, rows = _cells(h, w, self.num_box)
            confidence = ops.sigmoid(x[..., 5:5 + self.num_classes]) * ops.sigmoid(
                x[..., 4:5])
            box = ops.stack([(cols + ops.sigmoid(x[..., 0])) / np.float32(w),
                             (rows + ops.sigmoid(x[..., 1])) / np.float32(h),
                             ops.exp(x[..., 2]) * anchors[:, 0] / net_w,
                             ops.exp(x[..., 3]) * anchors[:, 1] / net_h], axis=-1)
            count = h * w * self.num_box * self.num_classes
            box = ops.broadcast_to(box[..., None, :], (*ops.shape(confidence), 4))
            label = ops.broadcast_to(ops.convert_to_tensor(labels_row), ops.shape(confidence))
            scores.append(ops.reshape(confidence, (-1, count)))
            valid.append(ops.reshape(confidence > np.float32(self.confidence_threshold),
                                     (-1, count)))
            labels.append(ops.reshape(label, (-1, count)))
            boxes.append(ops.reshape(box, (-1, count, 4)))
        return tuple(ops.concatenate(part, axis=1) for part in (scores, valid, labels, boxes))

    def get_config(self):
        config = super().get_config()
        config.update(mask=self.mask, anchors_scale=self.anchors_scale,
                      mask_group_num=self.mask_group_num)
        return config

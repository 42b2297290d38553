"""YoloDetectionOutput and Yolov3DetectionOutput against numpy ports of the
fork's C++ (eric612/MobileNet-YOLO): src/caffe/layers/
yolo_detection_output_layer.cpp ``YoloDetectionOutputLayer::Forward_cpu``
with ``get_region_box``, ``class_index_and_score``, ``ApplyNms``,
``box_iou``/``box_intersection``/``overlap``; and
yolov3_detection_output_layer.cpp ``Yolov3DetectionOutputLayer::Forward_cpu``
(the CPU branch) with ``correct_yolo_boxes`` and src/caffe/util/bbox_util.cpp
``get_region_box``.

The ports give the fork's top ``(1, 1, num_kept, 7)`` for one image (the
fork pools a batch's images into one NMS; the Keras layer runs each image on
its own); ``padded`` lays each image's top out as the Keras ``(N, 1, D, 7)``.
Last, MobileNet-YOLOv3-lite's deploy net (eric612/MobileNet-YOLO) imports
with random weights and its detections are the port's on the net's heads.
"""

import math

import keras
import numpy as np
import pytest
from keras import ops

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from keras_caffe.layers.ssd import caffe_detections
from support import DATA_FORMATS, NETS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients

pytestmark = pytest.mark.kernels

DATA = NETS
f32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)


# -- the numpy ports -----------------------------------------------------------------


def sigmoid(x):
    """``1. / (1. + exp(-x))`` in double, stored as Dtype (float)."""
    return f32(1.0 / (1.0 + math.exp(-float(x))))


def box_iou(a, b):
    """box_iou(a, b) on (x, y, w, h), float as the fork's ``float`` locals."""
    def overlap(x1, w1, x2, w2):
        l1, l2 = f32(x1 - f32(w1 / f32(2))), f32(x2 - f32(w2 / f32(2)))
        r1, r2 = f32(x1 + f32(w1 / f32(2))), f32(x2 + f32(w2 / f32(2)))
        return f32(min(r1, r2) - max(l1, l2))

    w, h = overlap(a[0], a[2], b[0], b[2]), overlap(a[1], a[3], b[1], b[3])
    inter = f32(0) if (w < 0 or h < 0) else f32(w * h)
    union = f32(f32(f32(a[2] * a[3]) + f32(b[2] * b[3])) - inter)
    with np.errstate(divide="ignore", invalid="ignore"):
        return f32(inter / union)


def apply_nms(predicts, threshold):
    """std::sort by confidence (taken as stable: the fork's order of ties is
    unspecified), then ApplyNms: a box not yet suppressed suppresses every
    later one with IoU >= threshold."""
    predicts = sorted(predicts, key=lambda p: -p["confidence"])
    suppressed = set()
    for i in range(len(predicts) - 1):
        if i in suppressed:
            continue
        for j in range(i + 1, len(predicts)):
            if j not in suppressed and box_iou(predicts[i]["box"], predicts[j]["box"]) \
                    >= f32(threshold):
                suppressed.add(j)
    return [p for i, p in enumerate(predicts) if i not in suppressed]


def rows_of(kept, num):
    """The fork's top: rows [0, label + 1, confidence, left, top, right,
    bottom] (``x - w / 2.`` in double), else one [i, -1, ...] row per image."""
    if not kept:
        top = np.full((num, 7), -1, np.float32)
        top[:, 0] = np.arange(num)
        return top[None, None]
    rows = []
    for p in kept:
        x, y, w, h = (float(v) for v in p["box"])
        rows.append([0, p["label"] + 1, p["confidence"], x - w / 2.0, y - h / 2.0,
                     x + w / 2.0, y + h / 2.0])
    return np.asarray(rows, np.float32)[None, None]


def yolo_reference(bottoms, num_classes, biases, num_box=5, confidence_threshold=0.01,
                   nms_threshold=0.45):
    """YoloDetectionOutputLayer::Forward_cpu for one image: bottoms (1, C, S, S)."""
    predicts = []
    for bottom in bottoms[:2]:
        _, channels, _, side = bottom.shape
        # swap: (S*S, num_box, C / num_box), cells row by row.
        swap = bottom[0].transpose(1, 2, 0).reshape(side * side, num_box, channels // num_box)
        for j in range(side):
            for i in range(side):
                for n in range(num_box):
                    v = swap[j * side + i, n]
                    box = (f32(f32(i + sigmoid(v[0])) / side),
                           f32(f32(j + sigmoid(v[1])) / side),
                           f32(f32(f32(math.exp(float(v[2]))) * f32(biases[2 * n])) / side),
                           f32(f32(f32(math.exp(float(v[3]))) * f32(biases[2 * n + 1])) / side))
                    obj = sigmoid(v[4])
                    scores = v[5:5 + num_classes]
                    large = max(scores)
                    e = [f32(math.exp(float(f32(s - large)))) for s in scores]
                    total = f32(0)
                    for value in e:
                        total = f32(total + value)
                    probs = [f32(value / total) for value in e]
                    label, best = 0, probs[0]
                    for c, p in enumerate(probs):
                        if p > best:
                            label, best = c, p
                    confidence = f32(obj * best)
                    if confidence >= f32(confidence_threshold):
                        predicts.append(dict(box=box, label=label, confidence=confidence))
    return rows_of(apply_nms(predicts, nms_threshold), 1)


def yolov3_reference(bottoms, num_classes, biases, mask, anchors_scale, num_box=3,
                     mask_group_num=2, confidence_threshold=0.01, nms_threshold=0.45):
    """Yolov3DetectionOutputLayer::Forward_cpu for one image: bottoms (1, C, H, W)."""
    predicts = []
    group = len(mask) // mask_group_num
    length = 5 + num_classes
    for t, bottom in enumerate(bottoms):
        _, _, side_h, side_w = bottom.shape
        nw, nh = side_w * anchors_scale[t], side_h * anchors_scale[t]
        data = bottom[0].reshape(num_box, length, side_h * side_w)
        for s in range(side_h * side_w):
            y2, x2 = s // side_w, s % side_w
            for n in range(num_box):
                v = data[n, :, s]
                obj = sigmoid(v[4])
                anchor = mask[n + t * group]
                for c in range(num_classes):
                    score = f32(sigmoid(v[5 + c]) * obj)
                    if score > f32(confidence_threshold):
                        box = (f32(f32(x2 + sigmoid(v[0])) / side_w),
                               f32(f32(y2 + sigmoid(v[1])) / side_h),
                               f32(f32(f32(math.exp(float(v[2]))) * f32(biases[2 * anchor]))
                                   / nw),
                               f32(f32(f32(math.exp(float(v[3])))
                                       * f32(biases[2 * anchor + 1])) / nh))
                        # correct_yolo_boxes(relative=1): new_w == netw, new_h == neth,
                        # so (x - 0) / 1 and w * 1: the identity.
                        predicts.append(dict(box=box, label=c, confidence=score))
    return rows_of(apply_nms(predicts, nms_threshold), 1)


def per_image(reference, bottoms, rows, **kwargs):
    """The Keras layer's (N, 1, rows, 7): the fork's rows of each image run alone."""
    num = bottoms[0].shape[0]
    out = np.full((num, 1, rows, 7), -1, np.float32)
    out[:, 0, :, 0] = np.arange(num)[:, None]
    for i in range(num):
        mine = reference([b[i:i + 1] for b in bottoms], **kwargs)[0, 0]
        mine = mine[mine[:, 1] != -1]
        out[i, 0, :len(mine), 1:] = mine[:, 1:]
    return out


# -- running the layers ----------------------------------------------------------------


def yolo_text(num_classes, biases, num_box=5, confidence_threshold=None, nms_threshold=None,
              bottoms=("h0",), extra=""):
    params = f"num_classes: {num_classes} num_box: {num_box} " + " ".join(
        f"biases: {b}" for b in biases)
    if confidence_threshold is not None:
        params += f" confidence_threshold: {confidence_threshold}"
    if nms_threshold is not None:
        params += f" nms_threshold: {nms_threshold}"
    return ('layer { name: "det" type: "YoloDetectionOutput" '
            + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "det" {extra}yolo_detection_output_param {{ {params} }} }}\n')


def yolov3_text(num_classes, biases, mask, anchors_scale, num_box=3, mask_group_num=2,
                confidence_threshold=None, nms_threshold=None, bottoms=("h0", "h1"), extra=""):
    params = (f"num_classes: {num_classes} num_box: {num_box} mask_group_num: {mask_group_num} "
              + " ".join(f"biases: {b}" for b in biases) + " "
              + " ".join(f"mask: {m}" for m in mask) + " "
              + " ".join(f"anchors_scale: {a}" for a in anchors_scale))
    if confidence_threshold is not None:
        params += f" confidence_threshold: {confidence_threshold}"
    if nms_threshold is not None:
        params += f" nms_threshold: {nms_threshold}"
    return ('layer { name: "det" type: "Yolov3DetectionOutput" '
            + "".join(f'bottom: "{b}" ' for b in bottoms)
            + f'top: "det" {extra}yolov3_detection_output_param {{ {params} }} }}\n')


def run(text, heads, data_format="channels_last"):
    """The Keras top (N, 1, D, 7) of the layer on the heads (Caffe layout)."""
    return run_layers(text, {f"h{i}": h for i, h in enumerate(heads)},
                      data_format=data_format)["det"]


def check(kind, heads, data_format="channels_last", **kwargs):
    """The Keras top equals the port's, per image, and for one image the
    fork's blob itself; returns the Keras top."""
    if kind == "v2":
        text = yolo_text(bottoms=[f"h{i}" for i in range(len(heads))], **kwargs)
        reference = yolo_reference
    else:
        text = yolov3_text(bottoms=[f"h{i}" for i in range(len(heads))], **kwargs)
        reference = yolov3_reference
    got = run(text, heads, data_format)
    kwargs = {k: v for k, v in kwargs.items() if v is not None}  # the fork's defaults
    want = per_image(reference, heads, got.shape[2], **kwargs)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if heads[0].shape[0] == 1:
        np.testing.assert_allclose(caffe_detections(got), reference(heads, **kwargs),
                                   rtol=1e-5, atol=1e-6)
    return got


def heads_v2(rng, shapes, num_box, num_classes, scale=2.0):
    return [(scale * rng.standard_normal((n, num_box * (5 + num_classes), s, s))).astype(
        np.float32) for n, s in shapes]


VOC_BIASES = [1.08, 1.19, 3.42, 4.41, 6.63, 11.38, 9.42, 5.11, 16.62, 10.52]
TINY_BIASES = [10, 14, 23, 27, 37, 58, 81, 82, 135, 169, 344, 319]


# -- YOLOv2 --------------------------------------------------------------------------------


@pytest.mark.layer_type("YoloDetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("shapes, num_box, num_classes, confidence, nms", [
    ([(2, 3)], 5, 4, 0.3, 0.45),          # batch 2, one head
    ([(1, 3), (1, 5)], 2, 3, 0.2, 0.3),   # two heads (the fork's two-scale YOLOv2)
    ([(2, 2)], 1, 1, None, None),         # one class (probability 1); defaults 0.01, 0.45
    ([(1, 4)], 3, 6, 0.05, 0.7),
])
def test_yolo_matches_the_fork(data_format, shapes, num_box, num_classes, confidence, nms):
    rng = np.random.default_rng(len(shapes) + num_box)
    heads = heads_v2(rng, shapes, num_box, num_classes)
    got = check("v2", heads, data_format, num_classes=num_classes, num_box=num_box,
                biases=VOC_BIASES[:2 * num_box], confidence_threshold=confidence,
                nms_threshold=nms)
    assert got.shape == (shapes[0][0], 1, sum(s * s for _, s in shapes) * num_box, 7)
    assert (got[..., 1] != -1).any()


def cell_boxes(num_box, num_classes, side, logits):
    """One head (1, C, side, side) whose anchors are all far below any
    threshold, but the (row, col, anchor) -> (tx, ty, tw, th, obj, class
    logits) given in ``logits``."""
    head = np.zeros((1, num_box, 5 + num_classes, side, side), np.float32)
    head[:, :, 4] = -40
    for (row, col, n), values in logits.items():
        head[0, n, :len(values), row, col] = values
    return head.reshape(1, -1, side, side)


@pytest.mark.layer_type("YoloDetectionOutput")
@pytest.mark.parametrize("threshold, kept", [(1.0, 1), (0.999, 1)])
def test_yolo_keeps_a_confidence_equal_to_the_threshold(threshold, kept):
    """confidence >= confidence_threshold: sigmoid(40) * 1 is exactly 1.0."""
    head = cell_boxes(1, 1, 2, {(0, 1, 0): [0, 0, 0, 0, 40, 0]})
    got = check("v2", [head], num_classes=1, num_box=1, biases=[1, 1],
                confidence_threshold=threshold)
    assert (got[0, 0, :, 1] != -1).sum() == kept
    np.testing.assert_allclose(got[0, 0, 0], [0, 1, 1, 0.5, 0, 1, 0.5], atol=1e-6)


@pytest.mark.layer_type("YoloDetectionOutput")
@pytest.mark.parametrize("nms_threshold, kept", [(0.5, 1), (0.5000001, 2), (0.0, 1)])
def test_yolo_nms_suppresses_at_the_threshold(nms_threshold, kept):
    """Two anchors of one cell, same centre (0.375, 0.375), widths 0.5 and
    0.25, height 0.25: IoU exactly 0.5, suppressed when >= the threshold.
    Threshold 0 suppresses even a disjoint box (IoU 0 >= 0)."""
    head = cell_boxes(2, 1, 4, {(1, 1, 0): [0, 0, 0, 0, 5, 0],
                                (1, 1, 1): [0, 0, 0, 0, 4, 0]})
    if nms_threshold == 0.0:
        head = cell_boxes(2, 1, 4, {(1, 1, 0): [0, 0, 0, 0, 5, 0],
                                    (3, 3, 1): [0, 0, 0, 0, 4, 0]})
    got = check("v2", [head], num_classes=1, num_box=2, biases=[2, 1, 1, 1],
                nms_threshold=nms_threshold)
    assert (got[0, 0, :, 1] != -1).sum() == kept
    assert got[0, 0, 0, 2] == pytest.approx(1 / (1 + math.exp(-5)), rel=1e-6)


@pytest.mark.layer_type("YoloDetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_yolo_ties_keep_the_earlier_candidate(data_format):
    """The same box and confidence twice (anchors 0 and 1 of one cell, same
    biases): the earlier candidate (anchor 0) comes first and suppresses the
    other; a tie between classes picks the first class."""
    head = cell_boxes(2, 2, 3, {(2, 0, 0): [0.5, -0.5, 0.1, 0.2, 1, 3, 3],
                                (2, 0, 1): [0.5, -0.5, 0.1, 0.2, 1, 3, 3]})
    got = check("v2", [head], data_format, num_classes=2, num_box=2, biases=[1, 2, 1, 2])
    kept = got[0, 0][got[0, 0, :, 1] != -1]
    assert kept.shape == (1, 7) and kept[0, 1] == 1  # label = class 0 + 1


@pytest.mark.layer_type("YoloDetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_yolo_without_detections_gives_the_forks_rows(data_format):
    heads = heads_v2(np.random.default_rng(3), [(3, 2)], 2, 2)
    got = check("v2", heads, data_format, num_classes=2, num_box=2, biases=[1, 1, 2, 2],
                confidence_threshold=1.5)
    np.testing.assert_array_equal(caffe_detections(got)[0, 0],
                                  [[i, -1, -1, -1, -1, -1, -1] for i in range(3)])


# -- YOLOv3 --------------------------------------------------------------------------------


@pytest.mark.layer_type("Yolov3DetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("case", ["tiny", "three", "one", "overlapping_mask"])
def test_yolov3_matches_the_fork(data_format, case):
    rng = np.random.default_rng(7)
    kwargs = dict(num_classes=3, biases=TINY_BIASES, confidence_threshold=0.35,
                  nms_threshold=0.45)
    if case == "tiny":  # yolov3-tiny's heads and masks, batch 2, non-square
        shapes = [(2, 2, 3), (2, 4, 6)]
        kwargs.update(mask=[3, 4, 5, 0, 1, 2], anchors_scale=[32, 16])
    elif case == "three":  # YOLOv3's three heads
        shapes = [(1, 2, 2), (1, 4, 4), (1, 8, 8)]
        kwargs.update(mask=[6, 7, 8, 3, 4, 5, 0, 1, 2], anchors_scale=[32, 16, 8],
                      mask_group_num=3, biases=TINY_BIASES + [373, 326, 400, 400, 20, 20])
    elif case == "one":
        shapes = [(2, 3, 3)]
        kwargs.update(num_box=2, mask=[1, 0], anchors_scale=[8], mask_group_num=1,
                      confidence_threshold=0.2)
    else:  # num_box 2 of groups of 3: head 1 reads mask[3], mask[4]
        shapes = [(1, 2, 2), (1, 3, 3)]
        kwargs.update(num_box=2, mask=[0, 1, 2, 3, 4, 5], anchors_scale=[16, 8])
    num_box = kwargs.get("num_box", 3)
    heads = [(2 * rng.standard_normal((n, num_box * 8, h, w))).astype(np.float32)
             for n, h, w in shapes]
    got = check("v3", heads, data_format, **kwargs)
    assert got.shape[2] == sum(h * w for _, h, w in shapes) * num_box * 3
    assert (got[..., 1] != -1).any()


@pytest.mark.layer_type("Yolov3DetectionOutput")
@pytest.mark.parametrize("threshold, kept", [(1.0, 0), (0.999, 1)])
def test_yolov3_drops_a_confidence_equal_to_the_threshold(threshold, kept):
    """score > confidence_threshold (strict, unlike YOLOv2): sigmoid(40)^2 is 1.0."""
    head = np.full((1, 6, 2, 2), -40, np.float32)
    head[0, :4, 0, 1] = 0
    head[0, 4:, 0, 1] = 40
    got = check("v3", [head], num_classes=1, num_box=1, biases=[4, 6], mask=[0],
                anchors_scale=[8], mask_group_num=1, confidence_threshold=threshold)
    assert (got[0, 0, :, 1] != -1).sum() == kept


@pytest.mark.layer_type("Yolov3DetectionOutput")
@pytest.mark.parametrize("nms_threshold, labels", [(0.45, [2]), (1.5, [2, 1])])
def test_yolov3_nms_is_across_classes(nms_threshold, labels):
    """One anchor above the threshold for two classes makes two candidates
    with one box: NMS ignores the classes, so the weaker class is suppressed
    (IoU about 1) unless the threshold exceeds every IoU."""
    head = np.full((1, 7, 2, 2), -40, np.float32)
    head[0, :4, 1, 0] = [0.3, -0.2, 0.1, 0.4]
    head[0, 4:, 1, 0] = [3, 1, 2]  # objectness, class 0, class 1
    got = check("v3", [head], num_classes=2, num_box=1, biases=[4, 6], mask=[0],
                anchors_scale=[8], mask_group_num=1, nms_threshold=nms_threshold)
    kept = got[0, 0][got[0, 0, :, 1] != -1]
    assert kept[:, 1].tolist() == labels


# -- shapes and refusals -------------------------------------------------------------------


def inputs_text(shapes):
    return ('layer { name: "in" type: "Input" ' + "".join(f'top: "h{i}" ' for i in range(
        len(shapes))) + "input_param { " + "".join(
        "shape { " + " ".join(f"dim: {d}" for d in s) + " } " for s in shapes) + "} }\n")


@pytest.mark.layer_type("YoloDetectionOutput", "Yolov3DetectionOutput")
def test_analyze_rows():
    v2 = inputs_text([(2, 50, 13, 13), (2, 50, 26, 26)]) + yolo_text(
        20, VOC_BIASES[:4], num_box=2, bottoms=("h0", "h1"))
    row = analyze(v2, batch=None).layers[-1]
    assert row.tops == (("det", (2, 1, (169 + 676) * 2, 7)),)
    assert row.weight_shapes == () and row.forward_flops == 0
    v3 = inputs_text([(1, 75, 2, 3), (1, 75, 4, 6)]) + yolov3_text(
        20, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16])
    assert analyze(v3, batch=None).layers[-1].tops == (("det", (1, 1, (6 + 24) * 3 * 20, 7)),)


def refused(text, shapes, message):
    inputs = {f"h{i}": np.zeros(s, np.float32) for i, s in enumerate(shapes)}
    with pytest.raises(LayerError, match="^layer 'det': " + message + "$"):
        run_layers(text, inputs)


@pytest.mark.layer_type("YoloDetectionOutput")
@pytest.mark.parametrize("text, shapes, message", [
    ('layer { name: "det" type: "YoloDetectionOutput" bottom: "h0" top: "det" '
     "yolo_detection_output_param { num_box: 1 biases: 1 biases: 1 } }\n", [(1, 25, 2, 2)],
     r"\(YoloDetectionOutput\) yolo_detection_output_param.num_classes is required"),
    (yolo_text(0, [1, 1], num_box=1), [(1, 5, 2, 2)],
     r"\(YoloDetectionOutput\) yolo_detection_output_param.num_classes must be positive, got 0"),
    (yolo_text(2, [], num_box=0), [(1, 7, 2, 2)],
     r"\(YoloDetectionOutput\) yolo_detection_output_param.num_box must be positive, got 0"),
    (yolo_text(2, [1, 1, 2], num_box=2), [(1, 14, 2, 2)],
     r"\(YoloDetectionOutput\) yolo_detection_output_param.biases needs 2 \* num_box = 4 "
     r"values \(anchor widths and heights\), got 3"),
    (yolo_text(2, [1, 1, 2, 2], num_box=2), [(1, 12, 2, 2)],
     r"\(YoloDetectionOutput\) bottom 0 needs num_box \* \(5 \+ num_classes\) = 2 \* 7 = 14 "
     r"channels, got 12"),
    (yolo_text(2, [1, 1], num_box=1), [(1, 7, 2, 3)],
     r"\(YoloDetectionOutput\) bottom 0 must be square \(the fork takes its width 3 as the "
     r"side\), got height 2"),
    (yolo_text(2, [1, 1], num_box=1, bottoms=("h0", "h1", "h2")),
     [(1, 7, 2, 2)] * 3, r"\(YoloDetectionOutput\) takes 1 to 2 bottom\(s\), got 3"),
    (yolo_text(2, [1, 1], num_box=1, bottoms=("h0", "h1")), [(1, 7, 2, 2), (2, 7, 3, 3)],
     r"\(YoloDetectionOutput\) bottom 1 has batch 2, bottom 0 has 1"),
    (yolo_text(2, [1, 1], num_box=1), [(1, 7)],
     r"\(YoloDetectionOutput\) bottom 0 must be 4-D \(N, C, H, W\), got \(1, 7\)"),
    (yolo_text(2, [1, 1], num_box=1, extra="loss_weight: 1 "), [(1, 7, 2, 2)],
     r"\(YoloDetectionOutput\) has no backward \(the fork's does nothing\), so its top cannot "
     r"take a loss_weight"),
])
def test_yolo_refusals(text, shapes, message):
    refused(text, shapes, message)


@pytest.mark.layer_type("Yolov3DetectionOutput")
@pytest.mark.parametrize("text, shapes, message", [
    ('layer { name: "det" type: "Yolov3DetectionOutput" bottom: "h0" top: "det" '
     "yolov3_detection_output_param { num_box: 1 mask_group_num: 1 mask: 0 biases: 1 biases: 1 "
     "anchors_scale: 8 } }\n", [(1, 25, 2, 2)],
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.num_classes is required"),
    (yolov3_text(2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16], bottoms=("h0",)),
     [(1, 21, 2, 2)], r"\(Yolov3DetectionOutput\) yolov3_detection_output_param."
                      r"mask_group_num 2 must be the number of bottoms, 1"),
    (yolov3_text(2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32]), [(1, 21, 2, 2), (1, 21, 4, 4)],
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.anchors_scale needs one value "
     r"per bottom \(2\), got 1"),
    (yolov3_text(2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 0]), [(1, 21, 2, 2), (1, 21, 4, 4)],
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.anchors_scale must be "
     r"positive, got \[32, 0\]"),
    (yolov3_text(2, TINY_BIASES, [3, 4, 5, 0], [32, 16]), [(1, 21, 2, 2), (1, 21, 4, 4)],
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.mask needs 5 values for 2 "
     r"bottom\(s\) of num_box 3 anchors, got 4"),
    (yolov3_text(2, TINY_BIASES[:8], [3, 4, 5, 0, 1, 2], [32, 16]),
     [(1, 21, 2, 2), (1, 21, 4, 4)],
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.biases has 8 values, so no "
     r"anchor 5 for mask"),
    (yolov3_text(2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16]), [(1, 21, 2, 2), (1, 24, 4, 4)],
     r"\(Yolov3DetectionOutput\) bottom 1 needs num_box \* \(5 \+ num_classes\) = 3 \* 7 = 21 "
     r"channels, got 24"),
    (yolov3_text(0, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16]), [(1, 15, 2, 2)] * 2,
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.num_classes must be positive, "
     r"got 0"),
    (yolov3_text(2, TINY_BIASES, [0, 1], [8], num_box=0, mask_group_num=1, bottoms=("h0",)),
     [(1, 7, 2, 2)], r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.num_box must "
                     r"be positive, got 0"),
    ('layer { name: "det" type: "Yolov3DetectionOutput" bottom: "h0" top: "det" '
     "yolov3_detection_output_param { num_classes: 1 num_box: 1 mask_group_num: 1 mask: 0 "
     "biases: 1 biases: 1 anchors_scale: 8 gaussian_box: true } }\n", [(1, 6, 2, 2)],
     r"\(Yolov3DetectionOutput\) yolov3_detection_output_param.gaussian_box \(Gaussian YOLOv3 "
     r"heads\) is not supported"),
    (yolov3_text(2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16], extra="loss_weight: 1 "),
     [(1, 21, 2, 2), (1, 21, 4, 4)],
     r"\(Yolov3DetectionOutput\) has no backward \(the fork's does nothing\), so its top "
     r"cannot take a loss_weight"),
])
def test_yolov3_refusals(text, shapes, message):
    refused(text, shapes, message)


@pytest.mark.layer_type("YoloDetectionOutput", "Yolov3DetectionOutput")
def test_no_gradient_reaches_the_heads():
    text = inputs_text([(1, 21, 2, 2), (1, 21, 4, 4)]) + yolov3_text(
        2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16])
    model = import_model(text, data_format="channels_first")
    feed = [np.random.default_rng(0).standard_normal(s).astype(np.float32)
            for s in ((1, 21, 2, 2), (1, 21, 4, 4))]
    grads, _ = gradients(lambda *t: ops.sum(model(list(t))), feed)
    assert all(g is None or not np.any(g) for g in grads)


@pytest.mark.layer_type("YoloDetectionOutput", "Yolov3DetectionOutput")
def test_a_saved_model_loads_and_detects_the_same(tmp_path):
    import keras_caffe  # noqa: F401  (registers the layers)

    text = (inputs_text([(1, 21, 2, 2), (1, 21, 4, 4), (1, 14, 3, 3)])
            + yolov3_text(2, TINY_BIASES, [3, 4, 5, 0, 1, 2], [32, 16])
            + yolo_text(2, [1, 2, 3, 4], num_box=2, bottoms=("h2",)).replace(
                'name: "det"', 'name: "det2"').replace('top: "det"', 'top: "det2"'))
    model = import_model(text)
    rng = np.random.default_rng(4)
    feed = [to_keras_layout(rng.standard_normal(s).astype(np.float32), "channels_last")
            for s in ((1, 21, 2, 2), (1, 21, 4, 4), (1, 14, 3, 3))]
    path = tmp_path / "yolo.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    for name, value in model(feed).items():
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(feed)[name]),
                                      keras.ops.convert_to_numpy(value))


# -- end to end ----------------------------------------------------------------------------


@pytest.mark.layer_type("Yolov3DetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_mobilenet_yolov3_lite_deploy_detects_as_the_fork(data_format):
    """eric612/MobileNet-YOLO's MobileNet-YOLOv3-lite deploy net (input shrunk
    to 64 x 64: heads 2 x 2 and 4 x 4), random weights: its detections are
    the port's on the net's own heads, conv19 and conv20."""
    text = (DATA / "mobilenet_yolov3_lite_deploy.prototxt").read_text()
    keras.utils.set_random_seed(0)
    model = import_model(text, data_format=data_format,
                         outputs=["conv19", "conv20", "detection_out"])
    image = np.random.default_rng(5).uniform(-1, 1, (2, 3, 64, 64)).astype(np.float32)
    out = model(to_keras_layout(image, data_format))
    conv19, conv20, det = (from_keras_layout(keras.ops.convert_to_numpy(out[b]), data_format)
                           for b in ("conv19", "conv20", "detection_out"))
    assert conv19.shape == (2, 75, 2, 2) and conv20.shape == (2, 75, 4, 4)
    assert det.shape == (2, 1, (4 + 16) * 3 * 20, 7)
    kwargs = dict(num_classes=20, biases=TINY_BIASES, mask=[3, 4, 5, 0, 1, 2],
                  anchors_scale=[32, 16], confidence_threshold=0.00999999977648,
                  nms_threshold=0.449999988079)
    want = per_image(yolov3_reference, [conv19, conv20], det.shape[2], **kwargs)
    np.testing.assert_allclose(det, want, rtol=1e-5, atol=1e-6)
    assert (det[..., 1] != -1).sum() > 2
    np.testing.assert_allclose(caffe_detections(det[:1]),
                               yolov3_reference([conv19[:1], conv20[:1]], **kwargs),
                               rtol=1e-5, atol=1e-6)

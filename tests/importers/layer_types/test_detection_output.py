"""SSD's DetectionOutput against a numpy port of the fork's C++ (weiliu89/caffe,
branch ssd): src/caffe/layers/detection_output_layer.cpp
``DetectionOutputLayer::Forward_cpu`` and, from src/caffe/util/bbox_util.cpp,
``GetLocPredictions``, ``GetConfidenceScores``, ``GetPriorBBoxes``,
``DecodeBBoxesAll``/``DecodeBBox``, ``ApplyNMSFast``, ``GetMaxScoreIndex``,
``JaccardOverlap``, ``IntersectBBox``, ``BBoxSize``.

The Keras layer gives each image ``D`` rows (its detections, then ``[i, -1,
..., -1]``); ``caffe_detections`` turns that into the fork's ``(1, 1,
num_kept, 7)``, and both forms are checked. Last, chuanqi305/MobileNet-SSD's
deploy net imports and its detections match the numpy PriorBox +
DetectionOutput run on the net's own loc and conf.
"""

import math

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model
from keras_caffe.analysis import analyze
from keras_caffe.importers.formats.netfile import read_net_file
from keras_caffe.layers.ssd import DetectionOutput, caffe_detections
from support import DATA_FORMATS, NETS, from_keras_layout, run_layers, to_keras_layout
from support.layer_gradients import gradients, no_gradient
from importers.layer_types.test_prior_box import prior_box_reference

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

DATA = NETS
f32 = np.float32
FLT_MAX = float(np.finfo(np.float32).max)


# -- the numpy port --------------------------------------------------------------


def bbox_size(box):
    """BBoxSize (normalized): 0 for an invalid box, else the stored size."""
    xmin, ymin, xmax, ymax, size = box
    if xmax < xmin or ymax < ymin:
        return f32(0)
    return size


def with_size(xmin, ymin, xmax, ymax):
    box = (f32(xmin), f32(ymin), f32(xmax), f32(ymax))
    if box[2] < box[0] or box[3] < box[1]:
        return (*box, f32(0))
    return (*box, f32((box[2] - box[0]) * (box[3] - box[1])))


def jaccard_overlap(b1, b2):
    """JaccardOverlap(bbox1, bbox2) with IntersectBBox, normalized."""
    if b2[0] > b1[2] or b2[2] < b1[0] or b2[1] > b1[3] or b2[3] < b1[1]:
        inter = (f32(0), f32(0), f32(0), f32(0))
    else:
        inter = (max(b1[0], b2[0]), max(b1[1], b2[1]), min(b1[2], b2[2]), min(b1[3], b2[3]))
    width, height = f32(inter[2] - inter[0]), f32(inter[3] - inter[1])
    if width > 0 and height > 0:
        size = f32(width * height)
        return f32(size / f32(f32(bbox_size(b1) + bbox_size(b2)) - size))
    return f32(0)


def apply_nms_fast(boxes, scores, score_threshold, nms_threshold, eta, top_k):
    """ApplyNMSFast with GetMaxScoreIndex (scores > threshold, std::stable_sort
    descending, top_k), greedy with the adaptive threshold."""
    pairs = [(s, i) for i, s in enumerate(scores) if s > f32(score_threshold)]
    pairs.sort(key=lambda pair: -pair[0])  # stable: ties keep the lower index first
    if -1 < top_k < len(pairs):
        pairs = pairs[:top_k]
    adaptive = f32(nms_threshold)
    indices = []
    for _, idx in pairs:
        keep = True
        for kept in indices:
            if not keep:
                break
            keep = jaccard_overlap(boxes[idx], boxes[kept]) <= adaptive
        if keep:
            indices.append(idx)
        if keep and eta < 1 and adaptive > 0.5:
            adaptive = f32(adaptive * f32(eta))
    return indices


def decode_bbox(prior, var, code_type, encoded, loc):
    """DecodeBBox: float32 where the fork stores floats; ``exp`` and ``/ 2.``
    in double (C's ``exp``, the literal ``2.``), stored as float."""
    px, py, px2, py2 = prior[:4]
    lx, ly, lx2, ly2 = loc
    v = (f32(1), f32(1), f32(1), f32(1)) if encoded else var
    scale = (lambda i, value: value) if encoded else (lambda i, value: f32(v[i] * value))
    if code_type == "CORNER":
        return with_size(px + scale(0, lx), py + scale(1, ly), px2 + scale(2, lx2),
                         py2 + scale(3, ly2))
    width, height = f32(px2 - px), f32(py2 - py)
    if code_type == "CORNER_SIZE":
        return with_size(px + f32(scale(0, lx) * width), py + f32(scale(1, ly) * height),
                         px2 + f32(scale(2, lx2) * width), py2 + f32(scale(3, ly2) * height))
    cx = f32(f32(scale(0, lx) * width) + f32(f32(px + px2) / 2))
    cy = f32(f32(scale(1, ly) * height) + f32(f32(py + py2) / 2))
    w = f32(math.exp(float(scale(2, lx2))) * float(width))
    h = f32(math.exp(float(scale(3, ly2))) * float(height))
    return with_size(float(cx) - float(w) / 2.0, float(cy) - float(h) / 2.0,
                     float(cx) + float(w) / 2.0, float(cy) + float(h) / 2.0)


def detection_output_reference(loc, conf, prior, num_classes, share_location=True,
                               background_label_id=0, code_type="CORNER",
                               variance_encoded_in_target=False, keep_top_k=-1,
                               confidence_threshold=None, nms_threshold=0.3, top_k=-1, eta=1.0):
    """DetectionOutputLayer::Forward_cpu -> the fork's top (1, 1, num_kept, 7).

    Two choices where the fork leaves it open: the keep_top_k sort is taken
    as stable (``std::sort`` orders ties arbitrarily), and with
    share_location and background_label_id -1 every class runs (the GPU
    forward; the CPU one aborts)."""
    loc, conf, prior = (np.asarray(a, np.float32) for a in (loc, conf, prior))
    num = loc.shape[0]
    num_priors = prior.shape[2] // 4
    loc_classes = 1 if share_location else num_classes
    threshold = -FLT_MAX if confidence_threshold is None else confidence_threshold
    priors = [tuple(prior[0, 0, 4 * p:4 * p + 4]) for p in range(num_priors)]
    priors = [with_size(*p) for p in priors]
    variances = [tuple(prior[0, 1, 4 * p:4 * p + 4]) for p in range(num_priors)]
    all_decoded, all_scores, all_indices = [], [], []
    num_kept = 0
    for i in range(num):
        data = loc[i].reshape(-1)
        decoded = {}
        for c in range(loc_classes):
            label = -1 if share_location else c
            if not share_location and label == background_label_id:
                continue
            decoded[label] = [
                decode_bbox(priors[p], variances[p], code_type, variance_encoded_in_target,
                            data[(p * loc_classes + c) * 4:(p * loc_classes + c) * 4 + 4])
                for p in range(num_priors)]
        scores = {c: list(conf[i].reshape(num_priors, num_classes)[:, c])
                  for c in range(num_classes)}
        indices, num_det = {}, 0
        for c in range(num_classes):
            if c == background_label_id:
                continue
            boxes = decoded[-1 if share_location else c]
            indices[c] = apply_nms_fast(boxes, scores[c], threshold, nms_threshold, eta, top_k)
            num_det += len(indices[c])
        if keep_top_k > -1 and num_det > keep_top_k:
            pairs = [(scores[c][idx], (c, idx)) for c in sorted(indices) for idx in indices[c]]
            pairs.sort(key=lambda pair: -pair[0])
            chosen = {}
            for _, (c, idx) in pairs[:keep_top_k]:
                chosen.setdefault(c, []).append(idx)
            indices = chosen
            num_kept += keep_top_k
        else:
            num_kept += num_det
        all_decoded.append(decoded)
        all_scores.append(scores)
        all_indices.append(indices)
    if num_kept == 0:
        top = np.full((num, 7), -1, np.float32)
        top[:, 0] = np.arange(num)
        return top[None, None]
    rows = []
    for i in range(num):
        for c in sorted(all_indices[i]):
            boxes = all_decoded[i][-1 if share_location else c]
            for idx in all_indices[i][c]:
                rows.append([i, c, all_scores[i][c][idx], *boxes[idx][:4]])
    return np.asarray(rows, np.float32).reshape(1, 1, -1, 7)


def padded(reference, num, rows):
    """The Keras layer's (N, 1, rows, 7) for the fork's top ``reference``."""
    out = np.full((num, 1, rows, 7), -1, np.float32)
    out[:, 0, :, 0] = np.arange(num)[:, None]
    found = reference[0, 0]
    found = found[found[:, 1] != -1]
    for i in range(num):
        mine = found[found[:, 0] == i]
        out[i, 0, :len(mine)] = mine
    return out


# -- running the layer -------------------------------------------------------------


def params_text(num_classes, share_location=True, background_label_id=0, code_type="CORNER",
                variance_encoded_in_target=False, keep_top_k=-1, confidence_threshold=None,
                nms_threshold=0.3, top_k=-1, eta=1.0):
    nms = f"nms_threshold: {nms_threshold} eta: {eta}" + (f" top_k: {top_k}" if top_k > -1 else "")
    return (f"num_classes: {num_classes} share_location: {str(share_location).lower()} "
            f"background_label_id: {background_label_id} code_type: {code_type} "
            f"variance_encoded_in_target: {str(variance_encoded_in_target).lower()} "
            f"keep_top_k: {keep_top_k} nms_param {{ {nms} }}"
            + ("" if confidence_threshold is None
               else f" confidence_threshold: {confidence_threshold}"))


def detection_layer(params, extra=""):
    return ('layer { name: "det" type: "DetectionOutput" bottom: "loc" bottom: "conf" '
            f'bottom: "prior" top: "det" {extra} detection_output_param {{ {params} }} }}\n')


def run_detection(loc, conf, prior, data_format="channels_first", **params):
    out = run_layers(detection_layer(params_text(**params)),
                     {"loc": loc, "conf": conf, "prior": prior}, data_format=data_format,
                     outputs=["det"])["det"]
    return out


def check(loc, conf, prior, data_format="channels_first", **params):
    """The layer against the port, in both forms; returns the fork's top."""
    got = run_detection(loc, conf, prior, data_format, **params)
    want = detection_output_reference(loc, conf, prior, **params)
    num_priors = prior.shape[2] // 4
    classes = [c for c in range(params["num_classes"]) if c != params.get("background_label_id", 0)]
    top_k, keep_top_k = params.get("top_k", -1), params.get("keep_top_k", -1)
    rows = len(classes) * (num_priors if top_k < 0 else min(top_k, num_priors))
    rows = max(min(rows, keep_top_k) if keep_top_k > -1 else rows, 1)
    assert got.shape == (loc.shape[0], 1, rows, 7)
    np.testing.assert_allclose(caffe_detections(got), want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, padded(want, loc.shape[0], rows), rtol=1e-6, atol=1e-6)
    return want


def random_case(rng, num, num_priors, num_classes, share_location):
    """Crowded priors (many overlaps) and scores on a 0.01 grid (ties)."""
    centre = rng.uniform(0.3, 0.7, (num_priors, 2))
    half = rng.uniform(0.05, 0.2, (num_priors, 2))
    boxes = np.concatenate([centre - half, centre + half], axis=1).reshape(-1)
    variance = np.tile([0.1, 0.1, 0.2, 0.2], num_priors)
    prior = np.stack([boxes, variance])[None].astype(np.float32)
    loc_classes = 1 if share_location else num_classes
    loc = rng.normal(0, 0.5, (num, num_priors * loc_classes * 4)).astype(np.float32)
    conf = np.round(rng.uniform(0, 1, (num, num_priors * num_classes)), 2).astype(np.float32)
    return loc, conf, prior


RANDOM_CASES = [
    dict(num_classes=4, share_location=True, background_label_id=0, code_type="CENTER_SIZE",
         confidence_threshold=0.3, nms_threshold=0.45, top_k=10, keep_top_k=15),
    dict(num_classes=4, share_location=False, background_label_id=0, code_type="CORNER",
         nms_threshold=0.3),
    dict(num_classes=5, share_location=False, background_label_id=2, code_type="CORNER_SIZE",
         variance_encoded_in_target=True, confidence_threshold=0.5, nms_threshold=0.7, top_k=5,
         keep_top_k=7, eta=0.8),
    dict(num_classes=3, share_location=True, background_label_id=-1, code_type="CENTER_SIZE",
         variance_encoded_in_target=True, nms_threshold=0.5, keep_top_k=3),
    dict(num_classes=3, share_location=False, background_label_id=-1, code_type="CENTER_SIZE",
         confidence_threshold=0.2, nms_threshold=0.6, top_k=8, eta=0.7),
    dict(num_classes=6, share_location=True, background_label_id=5, code_type="CORNER",
         confidence_threshold=0.9, nms_threshold=0.1, keep_top_k=0),
    dict(num_classes=3, share_location=True, background_label_id=0, code_type="CENTER_SIZE",
         confidence_threshold=0.97, nms_threshold=0.45, top_k=3),
]


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("params", RANDOM_CASES,
                         ids=[f"case{i}" for i in range(len(RANDOM_CASES))])
def test_detection_output_matches_the_fork(data_format, params):
    rng = np.random.default_rng(sum(map(ord, str(params))))
    loc, conf, prior = random_case(rng, 3, 24, params["num_classes"], params["share_location"])
    want = check(loc, conf, prior, data_format, **params)
    assert want.shape[2] >= 1


def test_the_random_cases_exercise_nms_and_keep_top_k():
    """The cases above are not vacuous: NMS suppresses, keep_top_k cuts, and
    the high threshold leaves images (and, with keep_top_k 0, all) empty."""
    rng = np.random.default_rng(sum(map(ord, str(RANDOM_CASES[0]))))
    loc, conf, prior = random_case(rng, 3, 24, 4, True)
    kept = detection_output_reference(loc, conf, prior, **RANDOM_CASES[0])
    assert kept.shape[2] == 3 * 15  # keep_top_k cut each image
    loose = dict(RANDOM_CASES[0], nms_threshold=1.0, keep_top_k=-1)
    assert detection_output_reference(loc, conf, prior, **loose).shape[2] > 3 * 15
    rng = np.random.default_rng(sum(map(ord, str(RANDOM_CASES[6]))))
    loc, conf, prior = random_case(rng, 3, 24, 3, True)
    top = detection_output_reference(loc, conf, prior, **RANDOM_CASES[6])[0, 0]
    assert 0 < len(top) and len(set(top[:, 0])) < 3  # some image has no detection


# -- NMS edge cases: CORNER with zero offsets decodes each box as its prior ----------


def boxes_case(boxes, scores, num=1):
    """One class (1, background 0) over ``boxes``, whose scores are ``scores``."""
    boxes = np.asarray(boxes, np.float32)
    prior = np.stack([boxes.reshape(-1), np.full(boxes.size, 0.1)])[None].astype(np.float32)
    loc = np.zeros((num, boxes.size), np.float32)
    conf = np.zeros((num, len(boxes), 2), np.float32)
    conf[:, :, 1] = scores
    return loc, conf.reshape(num, -1), prior


def kept_boxes(top):
    # Python floats: numpy 1.x compares float32(0.6) with 0.6 in float64 (unequal)
    return [tuple(round(float(v), 4) for v in row[3:]) for row in top[0, 0] if row[1] != -1]


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.parametrize("nms_threshold, kept", [(0.5, 2), (0.49, 1)])
def test_an_overlap_equal_to_the_threshold_is_kept(nms_threshold, kept):
    # IoU of [0,0,1,1] and [0,0,1,0.5]: 0.5 / (1 + 0.5 - 0.5) = 0.5 exactly.
    case = boxes_case([[0, 0, 1, 1], [0, 0, 1, 0.5]], [0.9, 0.8])
    top = check(*case, num_classes=2, nms_threshold=nms_threshold)
    assert len(kept_boxes(top)) == kept


@pytest.mark.layer_type("DetectionOutput")
def test_touching_and_invalid_boxes_do_not_overlap():
    # Touching (intersection of width 0) and inverted boxes (size 0) overlap 0:
    # even nms_threshold 0 keeps them; a real overlap is suppressed.
    case = boxes_case([[0, 0, 0.5, 1], [0.5, 0, 1, 1], [0.6, 0.6, 0.4, 0.4], [0.6, 0.6, 0.4, 0.4],
                       [0, 0, 0.6, 1]], [0.9, 0.8, 0.7, 0.6, 0.5])
    top = check(*case, num_classes=2, nms_threshold=0)
    assert kept_boxes(top) == [(0, 0, 0.5, 1), (0.5, 0, 1, 1), (0.6, 0.6, 0.4, 0.4),
                               (0.6, 0.6, 0.4, 0.4)]


@pytest.mark.layer_type("DetectionOutput")
def test_tied_scores_keep_the_lower_prior():
    case = boxes_case([[0.1, 0.1, 0.5, 0.51], [0.1, 0.1, 0.5, 0.5], [0.1, 0.1, 0.5, 0.52]],
                      [0.7, 0.7, 0.7])
    top = check(*case, num_classes=2, nms_threshold=0.5)
    assert kept_boxes(top) == [(0.1, 0.1, 0.5, 0.51)]


@pytest.mark.layer_type("DetectionOutput")
def test_thresholds_and_top_k():
    disjoint = [[0, 0, 0.1, 0.1], [0.2, 0.2, 0.3, 0.3], [0.4, 0.4, 0.5, 0.5], [0.6, 0.6, 0.7, 0.7]]
    case = boxes_case(disjoint, [0.5, 0.9, 0.7, 0.25])
    # A score equal to confidence_threshold is out (scores must be above it).
    top = check(*case, num_classes=2, confidence_threshold=0.5)
    assert [row[2] for row in top[0, 0]] == pytest.approx([0.9, 0.7])
    # top_k keeps the best before NMS; no threshold keeps every score.
    top = check(*case, num_classes=2, top_k=3)
    assert [row[2] for row in top[0, 0]] == pytest.approx([0.9, 0.7, 0.5])
    top = check(*case, num_classes=2)
    assert [row[2] for row in top[0, 0]] == pytest.approx([0.9, 0.7, 0.5, 0.25])


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.parametrize("eta, kept", [(1.0, 3), (0.5, 2)])
def test_eta_lowers_the_nms_threshold(eta, kept):
    # IoU(A, B) = 0.6 / (1 + 0.6 - 0.6) = 0.6: kept under 0.9, not under 0.9 * 0.5.
    case = boxes_case([[0, 0, 1, 1], [0, 0, 1, 0.6], [2, 2, 3, 3]], [0.9, 0.8, 0.7])
    top = check(*case, num_classes=2, nms_threshold=0.9, eta=eta)
    assert len(kept_boxes(top)) == kept


@pytest.mark.layer_type("DetectionOutput")
def test_keep_top_k_takes_the_best_over_classes_and_keeps_label_order():
    boxes = np.asarray([[0, 0, 0.1, 0.1], [0.5, 0.5, 0.6, 0.6]], np.float32)
    prior = np.stack([boxes.reshape(-1), np.full(8, 0.1)])[None].astype(np.float32)
    conf = np.asarray([[0.0, 0.9, 0.8, 0.0, 0.6, 0.7]], np.float32)  # (prior, class)
    top = check(np.zeros((1, 8), np.float32), conf, prior, num_classes=3, keep_top_k=3)
    np.testing.assert_allclose(top[0, 0, :, 1:3], [[1, 0.9], [2, 0.8], [2, 0.7]])


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_no_detection_gives_the_forks_rows(data_format):
    case = boxes_case([[0, 0, 0.5, 0.5], [0.2, 0.2, 0.9, 0.9]], [0.1, 0.2], num=3)
    top = check(*case, data_format=data_format, num_classes=2, confidence_threshold=0.5,
                keep_top_k=4)
    np.testing.assert_array_equal(top[0, 0], [[i, -1, -1, -1, -1, -1, -1] for i in range(3)])
    # keep_top_k 0 and a net whose only class is the background detect nothing either.
    check(*case, num_classes=2, keep_top_k=0)
    loc, conf, prior = case
    check(loc, conf[:, ::2], prior, num_classes=1)


@pytest.mark.layer_type("DetectionOutput")
def test_an_image_without_detections_has_no_rows_in_the_forks_top():
    loc, conf, prior = boxes_case([[0, 0, 0.5, 0.5], [0.2, 0.2, 0.9, 0.9]], [0.1, 0.2], num=2)
    conf[1] = [0, 0.9, 0, 0.8]
    top = check(loc, conf, prior, num_classes=2, confidence_threshold=0.5)
    assert top[0, 0, :, 0].tolist() == [1, 1]


# -- shapes, errors, gradients -------------------------------------------------------


INPUTS = ('layer { name: "in" type: "Input" top: "loc" top: "conf" top: "prior" top: "odd" '
          'input_param { shape { dim: 2 dim: 24 } shape { dim: 2 dim: 18 } '
          'shape { dim: 1 dim: 2 dim: 24 } shape { dim: 3 dim: 18 } } }\n')


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.parametrize("params, rows", [
    ("num_classes: 3", 2 * 6),
    ("num_classes: 3 keep_top_k: 5 nms_param { top_k: 4 }", 5),
    ("num_classes: 3 keep_top_k: 50 nms_param { top_k: 4 }", 2 * 4),
    ("num_classes: 3 background_label_id: -1 nms_param { top_k: 100 }", 3 * 6),
    ("num_classes: 3 keep_top_k: 0", 1),
    ("num_classes: 3 nms_param { top_k: 0 }", 1),
])
def test_shape_rule(params, rows):
    text = INPUTS + detection_layer(params)
    row = [r for r in analyze(text, batch=None).layers if r.name == "det"][0]
    assert row.tops == (("det", (2, 1, rows, 7)),)
    assert row.weight_shapes == () and row.forward_flops == 0
    model = import_model(text, data_format="channels_first", outputs=["det"])
    assert model.output_shape == (None, 1, rows, 7)


@pytest.mark.layer_type("DetectionOutput")
@pytest.mark.parametrize("params, bottoms, extra, message", [
    ("share_location: true", None, "", "num_classes is required"),
    ("num_classes: 0", None, "", "num_classes must be positive"),
    ("num_classes: 3 nms_param { nms_threshold: -0.1 }", None, "",
     r"nms_param.nms_threshold must be non-negative, got -0.1"),
    ("num_classes: 3 nms_param { eta: 0 }", None, "", r"nms_param.eta must be in \(0, 1\], got 0"),
    ("num_classes: 3 nms_param { eta: 1.5 }", None, "",
     r"nms_param.eta must be in \(0, 1\], got 1.5"),
    ("num_classes: 2", None, "", r"conf must be \(N, num_priors \* num_classes\) = \(N, 12\) for "
                                 r"6 priors, got \(2, 18\)"),
    ("num_classes: 3 share_location: false", None, "",
     r"loc must be \(N, num_priors \* num_classes \* 4\) = \(N, 72\) for 6 priors, got \(2, 24\)"),
    ("num_classes: 3", ("loc", "conf", "loc"), "",
     r"prior must be \(1, 2, num_priors \* 4\) \(a PriorBox top\), got \(2, 24\)"),
    ("num_classes: 3", ("loc", "odd", "prior"), "",
     "loc and conf must have one batch, got 2 and 3"),
    ("num_classes: 3", ("loc", "conf"), "",
     r"takes loc, conf and prior \(and an image for visualize\), got 2 bottom\(s\)"),
    ("num_classes: 3", None, "loss_weight: 1",
     r"has no backward \(the fork's is NOT_IMPLEMENTED\), so its top cannot take a loss_weight"),
])
def test_bad_parameters_are_refused(params, bottoms, extra, message):
    bottoms = bottoms or ("loc", "conf", "prior")
    text = INPUTS + ('layer { name: "det" type: "DetectionOutput" '
                     + "".join(f'bottom: "{b}" ' for b in bottoms)
                     + f'top: "det" {extra} detection_output_param {{ {params} }} }}\n')
    with pytest.raises(LayerError, match=r"^layer 'det': \(DetectionOutput\) " + message):
        import_model(text)
    with pytest.raises(LayerError, match=r"^layer 'det': \(DetectionOutput\) " + message):
        analyze(text, batch=None)


@pytest.mark.layer_type("DetectionOutput")
def test_it_passes_no_gradient_and_warns_of_what_it_does_not_write():
    from keras import ops

    params = ('num_classes: 3 save_output_param { output_directory: "/nonexistent/out" } '
              "visualize: true")
    with pytest.warns(UserWarning, match=r"layer 'det' \(DetectionOutput\): save_output_param "
                                         "and visualize not reproduced"):
        model = import_model(INPUTS + detection_layer(params), phase="TRAIN",
                             data_format="channels_first", outputs=["det"])
    rng = np.random.default_rng(0)
    loc, conf, prior, odd = (rng.uniform(0, 1, shape).astype(np.float32)
                             for shape in ((2, 24), (2, 18), (1, 2, 24), (3, 18)))
    grads, _ = gradients(lambda *feeds: ops.sum(model(list(feeds))), [loc, conf, prior, odd])
    assert no_gradient(grads[0]) and no_gradient(grads[1])


@pytest.mark.layer_type("DetectionOutput")
def test_keras_layer_round_trips_its_config():
    layer = DetectionOutput(4, share_location=False, background_label_id=2,
                            code_type="CORNER_SIZE", keep_top_k=7, confidence_threshold=0.5,
                            nms_threshold=0.7, top_k=5, eta=0.8)
    clone = DetectionOutput.from_config(layer.get_config())
    rng = np.random.default_rng(3)
    loc, conf, prior = random_case(rng, 2, 10, 4, False)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer([loc, conf, prior])),
                                  keras.ops.convert_to_numpy(clone([loc, conf, prior])))
    assert layer.compute_output_shape([(None, 160), (None, 40), (1, 2, 40)]) == (None, 1, 7, 7)


# -- MobileNet-SSD, end to end ------------------------------------------------------


def prior_kwargs(p):
    """A PriorBoxParameter as prior_box_reference's arguments."""
    kwargs = dict(min_size=list(p.min_size), max_size=list(p.max_size),
                  aspect_ratio=list(p.aspect_ratio), flip=p.flip, clip=p.clip,
                  variance=list(p.variance), offset=p.offset)
    for field in ("img_size", "img_h", "img_w", "step", "step_h", "step_w"):
        if p.HasField(field):
            kwargs[field] = getattr(p, field)
    return kwargs


def detection_kwargs(p):
    from keras_caffe.proto import caffe_pb2

    return dict(num_classes=p.num_classes, share_location=p.share_location,
                background_label_id=p.background_label_id,
                code_type=caffe_pb2.PriorBoxParameter.CodeType.Name(p.code_type),
                variance_encoded_in_target=p.variance_encoded_in_target,
                keep_top_k=p.keep_top_k,
                confidence_threshold=(p.confidence_threshold
                                      if p.HasField("confidence_threshold") else None),
                nms_threshold=p.nms_param.nms_threshold,
                top_k=p.nms_param.top_k if p.nms_param.HasField("top_k") else -1,
                eta=p.nms_param.eta)


@pytest.mark.layer_type("PriorBox", "DetectionOutput")
@pytest.mark.parametrize("threshold", [None, 0.01])
def test_mobilenet_ssd_deploy_detects_as_the_fork(threshold):
    """chuanqi305/MobileNet-SSD's deploy net, random weights: its PriorBox
    tops and its detections are the numpy port's on the net's loc and conf.
    Threshold 0.01: 20 classes x top_k 100 candidates, cut by keep_top_k."""
    text = (DATA / "mobilenet_ssd_deploy.prototxt").read_text()
    if threshold is not None:
        text = text.replace("confidence_threshold: 0.25", f"confidence_threshold: {threshold}")
    net, _, _ = read_net_file(DATA / "mobilenet_ssd_deploy.prototxt")
    layers = {layer.name: layer for layer in net.layer}
    priors = [layer for layer in net.layer if layer.type == "PriorBox"]
    shapes = {top: shape for row in analyze(text).layers for top, shape in row.tops}
    blobs = ["mbox_loc", "mbox_conf_flatten", "mbox_priorbox", "detection_out"]
    keras.utils.set_random_seed(0)  # the fillers' random weights
    model = import_model(text, outputs=blobs)
    for layer in model.layers:   # sharper class scores: detections above the file's 0.25
        if layer.name.endswith("mbox_conf"):
            layer.set_weights([w * 6 for w in layer.get_weights()])
    image = np.random.default_rng(5).uniform(-1, 1, (2, 3, 300, 300)).astype(np.float32)
    out = model(to_keras_layout(image, "channels_last"))
    loc, conf, prior, det = (from_keras_layout(keras.ops.convert_to_numpy(out[b]),
                                               "channels_last") for b in blobs)
    want_prior = np.concatenate(
        [prior_box_reference(shapes[layer.bottom[0]][2:], (300, 300),
                             **prior_kwargs(layer.prior_box_param)) for layer in priors], axis=2)
    assert want_prior.shape == (1, 2, 1917 * 4)
    for sample in prior:
        np.testing.assert_allclose(sample, want_prior[0], rtol=0, atol=1e-7)
    params = detection_kwargs(layers["detection_out"].detection_output_param)
    if threshold is not None:
        params["confidence_threshold"] = threshold
    want = detection_output_reference(loc, conf, want_prior, **params)
    assert det.shape == (2, 1, 100, 7)
    np.testing.assert_allclose(caffe_detections(det), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(det, padded(want, 2, 100), rtol=1e-5, atol=1e-6)
    if threshold is not None:
        assert want.shape[2] == 2 * 100  # keep_top_k cut both images
    else:
        assert (want[0, 0, :, 1] != -1).any()  # random weights give detections above 0.25


@pytest.mark.layer_type("PriorBox", "DetectionOutput")
def test_a_saved_model_loads_and_detects_the_same(tmp_path):
    import keras_caffe  # noqa: F401  (registers the layers)

    text = ('layer { name: "in" type: "Input" top: "feat" top: "data" top: "loc" top: "conf" '
            'input_param { shape { dim: 2 dim: 2 dim: 3 dim: 3 } shape { dim: 2 dim: 3 dim: 12 '
            'dim: 12 } shape { dim: 2 dim: 36 } shape { dim: 2 dim: 27 } } }\n'
            'layer { name: "prior" type: "PriorBox" bottom: "feat" bottom: "data" top: "prior" '
            'prior_box_param { min_size: 6 variance: 0.1 variance: 0.1 variance: 0.2 '
            'variance: 0.2 } }\n'
            + detection_layer(params_text(3, code_type="CENTER_SIZE", nms_threshold=0.45,
                                          keep_top_k=5)))
    model = import_model(text, outputs=["det"])
    rng = np.random.default_rng(2)
    feed = [to_keras_layout(rng.uniform(0, 1, shape).astype(np.float32), "channels_last")
            for shape in ((2, 2, 3, 3), (2, 3, 12, 12), (2, 36), (2, 27))]
    model.save(tmp_path / "ssd.keras")
    loaded = keras.models.load_model(tmp_path / "ssd.keras")
    got, again = (keras.ops.convert_to_numpy(m(feed)) for m in (model, loaded))
    np.testing.assert_array_equal(got, again)
    assert (got[:, :, :, 0][..., 1] != -1).any()

"""Region proposals (py-faster-rcnn's Python ProposalLayer, OpenCV's Proposal)
against a numpy port of rbgirshick/py-faster-rcnn's lib/rpn/proposal_layer.py
``ProposalLayer.forward`` (with lib/rpn/generate_anchors.py,
lib/fast_rcnn/bbox_transform.py ``bbox_transform_inv``/``clip_boxes`` and
lib/nms/py_cpu_nms.py), and py-faster-rcnn's ZF Faster R-CNN test net end
to end."""

import keras
import numpy as np
import pytest

from keras_caffe.errors import LayerError
from keras_caffe.importers import import_model, load_into
from keras_caffe.analysis import analyze
from support import DATA_FORMATS, NETS, run_layers, to_keras_layout

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

DATA = NETS


# -- the numpy port -------------------------------------------------------------------


def reference_anchors(base_size=16, ratios=(0.5, 1, 2), scales=(8, 16, 32)):
    """generate_anchors.py: _ratio_enum of the base window, then _scale_enum of each."""
    def whctrs(a):
        w, h = a[2] - a[0] + 1, a[3] - a[1] + 1
        return w, h, a[0] + 0.5 * (w - 1), a[1] + 0.5 * (h - 1)

    def mkanchors(ws, hs, x, y):
        ws, hs = ws[:, None], hs[:, None]
        return np.hstack((x - 0.5 * (ws - 1), y - 0.5 * (hs - 1),
                          x + 0.5 * (ws - 1), y + 0.5 * (hs - 1)))

    base = np.array([1, 1, base_size, base_size]) - 1
    w, h, x, y = whctrs(base)
    ws = np.round(np.sqrt(w * h / np.array(ratios, float)))
    ratio_anchors = mkanchors(ws, np.round(ws * np.array(ratios, float)), x, y)
    out = []
    for anchor in ratio_anchors:
        w, h, x, y = whctrs(anchor)
        out.append(mkanchors(w * np.array(scales, float), h * np.array(scales, float), x, y))
    return np.vstack(out)


def reference_nms(dets, thresh):
    """py_cpu_nms.py: keep the best box, drop those overlapping it by more than thresh."""
    x1, y1, x2, y2, scores = dets.T
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = scores.argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        w = np.maximum(0.0, np.minimum(x2[i], x2[order[1:]]) - np.maximum(x1[i], x1[order[1:]]) + 1)
        h = np.maximum(0.0, np.minimum(y2[i], y2[order[1:]]) - np.maximum(y1[i], y1[order[1:]]) + 1)
        inter = w * h
        ovr = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[np.where(ovr <= thresh)[0] + 1]
    return keep


def reference_proposals(scores, deltas, im_info, feat_stride=16, anchors=None,
                        pre_nms_topn=6000, post_nms_topn=300, nms_thresh=0.7, min_size=16):
    """ProposalLayer.forward: (rois (K, 5), scores (K, 1))."""
    anchors = reference_anchors() if anchors is None else anchors
    count = anchors.shape[0]
    scores = scores[:, count:, :, :]
    info = im_info[0, :]
    height, width = scores.shape[-2:]
    sx, sy = np.meshgrid(np.arange(width) * feat_stride, np.arange(height) * feat_stride)
    shifts = np.vstack((sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel())).T
    all_anchors = (anchors.reshape((1, count, 4))
                   + shifts.reshape((1, -1, 4)).transpose((1, 0, 2))).reshape((-1, 4))
    deltas = deltas.transpose((0, 2, 3, 1)).reshape((-1, 4))
    scores = scores.transpose((0, 2, 3, 1)).reshape((-1, 1))
    # bbox_transform_inv
    boxes = all_anchors.astype(deltas.dtype, copy=False)
    widths = boxes[:, 2] - boxes[:, 0] + 1.0
    heights = boxes[:, 3] - boxes[:, 1] + 1.0
    ctr_x = boxes[:, 0] + 0.5 * widths
    ctr_y = boxes[:, 1] + 0.5 * heights
    pred_x = deltas[:, 0] * widths + ctr_x
    pred_y = deltas[:, 1] * heights + ctr_y
    pred_w = np.exp(deltas[:, 2]) * widths
    pred_h = np.exp(deltas[:, 3]) * heights
    proposals = np.stack([pred_x - 0.5 * pred_w, pred_y - 0.5 * pred_h,
                          pred_x + 0.5 * pred_w, pred_y + 0.5 * pred_h], axis=1)
    # clip_boxes
    proposals[:, 0::2] = np.maximum(np.minimum(proposals[:, 0::2], info[1] - 1), 0)
    proposals[:, 1::2] = np.maximum(np.minimum(proposals[:, 1::2], info[0] - 1), 0)
    # _filter_boxes
    ws = proposals[:, 2] - proposals[:, 0] + 1
    hs = proposals[:, 3] - proposals[:, 1] + 1
    keep = np.where((ws >= min_size * info[2]) & (hs >= min_size * info[2]))[0]
    proposals, scores = proposals[keep, :], scores[keep]
    order = scores.ravel().argsort()[::-1]
    if pre_nms_topn > 0:
        order = order[:pre_nms_topn]
    proposals, scores = proposals[order, :], scores[order]
    keep = reference_nms(np.hstack((proposals, scores)), nms_thresh)
    if post_nms_topn > 0:
        keep = keep[:post_nms_topn]
    proposals, scores = proposals[keep, :], scores[keep]
    rois = np.hstack((np.zeros((len(proposals), 1), np.float32), proposals.astype(np.float32)))
    return rois, scores


def check_padded(got_rois, got_scores, want_rois, want_scores, rows):
    """The kept proposals first, then rows of zeros up to ``rows``."""
    assert got_rois.shape == (rows, 5)
    k = len(want_rois)
    np.testing.assert_allclose(got_rois[:k], want_rois, rtol=1e-5, atol=1e-3)
    np.testing.assert_array_equal(got_rois[k:], 0)
    if got_scores is not None:
        assert got_scores.shape == (rows, 1)
        np.testing.assert_allclose(got_scores[:k], want_scores, rtol=1e-6)
        np.testing.assert_array_equal(got_scores[k:], 0)


def rpn_inputs(rng, count, height, width, spread=0.3):
    """RPN probabilities (distinct, so the order is one) and deltas; some
    deltas large enough to push boxes off the image or shrink them."""
    logits = rng.standard_normal((1, 2, count * height * width))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    scores = probs.reshape(1, 2 * count, height, width).astype(np.float32)
    deltas = (rng.standard_normal((1, 4 * count, height, width)) * spread).astype(np.float32)
    deltas[0, 2::4, 0, :] -= 3.0   # narrow boxes: dropped by min_size
    deltas[0, 0::4, :, -1] += 2.0  # pushed right, off the image: clipped
    return scores, deltas


PY_LAYER = ('layer {{ name: "proposal" type: "Python" bottom: "prob" bottom: "deltas" '
            'bottom: "im_info" {tops} python_param {{ module: "rpn.proposal_layer" '
            'layer: "ProposalLayer" param_str: "{param_str}" }} }}\n')


# -- py-faster-rcnn's Python ProposalLayer --------------------------------------------


@pytest.mark.layer_type("Python")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
@pytest.mark.parametrize("param_str, scales, im_info", [
    ("'feat_stride': 16", (8, 16, 32), (100.0, 130.0, 1.0)),
    ("{'feat_stride': 8, 'scales': (2, 4)}", (2, 4), (60.0, 70.0, 0.5)),
])
def test_proposal_layer_matches_py_faster_rcnn(data_format, param_str, scales, im_info):
    rng = np.random.default_rng(0)
    anchors = reference_anchors(scales=scales)
    stride = 16 if "16" in param_str else 8
    scores, deltas = rpn_inputs(rng, len(anchors), 7, 9)
    info = np.array([im_info], np.float32)
    text = PY_LAYER.format(tops='top: "rois" top: "scores"', param_str=param_str)
    got = run_layers(text, {"prob": scores, "deltas": deltas, "im_info": info},
                     data_format=data_format)
    want_rois, want_scores = reference_proposals(scores, deltas, info, stride, anchors)
    assert 0 < len(want_rois) < 300  # some proposals, and padding
    check_padded(got["rois"], got["scores"], want_rois, want_scores, 300)


@pytest.mark.layer_type("Python")
def test_proposal_layer_keeps_post_nms_top_n():
    """More than 300 proposals survive: the best 300, no padding."""
    rng = np.random.default_rng(1)
    scores, deltas = rpn_inputs(rng, 9, 20, 24, spread=0.05)
    info = np.array([[320.0, 384.0, 1.0]], np.float32)
    got = run_layers(PY_LAYER.format(tops='top: "rois"', param_str="'feat_stride': 16"),
                     {"prob": scores, "deltas": deltas, "im_info": info})["rois"]
    want, _ = reference_proposals(scores, deltas, info)
    assert len(want) == 300
    check_padded(got, None, want, None, 300)


@pytest.mark.layer_type("Python")
def test_proposal_layer_shape_rule():
    text = ('layer { name: "in" type: "Input" top: "prob" top: "deltas" top: "im_info" '
            "input_param { shape { dim: 1 dim: 18 dim: 38 dim: 50 } shape { dim: 1 dim: 36 "
            "dim: 38 dim: 50 } shape { dim: 1 dim: 3 } } }\n"
            + PY_LAYER.format(tops='top: "rois" top: "scores"', param_str="'feat_stride': 16"))
    row = analyze(text).layers[-1]
    assert row.tops == (("rois", (300, 5)), ("scores", (300, 1)))
    assert row.weights == 0


@pytest.mark.layer_type("Python")
@pytest.mark.parametrize("param_str, message", [
    ("'feat_stride': 16, 'ratios': [1]",
     "python_param.param_str \"'feat_stride': 16, 'ratios': [1]\" has unknown key(s) "
     "'ratios'; ProposalLayer reads 'feat_stride' and 'scales'"),
    ("__import__('os').system('true')",
     "python_param.param_str \"__import__('os').system('true')\" is not a Python dict "
     "literal such as \"'feat_stride': 16\""),
    ("[16]", "python_param.param_str '[16]' is not a Python dict literal such as "
             "\"'feat_stride': 16\""),
    ("{'scales': (8,)}", "python_param.param_str \"{'scales': (8,)}\" lacks 'feat_stride'"),
    ("'feat_stride': 1.5", "python_param.param_str \"'feat_stride': 1.5\": 'feat_stride' "
                           "must be a positive integer, got 1.5"),
    ("'feat_stride': 16, 'scales': []", "python_param.param_str \"'feat_stride': 16, "
                                        "'scales': []\": 'scales' must be a list of positive "
                                        "numbers, got []"),
])
def test_proposal_layer_bad_param_str(param_str, message):
    text = PY_LAYER.format(tops='top: "rois"', param_str=param_str.replace('"', '\\"'))
    inputs = {"prob": np.zeros((1, 18, 2, 2), np.float32),
              "deltas": np.zeros((1, 36, 2, 2), np.float32),
              "im_info": np.zeros((1, 3), np.float32)}
    with pytest.raises(LayerError) as err:
        run_layers(text, inputs)
    assert str(err.value) == f"layer 'proposal': (Python) {message}"


@pytest.mark.layer_type("Python")
@pytest.mark.parametrize("shapes, message", [
    (((2, 18, 2, 2), (2, 36, 2, 2), (2, 3)),
     "(Python) py-faster-rcnn's ProposalLayer takes a batch of 1 image, got 2"),
    (((1, 16, 2, 2), (1, 36, 2, 2), (1, 3)),
     "(Python) bottom 0 must be the RPN's probabilities (1, 18, H, W) for 9 anchors, got "
     "(1, 16, 2, 2)"),
    (((1, 18, 2, 2), (1, 36, 2, 3), (1, 3)),
     "(Python) bottom 1 must be the RPN's box deltas (1, 36, 2, 2), got (1, 36, 2, 3)"),
    (((1, 18, 2, 2), (1, 36, 2, 2), (1, 4)),
     "(Python) bottom 2 must be im_info (1, 3), got (1, 4)"),
])
def test_proposal_layer_bad_bottoms(shapes, message):
    inputs = {name: np.zeros(shape, np.float32)
              for name, shape in zip(("prob", "deltas", "im_info"), shapes)}
    text = PY_LAYER.format(tops='top: "rois"', param_str="'feat_stride': 16")
    with pytest.raises(LayerError) as err:
        run_layers(text, inputs)
    assert str(err.value) == f"layer 'proposal': {message}"


# -- OpenCV's Proposal --------------------------------------------------------------------


CV_LAYER = ('layer {{ name: "proposal" type: "Proposal" bottom: "prob" bottom: "deltas" '
            'bottom: "im_info" top: "rois" top: "scores" proposal_param {{ {params} }} }}\n')


@pytest.mark.layer_type("Proposal")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_opencv_proposal_matches_py_faster_rcnn(data_format):
    rng = np.random.default_rng(2)
    params = ("feat_stride: 8 base_size: 8 min_size: 4 ratio: 0.5 ratio: 2 scale: 2 scale: 3 "
              "scale: 5 pre_nms_topn: 60 post_nms_topn: 25 nms_thresh: 0.5")
    anchors = reference_anchors(8, (0.5, 2), (2, 3, 5))
    scores, deltas = rpn_inputs(rng, len(anchors), 6, 8)
    info = np.array([[48.0, 60.0, 1.5]], np.float32)
    got = run_layers(CV_LAYER.format(params=params),
                     {"prob": scores, "deltas": deltas, "im_info": info}, data_format=data_format)
    want_rois, want_scores = reference_proposals(scores, deltas, info, 8, anchors, 60, 25, 0.5, 4)
    assert 0 < len(want_rois)
    check_padded(got["rois"], got["scores"], want_rois, want_scores, 25)


@pytest.mark.layer_type("Proposal")
def test_opencv_proposal_defaults_are_py_faster_rcnn():
    rng = np.random.default_rng(3)
    scores, deltas = rpn_inputs(rng, 9, 5, 6)
    info = np.array([[80.0, 96.0, 1.0]], np.float32)
    got = run_layers(CV_LAYER.format(params=""),
                     {"prob": scores, "deltas": deltas, "im_info": info})
    want_rois, want_scores = reference_proposals(scores, deltas, info)
    check_padded(got["rois"], got["scores"], want_rois, want_scores, 300)


@pytest.mark.layer_type("Proposal")
@pytest.mark.parametrize("params, message", [
    ("feat_stride: 0", "proposal_param.feat_stride must be positive, got 0"),
    ("base_size: 0", "proposal_param.base_size must be positive, got 0"),
    ("ratio: 1 ratio: -2", "proposal_param.ratio must be positive, got 1, -2"),
    ("scale: 0", "proposal_param.scale must be positive, got 0"),
    ("nms_thresh: 1.5", "proposal_param.nms_thresh must be in [0, 1], got 1.5"),
])
def test_opencv_proposal_bad_parameters(params, message):
    inputs = {"prob": np.zeros((1, 18, 2, 2), np.float32),
              "deltas": np.zeros((1, 36, 2, 2), np.float32),
              "im_info": np.zeros((1, 3), np.float32)}
    with pytest.raises(LayerError) as err:
        run_layers(CV_LAYER.format(params=params), inputs)
    assert str(err.value) == f"layer 'proposal': (Proposal) {message}"


# -- py-faster-rcnn's ZF Faster R-CNN, end to end ----------------------------------------------


def _nms_case(seed, count=60):
    """Integer boxes (many equal overlaps and ties at the threshold) in score
    order, as the Proposal layer hands them to its NMS: (y1, x1, y2 + 1, x2 + 1)."""
    rng = np.random.default_rng(seed)
    x1, y1 = rng.integers(0, 20, count), rng.integers(0, 20, count)
    x2, y2 = x1 + rng.integers(0, 12, count), y1 + rng.integers(0, 12, count)
    scores = np.sort(rng.random(count).astype(np.float32))[::-1]
    dets = np.stack([x1, y1, x2, y2, scores], axis=1).astype(np.float64)
    corners = np.stack([y1, x1, y2 + 1, x2 + 1], axis=1).astype(np.float32)
    return dets, corners, scores


@pytest.mark.layer_type("Proposal")
@pytest.mark.parametrize("seed, count, most, threshold", [
    (0, 60, 60, 0.7), (1, 60, 60, 0.3), (2, 50, 40, 0.5), (3, 60, 5, 0.7), (4, 30, 60, 0.0)])
def test_keras_ops_nms_is_py_faster_rcnns(seed, count, most, threshold):
    """Proposal's NMS in keras.ops (the one JAX and PyTorch run) keeps
    py_cpu_nms's boxes, in its order, the first ``count`` candidates only,
    at most ``most``, then zeros."""
    from keras_caffe.layers.two_stage import non_max_suppression

    dets, corners, scores = _nms_case(seed)
    want = reference_nms(dets[:count], threshold)[:min(most, count)]
    indices, found = non_max_suppression(corners, scores, count, min(most, 60),
                                         np.float32(threshold))
    indices = keras.ops.convert_to_numpy(indices)
    assert int(keras.ops.convert_to_numpy(found)) == len(want)
    np.testing.assert_array_equal(indices[:len(want)], want)
    assert not indices[len(want):].any()


@pytest.mark.tensorflow_only
@pytest.mark.layer_type("Proposal")
@pytest.mark.parametrize("seed, count, most, threshold", [
    (0, 60, 60, 0.7), (1, 60, 60, 0.3), (2, 50, 40, 0.5), (3, 60, 5, 0.7), (4, 30, 60, 0.0)])
def test_tensorflows_nms_kernel_keeps_the_same_boxes(seed, count, most, threshold):
    """On TensorFlow the layer runs tf.image.non_max_suppression
    (tensorflow_kernels): the same indices as the keras.ops NMS."""
    from keras_caffe.layers import tensorflow_kernels
    from keras_caffe.layers.two_stage import non_max_suppression

    _, corners, scores = _nms_case(seed)
    ours = non_max_suppression(corners, scores, count, most, np.float32(threshold))
    theirs = tensorflow_kernels.non_max_suppression(corners, scores, count, most,
                                                    np.float32(threshold))
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))


def random_blobs(text, input_shapes, rng):
    """Random weights of every layer with blobs, scaled by fan-in (He)."""
    blobs = {}
    for row in analyze(text, input_shapes=input_shapes).layers:
        if row.weight_shapes:
            weight = row.weight_shapes[0]
            fan_in = int(np.prod(weight[1:]))
            blobs[row.name] = [(rng.standard_normal(weight) * np.sqrt(2.0 / fan_in))
                               .astype(np.float32)]
            blobs[row.name] += [(rng.standard_normal(s) * 0.1).astype(np.float32)
                                for s in row.weight_shapes[1:]]
    return blobs


@pytest.mark.layer_type("Python")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_faster_rcnn_zf_test_net(data_format):
    """py-faster-rcnn's ZF test.prototxt at 128 x 160 with random weights:
    the proposals are the numpy port's on the RPN's own outputs, and the
    detection heads run on them (ROIPooling over the padded rows too)."""
    text = (DATA / "faster_rcnn_zf_test.prototxt").read_text()
    shapes = {"data": (3, 128, 160), "im_info": (3,)}
    rng = np.random.default_rng(4)
    blobs = random_blobs(text, shapes, rng)
    blobs["rpn_bbox_pred"][0] *= 0.1  # deltas of a few tenths: boxes near their anchors
    # objectness of about 0.8 at most: unscaled, the softmax saturates and float32
    # scores tie exactly at 0.99999988, where the order of tied proposals is
    # neither py-faster-rcnn's (argsort) nor ours to define (oneDNN on TF 2.16 tied)
    blobs["rpn_cls_score"][0] *= 0.1
    wanted = ["rpn_cls_prob_reshape", "rpn_bbox_pred", "rois", "cls_prob", "bbox_pred"]
    model = import_model(text, data_format=data_format, input_shapes=shapes, outputs=wanted)
    load_into(model, blobs)
    image = rng.standard_normal((1, 3, 128, 160)).astype(np.float32)
    info = np.array([[128.0, 160.0, 1.0]], np.float32)
    out = model([to_keras_layout(image, data_format), info])
    out = {k: keras.ops.convert_to_numpy(v) for k, v in out.items()}
    prob, deltas = out["rpn_cls_prob_reshape"], out["rpn_bbox_pred"]
    if data_format == "channels_last":
        prob, deltas = np.moveaxis(prob, -1, 1), np.moveaxis(deltas, -1, 1)
    assert prob.shape[1:] == (18, 9, 11)  # ZF keeps 1/16 of the image, rounded up
    want, _ = reference_proposals(prob, deltas, info)
    assert 0 < len(want) < 300
    check_padded(out["rois"], None, want, None, 300)
    assert out["cls_prob"].shape == (300, 21) and out["bbox_pred"].shape == (300, 84)
    assert np.all(np.isfinite(out["cls_prob"])) and np.all(np.isfinite(out["bbox_pred"]))
    np.testing.assert_allclose(out["cls_prob"].sum(axis=1), 1.0, rtol=1e-5)
    report = analyze(text, input_shapes=shapes)
    assert dict(report.layers[[r.name for r in report.layers].index("proposal")].tops) == {
        "rois": (300, 5)}


# -- caffe-fast-rcnn's Dropout scale_train (the ZF net's fc6 and fc7) -----------------------


@pytest.mark.layer_type("Dropout")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_dropout_scale_train_false(data_format):
    """caffe-fast-rcnn's dropout_layer.cpp Forward_cpu with scale_train false:
    TRAIN keeps units unscaled (x * mask), TEST scales by 1 - dropout_ratio."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32) + 3.0
    text = ('layer { name: "drop" type: "Dropout" bottom: "x" top: "y" '
            "dropout_param { dropout_ratio: 0.25 scale_train: false } }\n")
    test = run_layers(text, {"x": x}, data_format=data_format)["y"]
    np.testing.assert_allclose(test, x * 0.75, rtol=1e-6)
    train = run_layers(text, {"x": x}, data_format=data_format, phase="TRAIN",
                       training=True)["y"]
    kept = train != 0
    assert 0 < kept.mean() < 1
    np.testing.assert_allclose(train[kept], x[kept], rtol=1e-6)  # x / (1-p) * (1-p)

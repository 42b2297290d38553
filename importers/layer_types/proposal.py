"""Faster R-CNN's region proposals: py-faster-rcnn's Python layer
(rbgirshick/py-faster-rcnn: lib/rpn/proposal_layer.py, generate_anchors.py,
lib/fast_rcnn/bbox_transform.py, lib/nms) recognised as a ``Python`` layer
(``python_layer.PYTHON_LAYERS``), and OpenCV 4's ``Proposal`` type
(``proposal_param`` at field 201 of OpenCV's opencv-caffe.proto), both
computed by ``keras_caffe.layers.two_stage.Proposal``.

Caffe's top has as many rows as proposals survive (at most post_nms_topN);
a Keras tensor's rows are fixed, so the top always has post_nms_topN rows
(OpenCV's choice): the proposals in order of score, then rows of zeros.
ROIPooling (and ROIAlign, PSROIPooling) downstream pool every row; a row
of zeros pools the map's corner, and the results for those rows mean
nothing. The rows that hold proposals are those before the first row of
zeros (a proposal is at least min_size wide, so never all zero unless
min_size is 0).

py-faster-rcnn's TEST configuration (lib/fast_rcnn/config.py) is used:
pre_nms_topN 6000, post_nms_topN 300, nms_thresh 0.7, min_size 16 (its
TRAIN values only apply to training nets, whose other Python layers are
refused); a box is suppressed when its overlap exceeds nms_thresh (its
default GPU NMS and py_cpu_nms; cpu_nms suppresses at equality too).
"""

import ast
import math

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    FASTER_RCNN,
    OPENCV,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.importers.layer_types.python_layer import python_layer
from keras_caffe.layers.two_stage import Proposal as KerasProposal, generate_anchors

RATIOS = (0.5, 1.0, 2.0)
SCALES = (8.0, 16.0, 32.0)
#: py-faster-rcnn's cfg.TEST: RPN_PRE_NMS_TOP_N, RPN_POST_NMS_TOP_N, RPN_NMS_THRESH, RPN_MIN_SIZE.
TEST_CONFIG = dict(pre_nms_topn=6000, post_nms_topn=300, nms_thresh=0.7, min_size=16)
#: The keys of param_str that py-faster-rcnn's ProposalLayer reads.
PARAM_STR_KEYS = ("feat_stride", "scales")


class _Settings:
    def __init__(self, feat_stride, base_size, ratios, scales, pre_nms_topn, post_nms_topn,
                 nms_thresh, min_size):
        self.feat_stride, self.base_size = feat_stride, base_size
        self.ratios, self.scales = tuple(ratios), tuple(scales)
        self.pre_nms_topn, self.post_nms_topn = pre_nms_topn, post_nms_topn
        self.nms_thresh, self.min_size = nms_thresh, min_size

    @property
    def anchors(self):
        return generate_anchors(self.base_size, self.ratios, self.scales)


def _rows(settings, total):
    """The top's rows: post_nms_topN (or every candidate where it is <= 0)."""
    candidates = total if settings.pre_nms_topn <= 0 else min(settings.pre_nms_topn, total)
    return settings.post_nms_topn if settings.post_nms_topn > 0 else candidates


def _shapes(layer, bottoms, settings, who):
    need_bottoms(layer, bottoms, 3)
    if not 1 <= len(layer.top) <= 2:
        raise LayerError(layer.name, f"({layer.type}) has tops rois and optionally scores, "
                                     f"got {len(layer.top)} top(s)")
    count = len(settings.ratios) * len(settings.scales)
    scores, deltas, info = (tuple(b) for b in bottoms)
    if len(scores) != 4 or scores[1] != 2 * count:
        raise LayerError(layer.name, f"({layer.type}) bottom 0 must be the RPN's probabilities "
                                     f"(1, {2 * count}, H, W) for {count} anchors, got "
                                     f"{fmt(scores)}")
    if scores[0] != 1:
        raise LayerError(layer.name, f"({layer.type}) {who} takes a batch of 1 image, got "
                                     f"{scores[0]}")
    if deltas != (1, 4 * count, *scores[2:]):
        raise LayerError(layer.name, f"({layer.type}) bottom 1 must be the RPN's box deltas "
                                     f"{fmt((1, 4 * count, *scores[2:]))}, got {fmt(deltas)}")
    if len(info) < 2 or info[:2] != (1, 3) or any(d != 1 for d in info[2:]):
        raise LayerError(layer.name, f"({layer.type}) bottom 2 must be im_info (1, 3), got "
                                     f"{fmt(info)}")
    rows = _rows(settings, scores[2] * scores[3] * count)
    tops = [(rows, 5), (rows, 1)][:len(layer.top)]
    return Shapes(tops, [], 0)


def _build(layer, bottoms, ctx, settings):
    shapes = ctx.shapes.tops
    scores = ctx.as_image(bottoms[0], layer)
    deltas = ctx.as_image(bottoms[1], layer)
    info = ctx.caffe_order(bottoms[2], layer).tensor
    proposal = KerasProposal(
        settings.anchors.tolist(), settings.feat_stride, settings.pre_nms_topn,
        settings.post_nms_topn, settings.nms_thresh, settings.min_size, rows=shapes[0][0],
        with_scores=len(layer.top) == 2, data_format=ctx.data_format,
        name=ctx.keras_name(layer.name))
    out = proposal([scores, deltas, info])
    return [Blob(t) for t in (out if isinstance(out, (list, tuple)) else [out])]


def _positive_number(value):
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and math.isfinite(value) and value > 0)


def parse_param_str(layer):
    """py-faster-rcnn's param_str (YAML there: a dict of 'feat_stride' and
    optionally 'scales'), read as a Python dict literal with
    ``ast.literal_eval`` (braces optional), never run."""
    text = layer.python_param.param_str.strip()
    literal = text if text.startswith("{") else "{" + text + "}"
    where = f"(Python) python_param.param_str {text!r}"
    try:
        params = ast.literal_eval(literal)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise LayerError(layer.name, f"{where} is not a Python dict literal such as "
                                     "\"'feat_stride': 16\"") from None
    if not isinstance(params, dict):
        raise LayerError(layer.name, f"{where} is not a dict")
    unknown = sorted(repr(k) for k in params if k not in PARAM_STR_KEYS)
    if unknown:
        raise LayerError(layer.name, f"{where} has unknown key(s) {', '.join(unknown)}; "
                                     "ProposalLayer reads 'feat_stride' and 'scales'")
    if "feat_stride" not in params:
        raise LayerError(layer.name, f"{where} lacks 'feat_stride'")
    stride = params["feat_stride"]
    if not (isinstance(stride, int) and not isinstance(stride, bool) and stride > 0):
        raise LayerError(layer.name, f"{where}: 'feat_stride' must be a positive integer, got "
                                     f"{stride!r}")
    scales = params.get("scales", SCALES)
    if not (isinstance(scales, (list, tuple)) and scales
            and all(_positive_number(s) for s in scales)):
        raise LayerError(layer.name, f"{where}: 'scales' must be a list of positive numbers, "
                                     f"got {scales!r}")
    return _Settings(stride, 16, RATIOS, [float(s) for s in scales], **TEST_CONFIG)


@python_layer("rpn.proposal_layer", "ProposalLayer")
class PyFasterRCNNProposal(LayerType):
    """py-faster-rcnn's ProposalLayer (a ``Python`` layer): bottoms the RPN's
    probabilities (1, 2A, H, W), box deltas (1, 4A, H, W) and im_info (1,
    3); tops rois (post_nms_topN, 5) and optionally scores (post_nms_topN, 1)."""

    origin = FASTER_RCNN

    def shapes(self, layer, bottoms, state):
        return _shapes(layer, bottoms, parse_param_str(layer), "py-faster-rcnn's ProposalLayer")

    def build(self, layer, bottoms, ctx):
        return _build(layer, bottoms, ctx, parse_param_str(layer))


def _opencv_settings(layer):
    p = layer.proposal_param
    ratios = list(p.ratio) or list(RATIOS)
    scales = list(p.scale) or list(SCALES)
    for field, value in (("feat_stride", p.feat_stride), ("base_size", p.base_size)):
        if value <= 0:
            raise LayerError(layer.name, f"(Proposal) proposal_param.{field} must be positive, "
                                         f"got {value}")
    for field, values in (("ratio", ratios), ("scale", scales)):
        if not all(_positive_number(v) for v in values):
            raise LayerError(layer.name, f"(Proposal) proposal_param.{field} must be positive, "
                                         f"got {', '.join(f'{v:g}' for v in values)}")
    if not 0 <= p.nms_thresh <= 1:
        raise LayerError(layer.name, f"(Proposal) proposal_param.nms_thresh must be in [0, 1], "
                                     f"got {p.nms_thresh:g}")
    return _Settings(p.feat_stride, p.base_size, ratios, scales, p.pre_nms_topn,
                     p.post_nms_topn, p.nms_thresh, p.min_size)


@layer_type("Proposal")
class Proposal(LayerType):
    """OpenCV's Proposal (proposal_param: feat_stride, base_size, min_size,
    ratio, scale, pre_nms_topn, post_nms_topn, nms_thresh), computed as
    py-faster-rcnn's ProposalLayer with those settings."""

    origin = OPENCV
    examples = (
        Example("proposal_param { feat_stride: 8 ratio: 1 scale: 2 scale: 4 post_nms_topn: 10 }",
                [(1, 4, 3, 5), (1, 8, 3, 5), (1, 3)], tops=2),
    )

    def shapes(self, layer, bottoms, state):
        return _shapes(layer, bottoms, _opencv_settings(layer), "Proposal")

    def build(self, layer, bottoms, ctx):
        return _build(layer, bottoms, ctx, _opencv_settings(layer))

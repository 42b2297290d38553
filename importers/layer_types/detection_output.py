"""DetectionOutput (SSD, weiliu89/caffe branch ssd:
src/caffe/layers/detection_output_layer.cpp, src/caffe/util/bbox_util.cpp).

Bottoms: loc ``(N, P * L * 4)`` (L = 1 with ``share_location``, else
``num_classes``), conf ``(N, P * num_classes)``, prior ``(1, 2, P * 4)`` (a
fourth bottom, the image the fork draws on with ``visualize``, is accepted
and not read).

The fork's top is ``(1, 1, num_kept, 7)``, ``num_kept`` known only after the
forward pass (its Reshape says 1). A Keras tensor needs a fixed size, so the
Keras top, and this shape rule, is ``(N, 1, D, 7)``: per image, ``D =
min(keep_top_k, C * K)`` rows (no ``keep_top_k``: ``C * K``; at least 1),
C the classes but the background, K = min(top_k, P) the candidates NMS sees
per class; the image's detections in the fork's order, then rows ``[i, -1,
-1, -1, -1, -1, -1]`` (the fork's row for an image when nothing is
detected). ``keras_caffe.layers.ssd.caffe_detections`` gives the fork's blob.
In a ``channels_last`` model, a model output of it is ``(N, D, 7, 1)``, as
every 4-D blob.

Differences from the fork, all where its result is undefined or absent:

- ties in the ``keep_top_k`` selection (the fork's ``std::sort`` leaves their
  order unspecified): the lower label, then the NMS order, wins;
- ``share_location`` with ``background_label_id: -1``: the fork's CPU
  forward aborts (``DecodeBBoxesAll`` skips the shared label -1), its GPU
  forward runs NMS for every class; this is the GPU's result;
- ``CENTER_SIZE``/``CORNER_SIZE`` with a prior of non-positive width or
  height: the CPU forward aborts (a CHECK), here as the GPU decodes it;
- ``save_output_param`` and ``visualize`` (files and windows, no effect on
  the top) are not reproduced; a warning says so.

No weights; ``analyze`` counts no multiply-adds for it (a few operations per
box and the comparisons of NMS, not a product of tensors).

Inference only: the fork's Backward is ``NOT_IMPLEMENTED``. The Keras layer
stops its inputs' gradients (a loss reading its top trains nothing through
it, where Caffe would abort); a ``loss_weight`` on its top is refused.
"""

import warnings

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    SSD,
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
)
from keras_caffe.layers.ssd import DetectionOutput as KerasDetectionOutput
from keras_caffe.layers.ssd import detection_rows
from keras_caffe.proto import caffe_pb2


def settings(layer, bottoms):
    """``DetectionOutputLayer::LayerSetUp`` and ``Reshape``'s checks: the
    Keras layer's arguments and the number of priors."""
    p = layer.detection_output_param
    nms = p.nms_param

    def fail(message):
        raise LayerError(layer.name, f"(DetectionOutput) {message}")

    if len(bottoms) not in (3, 4):
        fail(f"takes loc, conf and prior (and an image for visualize), got {len(bottoms)} "
             "bottom(s)")
    if not p.HasField("num_classes"):
        fail("num_classes is required")
    if p.num_classes <= 0:
        fail("num_classes must be positive")
    if nms.nms_threshold < 0:
        fail(f"nms_param.nms_threshold must be non-negative, got {nms.nms_threshold:g}")
    if not 0 < nms.eta <= 1:
        fail(f"nms_param.eta must be in (0, 1], got {nms.eta:g}")
    if any(w != 0 for w in layer.loss_weight):
        fail("has no backward (the fork's is NOT_IMPLEMENTED), so its top cannot take a "
             "loss_weight")
    loc, conf, prior = (tuple(b) for b in bottoms[:3])
    if len(prior) < 3 or prior[1] != 2 or prior[2] % 4 or count(prior[3:]) != 1:
        fail(f"prior must be (1, 2, num_priors * 4) (a PriorBox top), got {fmt(prior)}")
    num_priors = prior[2] // 4
    loc_classes = 1 if p.share_location else p.num_classes
    for what, shape, size, rule in (
            ("loc", loc, num_priors * loc_classes * 4,
             f"num_priors * {'1' if p.share_location else 'num_classes'} * 4"),
            ("conf", conf, num_priors * p.num_classes, "num_priors * num_classes")):
        if len(shape) < 2 or shape[1] != size or count(shape[2:]) != 1:
            fail(f"{what} must be (N, {rule}) = (N, {size}) for {num_priors} priors, got "
                 f"{fmt(shape)}")
    if loc[0] is not None and conf[0] is not None and loc[0] != conf[0]:
        fail(f"loc and conf must have one batch, got {loc[0]} and {conf[0]}")
    kwargs = dict(
        num_classes=p.num_classes, share_location=p.share_location,
        background_label_id=p.background_label_id,
        code_type=caffe_pb2.PriorBoxParameter.CodeType.Name(p.code_type),
        variance_encoded_in_target=p.variance_encoded_in_target, keep_top_k=p.keep_top_k,
        confidence_threshold=p.confidence_threshold if p.HasField("confidence_threshold")
        else None,
        nms_threshold=nms.nms_threshold, top_k=nms.top_k if nms.HasField("top_k") else -1,
        eta=nms.eta)
    return kwargs, num_priors


@layer_type("DetectionOutput")
class DetectionOutput(LayerType):
    """SSD's detections: decode (CORNER, CENTER_SIZE, CORNER_SIZE), per-class
    NMS (threshold, top_k, eta), keep_top_k; (N, 1, D, 7) rows, -1 padded."""

    origin = SSD
    examples = (
        Example("detection_output_param { num_classes: 3 share_location: true "
                "background_label_id: 0 code_type: CENTER_SIZE keep_top_k: 5 "
                "confidence_threshold: 0.1 nms_param { nms_threshold: 0.45 top_k: 4 } }",
                [(2, 24), (2, 18), (1, 2, 24)]),
        Example("detection_output_param { num_classes: 2 share_location: false "
                "background_label_id: -1 code_type: CORNER variance_encoded_in_target: true "
                "nms_param { nms_threshold: 0.3 eta: 0.9 } }",
                [(1, 40), (1, 10), (1, 2, 20)]),
    )

    def shapes(self, layer, bottoms, state):
        kwargs, num_priors = settings(layer, bottoms)
        rows = detection_rows(num_priors, kwargs["num_classes"], kwargs["background_label_id"],
                              kwargs["top_k"], kwargs["keep_top_k"])
        return Shapes([(bottoms[0][0], 1, rows, 7)])

    def build(self, layer, bottoms, ctx):
        kwargs, _ = settings(layer, ctx.bottom_shapes)
        p = layer.detection_output_param
        ignored = [field for field, on in (("save_output_param",
                                            bool(p.save_output_param.output_directory)),
                                           ("visualize", p.visualize)) if on]
        if ignored:
            warnings.warn(f"layer {layer.name!r} (DetectionOutput): {' and '.join(ignored)} "
                          "not reproduced (the fork writes files or draws with it; the top "
                          "is the same)", stacklevel=2)
        inputs = [ctx.caffe_order(b, layer).tensor for b in bottoms[:3]]
        keras_layer = KerasDetectionOutput(**kwargs, name=ctx.keras_name(layer.name))
        return [Blob(keras_layer(inputs))]

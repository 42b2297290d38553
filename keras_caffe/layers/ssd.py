"""SSD's PriorBox and DetectionOutput (weiliu89/caffe, branch ``ssd``),
computed as the fork's ``Forward_cpu`` does, for inference.

``PriorBox`` (``prior_box_layer.cpp``) depends on nothing but the shapes of
its inputs: its top is computed once with numpy from the static shapes and
emitted as a constant, broadcast to the batch.

``DetectionOutput`` (``detection_output_layer.cpp``, ``bbox_util.cpp``)
decodes the location predictions against the priors, runs the fork's greedy
``ApplyNMSFast`` per image and class, keeps the ``keep_top_k`` best and
writes rows ``[image_id, label, score, xmin, ymin, xmax, ymax]``. The fork's
top holds a data-dependent number of rows for the whole batch; a Keras tensor
cannot, so this layer gives each image a fixed number of rows (``(N, 1, D,
7)``, ``D = detection_rows(...)``, the most the image can have): the image's
rows in the fork's order, then padding rows ``[i, -1, -1, -1, -1, -1, -1]``
(the row the fork writes for an image when no image of the batch has a
detection). ``caffe_detections`` turns that into the fork's blob.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_caffe.layers.base import check_data_format, register, top_k

#: ``PriorBoxParameter.CodeType``'s values.
CODE_TYPES = {"CORNER": 1, "CENTER_SIZE": 2, "CORNER_SIZE": 3}
#: The fork's ``-FLT_MAX``: no confidence threshold.
NO_THRESHOLD = -float(np.finfo(np.float32).max)


# -- PriorBox ------------------------------------------------------------------


def prior_aspect_ratios(aspect_ratios, flip):
    """``PriorBoxLayer::LayerSetUp``'s ratios: 1, then each given ratio not
    already there (within 1e-6), followed by its inverse when ``flip``."""
    ratios = [np.float32(1.0)]
    for ar in aspect_ratios:
        ar = np.float32(ar)
        if any(abs(ar - known) < 1e-6 for known in ratios):
            continue
        ratios.append(ar)
        if flip:
            ratios.append(np.float32(1.0 / float(ar)))
    return ratios


def priors_per_location(min_sizes, max_sizes, aspect_ratios, flip):
    """The number of priors at each feature map position (the fork's ``num_priors_``)."""
    return len(prior_aspect_ratios(aspect_ratios, flip)) * len(min_sizes) + len(max_sizes)


def prior_boxes(layer_hw, image_hw, min_sizes, max_sizes=(), aspect_ratios=(), flip=True,
                clip=False, variances=(0.1,), step_hw=None, offset=0.5):
    """The PriorBox top without its batch axis, ``(2, H * W * num_priors * 4)``
    float32: row 0 the boxes (xmin, ymin, xmax, ymax, normalized by the image
    size), row 1 their variances.

    ``layer_hw`` is the feature map's (H, W); ``image_hw`` the image's (its
    bottom's, or ``img_size``/``img_h``/``img_w``); ``step_hw`` the step (None:
    the image size over the feature map's). As in the fork, the sizes are
    truncated to integers (``int min_size_ = min_sizes_[s]``), steps and
    centres are float32 and each coordinate is computed in double and stored
    as float32.
    """
    layer_h, layer_w = (int(d) for d in layer_hw)
    img_h, img_w = (int(d) for d in image_hw)
    if step_hw is None:
        step_h = np.float32(img_h) / np.float32(layer_h)
        step_w = np.float32(img_w) / np.float32(layer_w)
    else:
        step_h, step_w = (np.float32(s) for s in step_hw)
    offset = np.float32(offset)
    ratios = prior_aspect_ratios(aspect_ratios, flip)
    # The box sizes of one location, in the fork's order, as float32.
    sizes = []
    for s, min_size in enumerate(min_sizes):
        low = int(np.float32(min_size))
        sizes.append((np.float32(low), np.float32(low)))
        if max_sizes:
            side = np.float32(math.sqrt(low * int(np.float32(max_sizes[s]))))
            sizes.append((side, side))
        for ar in ratios:
            if abs(float(ar) - 1.0) < 1e-6:
                continue
            root = math.sqrt(float(ar))
            sizes.append((np.float32(low * root), np.float32(low / root)))
    widths = np.array([w for w, _ in sizes], np.float64)
    heights = np.array([h for _, h in sizes], np.float64)
    cx = ((np.arange(layer_w, dtype=np.float32) + offset) * step_w).astype(np.float64)
    cy = ((np.arange(layer_h, dtype=np.float32) + offset) * step_h).astype(np.float64)
    cx = np.broadcast_to(cx[None, :, None], (layer_h, layer_w, len(sizes)))
    cy = np.broadcast_to(cy[:, None, None], (layer_h, layer_w, len(sizes)))
    boxes = np.stack([(cx - widths / 2.0) / img_w, (cy - heights / 2.0) / img_h,
                      (cx + widths / 2.0) / img_w, (cy + heights / 2.0) / img_h], axis=-1)
    boxes = boxes.astype(np.float32).reshape(-1)
    if clip:
        boxes = np.minimum(np.maximum(boxes, np.float32(0)), np.float32(1))
    variances = np.asarray(variances, np.float32).reshape(-1)
    if variances.size == 1:
        variance = np.full(boxes.shape, variances[0], np.float32)
    else:  # one value per coordinate
        variance = np.tile(variances, boxes.size // 4)
    return np.stack([boxes, variance])


@register
class PriorBox(keras.layers.Layer):
    """SSD's PriorBox: the prior boxes and variances of a feature map, a
    constant of the input shapes (``prior_boxes``), broadcast to the batch:
    ``(N, 2, H * W * num_priors * 4)``, Caffe's layout.

    Inputs: the feature map, and the image when ``img_size`` is None (only
    their shapes are read), both in ``data_format``. ``img_size``/``step``
    are (h, w) pairs or None. No weights, no gradient.
    """

    def __init__(self, min_sizes, max_sizes=(), aspect_ratios=(), flip=True, clip=False,
                 variances=(0.1,), img_size=None, step=None, offset=0.5,
                 data_format="channels_last", **kwargs):
        super().__init__(**kwargs)
        self.min_sizes = [float(s) for s in min_sizes]
        self.max_sizes = [float(s) for s in max_sizes]
        self.aspect_ratios = [float(a) for a in aspect_ratios]
        self.flip = bool(flip)
        self.clip = bool(clip)
        self.variances = [float(v) for v in variances]
        self.img_size = None if img_size is None else tuple(int(d) for d in img_size)
        self.step = None if step is None else tuple(float(s) for s in step)
        self.offset = float(offset)
        self.data_format = check_data_format(data_format)
        self.num_priors = priors_per_location(self.min_sizes, self.max_sizes,
                                              self.aspect_ratios, self.flip)
        self._constants = {}

    def _hw(self, shape):
        shape = tuple(shape)
        if len(shape) != 4:
            raise ValueError(f"PriorBox needs 4-D inputs, got shape {shape}")
        hw = shape[1:3] if self.data_format == "channels_last" else shape[2:4]
        if any(d is None for d in hw):
            raise ValueError(f"PriorBox needs static spatial sizes, got shape {shape}")
        return tuple(int(d) for d in hw)

    def _inputs(self, inputs):
        inputs = list(inputs) if isinstance(inputs, (list, tuple)) else [inputs]
        if len(inputs) != (1 if self.img_size is not None else 2):
            wanted = "the feature map" if self.img_size else "the feature map and the image"
            raise ValueError(f"PriorBox takes {wanted}, got {len(inputs)} input(s)")
        return inputs

    def priors(self, feature_shape, image_shape=None):
        """The constant ``(2, L)`` for inputs of these shapes."""
        layer_hw = self._hw(feature_shape)
        image_hw = self.img_size if self.img_size is not None else self._hw(image_shape)
        key = (layer_hw, image_hw)
        if key not in self._constants:
            self._constants[key] = prior_boxes(
                layer_hw, image_hw, self.min_sizes, self.max_sizes, self.aspect_ratios,
                self.flip, self.clip, self.variances, self.step, self.offset)
        return self._constants[key]

    def call(self, inputs):
        inputs = self._inputs(inputs)
        priors = self.priors(inputs[0].shape, inputs[1].shape if len(inputs) > 1 else None)
        batch = ops.shape(inputs[0])[0]
        constant = ops.convert_to_tensor(priors[None], dtype="float32")
        return ops.broadcast_to(constant, (batch, *priors.shape))

    def compute_output_shape(self, input_shape):
        first = input_shape[0] if isinstance(input_shape[0], (list, tuple)) else input_shape
        layer_h, layer_w = self._hw(first)
        return (first[0], 2, layer_h * layer_w * self.num_priors * 4)

    def get_config(self):
        config = super().get_config()
        config.update(min_sizes=self.min_sizes, max_sizes=self.max_sizes,
                      aspect_ratios=self.aspect_ratios, flip=self.flip, clip=self.clip,
                      variances=self.variances,
                      img_size=None if self.img_size is None else list(self.img_size),
                      step=None if self.step is None else list(self.step), offset=self.offset,
                      data_format=self.data_format)
        return config


# -- DetectionOutput -----------------------------------------------------------


def detection_classes(num_classes, background_label_id):
    """The labels NMS runs for: every class but the background."""
    return [c for c in range(num_classes) if c != background_label_id]


def candidates_per_class(num_priors, top_k):
    """How many boxes of a class enter NMS (``GetMaxScoreIndex``'s top_k)."""
    return num_priors if top_k < 0 else min(top_k, num_priors)


def detection_rows(num_priors, num_classes, background_label_id, top_k, keep_top_k):
    """``D``, the rows per image of the Keras ``DetectionOutput``: the most
    detections one image can have (each class's NMS keeps at most its
    candidates; then at most ``keep_top_k``), at least 1 (the fork's row for
    an image without detections)."""
    rows = len(detection_classes(num_classes, background_label_id)) * candidates_per_class(
        num_priors, top_k)
    if keep_top_k > -1:
        rows = min(rows, keep_top_k)
    return max(rows, 1)


def _decode(code_type, loc, prior, variance, variance_encoded_in_target):
    """``DecodeBBox`` (float32, the fork's order of operations): ``loc``
    (..., P, 4), ``prior`` and ``variance`` (P, 4) -> boxes (..., P, 4)."""
    lx, ly, lx2, ly2 = (loc[..., i] for i in range(4))
    px, py, px2, py2 = (prior[:, i] for i in range(4))
    vx, vy, vx2, vy2 = (variance[:, i] for i in range(4))
    if variance_encoded_in_target:
        vx = vy = vx2 = vy2 = None

    def scaled(v, value):  # prior_variance[i] * bbox.i(), or bbox.i() alone
        return value if v is None else v * value

    if code_type == CODE_TYPES["CORNER"]:
        return ops.stack([px + scaled(vx, lx), py + scaled(vy, ly),
                          px2 + scaled(vx2, lx2), py2 + scaled(vy2, ly2)], axis=-1)
    width, height = px2 - px, py2 - py
    if code_type == CODE_TYPES["CORNER_SIZE"]:
        return ops.stack([px + scaled(vx, lx) * width, py + scaled(vy, ly) * height,
                          px2 + scaled(vx2, lx2) * width, py2 + scaled(vy2, ly2) * height],
                         axis=-1)
    if code_type != CODE_TYPES["CENTER_SIZE"]:
        raise ValueError(f"unknown code_type {code_type}")
    cx = scaled(vx, lx) * width + (px + px2) / 2.0
    cy = scaled(vy, ly) * height + (py + py2) / 2.0
    w = ops.exp(scaled(vx2, lx2)) * width
    h = ops.exp(scaled(vy2, ly2)) * height
    return ops.stack([cx - w / 2.0, cy - h / 2.0, cx + w / 2.0, cy + h / 2.0], axis=-1)


def _size(boxes):
    """``BBoxSize`` (normalized): 0 for a box with xmax < xmin or ymax < ymin."""
    width = boxes[..., 2] - boxes[..., 0]
    height = boxes[..., 3] - boxes[..., 1]
    invalid = ops.logical_or(width < 0, height < 0)
    return ops.where(invalid, ops.zeros_like(width), width * height)


def _overlap(box, size, boxes, sizes):
    """``JaccardOverlap`` (normalized) of ``box`` (..., 4) with each of
    ``boxes`` (..., K, 4): 0 unless the intersection has a positive width and
    height; else intersection / (size1 + size2 - intersection)."""
    box = box[..., None, :]
    disjoint = ops.logical_or(
        ops.logical_or(boxes[..., 0] > box[..., 2], boxes[..., 2] < box[..., 0]),
        ops.logical_or(boxes[..., 1] > box[..., 3], boxes[..., 3] < box[..., 1]))
    width = ops.minimum(box[..., 2], boxes[..., 2]) - ops.maximum(box[..., 0], boxes[..., 0])
    height = ops.minimum(box[..., 3], boxes[..., 3]) - ops.maximum(box[..., 1], boxes[..., 1])
    meet = ops.logical_and(ops.logical_not(disjoint),
                           ops.logical_and(width > 0, height > 0))
    inter = width * height
    union = ops.where(meet, size[..., None] + sizes - inter, ops.ones_like(inter))
    return ops.where(meet, inter / union, ops.zeros_like(inter))


@register
class DetectionOutput(keras.layers.Layer):
    """SSD's DetectionOutput, inference only: ``[loc, conf, prior]`` in
    Caffe's order (loc ``(N, P * L * 4)``, L = 1 with ``share_location`` else
    ``num_classes``; conf ``(N, P * num_classes)``; prior ``(M, 2, P * 4)``,
    sample 0 read) -> ``(N, 1, D, 7)``, ``D = detection_rows(...)``: each
    image's rows ``[image_id, label, score, xmin, ymin, xmax, ymax]`` in the
    fork's order (labels ascending; within a label, by score), then rows
    ``[image_id, -1, -1, -1, -1, -1, -1]``.

    The fork's semantics: ``GetMaxScoreIndex`` keeps scores strictly above
    ``confidence_threshold`` (None: all), the best ``top_k`` (ties: lower
    prior first); ``ApplyNMSFast`` keeps a box whose overlap with every kept
    one is ``<=`` the threshold, which is multiplied by ``eta`` after each
    kept box while above 0.5; over ``keep_top_k`` detections in an image, the
    best ``keep_top_k`` over all classes stay. Its inputs' gradients are
    stopped: the fork has no backward.
    """

    def __init__(self, num_classes, share_location=True, background_label_id=0,
                 code_type="CORNER", variance_encoded_in_target=False, keep_top_k=-1,
                 confidence_threshold=None, nms_threshold=0.3, top_k=-1, eta=1.0, **kwargs):
        super().__init__(**kwargs)
        self.num_classes = int(num_classes)
        self.share_location = bool(share_location)
        self.background_label_id = int(background_label_id)
        self.code_type = code_type if isinstance(code_type, str) else {
            v: k for k, v in CODE_TYPES.items()}[int(code_type)]
        if self.code_type not in CODE_TYPES:
            raise ValueError(f"code_type must be one of {sorted(CODE_TYPES)}, got {code_type!r}")
        self.variance_encoded_in_target = bool(variance_encoded_in_target)
        self.keep_top_k = int(keep_top_k)
        self.confidence_threshold = (None if confidence_threshold is None
                                     else float(confidence_threshold))
        self.nms_threshold = float(nms_threshold)
        self.top_k = int(top_k)
        self.eta = float(eta)
        if self.num_classes <= 0:
            raise ValueError(f"num_classes must be positive, got {num_classes}")
        if self.nms_threshold < 0:
            raise ValueError(f"nms_threshold must be non-negative, got {nms_threshold}")
        if not 0 < self.eta <= 1:
            raise ValueError(f"eta must be in (0, 1], got {eta}")

    @property
    def loc_classes(self):
        return 1 if self.share_location else self.num_classes

    def _num_priors(self, prior_shape):
        return int(prior_shape[2]) // 4

    def rows(self, num_priors):
        return detection_rows(num_priors, self.num_classes, self.background_label_id,
                              self.top_k, self.keep_top_k)

    def call(self, inputs):
        loc, conf, prior = (ops.stop_gradient(ops.cast(x, "float32")) for x in inputs[:3])
        num_priors = self._num_priors(prior.shape)
        classes = detection_classes(self.num_classes, self.background_label_id)
        k = candidates_per_class(num_priors, self.top_k)
        rows = self.rows(num_priors)
        batch = ops.shape(loc)[0]
        image_id = ops.cast(ops.arange(batch), "float32")[:, None]
        padding = ops.concatenate([image_id, -ops.ones((batch, 6), "float32")], axis=1)
        padding = ops.broadcast_to(padding[:, None, :], (batch, rows, 7))
        if not classes or k == 0:
            return padding[:, None]

        # Decode (DecodeBBoxesAll): boxes (B, C', P, 4) of the classes NMS sees.
        loc = ops.reshape(loc, (-1, num_priors, self.loc_classes, 4))
        prior = ops.reshape(prior[0], (2, num_priors, 4))
        boxes = _decode(CODE_TYPES[self.code_type], ops.transpose(loc, (0, 2, 1, 3)), prior[0],
                        prior[1], self.variance_encoded_in_target)
        if not self.share_location:
            boxes = ops.take(boxes, classes, axis=1)
        boxes = ops.broadcast_to(boxes, (batch, len(classes), num_priors, 4))
        scores = ops.reshape(conf, (-1, num_priors, self.num_classes))
        scores = ops.transpose(ops.take(scores, classes, axis=2), (0, 2, 1))  # (B, C', P)

        # GetMaxScoreIndex: above the threshold, best first (ties: lower index), top_k.
        threshold = (NO_THRESHOLD if self.confidence_threshold is None
                     else self.confidence_threshold)
        above = scores > np.float32(threshold)
        masked = ops.where(above, scores, ops.full_like(scores, -np.inf))
        values, order = top_k(masked, k)
        valid = ops.take_along_axis(above, order, axis=-1)
        order4 = ops.broadcast_to(order[..., None], (*ops.shape(order), 4))
        sorted_boxes = ops.take_along_axis(boxes, order4, axis=2)  # (B, C', K, 4)
        sizes = _size(sorted_boxes)

        # ApplyNMSFast: greedy, in score order, with the adaptive threshold.
        positions = ops.arange(k)
        eta = np.float32(self.eta)

        def step(i, state):
            kept, limit = state
            box = ops.take(sorted_boxes, i, axis=2)
            size = ops.take(sizes, i, axis=2)
            overlap = _overlap(box, size, sorted_boxes, sizes)
            beaten = ops.logical_and(kept, ops.logical_not(overlap <= limit[..., None]))
            keep = ops.logical_and(ops.take(valid, i, axis=2),
                                   ops.logical_not(ops.any(beaten, axis=-1)))
            kept = ops.logical_or(kept, ops.logical_and(keep[..., None], positions == i))
            if eta < 1:
                limit = ops.where(ops.logical_and(keep, limit > 0.5), limit * eta, limit)
            return kept, limit

        kept = ops.zeros(ops.shape(valid), "bool")
        limit = ops.full(ops.shape(valid)[:2], np.float32(self.nms_threshold), "float32")
        kept, _ = ops.fori_loop(0, k, step, (kept, limit))

        # keep_top_k over the image's classes (ties: lower label, then NMS order).
        flat = len(classes) * k
        kept = ops.reshape(kept, (-1, flat))
        values = ops.reshape(values, (-1, flat))
        best = ops.where(kept, values, ops.full_like(values, -np.inf))
        index = ops.arange(flat)
        if -1 < self.keep_top_k < flat:
            if self.keep_top_k == 0:
                kept = ops.zeros_like(kept)
            else:
                top_values, top_index = top_k(best, self.keep_top_k)
                last_value, last_index = top_values[:, -1:], top_index[:, -1:]
                ranked = ops.logical_or(best > last_value, ops.logical_and(
                    best == last_value, index[None] <= last_index))
                kept = ops.logical_and(kept, ranked)

        # The rows: kept entries in (label, NMS order), then padding.
        key = ops.where(kept, flat - index[None], ops.zeros_like(kept, "int32"))
        _, pick = top_k(ops.cast(key, "int32"), rows)
        real = ops.take_along_axis(kept, pick, axis=1)
        labels = ops.take(ops.convert_to_tensor(np.asarray(classes, np.float32)), pick // k)
        score = ops.take_along_axis(values, pick, axis=1)
        pick4 = ops.broadcast_to(pick[..., None], (*ops.shape(pick), 4))
        box = ops.take_along_axis(ops.reshape(sorted_boxes, (-1, flat, 4)), pick4, axis=1)
        found = ops.concatenate([ops.broadcast_to(image_id, ops.shape(score))[..., None],
                                 labels[..., None], score[..., None], box], axis=-1)
        return ops.where(real[..., None], found, padding)[:, None]

    def compute_output_shape(self, input_shape):
        loc_shape, _, prior_shape = input_shape[:3]
        return (loc_shape[0], 1, self.rows(self._num_priors(prior_shape)), 7)

    def get_config(self):
        config = super().get_config()
        config.update(num_classes=self.num_classes, share_location=self.share_location,
                      background_label_id=self.background_label_id, code_type=self.code_type,
                      variance_encoded_in_target=self.variance_encoded_in_target,
                      keep_top_k=self.keep_top_k, confidence_threshold=self.confidence_threshold,
                      nms_threshold=self.nms_threshold, top_k=self.top_k, eta=self.eta)
        return config


def caffe_detections(detections, data_format="channels_first"):
    """The fork's DetectionOutput blob ``(1, 1, num_kept, 7)`` from this
    layer's output (numpy; a model output in ``channels_last`` is ``(N, D, 7,
    1)``): every image's detections, images in order; when no image has one,
    the row ``[i, -1, -1, -1, -1, -1, -1]`` for each image ``i``."""
    detections = np.asarray(detections)
    if data_format == "channels_last":
        detections = np.moveaxis(detections, -1, 1)
    rows = detections.reshape(detections.shape[0], -1, 7)
    found = rows[rows[..., 1] != -1]
    if not len(found):
        found = rows[:, 0]
    return found.reshape(1, 1, -1, 7)

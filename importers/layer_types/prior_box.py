"""PriorBox (SSD, weiliu89/caffe branch ssd: src/caffe/layers/prior_box_layer.cpp).

The top, ``(1, 2, H * W * num_priors * 4)`` in Caffe (boxes, then their
variances), depends only on the shapes of the bottoms: it is computed with
numpy when the model is built and emitted as a constant broadcast to the
batch, so the Keras top (and this shape rule) is ``(N, 2, H * W *
num_priors * 4)``, N the feature map's batch. No weights, no gradient (the
fork's Backward does nothing), no multiply-adds.

The fork's quirks kept: min and max sizes are truncated to integers
(``int min_size_ = min_sizes_[s]``); an aspect ratio within 1e-6 of one
already listed is dropped; its header declares ``ExactBottomBlobs`` (not
``ExactNumBottomBlobs``), so Caffe does not enforce two bottoms, and one
bottom works where ``img_size`` (or ``img_h``/``img_w``) is given. Refused
where the fork would compute NaN or infinity: a non-positive aspect ratio.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import (
    SSD,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
)
from keras_caffe.layers.ssd import PriorBox as KerasPriorBox
from keras_caffe.layers.ssd import priors_per_location


def settings(layer, bottoms):
    """``PriorBoxLayer::LayerSetUp``'s checks: the Keras layer's arguments
    and the feature map's (H, W)."""
    p = layer.prior_box_param
    name = layer.name

    def fail(message):
        raise LayerError(name, f"(PriorBox) {message}")

    min_sizes, max_sizes = list(p.min_size), list(p.max_size)
    if not min_sizes:
        fail("min_size is required")
    if min(min_sizes) <= 0:
        fail(f"min_size must be positive, got {min_sizes}")
    if max_sizes:
        if len(max_sizes) != len(min_sizes):
            fail(f"max_size must be given once per min_size ({len(min_sizes)}), got "
                 f"{len(max_sizes)}")
        for low, high in zip(min_sizes, max_sizes):
            if not high > low:
                fail(f"max_size {high:g} must be greater than min_size {low:g}")
    ratios = list(p.aspect_ratio)
    if ratios and min(ratios) <= 0:
        fail(f"aspect_ratio must be positive, got {ratios}")
    variances = list(p.variance) or [0.1]
    if len(variances) not in (1, 4):
        fail(f"variance takes 1 or 4 values, got {len(variances)}")
    if min(variances) <= 0:
        fail(f"variance must be positive, got {variances}")
    if p.HasField("img_h") or p.HasField("img_w"):
        if p.HasField("img_size"):
            fail("give either img_size or img_h/img_w, not both")
        if p.img_h <= 0 or p.img_w <= 0:
            fail(f"img_h and img_w must both be positive, got img_h {p.img_h}, img_w {p.img_w}")
        img_size = (p.img_h, p.img_w)
    elif p.HasField("img_size"):
        if p.img_size <= 0:
            fail("img_size must be positive")
        img_size = (p.img_size, p.img_size)
    else:
        img_size = None
    if p.HasField("step_h") or p.HasField("step_w"):
        if p.HasField("step"):
            fail("give either step or step_h/step_w, not both")
        if not (p.step_h > 0 and p.step_w > 0):
            fail(f"step_h and step_w must both be positive, got step_h {p.step_h:g}, "
                 f"step_w {p.step_w:g}")
        step = (p.step_h, p.step_w)
    elif p.HasField("step"):
        if not p.step > 0:
            fail(f"step must be positive, got {p.step:g}")
        step = (p.step, p.step)
    else:
        step = None
    wanted = (1, 2) if img_size is not None else (2,)
    if len(bottoms) not in wanted:
        fail("takes the feature map and the image (2 bottoms)"
             + (" or the feature map alone (img_size is given)" if img_size else "")
             + f", got {len(bottoms)}")
    read = bottoms[:1] if img_size is not None else bottoms[:2]
    for which, shape in zip(("feature map", "image"), read):
        if len(shape) != 4:
            fail(f"needs a 4-D {which} (N, C, H, W), got {fmt(shape)}")
    kwargs = dict(min_sizes=min_sizes, max_sizes=max_sizes, aspect_ratios=ratios, flip=p.flip,
                  clip=p.clip, variances=variances, img_size=img_size, step=step,
                  offset=p.offset)
    return kwargs, tuple(bottoms[0][2:4])


@layer_type("PriorBox")
class PriorBox(LayerType):
    """SSD's prior boxes of a feature map (min/max sizes, aspect ratios with
    flip, clip, variances, img size, step, offset): a constant of the shapes."""

    origin = SSD
    examples = (
        Example("prior_box_param { min_size: 60 aspect_ratio: 2 flip: true clip: false "
                "variance: 0.1 variance: 0.1 variance: 0.2 variance: 0.2 offset: 0.5 }",
                [(2, 4, 3, 3), (2, 3, 12, 12)]),
        Example("prior_box_param { min_size: 30 min_size: 45 max_size: 60 max_size: 90 "
                "aspect_ratio: 2 aspect_ratio: 3 clip: true variance: 0.2 step: 8 }",
                [(1, 2, 4, 5), (1, 3, 30, 40)]),
        Example("prior_box_param { min_size: 10 img_h: 40 img_w: 30 step_h: 10 step_w: 8 "
                "offset: 0 flip: false aspect_ratio: 0.5 }", [(2, 3, 4, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        kwargs, (height, width) = settings(layer, bottoms)
        per_location = priors_per_location(kwargs["min_sizes"], kwargs["max_sizes"],
                                           kwargs["aspect_ratios"], kwargs["flip"])
        return Shapes([(bottoms[0][0], 2, height * width * per_location * 4)])

    def build(self, layer, bottoms, ctx):
        kwargs, _ = settings(layer, ctx.bottom_shapes)
        read = bottoms[:1] if kwargs["img_size"] is not None else bottoms[:2]
        keras_layer = KerasPriorBox(**kwargs, data_format=ctx.data_format,
                                    name=ctx.keras_name(layer.name))
        images = [ctx.as_image(b, layer) for b in read]
        tensor = keras_layer(images if len(images) > 1 else images[0])
        return [Blob(tensor)]  # Caffe's layout: (N, 2, L)

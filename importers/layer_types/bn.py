"""BN: the one-layer batch norms of SegNet and PSPNet (one type name, two
different layers).

- SegNet (alexgkendall/caffe-segnet, src/caffe/layers/bn_layer.cpp): blobs
  scale and shift, (1, C, 1, 1) each. ``bn_mode: LEARN`` (the default)
  normalizes by the batch's statistics in every phase (eps 1e-9, fixed) and
  may have two more tops, the batch mean and variance, (1, C, 1, 1) each;
  ``bn_mode: INFERENCE`` is ``x * scale + shift`` (statistics folded in).
- PSPNet (hszhao/PSPNet, src/caffe/layers/bn_layer.cpp): blobs slope,
  bias, running mean, running variance, (1, C, 1, 1) each; the running
  statistics in TEST or when ``frozen``, the batch's (updated into the
  running ones with ``momentum``) otherwise; ``eps`` (1e-5).

Which one a layer is: its ``bn_param`` fields (SegNet: ``bn_mode``,
``scale_filler``, ``shift_filler``; PSPNet: ``slope_filler``,
``bias_filler``, ``momentum``, ``eps``, ``frozen``, ``engine``), else its
tops (more than one: SegNet's), else its number of ``param { }`` (2: SegNet,
4: PSPNet), else it is refused.
"""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    SEGNET,
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.initializers import from_filler
from keras_caffe.layers.segmentation import PSPNetBN, SegNetBN
from keras_caffe.proto import caffe_pb2

_SEGNET_FIELDS = ("bn_mode", "scale_filler", "shift_filler")
_PSPNET_FIELDS = ("slope_filler", "bias_filler", "momentum", "eps", "frozen", "engine")


def variant(layer):
    """"SegNet" or "PSPNet": the fork whose BN ``layer`` is."""
    p = layer.bn_param
    segnet = [f for f in _SEGNET_FIELDS if p.HasField(f)]
    pspnet = [f for f in _PSPNET_FIELDS if p.HasField(f)]
    if segnet and pspnet:
        raise LayerError(layer.name, f"(BN) mixes SegNet's bn_param fields ({', '.join(segnet)}) "
                                     f"with PSPNet's ({', '.join(pspnet)}); one BN layer is "
                                     "either fork's")
    if segnet or pspnet:
        return "SegNet" if segnet else "PSPNet"
    if len(layer.top) > 1:
        return "SegNet"  # its batch mean and variance tops; PSPNet's BN has one top
    if len(layer.param) in (2, 4):
        return "SegNet" if len(layer.param) == 2 else "PSPNet"
    raise LayerError(layer.name, "(BN) cannot tell SegNet's BN (bn_mode, scale_filler, "
                                 "shift_filler; 2 blobs) from PSPNet's (slope_filler, "
                                 "bias_filler, momentum, eps, frozen; 4 blobs): give one of "
                                 "those bn_param fields, or 2 or 4 param { }")


def _filler(p, name, shape):
    # Caffe's default filler is constant 0.
    return from_filler(getattr(p, name) if p.HasField(name) else caffe_pb2.FillerParameter(),
                       shape)


@layer_type("BN")
class BN(LayerType):
    """SegNet's BN (scale, shift; bn_mode LEARN: batch statistics always,
    INFERENCE: x * scale + shift) or PSPNet's (slope, bias, running mean and
    variance; momentum, eps, frozen), told apart by their bn_param fields."""

    origin = SEGNET
    examples = (
        Example("bn_param { bn_mode: INFERENCE scale_filler { type: 'constant' value: 2 } "
                "shift_filler { type: 'constant' value: 0.5 } }", [(2, 3, 4, 5)]),
        Example("bn_param { scale_filler { type: 'constant' value: 1 } "
                "shift_filler { type: 'constant' value: 0.001 } }", [(2, 3, 4, 4)]),
        Example("bn_param { bn_mode: LEARN }", [(2, 4, 3, 2)], tops=3),
        Example("bn_param { slope_filler { type: 'constant' value: 1 } "
                "bias_filler { type: 'constant' value: 0 } frozen: true momentum: 0.95 }",
                [(2, 3, 4, 4)]),
        Example("bn_param { momentum: 0.9 eps: 0.001 }", [(2, 5, 3, 3)]),
        Example("bn_param { frozen: true }", [(2, 6)]),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        if not 2 <= len(shape) <= 4:
            raise LayerError(layer.name, f"(BN) needs a 2- to 4-D input (N, C, H, W), got "
                                         f"{fmt(shape)}")
        blob = (1, shape[1], 1, 1)
        if variant(layer) == "PSPNet":
            if len(layer.top) != 1:
                raise LayerError(layer.name, f"(BN) PSPNet's BN has one top, got "
                                             f"{len(layer.top)}")
            return Shapes([shape], [blob] * 4)
        learn = layer.bn_param.bn_mode == caffe_pb2.BNParameter.LEARN
        limit, what = ((3, "1 to 3 tops (output, batch mean, batch variance)") if learn
                       else (1, "one top with bn_mode INFERENCE"))
        if len(layer.top) > limit:
            raise LayerError(layer.name, f"(BN) SegNet's BN has {what}, got {len(layer.top)}")
        return Shapes([shape] + [blob] * (len(layer.top) - 1), [blob] * 2)

    def build(self, layer, bottoms, ctx):
        p = layer.bn_param
        bottom = bottoms[0]
        if bottom.layout == "flat":
            bottom = ctx.caffe_order(bottom, layer)
        channels = ctx.bottom_shapes[0][1]
        blob = (1, channels, 1, 1)
        common = dict(axis=ctx.axis(bottom, 1), name=ctx.keras_name(layer.name),
                      caffe_name=layer.name)
        if variant(layer) == "PSPNet":
            norm = PSPNetBN(momentum=p.momentum, eps=p.eps, frozen=p.frozen,
                            slope_initializer=_filler(p, "slope_filler", blob),
                            bias_initializer=_filler(p, "bias_filler", blob), **common)
            return [ctx.same_layout(ctx.apply(norm, bottom.tensor), bottom)]
        statistics = len(layer.top) > 1
        channels_last = ctx.data_format == "channels_last"
        norm = SegNetBN(mode=caffe_pb2.BNParameter.BNMode.Name(p.bn_mode),
                        statistics=statistics,
                        statistics_shape=((1, 1, 1, channels) if channels_last else blob)
                        if statistics else None,
                        scale_initializer=_filler(p, "scale_filler", blob),
                        shift_initializer=_filler(p, "shift_filler", blob), **common)
        out = ctx.apply(norm, bottom.tensor)
        if not statistics:
            return [ctx.same_layout(out, bottom)]
        y, mean, variance = out
        return [ctx.same_layout(y, bottom)] + [ctx.image_output(t)
                                               for t in (mean, variance)][:len(layer.top) - 1]

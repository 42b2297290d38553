"""Pooling (BVLC: pooling_layer.cpp): MAX and AVE, global, Caffe's ceil
output size or ``round_mode: FLOOR`` (the forks' ``ceil_mode: false``), and
MAX pooling's second top, the argmax mask that SegNet's Upsample reads.

Which Caffe build's output-size rule an import (or ``analyze``) follows:
BVLC's by default. ChenYingpeng/caffe-yolov3's Caffe replaces
``pooling_layer.cpp`` (``caffe_layers/pooling_layer/pooling_layer.cpp`` at
commit 7bf54026; darknet2caffe's README has users copy it over Caffe's, "only
work for yolov3-tiny, use with caution"): one more output row and column
wherever ``kernel_h - stride_h`` is odd, so that darknet's size-2 stride-1
maxpool keeps 13x13 at 13x13. Nothing in a prototxt says which Caffe it was
written for (no ``pooling_param`` field selects the patch; OpenCV's and
ncnn's darknet importers pad such maxpools asymmetrically instead, through
their own layer parameters), so the rule is asked for around the import::

    from keras_caffe.importers.layer_types.pooling import pooling_rule

    with pooling_rule("caffe-yolov3"):
        model = import_model("yolov3-tiny.prototxt")

Inside the block every Pooling layer follows that Caffe's ``Reshape``, as it
would there (a kernel 3 stride 2 pool gets its extra row and column too).
Under BVLC's rule, a shape error downstream of a maxpool that the patch
would keep at its input's size says so (``ShapeState.notes``).
"""

import contextlib
import contextvars

from keras_caffe import layers
from keras_caffe.errors import ArgumentError, LayerError
from keras_caffe.importers.layer_types._params import spatial
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    Shapes,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.pooling import BVLC, CAFFE_YOLOV3, RULES, pooled_shape
from keras_caffe.proto import caffe_pb2

_RULE = contextvars.ContextVar("keras_caffe_pooling_rule", default=BVLC)

#: How to ask for caffe-yolov3's rule, as error messages say it.
HOW_TO_ASK = (f'import it inside `with keras_caffe.importers.pooling_rule("{CAFFE_YOLOV3}"):`')


@contextlib.contextmanager
def pooling_rule(rule):
    """Within the block, Pooling layers follow ``rule``: ``"bvlc"`` (BVLC
    Caffe's ``PoolingLayer::Reshape``) or ``"caffe-yolov3"``
    (ChenYingpeng/caffe-yolov3's patched one)."""
    if rule not in RULES:
        raise ArgumentError("pooling_rule", "rule",
                            f"must be one of {', '.join(map(repr, RULES))}, got {rule!r}")
    token = _RULE.set(rule)
    try:
        yield rule
    finally:
        _RULE.reset(token)


def current_rule():
    """The rule of the innermost ``pooling_rule`` block ("bvlc" outside any)."""
    return _RULE.get()


def darknet_note(layer, shape, kernel, stride, bvlc, yolov3):
    """What a later shape error says about a Pooling layer that BVLC's rule
    shrinks where caffe-yolov3's keeps the input's size (darknet's maxpool)."""
    return (f"layer {layer.name!r} (Pooling, kernel {kernel[0]}x{kernel[1]}, stride "
            f"{stride[0]}x{stride[1]}) pools {shape[2]}x{shape[3]} to {bvlc[0]}x{bvlc[1]} by "
            f"BVLC Caffe's rule; ChenYingpeng/caffe-yolov3's Caffe (the pooling_layer.cpp "
            f"darknet2caffe patches in) keeps {yolov3[0]}x{yolov3[1]}, as darknet's maxpool "
            f"does. A net from darknet2caffe needs that rule: {HOW_TO_ASK}")


def window(layer, shape):
    """(kernel, stride, pad) of a Pooling layer on a 4-D ``shape``."""
    p = layer.pooling_param
    if len(shape) != 4:
        raise LayerError(layer.name, f"(Pooling) needs a 4-D input (N, C, H, W), got "
                                     f"{fmt(shape)}")
    if p.global_pooling:
        if p.HasField("kernel_size") or p.HasField("kernel_h"):
            raise LayerError(layer.name, "(Pooling) global_pooling takes no kernel size")
        return tuple(shape[2:]), (1, 1), (0, 0)
    kernel = spatial(layer, p, "kernel_size", repeated=False)
    stride = spatial(layer, p, "stride", default=1, repeated=False)
    pad = spatial(layer, p, "pad", default=0, repeated=False)
    if min(kernel) <= 0 or min(stride) <= 0:
        raise LayerError(layer.name, "(Pooling) kernel and stride must be positive")
    if pad[0] >= kernel[0] or pad[1] >= kernel[1]:
        raise LayerError(layer.name, f"(Pooling) pad {pad} must be smaller than the kernel "
                                     f"{kernel}")
    return kernel, stride, pad


@layer_type("Pooling")
class Pooling(LayerType):
    """MAX / AVE / global pooling with Caffe's pads and ceil (or FLOOR) output
    size; MAX with a second top gives the argmax mask (index h * W + w of
    each window's first maximum in the input plane; -1 where none)."""

    examples = (
        Example("pooling_param { pool: MAX kernel_size: 3 stride: 2 }", [(2, 3, 8, 8)]),
        Example("pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }", [(2, 3, 7, 6)]),
        Example("pooling_param { pool: MAX kernel_size: 2 stride: 2 round_mode: FLOOR }",
                [(1, 2, 5, 5)]),
        Example("pooling_param { pool: AVE global_pooling: true }", [(2, 4, 3, 5)]),
        Example("pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }", [(2, 3, 7, 6)],
                tops=2),
        Example("pooling_param { pool: MAX global_pooling: true }", [(1, 2, 3, 4)], tops=2),
    )

    def shapes(self, layer, bottoms, state):
        p = layer.pooling_param
        need_bottoms(layer, bottoms, 1)
        shape = tuple(bottoms[0])
        kernel, stride, pad = window(layer, shape)
        if p.pool == caffe_pb2.PoolingParameter.STOCHASTIC:
            raise LayerError(layer.name, "STOCHASTIC pooling is not supported (MAX and AVE are)")
        ceil = p.round_mode == caffe_pb2.PoolingParameter.CEIL
        for size, k, q in zip(shape[2:], kernel, pad):
            if size + 2 * q - k < 0:
                raise LayerError(layer.name, f"(Pooling) kernel {k} exceeds the padded input "
                                             f"size {size + 2 * q} (input shape {fmt(shape)})")
        rule = current_rule()
        if rule == CAFFE_YOLOV3 and not ceil:
            raise LayerError(layer.name, "(Pooling) round_mode: FLOOR is not in "
                                         "ChenYingpeng/caffe-yolov3's pooling_layer.cpp (the "
                                         "caffe-yolov3 rule): it always rounds up")
        out = pooled_shape(shape[2:], kernel, stride, pad, ceil, rule)
        if rule == CAFFE_YOLOV3:
            _check_last_windows(layer, shape, kernel, stride, pad, out)
        if len(layer.top) > 1 and p.pool != caffe_pb2.PoolingParameter.MAX:
            raise LayerError(layer.name, "(Pooling) only MAX pooling has a second (mask) top")
        if len(layer.top) > 2:
            raise LayerError(layer.name, f"(Pooling) has at most 2 tops (the pooled blob and "
                                         f"the MAX mask), got {len(layer.top)}")
        if rule == BVLC and ceil and state is not None:
            yolov3 = pooled_shape(shape[2:], kernel, stride, pad, True, CAFFE_YOLOV3)
            if yolov3 == tuple(shape[2:]) != out:
                note = darknet_note(layer, shape, kernel, stride, out, yolov3)
                state.notes.update((top, (note,)) for top in layer.top)
        return Shapes([(shape[0], shape[1], *out)] * len(layer.top))

    def build(self, layer, bottoms, ctx):
        p = layer.pooling_param
        kernel, stride, pad = window(layer, ctx.bottom_shapes[0])
        if p.global_pooling:
            kernel = (1, 1)
        pool = layers.Pooling(
            "MAX" if p.pool == caffe_pb2.PoolingParameter.MAX else "AVE", kernel_size=kernel,
            stride=stride, pad=pad, global_pooling=p.global_pooling,
            ceil_mode=p.round_mode == caffe_pb2.PoolingParameter.CEIL,
            data_format=ctx.data_format, return_mask=len(layer.top) == 2, rule=current_rule(),
            name=ctx.keras_name(layer.name),
        )
        tops = pool(ctx.as_image(bottoms[0], layer))
        tops = tops if len(layer.top) == 2 else [tops]
        return [ctx.image_output(top) for top in tops]


def _check_last_windows(layer, shape, kernel, stride, pad, out):
    """Refuse what caffe-yolov3's extra row and column can do: a last window
    that starts past the input. With a pad, that Caffe's Reshape stops
    (``CHECK_LT((pooled_height_ - 1) * stride_h_, height_ + pad_h_)``, after
    its one decrement); without, the window holds no cell (MAX gives
    -FLT_MAX and a mask of -1 that its backward writes through, AVE 0/0)."""
    for axis, size, k, s, q, o in zip("HW", shape[2:], kernel, stride, pad, out):
        start = (o - 1) * s - q
        if start >= size:
            what = ("its PoolingLayer::Reshape fails CHECK_LT there" if any(pad)
                    else "that window holds no input cell")
            raise LayerError(layer.name, f"(Pooling) under ChenYingpeng/caffe-yolov3's rule "
                                         f"(kernel {k}, stride {s}, pad {q}) the last of its {o} "
                                         f"windows along {axis} starts at {start}, past the "
                                         f"input's {size} (input shape {fmt(shape)}): {what}")

"""FlowWarp (FlowNet 2.0: lmb-freiburg/flownet2 src/caffe/layers/
flow_warp_layer.cpp ``Forward_cpu``): bilinear backward warping of an image
(N, C, H, W) by a flow (N, 2, H, W), x then y; points outside the image
become ``fill_value`` (ZERO: 0, NOT_A_NUMBER: NaN)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    FLOWNET2,
    Example,
    LayerType,
    Shapes,
    count,
    fmt,
    layer_type,
    need_bottoms,
)
from keras_caffe.layers.flownet import FlowWarp as KerasFlowWarp
from keras_caffe.proto import caffe_pb2


def check(layer, bottoms):
    """``FlowWarpLayer::Reshape``'s checks; the top has the image's shape."""
    need_bottoms(layer, bottoms, 2)
    image, flow = tuple(bottoms[0]), tuple(bottoms[1])
    if len(image) != 4 or len(flow) != 4:
        raise LayerError(layer.name, f"(FlowWarp) needs 4-D bottoms (N, C, H, W), got "
                                     f"{fmt(image)} and {fmt(flow)}")
    same_batch = image[0] is None or flow[0] is None or image[0] == flow[0]
    if flow[1] != 2 or flow[2:] != image[2:] or not same_batch:
        raise LayerError(layer.name, f"(FlowWarp) the flow must be (N, 2, H, W) for the image "
                                     f"{fmt(image)}, got {fmt(flow)}")
    return image


@layer_type("FlowWarp")
class FlowWarp(LayerType):
    """Bilinear backward warping of bottom 0 by the flow in bottom 1;
    flow_warp_param fill_value ZERO or NOT_A_NUMBER outside the image."""

    origin = FLOWNET2
    examples = (
        Example("", [(2, 3, 5, 6), (2, 2, 5, 6)]),
        Example("flow_warp_param { fill_value: ZERO }", [(1, 1, 4, 3), (1, 2, 4, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        image = check(layer, bottoms)
        return Shapes([image], [], 4 * count((image[0] or 1, *image[1:])))

    def build(self, layer, bottoms, ctx):
        check(layer, ctx.bottom_shapes)
        nan = layer.flow_warp_param.fill_value == caffe_pb2.FlowWarpParameter.NOT_A_NUMBER
        warp = KerasFlowWarp(fill=float("nan") if nan else 0.0, data_format=ctx.data_format,
                             name=ctx.keras_name(layer.name))
        return [ctx.image_output(warp([ctx.as_image(b, layer) for b in bottoms]))]

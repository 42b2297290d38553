"""DataAugmentation (FlowNet 2.0: lmb-freiburg/flownet2 src/caffe/layers/
data_augmentation_layer.cpp for the setup and ``adjust_blobs``,
data_augmentation_layer.cu ``Forward_gpu`` for the values; the CPU forward
only aborts), as FlowNet 2.0's deploy nets use it.

The fork augments only where it crops (``crop_width`` and ``crop_height``
both given); otherwise, in every phase, the top is the bottom with the mean
subtracted, and the random augmentation fields (``translate``, ``rotate``,
``noise``, ...), ``augment_during_test`` and ``coeff_schedule_param`` change
nothing. Cropping (its spatial resampling and the augmentations) is not
modelled and is refused; so is the second top (the augmentation
coefficients). A second bottom (coefficients from another augmentation
layer) is read for nothing without cropping.

The mean (see ``keras_caffe.layers.flownet.DataAugmentation``):
``recompute_mean`` > 0 gives the layer three blobs (iteration count, pixel
mean, channel mean) and subtracts the pixel or the channel mean
(``mean_per_pixel``); otherwise three ``mean`` values with
``mean_per_pixel: false`` are subtracted per channel, and anything else
subtracts nothing.
"""

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
from keras_caffe.layers.flownet import DataAugmentation as KerasDataAugmentation


def check(layer, bottoms):
    """The checks; returns (image shape, blob shapes, the prototxt's mean or None)."""
    need_bottoms(layer, bottoms, 1, 2)
    p = layer.augmentation_param
    if len(layer.top) != 1:
        raise LayerError(layer.name, f"(DataAugmentation) names {len(layer.top)} tops; the "
                                     "second (the augmentation coefficients) is not modelled")
    if p.HasField("crop_width") and p.HasField("crop_height"):
        raise LayerError(layer.name, "(DataAugmentation) crop_width and crop_height (cropping, "
                                     "where the fork augments) are not modelled")
    shape = tuple(bottoms[0])
    if len(shape) != 4:
        raise LayerError(layer.name, f"(DataAugmentation) needs a 4-D bottom (N, C, H, W), got "
                                     f"{fmt(shape)}")
    channels, height, width = shape[1:]
    if p.recompute_mean > 0:
        return shape, [(1, 1, 1, 1), (1, channels, height, width), (1, channels, 1, 1)], None
    if len(p.mean) == 3 and not p.mean_per_pixel:
        if channels != 3:
            raise LayerError(layer.name, f"(DataAugmentation) mean has 3 values (one per "
                                         f"channel) but the bottom {fmt(shape)} has {channels} "
                                         "channels")
        return shape, [(1, 1, 1, 1)], list(p.mean)
    return shape, [(1, 1, 1, 1)], None


@layer_type("DataAugmentation")
class DataAugmentation(LayerType):
    """FlowNet 2.0's augmentation layer without cropping: the mean
    subtraction (recompute_mean with its count/pixel/channel mean blobs,
    mean_per_pixel, or three mean values); crop_width/crop_height refused."""

    origin = FLOWNET2
    examples = (
        Example("augmentation_param { augment_during_test: false recompute_mean: 1000 "
                "mean_per_pixel: false translate { rand_type: \"uniform_bernoulli\" exp: false "
                "mean: 0 spread: 0.4 prob: 1.0 } }", [(2, 3, 5, 6)]),
        Example("augmentation_param { recompute_mean: 10 }", [(1, 2, 4, 4)]),
        Example("augmentation_param { mean: 0.4 mean: 0.5 mean: 0.6 mean_per_pixel: false }",
                [(2, 3, 3, 4)]),
        Example("augmentation_param { recompute_mean: 5 mean_per_pixel: false }",
                [(1, 3, 4, 5), (1, 29, 1, 1)]),
    )

    def shapes(self, layer, bottoms, state):
        shape, weights, _ = check(layer, bottoms)
        return Shapes([shape], weights, count((shape[0] or 1, *shape[1:])))

    def build(self, layer, bottoms, ctx):
        _, _, mean = check(layer, ctx.bottom_shapes)
        p = layer.augmentation_param
        augmentation = KerasDataAugmentation(
            recompute_mean=p.recompute_mean, mean_per_pixel=p.mean_per_pixel, proto_mean=mean,
            data_format=ctx.data_format, name=ctx.keras_name(layer.name), caffe_name=layer.name)
        inputs = [ctx.as_image(b, layer) for b in bottoms]
        return [ctx.image_output(ctx.apply(augmentation,
                                           inputs if len(inputs) > 1 else inputs[0]))]

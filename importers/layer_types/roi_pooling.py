"""Fast/Faster R-CNN's ROIPooling (rbgirshick/caffe-fast-rcnn:
src/caffe/layers/roi_pooling_layer.cpp; ``roi_pooling_param`` at the fork's
field number 8266711)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    FASTER_RCNN,
    Example,
    LayerType,
    Shapes,
    layer_type,
    need_bottoms,
)
from keras_caffe.importers.layer_types._rois import features_and_rois
from keras_caffe.layers.roi_pooling import ROIPooling as KerasROIPooling


@layer_type("ROIPooling")
class ROIPooling(LayerType):
    """Max pooling of each region (rois (R, 5): batch index, x1, y1, x2, y2)
    of a (N, C, H, W) map into pooled_h x pooled_w bins (spatial_scale)."""

    origin = FASTER_RCNN
    examples = (
        Example("roi_pooling_param { pooled_h: 2 pooled_w: 3 spatial_scale: 0.5 }",
                [(2, 3, 6, 8), (4, 5)], integer_bottoms=(1,), integer_high=2),
    )

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 2)
        p = layer.roi_pooling_param
        if p.pooled_h <= 0 or p.pooled_w <= 0:
            raise LayerError(layer.name, f"(ROIPooling) pooled_h and pooled_w must be positive, "
                                         f"got {p.pooled_h} and {p.pooled_w}")
        features, rois = features_and_rois(layer, bottoms)
        return Shapes([(rois[0], features[1], p.pooled_h, p.pooled_w)])

    def build(self, layer, bottoms, ctx):
        p = layer.roi_pooling_param
        features = ctx.as_image(bottoms[0], layer)
        rois = ctx.caffe_order(bottoms[1], layer).tensor
        pool = KerasROIPooling(p.pooled_h, p.pooled_w, p.spatial_scale,
                               data_format=ctx.data_format, name=ctx.keras_name(layer.name))
        return [ctx.image_output(pool([features, rois]))]

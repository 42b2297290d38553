"""DummyData: tops filled by fillers (BVLC: dummy_data_layer.cpp)."""

import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._data import DataLayer
from keras_caffe.importers.layer_types.base import Example, layer_type
from keras_caffe.importers.data.pipeline_layers import Spec, dummy_shapes
from keras_caffe.importers.data.stateless_fill import check_filler, fill
from keras_caffe.proto import caffe_pb2


@layer_type("DummyData")
class DummyData(DataLayer):
    """DummyData: one shape per top (``shape``, or legacy num/channels/height/width).

    Each shape field is given once (for every top) or once per top; the
    batch is the shape's first axis. The pipeline fills each top with its
    ``data_filler`` (0, 1 or one per top; constant 0 by default), random
    ones with new values for every batch.
    """

    examples = (
        Example("dummy_data_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } "
                "shape { dim: 2 dim: 7 } }", (), tops=2),
        Example("dummy_data_param { num: 2 channels: 3 height: 4 width: 4 }", (), tops=2),
    )

    def source_shapes(self, layer, net_source):
        return dummy_shapes(layer)

    def pipeline(self, layer, ctx):
        p = layer.dummy_data_param
        shapes = dummy_shapes(layer)
        fillers = _fillers(layer, p, shapes)
        seeds = [ctx.layer_seed(layer, f"fill:{top}") for top in layer.top]

        def load(g):
            return {top: _in_layout(fill(filler, shape, tf.stack([tf.constant(s, tf.int64), g]),
                                         channels_last=True), ctx.data_format)
                    for top, filler, shape, s in zip(layer.top, fillers, shapes, seeds)}

        batch = shapes[0][0]
        return Spec(batch, batch, {t: ctx.model_shape(s) for t, s in zip(layer.top, shapes)}, load)


def _in_layout(blob, data_format):
    """A blob filled channels last (``fill``'s ``channels_last``: the cheaper
    order for the default layout) in the model's layout. Both layouts get the
    same value at each Caffe position (n, c, h, w)."""
    rank = blob.shape.rank
    if data_format == "channels_first" and rank >= 3:
        return tf.transpose(blob, (0, rank - 1, *range(1, rank - 1)))
    return blob


def _fillers(layer, p, shapes):
    """One checked ``FillerParameter`` per top."""
    if len(p.data_filler) not in (0, 1, len(layer.top)):
        raise LayerError(layer.name, f"give 0, 1 or {len(layer.top)} data_filler(s), got "
                                     f"{len(p.data_filler)}")
    fillers = []
    for i, shape in enumerate(shapes):
        filler = (p.data_filler[i if len(p.data_filler) > 1 else 0] if len(p.data_filler)
                  else caffe_pb2.FillerParameter(type="constant", value=0.0))
        check_filler(layer, filler, shape)
        fillers.append(filler)
    return fillers

"""Input: the net's declared inputs (BVLC: input_layer.cpp)."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._data import DataLayer
from keras_caffe.importers.layer_types.base import Example, layer_type


@layer_type("Input")
class Input(DataLayer):
    """Input: one shape for all tops, or one per top; the batch is left free.

    A shape may be left out (Caffe allows it: the caller reshapes the
    blobs); then ``input_shapes`` gives it. The pipeline feeds the caller's
    ``arrays`` in order, wrapping.
    """

    net_input = True
    examples = (
        Example("input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } }", ()),
        Example("input_param { shape { dim: 2 dim: 6 } shape { dim: 2 dim: 3 dim: 2 dim: 2 } }",
                (), tops=2),
    )

    def source_shapes(self, layer, net_source):
        shapes = layer.input_param.shape
        if not len(shapes):
            return [None] * len(layer.top)
        if len(shapes) not in (1, len(layer.top)):
            raise LayerError(layer.name, f"{len(shapes)} shapes for {len(layer.top)} tops")
        return [tuple(int(d) for d in shapes[min(i, len(shapes) - 1)].dim)
                for i in range(len(layer.top))]

    def input_shape(self, layer, top, stated, state):
        if stated is None and top not in state.input_shapes:
            raise LayerError(layer.name, f"states no shape for top {top!r}; give it in "
                                         f"input_param or with input_shapes={{{top!r}: shape "
                                         "without the batch}")
        return state.input_shape(layer, top, stated)

    def pipeline(self, layer, ctx):
        # here, not at the top: the pipelines are tf.data (TensorFlow optional)
        from keras_caffe.importers.data.pipeline_layers import array_spec, user_arrays

        shapes = layer.input_param.shape
        if not layer.top or len(shapes) not in (1, len(layer.top)):
            raise LayerError(layer.name, f"{len(shapes)} shape(s) for {len(layer.top)} top(s)")
        dims = [tuple(int(d) for d in shapes[min(i, len(shapes) - 1)].dim)
                for i in range(len(layer.top))]
        if any(not d or d[0] <= 0 for d in dims):
            raise LayerError(layer.name, "every input shape needs a positive batch dimension")
        batches = {d[0] for d in dims}
        if len(batches) > 1:
            raise LayerError(layer.name, f"input shapes differ in their batch dimension: {dims}")
        arrays = user_arrays(layer, ctx, {top: d[1:] for top, d in zip(layer.top, dims)})
        return array_spec(layer, ctx, arrays, dims[0][0])

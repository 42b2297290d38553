"""Input and data layers: the model's inputs (and, for labels, targets)."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.datasources import DATA_LAYER_TYPES, data_shapes
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.layer_types._legacy import converter


def _inputs(layer, shapes, ctx):
    """One Keras Input per top; Caffe shapes (batch first), batch left free."""
    tops = []
    for top, dims in zip(layer.top, shapes):
        if top in ctx.input_shapes:
            dims = [None, *ctx.input_shapes[top]]
        dims = [int(d) if d is not None else None for d in dims]
        if len(dims) < 1 or any(d is not None and d <= 0 for d in dims):
            raise LayerError(layer.name, f"input shape {dims} for top {top!r} is not a valid shape")
        count = 1
        for d in dims[1:]:
            count *= d
        ctx.check_size(layer, count, what=f"input {top!r} per sample")
        if len(dims) >= 3 and ctx.data_format == "channels_last":
            shape = (*dims[2:], dims[1])
        else:
            shape = tuple(dims[1:])
        tensor = keras.Input(shape=shape, name=ctx.keras_name(top))
        tops.append(ctx.image_output(tensor) if len(dims) >= 3 else Blob(tensor))
    return tops


@converter("Input")
def input_layer(layer, bottoms, ctx):
    """Caffe's Input: one shape for all tops, or one per top; batch left free."""
    shapes = layer.input_param.shape
    if len(shapes) not in (1, len(layer.top)):
        raise LayerError(layer.name, f"{len(shapes)} shapes for {len(layer.top)} tops")
    return _inputs(layer, [list(shapes[min(i, len(shapes) - 1)].dim)
                           for i in range(len(layer.top))], ctx)


@converter(*DATA_LAYER_TYPES)
def data_layer(layer, bottoms, ctx):
    """Data, ImageData, HDF5Data, DummyData, MemoryData as model inputs.

    Shapes come from the layer's parameters or its source's first record
    (``ctx.input_shapes`` overrides). Label tops read only by losses become
    training targets. The data pipelines themselves are not built here.
    """
    missing = [top for top in layer.top if top not in ctx.input_shapes]
    shapes = data_shapes(layer, ctx.source) if missing else [None] * len(layer.top)
    return _inputs(layer, shapes, ctx)

"""Input layers."""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.graph import Blob
from keras_caffe.importers.registry import converter


@converter("Input")
def input_layer(layer, bottoms, ctx):
    """Caffe's Input: one shape for all tops, or one per top; batch left free."""
    shapes = layer.input_param.shape
    if len(shapes) not in (1, len(layer.top)):
        raise LayerError(layer.name, f"{len(shapes)} shapes for {len(layer.top)} tops")
    tops = []
    for i, top in enumerate(layer.top):
        dims = [int(d) for d in shapes[min(i, len(shapes) - 1)].dim]
        if len(dims) < 1 or any(d <= 0 for d in dims):
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

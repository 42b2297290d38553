"""MemoryData: the caller's arrays (BVLC: memory_data_layer.cpp)."""

import warnings

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types._data import DataLayer
from keras_caffe.importers.layer_types.base import Example, layer_type
from keras_caffe.importers.data.pipeline_layers import array_spec, batch_size, check_tops, user_arrays


@layer_type("MemoryData")
class MemoryData(DataLayer):
    """MemoryData: data (N, channels, height, width) and label (N,) from the caller's arrays.

    Shapes as ``memory_data_layer.cpp:22-24``: the data top (``batch_size``,
    ``channels``, ``height``, ``width``), the label top (``batch_size``,).
    The pipeline feeds ``arrays={data: ..., label: ...}`` in order, wrapping,
    untransformed (as Caffe's ``Reset``).
    """

    examples = (
        Example("memory_data_param { batch_size: 2 channels: 3 height: 4 width: 5 }", (),
                tops=2),
    )

    def source_shapes(self, layer, net_source):
        batch, dims = _checked(layer)
        return [(batch, *dims), (batch,)]

    def pipeline(self, layer, ctx):
        batch, dims = _checked(layer)
        if layer.HasField("transform_param"):
            warnings.warn(f"layer {layer.name!r}: MemoryData does not transform array data "
                          "(as Caffe's Reset); transform_param is ignored", stacklevel=4)
        arrays = user_arrays(layer, ctx, {layer.top[0]: dims, layer.top[1]: ()})
        return array_spec(layer, ctx, arrays, batch)


def _checked(layer):
    """(batch_size, (channels, height, width)), all positive, for two tops."""
    p = layer.memory_data_param
    check_tops(layer, 2, 2)
    batch = batch_size(layer, p.batch_size)
    dims = (p.channels, p.height, p.width)
    if min(dims) <= 0:
        raise LayerError(layer.name, f"channels, height and width must be positive in "
                                     f"memory_data_param, got {dims}")
    return batch, dims

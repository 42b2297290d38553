"""Shape rules of the layers that bring data in: Input, DummyData, MemoryData, Data, ..."""

from keras_caffe.errors import LayerError
from keras_caffe.importers.analyze.shapes import _rule

#: Data layers whose top shapes come from their source, not the prototxt:
#: ``analyze`` takes them from ``input_shapes``.
SOURCE_DATA_TYPES = ("Data", "ImageData", "HDF5Data", "WindowData", "AnnotatedData", "VideoData")


@_rule("Input")
def _input(layer, bottoms, state):
    shapes = layer.input_param.shape
    if len(shapes) not in (1, len(layer.top)) and not all(t in state.input_shapes
                                                          for t in layer.top):
        raise LayerError(layer.name, f"{len(shapes)} shapes for {len(layer.top)} tops")
    tops = []
    for i, top in enumerate(layer.top):
        stated = list(shapes[min(i, len(shapes) - 1)].dim) if len(shapes) else None
        tops.append(state.input_shape(layer, top, stated))
    return tops, [], 0


@_rule("DummyData")
def _dummy_data(layer, bottoms, state):
    p = layer.dummy_data_param
    tops = []
    for i, top in enumerate(layer.top):
        if len(p.shape):
            stated = list(p.shape[min(i, len(p.shape) - 1)].dim)
        elif len(p.num):
            stated = [_nth(getattr(p, field), i)
                      for field in ("num", "channels", "height", "width")]
        else:
            stated = None
        tops.append(state.input_shape(layer, top, stated))
    return tops, [], 0


def _nth(values, i):
    """Caffe's per-top legacy fields: one value for all tops, or one each."""
    if not len(values):
        raise ValueError("num, channels, height and width must all be given")
    return values[min(i, len(values) - 1)]


@_rule("MemoryData")
def _memory_data(layer, bottoms, state):
    p = layer.memory_data_param
    stated = [(p.batch_size, p.channels, p.height, p.width), (p.batch_size, 1, 1, 1)]
    return [state.input_shape(layer, top, stated[min(i, 1)])
            for i, top in enumerate(layer.top)], [], 0


@_rule(*SOURCE_DATA_TYPES)
def _data(layer, bottoms, state):
    return [state.input_shape(layer, top, None) for top in layer.top], [], 0

"""What the units of the data layers share (Input, Data, ImageData, HDF5Data,
DummyData, MemoryData and the types ``analyze`` alone sizes).

A data layer brings data into the net: it has no bottoms and its tops are
model inputs (label tops read only by losses become training targets). Its
unit states the tops' Caffe shapes (batch first) in ``source_shapes``, from
the layer's parameters or its source's first record, as Caffe's
``DataLayerSetUp`` finds them; ``input_shapes`` overrides them, and when it
names every top the source is not read. The same rule serves ``analyze``
and the importer. ``pipeline`` builds the layer's ``tf.data`` batches
(``keras_caffe.importers.data.pipelines``; the helpers it shares are in
``keras_caffe.importers.data.pipeline_layers``).
"""

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.net.graph import Blob
from keras_caffe.importers.layer_types.base import LayerType, Shapes, count, units
from keras_caffe.importers.formats.paths import locate


class DataLayer(LayerType):
    """A layer that brings data in (subclasses give the pieces below)."""

    data_layer = True
    #: Whether the tops' shapes come from a file (database, list, HDF5)
    #: rather than from the layer's parameters alone.
    reads_source = False
    #: Whether the tops are the net's declared inputs, which the caller feeds
    #: (``keras-caffe time`` fills them at random, as ``caffe time`` runs on
    #: whatever its input blobs hold).
    net_input = False

    def source_shapes(self, layer, net_source):
        """One Caffe shape (batch first) per top (None where the layer does
        not say it), from the parameters or the source's first record;
        ``net_source`` is the prototxt's path, to find a relative source."""
        raise NotImplementedError

    def pipeline(self, layer, ctx):
        """The ``Spec`` of the layer's ``tf.data`` batches (``pipeline_layers``)."""
        raise NotImplementedError

    def shapes(self, layer, bottoms, state):
        """The tops' shapes: ``input_shapes``, else ``source_shapes`` (the
        batch replaced by analyze's); a unit that reads a file reads it only
        when ``input_shapes`` leaves a top out."""
        stated = self._stated(layer, state)
        tops = []
        for top, shape in zip(layer.top, stated):
            check_input_shape(layer, top, shape, state)
            tops.append(self.input_shape(layer, top, shape, state))
        return Shapes(tops)

    def input_shape(self, layer, top, stated, state):
        """The shape of ``top``: ``input_shapes``, else ``stated``."""
        return state.input_shape(layer, top, stated)

    def _stated(self, layer, state):
        if self.reads_source and all(top in state.input_shapes for top in layer.top):
            return [None] * len(layer.top)  # every top given: the source is not read
        shapes = list(self.source_shapes(layer, state.source))
        if len(shapes) < len(layer.top):
            raise LayerError(layer.name, f"produces {len(shapes)} blob(s) but names "
                                         f"{len(layer.top)} top(s)")
        return shapes[:len(layer.top)]

    def build(self, layer, bottoms, ctx):
        """One Keras Input per top, of the shape rule's shape; batch left free."""
        return [_keras_input(layer, top, shape, ctx)
                for top, shape in zip(layer.top, ctx.shapes.tops)]


def check_input_shape(layer, top, stated, state):
    """Refuse an empty shape or a dimension below 1 (the stated shape, or the
    ``input_shapes`` entry that overrides it, batch as None)."""
    if top in state.input_shapes:
        dims = [None, *state.input_shapes[top]]
    elif stated is not None:
        dims = list(stated)
    else:
        return
    dims = [int(d) if d is not None else None for d in dims]
    if len(dims) < 1 or any(d is not None and d <= 0 for d in dims):
        raise LayerError(layer.name, f"input shape {dims} for top {top!r} is not a valid shape")


def find_source(layer, path, net_source):
    """``path`` as Caffe opens it (the current directory), else next to the
    prototxt; a ``LayerError`` that says how to give the shapes instead."""
    found = locate(path, net_source)
    if found is not None:
        return found
    raise LayerError(layer.name, f"{layer.type} source {path!r} not found (looked in the "
                                 "current directory and next to the prototxt); give its shapes "
                                 "with input_shapes={top: shape without the batch}")


def cropped(layer, channels, height, width):
    """(C, H, W) after ``transform_param.crop_size``."""
    crop = layer.transform_param.crop_size
    return (channels, crop, crop) if crop else (channels, height, width)


def _keras_input(layer, top, shape, ctx):
    dims = tuple(shape[1:])
    ctx.check_size(layer, count(dims), what=f"input {top!r} per sample")
    if len(shape) >= 3 and ctx.data_format == "channels_last":
        dims = (*dims[1:], dims[0])
    tensor = keras.Input(shape=dims, name=ctx.keras_name(top))
    return ctx.image_output(tensor) if len(shape) >= 3 else Blob(tensor)


def _data_units():
    return {name: found for name, found in sorted(units().items())
            if getattr(found, "data_layer", False)}


def pipeline_types():
    """The data layer types a ``tf.data`` pipeline is built for."""
    return tuple(name for name, found in _data_units().items()
                 if getattr(found, "pipeline", None) is not None)


def source_types():
    """The data layer types whose shapes come from a file (their source)."""
    return tuple(name for name, found in _data_units().items()
                 if getattr(found, "reads_source", False))


def producing_types():
    """The data layer types whose pipeline makes the net's data itself (all
    but the net's declared inputs, which the caller feeds)."""
    return tuple(name for name in pipeline_types()
                 if not getattr(units()[name], "net_input", False))

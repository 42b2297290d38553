"""HDF5Data: rows of the HDF5 files a list names (BVLC: hdf5_data_layer.cpp)."""

import os

import tensorflow as tf

from keras_caffe.errors import LayerError
from keras_caffe.importers.data import records
from keras_caffe.importers.layer_types._data import DataLayer, find_source
from keras_caffe.importers.layer_types.base import layer_type
from keras_caffe.importers.data.pipeline_core import RecordOrder, positions
from keras_caffe.importers.data.pipeline_layers import Spec, batch_size, hdf5_permutation


@layer_type("HDF5Data")
class HDF5Data(DataLayer):
    """HDF5Data: one top per dataset of the listed HDF5 files, named as the top.

    Shapes: (``batch_size``, the dataset's row shape) from the first listed
    file. The pipeline reads the rows in order; ``shuffle`` permutes the
    files and the rows within each file every epoch. No transform_param
    (Caffe refuses it). No example: the layer reads HDF5 files.
    """

    reads_source = True

    def source_shapes(self, layer, net_source):
        import h5py

        p = layer.hdf5_data_param
        first = _first_file(layer, find_source(layer, p.source, net_source))
        with h5py.File(find_source(layer, first, net_source), "r") as h5:
            missing = [top for top in layer.top if top not in h5]
            if missing:
                raise LayerError(layer.name, f"HDF5 file {first!r} has no dataset(s) "
                                             f"{', '.join(missing)} for the layer's tops")
            return [(p.batch_size, *h5[top].shape[1:]) for top in layer.top]

    def pipeline(self, layer, ctx):
        p = layer.hdf5_data_param
        if not layer.top:
            raise LayerError(layer.name, "HDF5Data needs at least one top")
        if layer.HasField("transform_param"):
            raise LayerError(layer.name, "HDF5Data does not transform data; remove "
                                         "transform_param (Caffe refuses it too)")
        batch = batch_size(layer, p.batch_size)
        rows = records.Hdf5Rows(layer, records.find_source(layer, p.source, ctx.net_source),
                                ctx.in_memory_limit)
        shuffle = hdf5_permutation(ctx.layer_seed(layer, "shuffle"), rows) if p.shuffle else None
        order = RecordOrder(rows.num_records, 0, shuffle)
        tables = [tf.constant(rows.arrays[top]) for top in layer.top] if rows.in_memory else None

        def load(g):
            indices = order(positions(g, batch))
            if rows.in_memory:
                values = [tf.gather(t, indices) for t in tables]
            else:
                values = tf.numpy_function(rows.read, [indices], [tf.float32] * len(layer.top))
            return {top: ctx.to_model(tf.ensure_shape(v, (batch, *rows.row_shapes[top])))
                    for top, v in zip(layer.top, values)}

        shapes = {top: ctx.model_shape((batch, *rows.row_shapes[top])) for top in layer.top}
        return Spec(batch, rows.num_records, shapes, load)


def _first_file(layer, listing):
    """The first file the list names, relative ones next to the list if not
    found from the current directory."""
    files = [line.strip() for _, line in records.list_lines(layer, listing)]
    if not files:
        raise LayerError(layer.name, f"HDF5Data source {listing!r} lists no files")
    first = files[0]
    if not os.path.isabs(first) and not os.path.exists(first):
        first = os.path.join(os.path.dirname(listing), first)
    return first

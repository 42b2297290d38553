"""Data layers ``analyze`` sizes but the importer does not convert: WindowData
(BVLC: window_data_layer.cpp) and AnnotatedData (SSD: annotated_data_layer.cpp).
(C3D's VideoData has its own unit: data_video.py.)

keras-caffe has no reader for their sources (and no pipeline): the shapes of
their tops come from ``input_shapes`` alone."""

from keras_caffe.importers.layer_types._data import DataLayer
from keras_caffe.importers.layer_types.base import SSD, layer_type


class AnalyzeOnlyData(DataLayer):
    """A data layer whose source keras-caffe does not read: ``analyze`` takes
    its tops' shapes from ``input_shapes``; the importer refuses it."""

    reads_source = True
    build = None
    pipeline = None
    analyze_only = "keras-caffe has no reader for its source (give the data as an Input instead)"

    def source_shapes(self, layer, net_source):
        """Unknown: no reader, so ``input_shapes`` must give every top."""
        return [None] * len(layer.top)


@layer_type("WindowData")
class WindowData(AnalyzeOnlyData):
    """WindowData (R-CNN windows of images); analyze only, shapes from input_shapes."""


@layer_type("AnnotatedData")
class AnnotatedData(AnalyzeOnlyData):
    """AnnotatedData (SSD's annotated images); analyze only, shapes from input_shapes."""

    origin = SSD


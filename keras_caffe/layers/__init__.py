"""keras-caffe's Keras layers: Caffe layers Keras lacks or computes otherwise.

Registered serializable under the package ``keras_caffe``: a saved model
loads with ``keras.models.load_model`` after ``import keras_caffe``.
"""

from keras_caffe.layers import (  # noqa: F401  (registers)
    axpy,
    batch_select,
    c3d,
    conv_nd,
    deconv,
    elementwise,
    flownet,
    fork,
    gradient,
    lstm_unit,
    opencv,
    recurrent,
    reductions,
    roi_pooling,
    segmentation,
    shape,
    ssd,
    swish,
    two_stage,
    yolo,
)
from keras_caffe.layers.base import CaffeBlobs
from keras_caffe.layers.conv import Convolution
from keras_caffe.layers.dense import InnerProduct
from keras_caffe.layers.lrn import LRN
from keras_caffe.layers.normalization import BatchNorm, BatchNormScale, Scale
from keras_caffe.layers.pooling import Pooling

__all__ = ["CaffeBlobs", "Convolution", "InnerProduct", "LRN", "BatchNorm", "BatchNormScale", "Scale", "Pooling"]

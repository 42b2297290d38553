"""keras-caffe imports every Caffe layer type that BVLC Caffe, ncnn's
caffe2ncnn and OpenCV 4's Caffe importer handle (issue 15, item 5).

The lists are read from the sources, each cited; a type added to one of
them upstream is added here with its unit.
"""

import pytest

from keras_caffe.importers import registered_types
from keras_caffe.importers.layer_types import base

#: BVLC Caffe master 9b891540: every REGISTER_LAYER_CLASS / CREATOR name.
BVLC = {
    "AbsVal", "Accuracy", "ArgMax", "BNLL", "BatchNorm", "BatchReindex", "Bias", "Clip",
    "Concat", "ContrastiveLoss", "Convolution", "Crop", "Data", "Deconvolution", "Dropout",
    "DummyData", "ELU", "Eltwise", "Embed", "EuclideanLoss", "Exp", "Filter", "Flatten",
    "HDF5Data", "HDF5Output", "HingeLoss", "Im2col", "ImageData", "InfogainLoss",
    "InnerProduct", "Input", "LRN", "LSTM", "LSTMUnit", "Log", "MVN", "MemoryData",
    "MultinomialLogisticLoss", "PReLU", "Parameter", "Pooling", "Power", "Python", "RNN",
    "ReLU", "Reduction", "Reshape", "SPP", "Scale", "Sigmoid", "SigmoidCrossEntropyLoss",
    "Silence", "Slice", "Softmax", "SoftmaxWithLoss", "Split", "Swish", "TanH", "Threshold",
    "Tile", "WindowData",
}

#: BVLC types not built into Keras layers, each with why (``analyze`` still
#: sizes those with a unit); "Python" runs only the well-known Python
#: layers keras-caffe implements itself (py-faster-rcnn's ProposalLayer).
BVLC_NOT_BUILT = {
    "HDF5Output": "writes files during the forward pass",
    "InfogainLoss": "its infogain matrix file or third bottom: analyze only",
    "WindowData": "R-CNN's window file pipeline: analyze only",
    "Parameter": "its top has no batch axis: analyze only",
    "Python": "user code: only the well-known Python layers keras-caffe implements",
}

#: Tencent/ncnn master, tools/caffe/caffe2ncnn.cpp: the types it converts
#: (``layer.type() == "..."``); its Python branch is py-faster-rcnn's
#: ProposalLayer.
NCNN = {
    "BN", "BatchNorm", "Concat", "Convolution", "ConvolutionDepthwise", "Crop",
    "Deconvolution", "DepthwiseConvolution", "DetectionOutput", "Dropout", "ELU", "Eltwise",
    "Embed", "InnerProduct", "Input", "Interp", "LRN", "LSTM", "MVN", "MemoryData",
    "Normalize", "PReLU", "PSROIPooling", "Permute", "Pooling", "Power", "PriorBox",
    "ROIAlign", "ROIPooling", "ReLU", "ReLU6", "Reorg", "Reshape", "Scale", "ShuffleChannel",
    "Silence", "Slice", "Softmax", "Threshold", "YoloDetectionOutput", "Yolov3DetectionOutput",
}

#: opencv/opencv 4.x, modules/dnn/src/init.cpp: the layer factory's names
#: that a Caffe prototxt reaches through readNetFromCaffe (caffe_importer.cpp
#: passes ``type`` to the factory; opencv-caffe.proto holds their
#: parameters), plus the types caffe_importer.cpp rewrites (Axpy,
#: ConvolutionDepthwise, Python's ProposalLayer).
OPENCV = {
    "Slice", "Split", "Concat", "Reshape", "Flatten", "Interp", "Convolution", "Deconvolution",
    "Pooling", "ROIPooling", "PSROIPooling", "LRN", "InnerProduct", "Softmax", "SoftMax", "MVN",
    "ReLU", "ReLU6", "ChannelsPReLU", "PReLU", "Sigmoid", "TanH", "Swish", "Mish", "ELU", "BNLL",
    "AbsVal", "Power", "Exp", "Ceil", "Floor", "Log", "Round", "Sqrt", "Not", "Acos", "Acosh",
    "Asin", "Asinh", "Atan", "Atanh", "Cos", "Cosh", "Erf", "HardSwish", "Sin", "Sinh", "Sign",
    "Shrink", "Softplus", "Softsign", "Tan", "Celu", "HardSigmoid", "Selu", "ThresholdedRelu",
    "Gelu", "GeluApproximation", "BatchNorm", "Dropout", "Identity", "Silence", "Crop",
    "Eltwise", "Permute", "ShuffleChannel", "PriorBox", "Reorg", "Region", "DetectionOutput",
    "Normalize", "Proposal", "Scale", "DataAugmentation", "Correlation", "Accum", "FlowWarp",
    "LSTM", "Tile", "Axpy", "ConvolutionDepthwise", "Input",
}

#: OpenCV factory names left out, with why: none of them is a layer of BVLC
#: Caffe or of a Caffe fork, so no Caffe prototxt names them.
OPENCV_NOT_CAFFE = {
    "Resize", "CropAndResize", "Reduce", "Gemm", "MatMul", "Const", "Arg", "Reciprocal",
    "Gather", "GatherElements", "LayerNormalization", "Expand", "InstanceNormalization",
    "Attention", "GroupNormalization", "DepthToSpace", "SpaceToDepth", "NaryEltwise",
    "MaxUnpool", "NormalizeBBox", "PriorBoxClustered", "Shift", "Padding", "Compare", "GRU",
    "CumSum", "Einsum", "Scatter", "ScatterND", "TopK", "Quantize", "Dequantize", "Requantize",
}


@pytest.mark.parametrize("name, types", [("BVLC Caffe", BVLC), ("ncnn caffe2ncnn", NCNN),
                                         ("OpenCV 4", OPENCV)])
def test_every_type_of_the_importers_people_used_imports(name, types):
    missing = types - set(registered_types()) - set(BVLC_NOT_BUILT)
    assert not missing, f"{name} types keras-caffe does not import: {sorted(missing)}"


def test_the_bvlc_types_not_built_are_sized_or_refused_with_a_reason():
    units = base.units()
    for t in BVLC_NOT_BUILT:
        assert t not in registered_types() or t == "Python", t
    for t in ("HDF5Output", "InfogainLoss", "WindowData", "Parameter"):
        assert t in units and units[t].analyze_only, t


def test_the_opencv_names_left_out_are_not_caffe_layers():
    assert not OPENCV_NOT_CAFFE & (BVLC | NCNN | OPENCV)

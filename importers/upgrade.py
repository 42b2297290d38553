"""Upgrading legacy nets to the current format, once, on load.

Follows Caffe's ``upgrade_proto.cpp``: V1 ``layers { type: CONVOLUTION }``
become ``layer { type: "Convolution" }`` (``blobs_lr`` -> ``param.lr_mult``,
``weight_decay`` -> ``param.decay_mult``), the deprecated ``input`` /
``input_dim`` / ``input_shape`` fields become an ``Input`` layer, and old
BatchNorm ``param`` specs get lr_mult/decay_mult 0.
"""

from keras_caffe.errors import CaffeImportError
from keras_caffe.proto import caffe_pb2

_V1 = caffe_pb2.V1LayerParameter
#: V1 type enum name -> current type string (Caffe's UpgradeV1LayerType).
V1_TYPES = {
    "ABSVAL": "AbsVal", "ACCURACY": "Accuracy", "ARGMAX": "ArgMax", "BNLL": "BNLL",
    "CONCAT": "Concat", "CONTRASTIVE_LOSS": "ContrastiveLoss", "CONVOLUTION": "Convolution",
    "DECONVOLUTION": "Deconvolution", "DATA": "Data", "DROPOUT": "Dropout",
    "DUMMY_DATA": "DummyData", "EUCLIDEAN_LOSS": "EuclideanLoss", "ELTWISE": "Eltwise",
    "EXP": "Exp", "FLATTEN": "Flatten", "HDF5_DATA": "HDF5Data", "HDF5_OUTPUT": "HDF5Output",
    "HINGE_LOSS": "HingeLoss", "IM2COL": "Im2col", "IMAGE_DATA": "ImageData",
    "INFOGAIN_LOSS": "InfogainLoss", "INNER_PRODUCT": "InnerProduct", "LRN": "LRN",
    "MEMORY_DATA": "MemoryData", "MULTINOMIAL_LOGISTIC_LOSS": "MultinomialLogisticLoss",
    "MVN": "MVN", "POOLING": "Pooling", "POWER": "Power", "RELU": "ReLU", "SIGMOID": "Sigmoid",
    "SIGMOID_CROSS_ENTROPY_LOSS": "SigmoidCrossEntropyLoss", "SILENCE": "Silence",
    "SOFTMAX": "Softmax", "SOFTMAX_LOSS": "SoftmaxWithLoss", "SPLIT": "Split", "SLICE": "Slice",
    "TANH": "TanH", "WINDOW_DATA": "WindowData", "THRESHOLD": "Threshold",
}
# The typed parameter messages V1 and current layers share by name.
_SHARED_PARAMS = [
    f.name for f in _V1.DESCRIPTOR.fields
    if f.name.endswith("_param") and f.name in caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
]


def upgrade_net(net, source):
    """Return ``net`` in the current format (a new message if it changed)."""
    if not (net.layers or net.input or net.input_dim or net.input_shape or _old_batchnorm(net)):
        return net
    upgraded = caffe_pb2.NetParameter()
    upgraded.CopyFrom(net)
    if net.layers:
        if net.layer:
            raise CaffeImportError(
                f"{source}: the net mixes V1 `layers` and current `layer` entries"
            )
        if any(v1.HasField("layer") for v1 in net.layers):
            raise CaffeImportError(
                f"{source}: V0 layer definitions (`layers {{ layer {{ ... }} }}`) are not "
                "supported; upgrade the file once with Caffe's upgrade_net_proto_text"
            )
        upgraded.ClearField("layers")
        for v1 in net.layers:
            upgraded.layer.add().CopyFrom(_upgrade_v1_layer(v1, source))
    if net.input:
        _upgrade_input(upgraded, source)
    for layer in upgraded.layer:
        if layer.type == "BatchNorm" and len(layer.param) == 3:
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0
    return upgraded


def _old_batchnorm(net):
    return any(layer.type == "BatchNorm" and len(layer.param) == 3 for layer in net.layer)


def _upgrade_v1_layer(v1, source):
    layer = caffe_pb2.LayerParameter()
    layer.name = v1.name
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    layer.include.extend(v1.include)
    layer.exclude.extend(v1.exclude)
    if v1.HasField("type"):
        enum_name = _V1.LayerType.Name(v1.type)
        if enum_name not in V1_TYPES:
            raise CaffeImportError(f"{source}: V1 layer {v1.name!r} has type {enum_name}")
        layer.type = V1_TYPES[enum_name]
    layer.blobs.extend(v1.blobs)
    count = max(len(v1.param), len(v1.blob_share_mode), len(v1.blobs_lr), len(v1.weight_decay))
    for i in range(count):
        spec = layer.param.add()
        if i < len(v1.param):
            spec.name = v1.param[i]
        if i < len(v1.blob_share_mode):
            spec.share_mode = v1.blob_share_mode[i]
        if i < len(v1.blobs_lr):
            spec.lr_mult = v1.blobs_lr[i]
        if i < len(v1.weight_decay):
            spec.decay_mult = v1.weight_decay[i]
    layer.loss_weight.extend(v1.loss_weight)
    for name in _SHARED_PARAMS:
        if v1.HasField(name):
            getattr(layer, name).CopyFrom(getattr(v1, name))
    return layer


def _upgrade_input(net, source):
    """Caffe's UpgradeNetInput: input fields -> a first ``Input`` layer."""
    layer = caffe_pb2.LayerParameter(name="input", type="Input")
    layer.top.extend(net.input)
    if net.input_shape:
        if len(net.input_shape) != len(net.input):
            raise CaffeImportError(
                f"{source}: {len(net.input)} `input` names but {len(net.input_shape)} `input_shape`s"
            )
        for shape in net.input_shape:
            layer.input_param.shape.add().CopyFrom(shape)
    elif net.input_dim:
        if len(net.input_dim) != 4 * len(net.input):
            raise CaffeImportError(
                f"{source}: {len(net.input)} `input` names need {4 * len(net.input)} "
                f"`input_dim` values, got {len(net.input_dim)}"
            )
        for i in range(len(net.input)):
            layer.input_param.shape.add().dim.extend(net.input_dim[4 * i:4 * i + 4])
    else:
        raise CaffeImportError(f"{source}: `input` without `input_shape` or `input_dim`")
    existing = list(net.layer)
    net.ClearField("layer")
    net.layer.add().CopyFrom(layer)
    net.layer.extend(existing)
    for name in ("input", "input_shape", "input_dim"):
        net.ClearField(name)

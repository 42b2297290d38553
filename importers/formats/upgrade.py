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
    if not (net.layers or net.input or net.input_dim or net.input_shape or _old_batchnorm(net)
            or any(layer.pooling_param.HasField("ceil_mode") for layer in net.layer)):
        return net
    upgraded = caffe_pb2.NetParameter()
    upgraded.CopyFrom(net)
    if net.layers:
        if net.layer:
            raise CaffeImportError(
                f"{source}: the net mixes V1 `layers` and current `layer` entries"
            )
        v1_layers = net.layers
        if any(v1.HasField("layer") for v1 in net.layers):
            v1_layers = _upgrade_v0_layers(net, source)
        upgraded.ClearField("layers")
        for v1 in v1_layers:
            upgraded.layer.add().CopyFrom(_upgrade_v1_layer(v1, source))
    if net.input:
        _upgrade_input(upgraded, source)
    for layer in upgraded.layer:
        if layer.pooling_param.HasField("ceil_mode"):
            _upgrade_ceil_mode(layer, source)
        if layer.type == "BatchNorm" and len(layer.param) == 3:
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0
    return upgraded


def _upgrade_ceil_mode(layer, source):
    """The forks' ``ceil_mode: false`` is BVLC's ``round_mode: FLOOR``."""
    p = layer.pooling_param
    mode = caffe_pb2.PoolingParameter.CEIL if p.ceil_mode else caffe_pb2.PoolingParameter.FLOOR
    if p.HasField("round_mode") and p.round_mode != mode:
        raise CaffeImportError(
            f"{source}: layer {layer.name!r} gives ceil_mode: {str(p.ceil_mode).lower()} and "
            f"round_mode: {caffe_pb2.PoolingParameter.RoundMode.Name(p.round_mode)}, which "
            "disagree")
    p.round_mode = mode
    p.ClearField("ceil_mode")


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


# -- V0 (``layers { layer { type: "conv" ... } }``) --------------------------------

#: V0 type string -> V1 type enum name (Caffe's UpgradeV0LayerType).
V0_TYPES = {
    "accuracy": "ACCURACY", "bnll": "BNLL", "concat": "CONCAT", "conv": "CONVOLUTION",
    "data": "DATA", "dropout": "DROPOUT", "euclidean_loss": "EUCLIDEAN_LOSS",
    "flatten": "FLATTEN", "hdf5_data": "HDF5_DATA", "hdf5_output": "HDF5_OUTPUT",
    "im2col": "IM2COL", "images": "IMAGE_DATA", "infogain_loss": "INFOGAIN_LOSS",
    "innerproduct": "INNER_PRODUCT", "lrn": "LRN",
    "multinomial_logistic_loss": "MULTINOMIAL_LOGISTIC_LOSS", "pool": "POOLING",
    "relu": "RELU", "sigmoid": "SIGMOID", "softmax": "SOFTMAX", "softmax_loss": "SOFTMAX_LOSS",
    "split": "SPLIT", "tanh": "TANH", "window_data": "WINDOW_DATA",
}
#: V0 field -> {V0 type (or "*"): (V1 parameter message, its field)}.
V0_FIELDS = {
    "num_output": {"conv": ("convolution_param", "num_output"),
                   "innerproduct": ("inner_product_param", "num_output")},
    "biasterm": {"conv": ("convolution_param", "bias_term"),
                 "innerproduct": ("inner_product_param", "bias_term")},
    "weight_filler": {"conv": ("convolution_param", "weight_filler"),
                      "innerproduct": ("inner_product_param", "weight_filler")},
    "bias_filler": {"conv": ("convolution_param", "bias_filler"),
                    "innerproduct": ("inner_product_param", "bias_filler")},
    "pad": {"conv": ("convolution_param", "pad"), "pool": ("pooling_param", "pad")},
    "kernelsize": {"conv": ("convolution_param", "kernel_size"),
                   "pool": ("pooling_param", "kernel_size")},
    "group": {"conv": ("convolution_param", "group")},
    "stride": {"conv": ("convolution_param", "stride"), "pool": ("pooling_param", "stride")},
    "pool": {"pool": ("pooling_param", "pool")},
    "dropout_ratio": {"dropout": ("dropout_param", "dropout_ratio")},
    "local_size": {"lrn": ("lrn_param", "local_size")},
    "alpha": {"lrn": ("lrn_param", "alpha")},
    "beta": {"lrn": ("lrn_param", "beta")},
    "k": {"lrn": ("lrn_param", "k")},
    "source": {"data": ("data_param", "source"), "hdf5_data": ("hdf5_data_param", "source"),
               "images": ("image_data_param", "source"),
               "window_data": ("window_data_param", "source"),
               "infogain_loss": ("infogain_loss_param", "source")},
    "batchsize": {"data": ("data_param", "batch_size"),
                  "hdf5_data": ("hdf5_data_param", "batch_size"),
                  "images": ("image_data_param", "batch_size"),
                  "window_data": ("window_data_param", "batch_size")},
    "rand_skip": {"data": ("data_param", "rand_skip"), "images": ("image_data_param", "rand_skip")},
    "shuffle_images": {"images": ("image_data_param", "shuffle")},
    "new_height": {"images": ("image_data_param", "new_height")},
    "new_width": {"images": ("image_data_param", "new_width")},
    "concat_dim": {"concat": ("concat_param", "concat_dim")},
    "det_fg_threshold": {"window_data": ("window_data_param", "fg_threshold")},
    "det_bg_threshold": {"window_data": ("window_data_param", "bg_threshold")},
    "det_fg_fraction": {"window_data": ("window_data_param", "fg_fraction")},
    "det_context_pad": {"window_data": ("window_data_param", "context_pad")},
    "det_crop_mode": {"window_data": ("window_data_param", "crop_mode")},
    "hdf5_output_param": {"hdf5_output": ("hdf5_output_param", None)},
    "scale": {"*": ("transform_param", "scale")},
    "meanfile": {"*": ("transform_param", "mean_file")},
    "cropsize": {"*": ("transform_param", "crop_size")},
    "mirror": {"*": ("transform_param", "mirror")},
}
_V0_COPIED = {"name", "type", "blobs", "blobs_lr", "weight_decay"}


def _upgrade_v0_layers(net, source):
    """V0 layers -> V1 layers (Caffe's UpgradeV0Net, padding layers folded)."""
    layers = []
    producer = {name: None for name in net.input}
    for v0 in net.layers:
        if not v0.HasField("layer"):
            raise CaffeImportError(f"{source}: the net mixes V0 and V1 layer definitions")
        bottoms = list(v0.bottom)
        pad = None
        for j, bottom in enumerate(bottoms):
            if bottom not in producer:
                raise CaffeImportError(f"{source}: V0 layer {v0.layer.name!r} reads unknown blob {bottom!r}")
            source_layer = producer[bottom]
            if source_layer is not None and source_layer.layer.type == "padding":
                if v0.layer.type not in ("conv", "pool") or len(bottoms) != 1:
                    raise CaffeImportError(f"{source}: padding layer feeds {v0.layer.type} layer "
                                           f"{v0.layer.name!r}; only conv and pool take padding")
                pad = source_layer.layer.pad
                bottoms[j] = source_layer.bottom[0]
        if v0.layer.type != "padding":
            layers.append(_upgrade_v0_layer(v0, bottoms, pad, source))
        for top in v0.top:
            producer[top] = v0
    return layers


def _upgrade_v0_layer(connection, bottoms, pad, source):
    v0 = connection.layer
    v1 = caffe_pb2.V1LayerParameter()
    v1.bottom.extend(bottoms)
    v1.top.extend(connection.top)
    v1.name = v0.name
    if v0.type not in V0_TYPES:
        raise CaffeImportError(f"{source}: V0 layer {v0.name!r} has unknown type {v0.type!r}")
    v1.type = _V1.LayerType.Value(V0_TYPES[v0.type])
    v1.blobs.extend(v0.blobs)
    v1.blobs_lr.extend(v0.blobs_lr)
    v1.weight_decay.extend(v0.weight_decay)
    for field, value in v0.ListFields():
        if field.name in _V0_COPIED:
            continue
        targets = V0_FIELDS.get(field.name, {})
        target = targets.get(v0.type) or targets.get("*")
        if target is None:
            raise CaffeImportError(f"{source}: V0 layer {v0.name!r}: parameter {field.name!r} "
                                   f"does not apply to type {v0.type!r}")
        _assign(getattr(v1, target[0]), target[1], value)
    if pad is not None:
        message = v1.convolution_param if v0.type == "conv" else v1.pooling_param
        _assign(message, "pad", pad)
    return v1


def _assign(message, field, value):
    if field is None:
        message.CopyFrom(value)
        return
    current = getattr(message, field)
    if hasattr(current, "append"):  # repeated scalar
        current.append(value)
    elif hasattr(current, "CopyFrom"):  # message
        current.CopyFrom(value)
    else:
        setattr(message, field, value)

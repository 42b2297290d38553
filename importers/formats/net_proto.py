"""The ``NetParameter`` Caffe writes for a net: ``Net::ToProto``.

A ``.caffemodel`` that Caffe writes (``caffe train`` snapshots,
``net.save`` in pycaffe) is ``Net::ToProto`` of the net (src/caffe/net.cpp):
the net's ``name`` and, for each of its layers in order, the layer's
``layer_param_`` (``Layer::ToProto``, include/caffe/layer.hpp) with its
blobs replaced by the layer's current blobs (``Blob::ToProto``, blob.cpp:
``shape`` then ``data``, no ``diff``). A layer's ``layer_param_`` is the
prototxt's layer as ``Net::Init`` leaves it:

* upgraded (``UpgradeNetAsNeeded``) and filtered by the net state's phase,
  level and stages (``Net::FilterNet``); the import does both;
* the ``Split`` layers of ``InsertSplits`` (src/caffe/util/insert_splits.cpp)
  added after each top read by more than one bottom, and those bottoms
  renamed to the split's tops;
* ``phase`` set to the net's phase where the layer sets none;
* ``loss_weight: 1`` added to a loss layer that gives none
  (``LossLayer::LayerSetUp``, src/caffe/layers/loss_layer.cpp);
* ``param { lr_mult: 0 }`` added to a BatchNorm for each of its 3 blobs
  the prototxt gives no ``param`` for (batch_norm_layer.cpp).

A layer sharing another's parameters (``param { name }``) holds the same
blobs, so the binary file has them under both names; ``Net::ToHDF5`` writes
each parameter once, under its owner.
"""

from keras_caffe.proto import caffe_pb2

#: BVLC's layers deriving from ``LossLayer`` (include/caffe/layers/*_loss_layer.hpp).
LOSS_LAYER_TYPES = frozenset({
    "ContrastiveLoss", "EuclideanLoss", "HingeLoss", "InfogainLoss",
    "MultinomialLogisticLoss", "SigmoidCrossEntropyLoss", "SoftmaxWithLoss"})
#: BatchNorm's blobs: mean, variance, moving-average factor.
BATCHNORM_BLOBS = 3


def phase_value(phase):
    """Caffe's ``Phase`` enum value for "TRAIN"/"TEST" or the enum."""
    return caffe_pb2.Phase.Value(phase.upper()) if isinstance(phase, str) else int(phase)


def insert_splits(net):
    """``InsertSplits``: a copy of ``net`` with a ``Split`` layer after each
    top that more than one bottom (or a nonzero ``loss_weight`` and a
    bottom) reads, named ``<blob>_<layer>_<top index>_split``, whose tops
    ``..._split_<k>`` replace those bottoms in order."""
    source_of, count, loss_weight, last_top = {}, {}, {}, {}
    for i, layer in enumerate(net.layer):
        for j, blob in enumerate(layer.bottom):
            top = last_top[blob]  # the import has refused unknown bottoms
            source_of[i, j] = top
            count[top] = count.get(top, 0) + 1
        for j, blob in enumerate(layer.top):
            last_top[blob] = (i, j)
        for j in range(min(len(layer.loss_weight), len(layer.top))):
            top = last_top[layer.top[j]]
            loss_weight[top] = layer.loss_weight[j]
            if loss_weight[top]:
                count[top] = count.get(top, 0) + 1
    out = caffe_pb2.NetParameter()
    out.CopyFrom(net)
    out.ClearField("layer")
    next_split = {}
    for i, source in enumerate(net.layer):
        layer = out.layer.add()
        layer.CopyFrom(source)
        for j, blob in enumerate(layer.bottom):
            top = source_of[i, j]
            if count.get(top, 0) > 1:
                owner = net.layer[top[0]].name
                layer.bottom[j] = _split_blob(owner, blob, top[1], next_split.get(top, 0))
                next_split[top] = next_split.get(top, 0) + 1
        for j, blob in enumerate(layer.top):
            n = count.get((i, j), 0)
            if n > 1:
                weight = loss_weight.get((i, j), 0.0)
                _configure_split(out.layer.add(), layer.name, blob, j, n, weight)
                if weight:
                    layer.ClearField("loss_weight")
                    next_split[i, j] = next_split.get((i, j), 0) + 1
    return out


def _split_blob(layer, blob, index, k):
    return f"{blob}_{layer}_{index}_split_{k}"


def _configure_split(split, layer, blob, index, n, loss_weight):
    """``ConfigureSplitLayer``."""
    split.bottom.append(blob)
    split.name = f"{blob}_{layer}_{index}_split"
    split.type = "Split"
    for k in range(n):
        split.top.append(_split_blob(layer, blob, index, k))
        if loss_weight:
            split.loss_weight.append(loss_weight if k == 0 else 0.0)


def layer_params(net, phase):
    """The ``layer_param_`` of each layer of the ``Net`` built from ``net``
    (filtered and upgraded) in ``phase``, in order: see the module doc."""
    phase = phase_value(phase)
    layers = list(insert_splits(net).layer)
    for layer in layers:
        if not layer.HasField("phase"):
            layer.phase = phase
        _LAYER_SETUP.get(layer.type, _no_setup)(layer)
    return layers


def _no_setup(layer):
    pass


def _loss_setup(layer):
    if not layer.loss_weight:
        layer.loss_weight.append(1.0)


def _batchnorm_setup(layer):
    while len(layer.param) < BATCHNORM_BLOBS:
        layer.param.add(lr_mult=0.0)


#: The ``LayerSetUp`` steps that change ``layer_param_``, by layer type.
_LAYER_SETUP = {**{t: _loss_setup for t in LOSS_LAYER_TYPES}, "BatchNorm": _batchnorm_setup}


def to_proto(net, phase, blobs, array_to_blob):
    """``Net::ToProto(write_diff=false)``: a ``NetParameter`` with ``net``'s
    name and each layer of ``layer_params(net, phase)`` holding
    ``blobs[layer name]`` (arrays, converted by ``array_to_blob``); layers
    without an entry hold none."""
    out = caffe_pb2.NetParameter(name=net.name)
    for layer in layer_params(net, phase):
        entry = out.layer.add()
        entry.CopyFrom(layer)
        entry.ClearField("blobs")
        for blob in blobs.get(layer.name, ()):
            entry.blobs.add().CopyFrom(array_to_blob(blob))
    return out


def layer_names(net, phase):
    """The names of the ``Net``'s layers (splits included), in order: the
    groups of ``Net::ToHDF5``'s ``/data``."""
    return [layer.name for layer in layer_params(net, phase)]

"""Files written for Caffe's forks (issue 15, fork-tolerant reading).

- The schema holds the well-known forks' parameters (SSD, SegNet, PSPNet,
  ShuffleNet, py-faster-rcnn, ``ceil_mode``), so their text files parse.
- A field no schema knows never stops the reading before every unknown
  layer type has been listed in one error; on a layer type that is
  converted, it is refused naming the layer, the field and its line.
- A fork-written binary caffemodel whose fields clash with BVLC's numbers
  still gives its blobs (the weights-only schema).

``mobilenet_ssd_deploy.prototxt`` and ``mobilenet_ssd_train.prototxt`` are
chuanqi305/MobileNet-SSD's files (source and commit in their first line).
"""

import struct

import numpy as np
import pytest

import keras_caffe
from keras_caffe import importers
from keras_caffe.errors import (
    CaffeImportError, ProtoParseError, UnknownLayerError, UnsafeLayerError)
from keras_caffe.importers.formats.netfile import read_net, read_net_file
from keras_caffe.importers.net.weights import load_weights
from keras_caffe.proto import caffe_pb2
from support import NETS

DATA = NETS


def test_ssd_deploy_parses_with_the_forks_parameters():
    net, _, skipped = read_net_file(DATA / "mobilenet_ssd_deploy.prototxt")
    assert skipped == []
    by_type = {}
    for layer in net.layer:
        by_type.setdefault(layer.type, layer)
    assert list(by_type["Permute"].permute_param.order) == [0, 2, 3, 1]
    prior = by_type["PriorBox"].prior_box_param
    assert prior.min_size and prior.flip and list(prior.variance) == pytest.approx(
        [0.1, 0.1, 0.2, 0.2])
    out = by_type["DetectionOutput"].detection_output_param
    assert (out.num_classes, out.nms_param.nms_threshold, out.keep_top_k) == (
        21, pytest.approx(0.45), 100)


def test_the_deploy_file_imports():
    """Every type of MobileNet-SSD's deploy file has a unit (Permute, PriorBox
    and DetectionOutput among them); its numbers are checked in
    test_detection_output.py."""
    model = keras_caffe.import_model(DATA / "mobilenet_ssd_deploy.prototxt",
                                     data_format="channels_first")
    assert model.caffe_outputs == ["detection_out"]
    assert tuple(model.output.shape)[1::2] == (1, 7)


def test_a_train_file_with_fields_no_schema_knows_lists_its_unknown_types():
    """SSD's AnnotatedData carries transform_param fields (resize_param,
    distort_param, ...) and annotated_data_param, none in the schema."""
    _, _, skipped = read_net_file(DATA / "mobilenet_ssd_train.prototxt")
    assert {(s.name, s.field) for s in skipped} >= {
        ("data", "resize_param"), ("data", "distort_param"), ("data", "annotated_data_param"),
        ("mbox_loss", "multibox_loss_param")}
    assert [s.line for s in skipped if s.field == "resize_param"] == [17]
    with pytest.raises(UnknownLayerError) as err:
        keras_caffe.import_model(DATA / "mobilenet_ssd_train.prototxt", phase="TRAIN")
    assert err.value.types == ["AnnotatedData", "MultiBoxLoss"]
    assert "AnnotatedData is sized by analyze but not built: keras-caffe has no reader" \
        in str(err.value)


NET = """name: "forked"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 dim: 4 dim: 4 } } }
layer { name: "up" type: "Mystery" bottom: "x" top: "y" mystery_param { size: 2 inner { a: "}" } } }
layer { name: "conv" type: "Convolution" bottom: "y" top: "z" {conv_extra}
  convolution_param { num_output: 2 kernel_size: 1 } }
layer { name: "train_only" type: "ReLU" bottom: "z" top: "z" include { phase: TRAIN }
  relu_param { fork_flag: true } }
"""


def net(conv_extra=""):
    return NET.replace("{conv_extra}", conv_extra)


def test_unknown_fields_of_unknown_types_do_not_stop_the_listing():
    with pytest.raises(UnknownLayerError) as err:
        keras_caffe.import_model(net())
    assert err.value.types == ["Mystery"]


def test_a_users_layer_type_for_a_fork_type_runs():
    seen = {}

    @importers.register_layer_type("Mystery")
    def mystery(layer, bottoms, ctx):
        seen.update(ctx.fork_fields(layer))  # the fork's param, as written
        return bottoms

    try:
        model = keras_caffe.import_model(net())
    finally:
        importers.unregister_layer_type("Mystery")
    assert model.output_shape == (None, 4, 4, 2)
    assert seen == {"mystery_param": 'mystery_param { size: 2 inner { a: "}" } }'}


def test_an_unknown_field_on_a_built_type_is_refused_where_it_is():
    importers.register_layer_type("Mystery")(lambda layer, bottoms, ctx: bottoms)
    try:
        with pytest.raises(ProtoParseError) as err:
            keras_caffe.import_model(net(conv_extra="conv_fork_mode: 3"))
    finally:
        importers.unregister_layer_type("Mystery")
    assert str(err.value) == (
        "<prototxt text>:4:63: layer 'conv' (Convolution): field 'conv_fork_mode' is not in "
        "keras-caffe's schema (a Caffe fork's?), so its meaning would be lost: Message type "
        "\"LayerParameter\" has no field named \"conv_fork_mode\".")
    assert (err.value.line, err.value.column) == (4, 63)


def test_a_layer_outside_the_phase_does_not_block_the_import():
    """train_only's relu_param has a fork flag; the TEST net does not hold it."""
    importers.register_layer_type("Mystery")(lambda layer, bottoms, ctx: bottoms)
    try:
        keras_caffe.import_model(net(), phase="TEST")
        with pytest.raises(ProtoParseError, match=r"layer 'train_only' \(ReLU\): field "
                                                  r"'fork_flag'"):
            keras_caffe.import_model(net(), phase="TRAIN")
    finally:
        importers.unregister_layer_type("Mystery")


def test_a_python_layer_is_reported_as_such_in_a_fork_file():
    text = net().replace('type: "Mystery"', 'type: "Python" python_param { module: "m" layer: "L" }')
    with pytest.raises(UnsafeLayerError, match="Python layer"):
        keras_caffe.import_model(text)


def test_a_syntax_error_is_still_a_syntax_error():
    with pytest.raises(ProtoParseError, match=r":3:"):
        read_net(net().replace('top: "y"', 'top: "y" {'))


@pytest.mark.parametrize("ceil, size", [("true", 3), ("false", 2)])
def test_ceil_mode_is_round_mode(ceil, size):
    text = f"""
layer {{ name: "in" type: "Input" top: "x" input_param {{ shape {{ dim: 1 dim: 1 dim: 6 dim: 6 }} }} }}
layer {{ name: "pool" type: "Pooling" bottom: "x" top: "p"
  pooling_param {{ kernel_size: 3 stride: 2 ceil_mode: {ceil} }} }}
"""
    net_param, _ = read_net(text)
    mode = net_param.layer[1].pooling_param.round_mode
    assert caffe_pb2.PoolingParameter.RoundMode.Name(mode) == ("CEIL" if ceil == "true" else "FLOOR")
    # Caffe: ceil((6 - 3) / 2) + 1 = 3, floor: 2
    assert keras_caffe.import_model(text).output_shape == (None, size, size, 1)


def test_ceil_mode_against_round_mode_is_refused():
    text = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 6 dim: 6 } } }
layer { name: "pool" type: "Pooling" bottom: "x" top: "p"
  pooling_param { kernel_size: 3 stride: 2 ceil_mode: false round_mode: CEIL } }
"""
    with pytest.raises(CaffeImportError, match=r"layer 'pool' gives ceil_mode: false and "
                                               r"round_mode: CEIL, which disagree"):
        read_net(text)


def test_a_net_whose_result_feeds_silence_outputs_it():
    """Colorization's only result feeds a Silence layer; Caffe's net then has
    no outputs, and the model outputs what Silence swallows."""
    text = """
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 } }
layer { name: "quiet" type: "Silence" bottom: "y" }
"""
    model = keras_caffe.import_model(text)
    assert model.caffe_outputs == ["y"] and model.output_shape == (None, 2)


# -- binary files from forks --------------------------------------------------


def _varint(value):
    out = b""
    while True:
        byte, value = value & 0x7F, value >> 7
        out += bytes([byte | (0x80 if value else 0)])
        if not value:
            return out


def _field(number, wire, payload):
    key = _varint(number << 3 | wire)
    return key + (_varint(len(payload)) + payload if wire == 2 else payload)


def test_a_fork_caffemodel_with_clashing_fields_loads_its_blobs(tmp_path):
    """A fork's string field at a number where BVLC has a message (as forks
    reuse 137, BVLC's embed_param): BVLC's schema cannot parse the file
    (the string's bytes are no message); its blobs still load."""
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend([2, 3])
    blob.data.extend(np.arange(6, dtype=np.float32).tolist())
    conv = caffe_pb2.LayerParameter(name="conv1", type="Convolution")
    conv.blobs.add().CopyFrom(blob)
    layer = conv.SerializeToString() + _field(137, 2, b"deconv_mode")
    data = _field(1, 2, b"segnet") + _field(100, 2, layer)
    path = tmp_path / "segnet.caffemodel"
    path.write_bytes(data)
    with pytest.raises(Exception):
        caffe_pb2.NetParameter.FromString(data)  # BVLC's schema refuses it
    weights = load_weights(path)
    assert list(weights) == ["conv1"]
    np.testing.assert_array_equal(weights["conv1"][0], np.arange(6).reshape(2, 3))


def test_a_v1_fork_caffemodel_loads_its_blobs(tmp_path):
    blob = caffe_pb2.BlobProto(num=1, channels=1, height=2, width=2)
    blob.data.extend([1.0, 2.0, 3.0, 4.0])
    v1 = _field(4, 2, b"ip") + _field(6, 2, blob.SerializeToString()) + _field(137, 0, _varint(5))
    v1 += _field(40, 0, _varint(1))  # BVLC: contrastive_loss_param, a message
    path = tmp_path / "v1.caffemodel"
    path.write_bytes(_field(2, 2, v1))
    weights = load_weights(path)
    np.testing.assert_array_equal(weights["ip"][0], [[[[1, 2], [3, 4]]]])


def test_garbage_is_still_not_a_weights_file(tmp_path):
    path = tmp_path / "junk.caffemodel"
    path.write_bytes(struct.pack("<4f", 1, 2, 3, 4) * 3 + b"\xff\xff")
    with pytest.raises(keras_caffe.errors.WeightsError, match="not a Caffe weights file"):
        load_weights(path)


def _nvidia_blob(values, shape, raw_type, dtype):
    """A BlobProto as NVIDIA/caffe 0.16+ writes it by default: ``shape`` (7),
    ``raw_data_type`` (10, its caffe.Type enum) and ``raw_data`` (12)."""
    dims = b"".join(_field(1, 0, _varint(d)) for d in shape)
    raw = np.asarray(values, dtype).tobytes()
    return _field(7, 2, dims) + _field(10, 0, _varint(raw_type)) + _field(12, 2, raw)


@pytest.mark.parametrize("raw_type, dtype", [(2, "<f2"), (1, "<f4"), (0, "<f8")])
def test_an_nvidia_caffe_caffemodel_with_raw_blobs_loads(tmp_path, raw_type, dtype):
    """NVIDIA/caffe writes blobs as raw bytes (FLOAT16 = 2, FLOAT = 1,
    DOUBLE = 0); the imported net computes with those values."""
    kernel = (np.arange(2 * 3 * 2 * 2) % 7 - 3) / 4.0   # exact in float16
    bias = np.array([0.5, -1.25])
    layer = (_field(1, 2, b"conv1") + _field(2, 2, b"Convolution")
             + _field(7, 2, _nvidia_blob(kernel, (2, 3, 2, 2), raw_type, dtype))
             + _field(7, 2, _nvidia_blob(bias, (2,), raw_type, dtype)))
    path = tmp_path / "nvcaffe.caffemodel"
    path.write_bytes(_field(100, 2, layer))
    weights = load_weights(path)
    np.testing.assert_array_equal(weights["conv1"][0], kernel.reshape(2, 3, 2, 2))
    np.testing.assert_array_equal(weights["conv1"][1], bias)
    net = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 '
           'dim: 3 dim: 3 } } }\nlayer { name: "conv1" type: "Convolution" bottom: "data" '
           'top: "conv1" convolution_param { num_output: 2 kernel_size: 2 } }')
    model = keras_caffe.import_model(net, weights=path, data_format="channels_first")
    x = np.random.RandomState(0).rand(1, 3, 3, 3).astype("float32")
    want = np.array([[[np.sum(x[0, :, i:i + 2, j:j + 2] * kernel.reshape(2, 3, 2, 2)[o]) + bias[o]
                       for j in range(2)] for i in range(2)] for o in range(2)])
    np.testing.assert_allclose(model.predict(x, verbose=0)[0], want, rtol=1e-5, atol=1e-6)


def test_raw_blob_data_of_a_broken_length_or_type_is_a_weights_error(tmp_path):
    blob = _field(7, 2, _field(1, 0, _varint(2))) + _field(10, 0, _varint(2)) + _field(12, 2, b"\0" * 3)
    layer = _field(1, 2, b"ip") + _field(7, 2, blob)
    path = tmp_path / "short.caffemodel"
    path.write_bytes(_field(100, 2, layer))
    with pytest.raises(keras_caffe.errors.WeightsError,
                       match=r"layer 'ip' blob 0: raw_data of 3 bytes is not a whole number "
                             r"of FLOAT16 values"):
        load_weights(path)
    blob = _field(7, 2, _field(1, 0, _varint(1))) + _field(12, 2, b"\0\0\0\0")
    path.write_bytes(_field(100, 2, _field(1, 2, b"ip") + _field(7, 2, blob)))
    with pytest.raises(keras_caffe.errors.WeightsError,
                       match=r"layer 'ip' blob 0: raw_data without a known raw_data_type \(none\)"):
        load_weights(path)

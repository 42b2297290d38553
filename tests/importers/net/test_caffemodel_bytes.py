"""Our .caffemodel files are the bytes BVLC Caffe writes (``Net::ToProto``),
checked against Caffe's own files: every ``caffe train`` snapshot in the
golden data (written from Caffe's weights, so every byte must match) and the
``net.save`` files of the golden forward nets; HDF5 files against Caffe's
layout (groups, datasets, dtypes, shapes, attributes); ``InsertSplits``
against Caffe's own unit test cases (src/caffe/test/test_split_layer.cpp)."""

import json
import os
from pathlib import Path

import h5py
import numpy as np
import pytest
from google.protobuf import text_format

import keras_caffe
from keras_caffe.importers.formats import net_proto
from keras_caffe.importers.net.blobs import model_blobs
from keras_caffe.importers.net.export import caffemodel_proto, export_caffemodel
from keras_caffe.importers.snapshots.files import load_snapshot, save_snapshot
from keras_caffe.importers.net.weights import array_to_blob
from keras_caffe.proto import caffe_pb2
from support import GOLDEN_SOLVER_CASES, NETS, golden_net, golden_resume

DATA = NETS
SPLIT_CASES = json.loads((DATA / "caffe_split_insertion.json").read_text())["cases"]
SNAPSHOT_BINARY = ["sgd_binaryproto", "adam_binaryproto", "sgd_binaryproto_fullbatch64"]
SNAPSHOT_HDF5 = ["sgd_hdf5", "adam_hdf5", "adam_hdf5_fullbatch64"]
FORWARD = ["lenet", "cifar10_quick", "nin_cifar10", "squeezenet_v1.1", "mobilenet_v1",
           "bvlc_googlenet"]


def assert_same_bytes(ours, theirs):
    if ours != theirs:
        at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                  min(len(ours), len(theirs)))
        pytest.fail(f"{len(ours)} bytes vs Caffe's {len(theirs)}; first difference at byte {at}")


# -- caffe train snapshots -----------------------------------------------------------

def test_the_golden_adam_snapshot_holds_all_five_layers(golden):
    """The issue's case: Caffe's iteration-30 Adam snapshot is 2,044 bytes,
    holding every layer of the train net with bottoms, tops, param and phase."""
    path = golden / "solvers" / "adam" / "bin_run" / "snap_iter_30.caffemodel"
    model = keras_caffe.import_model(golden / "solvers" / "adam" / "train_net.prototxt", path,
                                     phase="TRAIN", input_shapes={"data": (20,), "label": ()})
    net = caffemodel_proto(model, model_blobs(model))
    assert [(layer.name, layer.phase, len(layer.blobs)) for layer in net.layer] == [
        ("data", caffe_pb2.TRAIN, 0), ("ip1", caffe_pb2.TRAIN, 2), ("relu1", caffe_pb2.TRAIN, 0),
        ("ip2", caffe_pb2.TRAIN, 2), ("loss", caffe_pb2.TRAIN, 0)]
    assert list(net.layer[4].loss_weight) == [1.0]  # LossLayer::LayerSetUp adds it
    assert len(net.SerializeToString()) == os.path.getsize(path) == 2044


@pytest.mark.parametrize("case", GOLDEN_SOLVER_CASES)
def test_save_snapshot_writes_caffes_iteration_30_files(golden, case, tmp_path, monkeypatch):
    """Caffe's iteration-30 snapshot loaded and snapshotted again: the
    .caffemodel is Caffe's byte for byte, the .solverstate is Caffe's plus
    our one ignored field."""
    folder = golden / "solvers" / case
    caffe_state = folder / "bin_run" / "snap_iter_30.solverstate"
    model, optimizer = golden_resume(folder)
    load_snapshot(caffe_state, model, optimizer)
    monkeypatch.chdir(tmp_path)
    files = save_snapshot(model, optimizer, "bin_run/snap", 30, format="caffe")
    assert_same_bytes(Path(files.weights).read_bytes(),
                      (folder / "bin_run" / "snap_iter_30.caffemodel").read_bytes())
    assert Path(files.solverstate).read_bytes().startswith(caffe_state.read_bytes())


@pytest.mark.parametrize("case", SNAPSHOT_BINARY)
@pytest.mark.parametrize("iteration", [10, 20])
def test_save_snapshot_writes_caffes_snapshot_files(golden, case, iteration, tmp_path,
                                                    monkeypatch):
    folder = golden / "snapshot" / case
    caffe_state = folder / "snap" / f"run_iter_{iteration}.solverstate"
    model, optimizer = golden_resume(folder)
    load_snapshot(caffe_state, model, optimizer)
    monkeypatch.chdir(tmp_path)
    files = save_snapshot(model, optimizer, "snap/run", iteration, format="caffe")
    assert_same_bytes(Path(files.weights).read_bytes(),
                      (folder / "snap" / f"run_iter_{iteration}.caffemodel").read_bytes())
    assert Path(files.solverstate).read_bytes().startswith(caffe_state.read_bytes())


def h5_structure(path):
    """Every object: groups with their attributes, datasets with dtype,
    shape, storage layout, filters and attributes."""
    items = {}

    def visit(name, obj):
        attrs = sorted(obj.attrs)
        if isinstance(obj, h5py.Dataset):
            plist = obj.id.get_create_plist()
            items[name] = ("dataset", obj.dtype.str, obj.shape, plist.get_layout(),
                           plist.get_nfilters(), attrs)
        else:
            items[name] = ("group", attrs)
    with h5py.File(path, "r") as f:
        items["/"] = ("root", sorted(f.attrs))
        f.visititems(visit)
    return items


@pytest.mark.parametrize("case", SNAPSHOT_HDF5)
@pytest.mark.parametrize("iteration", [10, 20])
def test_hdf5_caffemodel_has_caffes_structure_and_values(golden, case, iteration, tmp_path,
                                                         monkeypatch):
    folder = golden / "snapshot" / case
    model, optimizer = golden_resume(folder)
    load_snapshot(folder / "snap" / f"run_iter_{iteration}.solverstate.h5", model, optimizer)
    monkeypatch.chdir(tmp_path)
    files = save_snapshot(model, optimizer, "snap/run", iteration, format="caffe_hdf5")
    caffe = folder / "snap" / f"run_iter_{iteration}.caffemodel.h5"
    assert h5_structure(files.weights) == h5_structure(caffe)
    assert list(h5_structure(caffe)) == ["/", "data", "data/data", "data/ip1", "data/ip1/0",
                                         "data/ip1/1", "data/ip2", "data/ip2/0", "data/ip2/1",
                                         "data/loss", "data/relu1"]
    with h5py.File(files.weights, "r") as a, h5py.File(caffe, "r") as b:
        for name in ("ip1/0", "ip1/1", "ip2/0", "ip2/1"):
            assert a["data"][name][()].tobytes() == b["data"][name][()].tobytes()


# -- pycaffe net.save files ----------------------------------------------------------

@pytest.mark.parametrize("name", FORWARD)
def test_export_writes_caffes_bytes_for_the_golden_nets(golden, name, tmp_path):
    """Import with Caffe's weights, export: Caffe's file byte for byte
    (GoogLeNet: 21 Split layers; MobileNet: BatchNorm's added params, the
    deprecated ``input`` fields upgraded)."""
    folder = golden_net(name)
    model = keras_caffe.import_model(folder / "deploy_used.prototxt",
                                     folder / "weights.caffemodel")
    out = export_caffemodel(model, tmp_path / "net.caffemodel")
    assert_same_bytes(Path(out).read_bytes(), (folder / "weights.caffemodel").read_bytes())


def test_googlenet_file_holds_caffes_split_layers(golden):
    net = caffe_pb2.NetParameter()
    net.ParseFromString((golden_net("bvlc_googlenet") / "weights.caffemodel").read_bytes())
    splits = [layer.name for layer in net.layer if layer.type == "Split"]
    assert len(splits) == 9 and splits[0] == "pool2/3x3_s2_pool2/3x3_s2_0_split"
    deploy = caffe_pb2.NetParameter()
    text_format.Parse((golden / "forward" / "bvlc_googlenet" / "deploy_used.prototxt")
                      .read_text(), deploy)
    assert [layer.name for layer in net_proto.layer_params(deploy, "TEST")] == \
        [layer.name for layer in net.layer]


# -- InsertSplits: Caffe's own test cases ----------------------------------------------

@pytest.mark.parametrize("case", sorted(SPLIT_CASES))
def test_insert_splits_passes_caffes_split_layer_tests(case):
    given, expected = (text_format.Parse(SPLIT_CASES[case][k], caffe_pb2.NetParameter())
                       for k in ("input", "expected"))
    once = net_proto.insert_splits(given)
    assert text_format.MessageToString(once) == text_format.MessageToString(expected)
    twice = net_proto.insert_splits(once)  # idempotent, as Caffe's test checks
    assert text_format.MessageToString(twice) == text_format.MessageToString(once)


# -- what Net::Init changes in layer_param_ --------------------------------------------

SHARED = """
name: "shared"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "data" top: "a"
        param { name: "w" } param { name: "b" } inner_product_param { num_output: 4 } }
layer { name: "b" type: "InnerProduct" bottom: "data" top: "b"
        param { name: "w" } param { name: "b" } inner_product_param { num_output: 4 } }
layer { name: "bn" type: "BatchNorm" bottom: "b" top: "b" param { lr_mult: 0 } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" }
layer { name: "loss" type: "EuclideanLoss" bottom: "sum" bottom: "a" top: "loss"
        loss_weight: 2 phase: TEST }
"""


def test_layer_params_are_what_net_init_leaves(tmp_path):
    model = keras_caffe.import_model(SHARED, phase="TRAIN")
    net = caffemodel_proto(model, model_blobs(model))
    assert [(layer.name, layer.type, list(layer.bottom), list(layer.top)) for layer in net.layer] \
        == [("data", "Input", [], ["data"]),
            ("data_data_0_split", "Split", ["data"],
             ["data_data_0_split_0", "data_data_0_split_1"]),
            ("a", "InnerProduct", ["data_data_0_split_0"], ["a"]),
            ("a_a_0_split", "Split", ["a"], ["a_a_0_split_0", "a_a_0_split_1"]),
            ("b", "InnerProduct", ["data_data_0_split_1"], ["b"]),
            ("bn", "BatchNorm", ["b"], ["b"]),
            ("sum", "Eltwise", ["a_a_0_split_0", "b"], ["sum"]),
            ("loss", "EuclideanLoss", ["sum", "a_a_0_split_1"], ["loss"])]
    layers = {layer.name: layer for layer in net.layer}
    assert [layer.phase for layer in net.layer] == [caffe_pb2.TRAIN] * 7 + [caffe_pb2.TEST]
    assert list(layers["loss"].loss_weight) == [2.0]  # given: kept
    assert [p.lr_mult for p in layers["bn"].param] == [0.0, 0.0, 0.0]  # BatchNorm adds 2
    # a sharer holds the owner's blobs in the binary file (one Blob, two layers) ...
    assert [b.SerializeToString() for b in layers["b"].blobs] == \
        [b.SerializeToString() for b in layers["a"].blobs] and len(layers["a"].blobs) == 2
    # ... and an empty group in HDF5, where Net::ToHDF5 writes owners only
    path = export_caffemodel(model, tmp_path / "shared.caffemodel.h5")
    structure = h5_structure(path)
    assert [k for k in structure if k.startswith("data/")] == [
        "data/a", "data/a/0", "data/a/1", "data/a_a_0_split", "data/b", "data/bn", "data/bn/0",
        "data/bn/1", "data/bn/2", "data/data", "data/data_data_0_split", "data/loss", "data/sum"]
    reloaded = keras_caffe.import_model(SHARED, str(path), phase="TRAIN")
    for a, b in zip(reloaded.get_weights(), model.get_weights()):
        assert a.tobytes() == b.tobytes()


def test_blobs_are_written_as_blob_to_proto_writes_them():
    """Shape then packed float data; a 0-d blob has no shape message, an
    empty blob no data (proto2 leaves both out)."""
    values = np.arange(6, dtype=np.float32).reshape(2, 3) / 7
    blob = array_to_blob(values)
    assert list(blob.shape.dim) == [2, 3] and not blob.diff
    assert np.asarray(blob.data, np.float32).tobytes() == values.tobytes()
    assert blob.SerializeToString() == b"\x2a\x18" + values.tobytes() + b"\x3a\x04\x0a\x02\x02\x03"
    scalar = array_to_blob(np.float32(1.5))
    assert not scalar.HasField("shape") and list(scalar.data) == [1.5]
    assert array_to_blob(np.zeros((0, 4), np.float32)).SerializeToString() == \
        b"\x3a\x04\x0a\x02\x00\x04"

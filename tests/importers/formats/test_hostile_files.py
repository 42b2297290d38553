"""Broken and hostile files (issue 18's reproducers): every one ends in the
package's own error naming the file and what is wrong, before a value is
read, and no file makes keras-caffe read another file.

Each case builds the file the fuzzer found (or the smallest one with the
same defect) with h5py and reads it through the public readers:
``load_weights`` (Caffe's HDF5 weights), ``load_snapshot`` (Caffe's HDF5
solverstate and our Keras-format one) and ``Solver.restore``.
"""

import json
import re
import shutil
from collections.abc import Sequence

import h5py
import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import KerasCaffeError, LayerError, WeightsError
from keras_caffe.importers.snapshots.files import SnapshotError, load_snapshot, save_snapshot
from keras_caffe.importers.net.weights import load_weights
from support import GOLDEN


def _varint(value):
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)

NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 20 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1" inner_product_param { num_output: 16 } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 5 } }
"""


def weights_file(path, build):
    """An HDF5 weights file with ``/data/ip1/{0,1}`` plus what ``build(f)`` adds."""
    with h5py.File(path, "w") as f:
        layer = f.create_group("data").create_group("ip1")
        layer["0"] = np.ones((16, 20), np.float32)
        layer["1"] = np.zeros(16, np.float32)
        build(f)
    return path


def refused(path, match, error=WeightsError):
    with pytest.raises(error, match=match) as info:
        load_weights(path)
    assert str(path) in str(info.value)
    return info.value


# -- Caffe's HDF5 weights -----------------------------------------------------------------


def test_a_sound_file_still_loads(tmp_path):
    weights = load_weights(weights_file(tmp_path / "w.h5", lambda f: None))
    assert sorted(weights) == ["ip1"] and weights["ip1"][0].shape == (16, 20)


def test_corrupt_group_structure(tmp_path):
    """h5py's ``RuntimeError: Unable to get group info (bad symbol table
    node signature)`` on a file whose group node was overwritten."""
    path = weights_file(tmp_path / "w.h5", lambda f: None)
    data = bytearray(path.read_bytes())
    count = data.count(b"SNOD")
    assert count >= 1
    path.write_bytes(bytes(data.replace(b"SNOD", b"XXXX")))
    refused(path, r"truncated or corrupt HDF5 file \(")


def test_groups_nested_three_thousand_deep(tmp_path):
    def build(f):
        group = f["data"]
        for i in range(3000):
            group = group.create_group(f"g{i}")

    refused(weights_file(tmp_path / "w.h5", build), r"nested 65 groups deep \(at most 64\)")


def test_soft_link_to_a_parent(tmp_path):
    def build(f):
        f["data/ip1/loop"] = h5py.SoftLink("/data")

    refused(weights_file(tmp_path / "w.h5", build),
            r"/data/ip1/loop is a soft link \(to '/data'\): keras-caffe reads no links")


def test_hard_link_to_a_parent(tmp_path):
    def build(f):
        f["data/ip1/loop"] = f["data"]

    refused(weights_file(tmp_path / "w.h5", build),
            r"/data/ip1/loop is linked a second time \(a cycle or alias in the file\)")


def test_external_link(tmp_path):
    other = weights_file(tmp_path / "other.h5", lambda f: None)

    def build(f):
        f["data/ip2"] = h5py.ExternalLink(str(other), "/data/ip1")

    refused(weights_file(tmp_path / "w.h5", build), r"/data/ip2 is an external link")


@pytest.mark.parametrize("dtype", [np.dtype([("a", "f4"), ("b", "i4")]), np.dtype("V8")],
                         ids=["compound", "opaque"])
def test_blob_of_a_type_that_is_not_numbers(tmp_path, dtype, request):
    def build(f):
        del f["data/ip1/1"]
        f["data/ip1"].create_dataset("1", shape=(16,), dtype=dtype)
        f["data/ip1/1"][...] = np.zeros(16, dtype)

    refused(weights_file(tmp_path / "w.h5", build),
            rf"/data/ip1/1 has type .* \(HDF5 {request.node.callspec.id}\), not numbers")


@pytest.mark.parametrize("elements, match", [
    (2 ** 40, r"/data/ip2/0 \(1099511627776,\) declares 4.00 TiB, more than the .* a file "
              r"may make keras-caffe read"),
    (2 ** 20, r"/data/ip2/0 declares \(1048576,\) values but stores none"),
])
def test_declared_but_not_stored(tmp_path, elements, match):
    """A chunked dataset declaring 2^40 (or 2^20) float32 values and storing
    none: refused before numpy allocates anything."""
    def build(f):
        f.create_group("data/ip2").create_dataset("0", shape=(elements,), dtype="f4",
                                                  chunks=(1024,))

    refused(weights_file(tmp_path / "w.h5", build), match)


def test_two_gib_declared_is_refused_whatever_the_ram(tmp_path):
    def build(f):
        f.create_group("data/ip2").create_dataset("0", shape=(2 ** 31,), dtype="f4",
                                                  chunks=(2 ** 16,))

    refused(weights_file(tmp_path / "w.h5", build), r"/data/ip2/0 .*declares")


def test_external_storage_is_never_read(tmp_path):
    """A dataset whose values live in another file: refused, naming it."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.arange(16, dtype=np.float32).tobytes())

    def build(f):
        del f["data/ip1/1"]
        f["data/ip1"].create_dataset("1", shape=(16,), dtype="f4", external=[(str(secret), 0, 64)])

    refused(weights_file(tmp_path / "w.h5", build),
            rf"/data/ip1/1 keeps its values in another file \('{secret}'\)")


def test_blob_indices_with_a_gap(tmp_path):
    def build(f):
        f["data/ip1/3"] = np.zeros(2, np.float32)

    refused(weights_file(tmp_path / "w.h5", build),
            r"/data/ip1 holds blobs 3 without the ones before them")


# -- solverstates -------------------------------------------------------------------------


@pytest.fixture
def snapshot(tmp_path):
    """A tiny compiled net and its snapshot in ``fmt``, returning (model,
    optimizer, solverstate path) so a test can damage the file."""
    def make(fmt):
        model = keras_caffe.import_model(NET, phase="TRAIN")
        optimizer = keras_caffe.SGD(0.01, momentum=0.9)
        model.compile(optimizer=optimizer, loss="mse")
        optimizer.build(model.trainable_variables)
        files = save_snapshot(model, optimizer, str(tmp_path / "snap"), 0, format=fmt,
                              state={"positions": [1]})
        return model, optimizer, files.solverstate
    return make


def damage_hdf5(path, change):
    with h5py.File(path, "r+") as f:
        change(f)


def restore_refused(model, optimizer, path, match):
    before = [v.numpy().copy() for v in model.weights]
    with pytest.raises(SnapshotError, match=match) as info:
        load_snapshot(path, model, optimizer)
    assert str(path) in str(info.value)
    for v, b in zip(model.weights, before):
        np.testing.assert_array_equal(v.numpy(), b)  # nothing changed


def test_caffe_hdf5_solverstate_with_external_storage(snapshot, tmp_path):
    model, optimizer, path = snapshot("caffe_hdf5")
    other = tmp_path / "hostname"
    other.write_bytes(b"\0" * 64 * 20 * 4)

    def change(f):
        shape = f["history/0"].shape
        del f["history/0"]
        f["history"].create_dataset("0", shape=shape, dtype="f4",
                                    external=[(str(other), 0, int(np.prod(shape)) * 4)])

    damage_hdf5(path, change)
    restore_refused(model, optimizer, path, r"/history/0 keeps its values in another file")


def test_caffe_hdf5_solverstate_history_declaring_a_tebibyte(snapshot):
    model, optimizer, path = snapshot("caffe_hdf5")

    def change(f):
        del f["history/1"]
        f["history"].create_dataset("1", shape=(2 ** 40,), dtype="f4", chunks=(4096,))

    damage_hdf5(path, change)
    restore_refused(model, optimizer, path, r"/history/1 \(1099511627776,\) declares 4.00 TiB")


def test_caffe_hdf5_solverstate_iteration_out_of_range(snapshot):
    model, optimizer, path = snapshot("caffe_hdf5")

    def change(f):
        del f["iter"]
        f["iter"] = np.array([1e300])

    damage_hdf5(path, change)
    restore_refused(model, optimizer, path, r"/iter is 1e\+300, expected an integer in \[0, 2\^31\)")


def test_keras_solverstate_variable_declaring_a_tebibyte(snapshot):
    model, optimizer, path = snapshot("keras")

    def change(f):
        group = f["optimizer_variables"]
        name = next(iter(group))
        while isinstance(group[name], h5py.Group):
            group = group[name]
            name = next(iter(group))
        del group[name]
        group.create_dataset(name, shape=(2 ** 40,), dtype="f4", chunks=(4096,))

    damage_hdf5(path, change)
    restore_refused(model, optimizer, path, r"declares 4.00 TiB")


def test_keras_solverstate_state_through_a_soft_link(snapshot):
    model, optimizer, path = snapshot("keras")

    def change(f):
        del f["state"]
        f["state"] = h5py.SoftLink("/model_fingerprint")

    damage_hdf5(path, change)
    restore_refused(model, optimizer, path, r"/state is a link: keras-caffe reads no links")


# -- the extra state ----------------------------------------------------------------------


def _set_extra(path, edit):
    with h5py.File(path, "r+") as f:
        extra = json.loads(f["keras_caffe_state"][()].split(b"\0", 1)[0])
        extra = edit(extra)
        del f["keras_caffe_state"]
        f["keras_caffe_state"] = np.bytes_(json.dumps(extra).encode() + b"\0")


def test_extra_state_that_is_not_a_dict(snapshot):
    """``/keras_caffe_state`` whose ``state`` is -0.5: ``TypeError: 'float'
    object is not iterable`` before; now the file and the key."""
    model, optimizer, path = snapshot("caffe_hdf5")
    _set_extra(path, lambda extra: {**extra, "state": -0.5})
    restore_refused(model, optimizer, path, r"corrupt keras-caffe state: 'state' is -0.5")


def test_extra_state_with_a_bad_checksum_type(snapshot):
    model, optimizer, path = snapshot("caffe_hdf5")
    _set_extra(path, lambda extra: {**extra, "weights_sha256": 12})
    restore_refused(model, optimizer, path, r"'weights_sha256' is 12")


def solver_folder(tmp_path):
    case = tmp_path / "sgd"
    shutil.copytree(GOLDEN / "solvers" / "sgd", case, ignore=shutil.ignore_patterns("bin_run"))
    return case


@pytest.mark.parametrize("key, value, match", [
    ("train_batches", 1e308, r"'train_batches' is 1e\+308, expected an integer in \[0, 2\^62\]"),
    ("train_batches", -3, r"'train_batches' is -3"),
    ("train_batches", 2 ** 70, r"'train_batches' is 1180591620717411303424"),
    ("test_batches", [1, 2, 3], r"'test_batches' is \[1, 2, 3\], expected a list of 0 integers"),
    ("rng", {"x": [1.5, 2]}, r"'rng' is \{'x': \[1.5, 2\]\}"),
    ("version", 99, r"solver state version 99: this keras-caffe reads version 1"),
])
def test_solver_state_is_checked_before_it_changes_anything(tmp_path, monkeypatch, key, value,
                                                             match):
    """A data position of 1e308 gave tf.data's ``ValueError: Can't convert
    Python sequence with out-of-range integer``; now the Solver refuses the
    snapshot, naming the file and the key, with the net untouched."""
    monkeypatch.chdir(solver_folder(tmp_path))
    solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None,
                                snapshot_format="caffe_hdf5")
    solver.step(2)
    files = solver.snapshot()
    _set_extra(files.solverstate, lambda extra: {**extra, "state": {**extra["state"],
                                                                     key: value}})
    again = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    before = [v.numpy().copy() for v in again.net.weights]
    with pytest.raises(SnapshotError, match=match) as info:
        again.restore(files.solverstate)
    assert files.solverstate in str(info.value)
    assert again.iter == 0
    for v, b in zip(again.net.weights, before):
        np.testing.assert_array_equal(v.numpy(), b)


# -- data sources -------------------------------------------------------------------------


@pytest.mark.parametrize("layer", [
    'type: "ImageData" image_data_param { source: "SRC" batch_size: 2 }',
    'type: "HDF5Data" hdf5_data_param { source: "SRC" batch_size: 2 }',
])
def test_a_list_source_that_is_a_directory(tmp_path, monkeypatch, layer):
    (tmp_path / "adir").mkdir()
    monkeypatch.chdir(tmp_path)
    net = f'layer {{ name: "data" {layer.replace("SRC", "adir")} top: "data" top: "label" }}'
    with pytest.raises(KerasCaffeError, match=r"layer 'data'.*adir") as info:
        keras_caffe.import_model(net, phase="TRAIN")
    assert isinstance(info.value, LayerError)


# -- HDF5Data's own data files --------------------------------------------------------------


def _hdf5_data_net(tmp_path, build):
    """A TRAIN net whose HDF5Data layer lists one file, made by ``build(f)``
    after sound ``data`` (8 x 3) and ``label`` (8) datasets (which ``build``
    may delete and replace)."""
    path = tmp_path / "rows.h5"
    with h5py.File(path, "w") as f:
        f["data"] = np.arange(24, dtype=np.float32).reshape(8, 3)
        f["label"] = np.arange(8, dtype=np.float32)
        build(f)
    (tmp_path / "list.txt").write_text(f"{path}\n")
    return (f'layer {{ name: "h5" type: "HDF5Data" top: "data" top: "label" '
            f'hdf5_data_param {{ source: "{tmp_path / "list.txt"}" batch_size: 2 }} }}')


def _replace(name, **create):
    def build(f):
        del f[name]
        f.create_dataset(name, **create)
    return build


def _refused_data(tmp_path, build, match):
    import keras_caffe.importers

    with pytest.raises(LayerError, match=match) as info:
        keras_caffe.importers.net_pipeline(_hdf5_data_net(tmp_path, build), phase="TRAIN")
    assert "layer 'h5'" in str(info.value) and str(tmp_path / "rows.h5") in str(info.value)


def test_hdf5_data_a_sound_file_reads_its_rows(tmp_path):
    pipeline = keras_caffe.importers.net_pipeline(_hdf5_data_net(tmp_path, lambda f: None),
                                                  phase="TRAIN")
    batch = next(iter(pipeline.dataset()))
    np.testing.assert_array_equal(np.asarray(batch["data"]), [[0, 1, 2], [3, 4, 5]])
    np.testing.assert_array_equal(np.asarray(batch["label"]), [0, 1])


def test_hdf5_data_soft_link(tmp_path):
    def build(f):
        del f["label"]
        f["label"] = h5py.SoftLink("/data")

    _refused_data(tmp_path, build, r"/label is a link: keras-caffe reads no links")


def test_hdf5_data_external_link_is_never_followed(tmp_path):
    other = tmp_path / "other.h5"
    with h5py.File(other, "w") as f:
        f["label"] = np.zeros(8, np.float32)

    def build(f):
        del f["label"]
        f["label"] = h5py.ExternalLink(str(other), "/label")

    _refused_data(tmp_path, build, r"/label is a link: keras-caffe reads no links")


def test_hdf5_data_external_storage_is_never_read(tmp_path):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(np.arange(8, dtype=np.float32).tobytes())
    _refused_data(tmp_path, _replace("label", shape=(8,), dtype=np.float32,
                                     external=[(str(outside), 0, 32)]),
                  r"/label keeps its values in another file \('.*outside.bin'\): keras-caffe "
                  r"reads only the file it was given")


def test_hdf5_data_compound_type(tmp_path):
    kind = np.dtype([("a", np.float32), ("b", np.int32)])
    _refused_data(tmp_path, _replace("data", shape=(8,), dtype=kind),
                  r"dataset 'data' is .* \(HDF5 compound\) of shape \(8,\); Caffe reads numeric "
                  r"datasets with a row axis")


def test_hdf5_data_declaring_a_tebibyte_of_rows_reads_nothing(tmp_path):
    _refused_data(tmp_path, _replace("data", shape=(2 ** 38, 1), dtype=np.float32,
                                     chunks=(1024, 1), maxshape=(None, 1)),
                  r"dataset 'data' declares \(274877906944, 1\) values but stores 0 of its "
                  r"268435456 chunks")


def test_hdf5_data_written_in_part(tmp_path):
    def build(f):
        del f["data"]
        data = f.create_dataset("data", shape=(8, 3), dtype=np.float32, chunks=(2, 3))
        data[:4] = 1.0  # two of the four chunks

    _refused_data(tmp_path, build, r"dataset 'data' declares \(8, 3\) values but stores 2 of "
                                   r"its 4 chunks \(a file written in part, or made up\)")


def test_hdf5_data_corrupt_file(tmp_path):
    net = _hdf5_data_net(tmp_path, lambda f: None)
    path = tmp_path / "rows.h5"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(LayerError, match=r"layer 'h5': cannot read HDF5 file '.*rows.h5': "
                                         r"truncated or corrupt HDF5 file \("):
        keras_caffe.importers.net_pipeline(net, phase="TRAIN")


# -- binary protobuf files: no more messages than their size allows (issue 33) --------------
#
# An empty ``layer { }`` is 3 bytes on disk and about 1.4 KB once parsed, so a
# few megabytes of them exhausted any memory limit (3,000,000 in 9 MB ended in
# MemoryError under a 4 GiB limit). ``message_count`` counts a file's messages
# on its wire bytes first and refuses more than 100,000 plus one per KiB.

LAYER = b"\xa2\x06"  # NetParameter.layer (100), length-delimited
V1_LAYERS = b"\x12"  # NetParameter.layers (2)
HISTORY = b"\x1a"  # SolverState.history (3)
BLOBS = b"\x3a"  # LayerParameter.blobs (7)

LIMIT_TEXT = ("the most a {size:,}-byte file may hold (100,000 and one per 1024 bytes): "
              "refused before parsing, as each parsed message takes up to 1.4 KB of memory")

#: Run in a forked child: the address space may grow by 1 GiB at most
#: (parsing 3,000,000 empty layers needs about 4 GiB: MemoryError before).
BOUNDED_LOAD = """
import resource, sys
from keras_caffe.errors import WeightsError
from keras_caffe.importers.net.weights import load_weights
with open("/proc/self/status") as f:
    size = next(int(line.split()[1]) for line in f if line.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (1 << 30), resource.RLIM_INFINITY))
try:
    load_weights(sys.argv[1])
except WeightsError as err:
    print(err)
"""


def test_three_million_empty_layers_are_refused_before_parsing(tmp_path):
    """The issue's file (9 MB, 3,000,000 empty layers) is refused after
    counting 108,790 of them, in a process whose address space may grow by
    only 1 GiB: the parse that needed about 4 GiB never runs."""
    from support.forked import run

    path = tmp_path / "empty_layers.caffemodel"
    path.write_bytes((LAYER + b"\0") * 3_000_000)
    proc = run(["-c", BOUNDED_LOAD, str(path)], timeout=120)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout == (
        f"{path}: holds more than 108,789 protobuf messages (108,790 in its first 326,370 "
        f"bytes, 108,790 of them `layer` entries), {LIMIT_TEXT.format(size=9_000_000)}\n")


def test_messages_nested_in_one_layer_are_counted_too(tmp_path):
    """One layer holding 200,000 empty blobs: the count enters messages."""
    blobs = (BLOBS + b"\0") * 200_000
    path = tmp_path / "one_layer.caffemodel"
    path.write_bytes(LAYER + _varint(len(blobs)) + blobs)
    size = path.stat().st_size
    assert size == 400_005
    with pytest.raises(WeightsError) as info:
        load_weights(path)
    assert str(info.value) == (
        f"{path}: holds more than 100,390 protobuf messages (100,391 in its first 200,785 "
        f"bytes, 100,390 of them `layer.blobs` entries), {LIMIT_TEXT.format(size=size)}")


def test_read_binary_refuses_v1_layers_the_same_way(tmp_path):
    """``read_binary`` (caffemodels, binaryproto means, video means) checks
    any message it parses; here V1 ``layers`` entries."""
    from keras_caffe.errors import ProtoParseError
    from keras_caffe.importers import read_binary
    from keras_caffe.proto import caffe_pb2

    path = tmp_path / "v1.caffemodel"
    path.write_bytes((V1_LAYERS + b"\0") * 1_000_000)
    with pytest.raises(ProtoParseError) as info:
        read_binary(path, caffe_pb2.NetParameter)
    assert str(info.value) == (
        f"{path}: holds more than 101,953 protobuf messages (101,954 in its first 203,908 "
        f"bytes, 101,954 of them `layers` entries), {LIMIT_TEXT.format(size=2_000_000)}")


def test_solverstate_with_a_million_history_blobs_is_refused(snapshot):
    model, optimizer, path = snapshot("caffe")
    with open(path, "wb") as f:
        f.write(b"\x08\x01" + (HISTORY + b"\0") * 1_000_000)  # iter: 1, then the blobs
    restore_refused(model, optimizer, path, re.escape(
        f"{path}: holds more than 101,953 protobuf messages (101,954 in its first 203,910 "
        f"bytes, 101,954 of them `history` entries), {LIMIT_TEXT.format(size=2_000_002)}"))


def test_unknown_fields_and_groups_do_not_hide_what_follows(tmp_path):
    """Fields the schema lacks (kept as raw bytes by the parser), a group
    (wire types 3/4, which caffe.proto never uses) and packed numbers are
    stepped over; the layers after them are still counted."""
    from keras_caffe.importers.formats.message_count import count_messages
    from keras_caffe.proto import caffe_pb2

    group = _varint(9999 << 3 | 3) + b"\x08\x05" + _varint(7 << 3 | 2) + b"\x01x" + \
        _varint(9999 << 3 | 4)
    unknown = _varint(5000 << 3 | 2) + b"\x03abc"
    packed = _varint(4 << 3 | 2) + b"\x02\x01\x02"  # input_dim, packed
    head = group + unknown + packed
    net = caffe_pb2.NetParameter.FromString(head + (LAYER + b"\0") * 3)
    assert (len(net.input_dim), len(net.layer)) == (2, 3)  # the parser reads it so too
    assert count_messages(head + (LAYER + b"\0") * 3, caffe_pb2.NetParameter, 10).messages == 3
    path = tmp_path / "hidden.caffemodel"
    path.write_bytes(head + (LAYER + b"\0") * 200_000)
    assert len(head) == 22
    with pytest.raises(WeightsError) as info:
        load_weights(path)
    assert str(info.value) == (
        f"{path}: holds more than 100,585 protobuf messages (100,586 in its first 301,780 "
        f"bytes, 100,586 of them `layer` entries), {LIMIT_TEXT.format(size=600_022)}")


def _parsed_count(proto):
    """Messages in a parsed protobuf, every depth (the top one not counted)."""
    from google.protobuf.descriptor import FieldDescriptor

    total = 0
    for field, value in proto.ListFields():
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            values = value if isinstance(value, Sequence) else [value]
            total += sum(1 + _parsed_count(v) for v in values)
    return total


def _golden_binaries():
    from keras_caffe.proto import caffe_pb2

    kinds = {".caffemodel": caffe_pb2.NetParameter, ".solverstate": caffe_pb2.SolverState,
             ".binaryproto": caffe_pb2.BlobProto}
    return sorted((p, kinds[p.suffix]) for p in GOLDEN.rglob("*") if p.suffix in kinds)


def test_golden_files_count_as_the_parser_reads_them_far_below_the_limit():
    """Every binary file of tests/golden: the wire count equals the messages
    the parser builds, at least 100 times below the limit, and it loads."""
    from keras_caffe.importers import read_binary
    from keras_caffe.importers.formats.message_count import count_messages, message_limit

    files = _golden_binaries()
    assert len(files) >= 40
    for path, message in files:
        data = path.read_bytes()
        count = count_messages(data, message, message_limit(len(data)))
        assert count.messages == _parsed_count(read_binary(path, message)), path
        assert count.position == len(data) and count.messages * 100 < message_limit(len(data))
        if message.DESCRIPTOR.name == "NetParameter":
            assert load_weights(path)


@pytest.mark.parametrize("name, messages", [("bvlc_googlenet", 693), ("mobilenet_v1", 772),
                                            ("squeezenet_v1.1", 212)])
def test_large_golden_caffemodels_hold_a_few_hundred_messages(name, messages):
    from keras_caffe.importers.formats.message_count import count_messages
    from keras_caffe.proto import caffe_pb2
    from support import golden_net

    path = golden_net(name) / "weights.caffemodel"
    data = path.read_bytes()
    assert count_messages(data, caffe_pb2.NetParameter, 10 ** 9).messages == messages
    assert load_weights(path)


def test_a_packed_field_cut_short_is_named(tmp_path):
    """A top-level packed ``input_dim`` running past the end: named where it is
    cut (protobuf 5+ has no ``FieldDescriptor.label``: AttributeError before)."""
    path = tmp_path / "packed.caffemodel"
    path.write_bytes(_varint(4 << 3 | 2) + b"\x05\x01\x02")
    with pytest.raises(WeightsError) as info:
        load_weights(path)
    assert str(info.value) == (f"{path}: truncated at byte 4 of at least 7 (its field "
                               "`input_dim` at byte 0 runs to byte 7)")

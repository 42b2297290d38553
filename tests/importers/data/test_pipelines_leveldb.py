"""Caffe's Data layer with ``backend: LEVELDB`` (read through plyvel): the same
Datums as an LMDB give the same batches bit for bit (raw, PNG-encoded and
float_data records, in memory and streamed), Caffe's golden batches through a
LevelDB copy of the golden LMDB, key order, wrap-around, resume and sharding,
the importer's shapes, import + fit, and the errors (no plyvel, a locked
database, missing, empty, not a LevelDB, bad records)."""

import os
import re
import subprocess
import sys

import numpy as np
import plyvel
import pytest

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import training_args
from keras_caffe.importers.data import records
from keras_caffe.importers.data.pipelines import layer_pipeline, net_pipeline, pipeline_errors
from keras_caffe.proto import caffe_pb2


def _fixtures():
    """tests/support/pipeline_fixtures.py (tests/importers is on pythonpath)."""
    from support import pipeline_fixtures

    return pipeline_fixtures


_f = _fixtures()
data_layer, png_bytes, raw_datum, random_images = (_f.data_layer, _f.png_bytes, _f.raw_datum,
                                                   _f.random_images)
take, to_caffe, write_lmdb = _f.take, _f.to_caffe, _f.write_lmdb

STREAMED = 0  # in_memory_limit that reads every batch from the database


def write_leveldb(path, datums, keys=None):
    """A LevelDB of Datums (or raw bytes) under ``keys`` (default b'%08d' % i); its path."""
    db = plyvel.DB(str(path), create_if_missing=True, error_if_exists=True)
    with db.write_batch() as batch:
        for i, datum in enumerate(datums):
            key = keys[i] if keys else b"%08d" % i
            batch.put(key, datum if isinstance(datum, bytes) else datum.SerializeToString())
    db.close()
    return os.path.realpath(path)  # LevelDB's messages name the real path


def leveldb_layer(source, batch, transform="", **options):
    lay = data_layer(source, batch, transform, **options)
    lay.data_param.backend = caffe_pb2.DataParameter.LEVELDB
    return lay


def _datums(kind, count):
    """``count`` Datums of one kind, and the key of each, in a shuffled write order."""
    pictures, labels = random_images(count, (3, 6, 5), seed=11)
    if kind == "raw":
        datums = [raw_datum(p, lab) for p, lab in zip(pictures, labels)]
    elif kind == "png":
        datums = [caffe_pb2.Datum(data=png_bytes(p), label=int(lab), encoded=True)
                  for p, lab in zip(pictures, labels)]
    else:
        values = np.random.default_rng(3).normal(size=(count, 2, 6, 5)).astype(np.float32)
        datums = [caffe_pb2.Datum(channels=2, height=6, width=5, float_data=v.ravel(),
                                  label=int(lab)) for v, lab in zip(values, labels)]
    order = np.random.default_rng(5).permutation(count)
    return [datums[i] for i in order], [b"%08d" % i for i in order]


def _assert_batches_equal(a, b, what):
    assert len(a) == len(b)
    for g, (x, y) in enumerate(zip(a, b)):
        assert x.keys() == y.keys()
        for top in x:
            assert x[top].dtype == y[top].dtype == np.float32
            np.testing.assert_array_equal(x[top], y[top], err_msg=f"{what} {top} batch {g}")


# -- The same records as an LMDB, bit for bit ---------------------------------------


@pytest.mark.parametrize("kind", ["raw", "png", "float"])
def test_batches_equal_the_same_records_in_an_lmdb_bit_for_bit(tmp_path, kind):
    """11 records, batch 4, TRAIN with random crops, mirrors and rand_skip, 4 batches
    (past the end of the database): LevelDB in memory and streamed == LMDB."""
    datums, keys = _datums(kind, 11)
    lmdb_path = write_lmdb(tmp_path / "lmdb", datums, keys)
    leveldb_path = write_leveldb(tmp_path / "leveldb", datums, keys)
    transform = "scale: 0.5 mean_value: 3 crop_size: 4 mirror: true"
    expected = take(layer_pipeline(data_layer(lmdb_path, 4, transform, extra="rand_skip: 7"),
                                   "TRAIN"), 4)
    lay = leveldb_layer(leveldb_path, 4, transform, extra="rand_skip: 7")
    for limit in (1 << 30, STREAMED):
        pipe = layer_pipeline(lay, "TRAIN", in_memory_limit=limit)
        assert pipe.num_records == 11
        _assert_batches_equal(take(pipe, 4), expected, f"{kind} limit {limit}")
    assert len({b["data"].tobytes() for b in expected}) == 4


def test_golden_caffe_batches_through_a_leveldb_copy_of_the_golden_lmdb(golden, tmp_path):
    """Caffe's golden LMDB, record for record in a LevelDB: nets A (TRAIN, mean_value,
    here without a backend line: Caffe's default is LEVELDB) and B (TEST, mean file,
    centre crop) give Caffe's recorded batches exactly, the 6th wrapping."""
    folder = golden / "lmdb"
    stub = data_layer(folder / "images_lmdb", 1)
    pairs = list(records.LmdbStore(stub, str(folder / "images_lmdb")).items())
    assert len(pairs) == 50
    write_leveldb(tmp_path / "images_leveldb", [v for _, v in pairs], [k for k, _ in pairs])
    text_a = (folder / "net_A_train_meanvalue.prototxt").read_text()
    text_a = text_a.replace('"images_lmdb" backend: LMDB', '"images_leveldb"')
    assert "backend" not in text_a
    (tmp_path / "a.prototxt").write_text(text_a)
    caffe = np.load(folder / "batches_A.npz")
    for limit in (1 << 30, STREAMED):
        batches = take(net_pipeline(tmp_path / "a.prototxt", "TRAIN", in_memory_limit=limit), 6)
        for i, batch in enumerate(batches):
            np.testing.assert_array_equal(to_caffe(batch["data"]), caffe[f"data_{i}"])
            np.testing.assert_array_equal(batch["label"], caffe[f"label_{i}"])
    text_b = (folder / "net_B_test_crop_meanfile.prototxt").read_text()
    text_b = re.sub(r'source: "images_lmdb"\s+backend: LMDB',
                    'source: "images_leveldb" backend: LEVELDB', text_b)
    text_b = text_b.replace('"mean.binaryproto"', f'"{folder / "mean.binaryproto"}"')
    assert "LEVELDB" in text_b and str(folder) in text_b
    (tmp_path / "b.prototxt").write_text(text_b)
    caffe = np.load(folder / "batches_B.npz")
    for i, batch in enumerate(take(net_pipeline(tmp_path / "b.prototxt", "TEST"), 6)):
        np.testing.assert_array_equal(to_caffe(batch["data"]), caffe[f"data_{i}"])
        np.testing.assert_array_equal(batch["label"], caffe[f"label_{i}"])


# -- Order, wrap-around, resume, shards ------------------------------------------------


def test_records_in_byte_order_of_their_keys_wrapping_like_caffe(tmp_path):
    """Keys b'0' ... b'12' written in random order: LevelDB (like Caffe's cursor) reads
    them in byte order (b'0', b'1', b'10', b'11', b'12', b'2', ...); 13 records,
    batch 5: batch 2 holds the 11th, 12th, 13th, 1st and 2nd of that order."""
    images, labels = random_images(13, (3, 4, 4), seed=2)
    keys = [b"%d" % i for i in range(13)]
    write_order = np.random.default_rng(1).permutation(13)
    path = write_leveldb(tmp_path / "db", [raw_datum(images[i], labels[i]) for i in write_order],
                         [keys[i] for i in write_order])
    order = sorted(range(13), key=lambda i: keys[i])
    assert order[:6] == [0, 1, 10, 11, 12, 2]
    lay = leveldb_layer(path, 5, "scale: 0.25 mean_value: 10 mean_value: 20 mean_value: 30")
    expected = (images.astype(np.float32) - np.float32([10, 20, 30])[:, None, None]) * 0.25
    for limit in (1 << 30, STREAMED):
        for b, batch in enumerate(take(layer_pipeline(lay, "TEST", in_memory_limit=limit), 4)):
            records_ = [order[(5 * b + j) % 13] for j in range(5)]
            np.testing.assert_array_equal(to_caffe(batch["data"]), expected[records_])
            np.testing.assert_array_equal(batch["label"], labels[records_].astype(np.float32))


@pytest.mark.parametrize("limit", [1 << 30, STREAMED])
def test_start_batch_resumes_and_shards_together_read_the_unsharded_stream(tmp_path, limit):
    """dataset(start_batch=s) is dataset(0) from batch s on; worker i of 3 reads global
    batches i, i+3, ... (three streamed pipelines share the one open database)."""
    datums, keys = _datums("raw", 10)
    path = write_leveldb(tmp_path / "db", datums, keys)
    lay = leveldb_layer(path, 3, "crop_size: 3 mirror: true", extra="rand_skip: 4")
    stream = take(layer_pipeline(lay, "TRAIN", in_memory_limit=limit), 9)
    _assert_batches_equal(take(layer_pipeline(lay, "TRAIN", in_memory_limit=limit), 3, start=5),
                          stream[5:8], "resumed")
    shards = [layer_pipeline(lay, "TRAIN", in_memory_limit=limit, shard_index=i, num_shards=3)
              for i in range(3)]
    parts = [take(shard, 3) for shard in shards]
    _assert_batches_equal([parts[g % 3][g // 3] for g in range(9)], stream, "sharded")
    _assert_batches_equal(take(shards[1], 1, start=2), stream[7:8], "shard resumed")


def test_in_memory_database_is_closed_after_reading_a_streamed_one_stays_open(tmp_path):
    """LevelDB lets one handle open a database: a database read into memory is let go
    (another reader can open it while the pipeline runs); a streamed one is held, and
    shared with the importer and other pipelines of this process."""
    datums, keys = _datums("raw", 5)
    path = write_leveldb(tmp_path / "db", datums, keys)
    in_memory = layer_pipeline(leveldb_layer(path, 2), "TEST")
    other = plyvel.DB(path)  # would raise IOError if the pipeline held the lock
    try:
        assert len(list(other.iterator(include_value=False))) == 5
        assert take(in_memory, 3)[2]["label"].shape == (2,)
    finally:
        other.close()
    streamed = layer_pipeline(leveldb_layer(path, 2), "TEST", in_memory_limit=STREAMED)
    with pytest.raises(plyvel.IOError, match="already held by process"):
        plyvel.DB(path)
    # The importer and further pipelines in this process share the open database.
    model = keras_caffe.import_model(_net(path), data_format="channels_first")
    assert tuple(model.inputs[0].shape) == (None, 3, 6, 5)
    again = layer_pipeline(leveldb_layer(path, 2), "TEST", in_memory_limit=STREAMED)
    _assert_batches_equal(take(streamed, 3), take(in_memory, 3), "streamed")
    _assert_batches_equal(take(again, 3), take(in_memory, 3), "streamed again")


# -- The importer and training ----------------------------------------------------------


def _net(source, transform="", extra="", backend="backend: LEVELDB"):
    return (f'layer {{ name: "data" type: "Data" top: "data" top: "label" '
            f'transform_param {{ {transform} }} '
            f'data_param {{ source: "{source}" {backend} batch_size: 4 {extra} }} }}\n'
            'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }')


def test_importer_takes_shapes_from_the_first_record(tmp_path):
    pictures, labels = random_images(3, (3, 6, 5), seed=6)
    raw = write_leveldb(tmp_path / "raw", [raw_datum(p, lab) for p, lab in zip(pictures, labels)])
    model = keras_caffe.import_model(_net(raw, "crop_size: 4"))
    assert tuple(model.inputs[0].shape) == (None, 4, 4, 3)
    model = keras_caffe.import_model(_net(raw, backend=""), data_format="channels_first")
    assert tuple(model.inputs[0].shape) == (None, 3, 6, 5)  # Caffe's default backend
    color = write_leveldb(tmp_path / "color", [caffe_pb2.Datum(data=png_bytes(p), encoded=True)
                                               for p in pictures])
    gray = write_leveldb(tmp_path / "gray", [caffe_pb2.Datum(data=png_bytes(p[:1]), encoded=True)
                                             for p in pictures])
    cases = [(color, "", "", 3), (color, "force_gray: true", "", 1), (gray, "", "", 1),
             (gray, "force_color: true", "", 3), (gray, "", "force_encoded_color: true", 3)]
    for path, transform, extra, channels in cases:
        model = keras_caffe.import_model(_net(path, transform, extra))
        assert tuple(model.inputs[0].shape) == (None, 6, 5, channels), (path, transform, extra)
        pipe = layer_pipeline(leveldb_layer(path, 3, transform, extra=extra), "TEST")
        assert pipe.shapes["data"] == (3, 6, 5, channels)
        assert take(pipe, 1)[0]["data"].shape == (3, 6, 5, channels)


def test_imported_train_net_fits_from_its_leveldb_data_layer(tmp_path):
    """Generated LevelDB -> Data (backend: LEVELDB) -> conv/pool/ip/SoftmaxWithLoss +
    Accuracy, imported and trained by fit from its own pipeline."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 40)
    images = (rng.integers(0, 60, (40, 1, 12, 12)) + 60 * labels[:, None, None, None])
    write_leveldb(tmp_path / "train_leveldb",
                  [raw_datum(im, lab) for im, lab in zip(images.astype(np.uint8), labels)])
    prototxt = tmp_path / "train.prototxt"
    prototxt.write_text(_f.tiny_train_net("train_leveldb", "LEVELDB"))
    model = keras_caffe.import_model(prototxt, phase="TRAIN")  # source found next to the prototxt
    pipe = net_pipeline(prototxt, "TRAIN", in_memory_limit=STREAMED)
    assert [tuple(t.shape[1:]) for t in model.inputs] == [pipe.shapes["data"][1:]] == [(10, 10, 1)]
    model.compile(optimizer=keras_caffe.SGD(learning_rate=0.05, momentum=0.9),
                  **training_args(model))
    ds = pipe.dataset().map(lambda b: (b["data"], b["label"]))
    losses = model.fit(ds, steps_per_epoch=5, epochs=2, verbose=0, shuffle=False).history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]


# -- Errors ------------------------------------------------------------------------------


def _raises(message, fn, *args, **kwargs):
    with pytest.raises(LayerError, match=message) as info:
        fn(*args, **kwargs)
    return info.value


def test_without_plyvel_the_error_says_what_to_install(tmp_path, monkeypatch):
    path = write_leveldb(tmp_path / "db", [raw_datum(np.zeros((1, 2, 2)), 0)])
    monkeypatch.setitem(sys.modules, "plyvel", None)  # import plyvel raises ImportError
    message = ("layer 'data': reading LevelDB needs the plyvel package "
               "(pip install 'keras-caffe[leveldb]', or pip install plyvel)")
    assert str(_raises(re.escape(message), layer_pipeline, leveldb_layer(path, 2))) == message
    _raises(re.escape(message), keras_caffe.import_model, _net(path))


def _locked(path):
    return f"layer 'data': LevelDB '{re.escape(path)}' is locked \\(IO error: lock " \
           f"{re.escape(path)}/LOCK: "


def test_a_database_open_elsewhere_in_this_process_is_a_clear_error(tmp_path):
    path = write_leveldb(tmp_path / "db", [raw_datum(np.zeros((1, 2, 2)), 0)])
    held = plyvel.DB(path)
    try:
        error = _raises(_locked(path) + "already held by process\\): another process, or "
                        "another handle in this one, has it open, and LevelDB allows one at a "
                        "time; close that one, read a copy of the database, or convert it to "
                        "LMDB", layer_pipeline, leveldb_layer(path, 2))
        assert error.layer == "data"
        _raises(_locked(path), keras_caffe.import_model, _net(path))
    finally:
        held.close()
    assert take(layer_pipeline(leveldb_layer(path, 2)), 1)[0]["data"].shape == (2, 2, 2, 1)


def test_a_database_open_in_another_process_is_a_clear_error(tmp_path):
    path = write_leveldb(tmp_path / "db", [raw_datum(np.zeros((1, 2, 2)), 0)])
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, plyvel; db = plyvel.DB(sys.argv[1]); "
                               "print('open', flush=True); sys.stdin.read()", path],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "open\n"
        _raises(_locked(path) + "Resource temporarily unavailable\\): another process",
                layer_pipeline, leveldb_layer(path, 2), in_memory_limit=STREAMED)
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    assert layer_pipeline(leveldb_layer(path, 2)).num_records == 1


def test_a_directory_leveldb_cannot_write_to_is_not_called_locked(tmp_path, monkeypatch):
    """LevelDB writes its LOCK file when opening: on a read-only directory it fails with
    the LOCK file's path in the message, which is not another reader's lock."""
    path = write_leveldb(tmp_path / "db", [raw_datum(np.zeros((1, 2, 2)), 0)])

    def read_only(name, **options):
        raise plyvel.IOError(f"IO error: {name}/LOCK: Read-only file system".encode())

    monkeypatch.setattr(plyvel, "DB", read_only)
    message = (f"layer 'data': cannot open LevelDB '{path}': IO error: {path}/LOCK: Read-only "
               "file system; LevelDB writes its LOCK and LOG files into the database directory "
               "when it opens it (as Caffe's reader does): copy the database to a writable place")
    assert str(_raises(re.escape(message), layer_pipeline, leveldb_layer(path, 2))) == message


def test_missing_empty_and_not_a_leveldb(tmp_path):
    missing = str(tmp_path / "nowhere_leveldb")
    _raises(f"layer 'data': Data source '{re.escape(missing)}' not found",
            layer_pipeline, leveldb_layer(missing, 2))
    empty = write_leveldb(tmp_path / "empty", [])
    _raises(f"layer 'data': LevelDB '{re.escape(empty)}' is empty",
            layer_pipeline, leveldb_layer(empty, 2))
    _raises(f"layer 'data': LevelDB '{re.escape(empty)}' is empty",
            keras_caffe.import_model, _net(empty))
    # An LMDB under Caffe's default backend: refused before LevelDB writes into it.
    lmdb_path = write_lmdb(tmp_path / "an_lmdb", [raw_datum(np.zeros((1, 2, 2)), 0)])
    before = sorted(p.name for p in (tmp_path / "an_lmdb").iterdir())
    message = (f"layer 'data': Data source '{lmdb_path}' is not a LevelDB (it has no CURRENT "
               "file); if it is an LMDB, set backend: LMDB in data_param (Caffe's default "
               "backend is LEVELDB)")
    assert str(_raises(re.escape(message), layer_pipeline, leveldb_layer(lmdb_path, 2))) == message
    _raises(re.escape(message), keras_caffe.import_model, _net(lmdb_path, backend=""))
    assert sorted(p.name for p in (tmp_path / "an_lmdb").iterdir()) == before
    junk = write_leveldb(tmp_path / "junk", [b"\xff\xff\xff garbage"])
    _raises(f"LevelDB '{re.escape(junk)}' record '00000000' is not a Caffe Datum",
            layer_pipeline, leveldb_layer(junk, 2))
    _raises(f"LevelDB '{re.escape(junk)}' record '00000000' is not a Caffe Datum",
            keras_caffe.import_model, _net(junk))


def test_a_wrong_size_record_named_by_its_key_up_front_or_while_streaming(tmp_path):
    datums = [raw_datum(np.zeros((2, 3, 3), np.uint8), 1)] * 7
    datums.append(raw_datum(np.zeros((2, 4, 3), np.uint8), 1))
    path = write_leveldb(tmp_path / "db", datums)
    message = f"layer 'data': LevelDB '{path}' record '00000007' is 2x4x3 but the first record " \
              "is 2x3x3"
    assert str(_raises(re.escape(message), layer_pipeline, leveldb_layer(path, 4))) == message
    pipe = layer_pipeline(leveldb_layer(path, 4), in_memory_limit=STREAMED)
    assert take(pipe, 1)[0]["data"].shape == (4, 3, 3, 2)
    with pytest.raises(LayerError) as info:
        with pipeline_errors():
            take(pipe, 2)
    assert str(info.value) == message

"""Data-layer pipelines: Caffe's golden batches, resume exactness, sharding, the
API, and an imported TRAIN net trained from its own Data layer."""


import numpy as np
import pytest


def _fixtures():
    """tests/support/pipeline_fixtures.py (tests/importers is on pythonpath)."""
    from support import pipeline_fixtures

    return pipeline_fixtures


_f = _fixtures()
data_layer, layer, png_bytes, raw_datum = _f.data_layer, _f.layer, _f.png_bytes, _f.raw_datum
raw_lmdb, take, to_caffe, write_lmdb = _f.raw_lmdb, _f.take, _f.to_caffe, _f.write_lmdb

import keras_caffe
from keras_caffe.errors import ArgumentError, LayerError
from keras_caffe.importers import read_binary, training_args
from keras_caffe.importers.data.pipelines import (
    DEFAULT_SEED, DataPipeline, layer_pipeline, net_pipeline)
from keras_caffe.proto import caffe_pb2

# -- Golden parity: batches recorded from BVLC Caffe's Data layer --------------


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_golden_train_mean_value_batches_equal_caffe_bit_for_bit(golden, data_format):
    """Net A (TRAIN, scale + mean_value, batch 10): 6 batches, the 6th wrapping."""
    folder = golden / "lmdb"
    pipe = net_pipeline(folder / "net_A_train_meanvalue.prototxt", "TRAIN", data_format=data_format)
    assert pipe.tops == ("data", "label") and pipe.num_records == 50
    side = {"channels_last": (10, 32, 32, 3), "channels_first": (10, 3, 32, 32)}[data_format]
    assert pipe.shapes == {"data": side, "label": (10,)}
    caffe = np.load(folder / "batches_A.npz")
    for i, batch in enumerate(take(pipe, 6)):
        assert batch["data"].dtype == np.float32 and batch["label"].dtype == np.float32
        np.testing.assert_array_equal(to_caffe(batch["data"], data_format), caffe[f"data_{i}"])
        np.testing.assert_array_equal(batch["label"], caffe[f"label_{i}"])


def test_golden_test_center_crop_mean_file_batches_equal_caffe_bit_for_bit(golden, monkeypatch):
    """Net B (TEST, mean_file, center crop 28): the source and mean file resolve from
    the current directory, as Caffe opens them."""
    folder = golden / "lmdb"
    monkeypatch.chdir(folder)
    param = caffe_pb2.NetParameter()
    param.CopyFrom(keras_caffe.importers.read_net("net_B_test_crop_meanfile.prototxt")[0])
    pipe = net_pipeline(param, "TEST")
    assert pipe.shapes["data"] == (10, 28, 28, 3)
    caffe = np.load(folder / "batches_B.npz")
    for i, batch in enumerate(take(pipe, 6)):
        np.testing.assert_array_equal(to_caffe(batch["data"]), caffe[f"data_{i}"])
        np.testing.assert_array_equal(batch["label"], caffe[f"label_{i}"])


def _golden_train_crop_layer(golden, batch=10):
    folder = golden / "lmdb"
    return layer(f'name: "data" type: "Data" top: "data" top: "label" transform_param {{ '
                 f'scale: 0.00390625 crop_size: 28 mirror: true mean_file: '
                 f'"{folder / "mean.binaryproto"}" }} data_param {{ source: '
                 f'"{folder / "images_lmdb"}" backend: LMDB batch_size: {batch} }}')


def test_golden_train_random_crops_and_mirrors_are_valid_deterministic_and_resumable(golden):
    """Caffe's RNG cannot be matched: every TRAIN record must be some 28x28 crop,
    mirrored or not, of (image - mean) * scale, and the choice a function of the seed."""
    source = np.load(golden / "lmdb" / "source_images.npz")
    images = source["images"].astype(np.float32)
    mean = read_binary(golden / "lmdb" / "mean.binaryproto", caffe_pb2.BlobProto)
    mean = np.asarray(mean.data, np.float32).reshape(3, 32, 32)
    centered = (images - mean) * np.float32(0.00390625)
    pipe = layer_pipeline(_golden_train_crop_layer(golden), "TRAIN", data_format="channels_first")
    batches = take(pipe, 6)
    seen = set()
    for b, batch in enumerate(batches):
        for j in range(10):
            record = (b * 10 + j) % 50
            assert batch["label"][j] == source["labels"][record]
            found = [(h, w, m) for h in range(5) for w in range(5) for m in (False, True)
                     if np.array_equal(batch["data"][j], _crop(centered[record], h, w, m))]
            assert len(found) >= 1, f"batch {b} record {j} is no crop of image {record}"
            seen.add(found[0])
    assert len({s[:2] for s in seen}) > 10 and {s[2] for s in seen} == {False, True}
    again = take(layer_pipeline(_golden_train_crop_layer(golden), "TRAIN",
                                data_format="channels_first"), 6)
    other = take(layer_pipeline(_golden_train_crop_layer(golden), "TRAIN", seed=7,
                                data_format="channels_first"), 6)
    for b in range(6):
        np.testing.assert_array_equal(again[b]["data"], batches[b]["data"])
    assert any(not np.array_equal(other[b]["data"], batches[b]["data"]) for b in range(6))
    resumed = take(pipe, 2, start=4)
    for k in range(2):
        np.testing.assert_array_equal(resumed[k]["data"], batches[4 + k]["data"])
    assert pipe.seed == DEFAULT_SEED == 1701


def _crop(image, h, w, mirror):
    out = image[:, h:h + 28, w:w + 28]
    return out[:, :, ::-1] if mirror else out


# -- Resume exactness and sharding, every layer type ---------------------------


def _layers(tmp_path):
    """One layer per type, each with its random parts switched on, and the arrays
    for MemoryData and Input; the batches wrap around their sources within 8 batches."""
    import h5py

    lmdb_path, images, labels = raw_lmdb(tmp_path / "raw_lmdb", count=13, shape=(3, 8, 9))
    encoded = write_lmdb(tmp_path / "png_lmdb",
                         [caffe_pb2.Datum(data=png_bytes(im), label=int(lab), encoded=True)
                          for im, lab in zip(images, labels)])
    (tmp_path / "img").mkdir()
    lines = []
    for i, image in enumerate(images[:11]):
        (tmp_path / "img" / f"im {i}.png").write_bytes(png_bytes(image))
        lines.append(f"im {i}.png {labels[i]}")
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    for name, rows in (("a.h5", 5), ("b.h5", 4)):
        with h5py.File(tmp_path / name, "w") as h5:
            h5["x"] = np.random.default_rng(rows).normal(size=(rows, 3, 2, 2))
            h5["y"] = np.arange(rows, dtype=np.float64)
    (tmp_path / "h5.txt").write_text(f"{tmp_path / 'a.h5'}\n{tmp_path / 'b.h5'}\n")
    crop = "crop_size: 6 mirror: true scale: 0.5 mean_value: 100"
    arrays = {"data": np.random.default_rng(1).normal(size=(7, 2, 3, 3)),
              "label": np.arange(7), "a": np.arange(21.0).reshape(7, 3)}
    layers = {
        "Data": data_layer(lmdb_path, 4, crop, extra="rand_skip: 9"),
        "Data encoded": data_layer(encoded, 3, crop),
        "ImageData": layer(f'name: "im" type: "ImageData" top: "data" top: "label" '
                           f'transform_param {{ {crop} }} image_data_param {{ source: '
                           f'"{tmp_path / "list.txt"}" root_folder: "{tmp_path / "img"}/" '
                           'batch_size: 4 shuffle: true rand_skip: 5 new_height: 7 '
                           'new_width: 10 }'),
        "HDF5Data": layer(f'name: "h5" type: "HDF5Data" top: "x" top: "y" hdf5_data_param {{ '
                          f'source: "{tmp_path / "h5.txt"}" batch_size: 4 shuffle: true }}'),
        "DummyData": layer('name: "d" type: "DummyData" top: "n" top: "u" dummy_data_param { '
                           'shape { dim: 4 dim: 2 dim: 3 dim: 3 } shape { dim: 4 dim: 5 } '
                           'data_filler { type: "gaussian" std: 2 } '
                           'data_filler { type: "uniform" min: -1 max: 3 } }'),
        "MemoryData": layer('name: "m" type: "MemoryData" top: "data" top: "label" '
                            'memory_data_param { batch_size: 3 channels: 2 height: 3 width: 3 }'),
        "Input": layer('name: "in" type: "Input" top: "a" input_param { shape { dim: 4 dim: 3 } }'),
    }
    return layers, arrays


def _pipelines(sources, names=None, **options):
    layers, arrays = sources
    return {name: layer_pipeline(lay, "TRAIN", arrays=arrays, **options)
            for name, lay in layers.items() if names is None or name in names}


def test_start_batch_resumes_every_layer_type_bit_for_bit(tmp_path):
    """Element k of dataset(start_batch=s) is element s + k of dataset(0), with random
    crops, mirrors, shuffles, rand_skip and random fillers, across epoch ends."""
    for name, pipe in _pipelines(_layers(tmp_path)).items():
        batches = take(pipe, 8)
        for start in (1, 5):
            for k, batch in enumerate(take(pipe, 3, start=start)):
                for top in pipe.tops:
                    np.testing.assert_array_equal(batch[top], batches[start + k][top],
                                                  err_msg=f"{name} {top} start {start}")
        varied = [top for top in pipe.tops
                  if not all(np.array_equal(b[top], batches[0][top]) for b in batches)]
        assert varied, f"{name}: every batch is the same"


def test_shards_together_read_exactly_the_unsharded_stream(tmp_path):
    """Worker i of 3 reads global batches i, i+3, ...; interleaved, the workers'
    batches are the single-worker stream, random parts included."""
    sources, names = _layers(tmp_path), ("Data", "ImageData", "HDF5Data")
    single = _pipelines(sources, names)
    shards = [_pipelines(sources, names, shard_index=i, num_shards=3) for i in range(3)]
    for name, pipe in single.items():
        stream = take(pipe, 9)
        parts = [take(shard[name], 3) for shard in shards]
        for g in range(9):
            for top in pipe.tops:
                np.testing.assert_array_equal(parts[g % 3][g // 3][top], stream[g][top],
                                              err_msg=f"{name} {top} batch {g}")
        resumed = take(shards[1][name], 1, start=2)[0]  # worker 1's 3rd batch = global batch 7
        for top in pipe.tops:
            np.testing.assert_array_equal(resumed[top], stream[7][top])


# -- Order and wrap-around ------------------------------------------------------


def test_data_reads_records_in_key_order_and_wraps_like_caffe(tmp_path):
    """13 records, batch 5: batch 2 is records 10, 11, 12, 0, 1 (Caffe restarts the
    cursor); values are (pixel - mean_value) * scale."""
    path, images, labels = raw_lmdb(tmp_path / "db", count=13, shape=(3, 4, 4))
    pipe = layer_pipeline(data_layer(path, 5, "scale: 0.25 mean_value: 10 mean_value: 20 "
                                              "mean_value: 30"), "TEST")
    expected = (images.astype(np.float32) - np.float32([10, 20, 30])[:, None, None]) * 0.25
    for b, batch in enumerate(take(pipe, 4)):
        records = [(5 * b + j) % 13 for j in range(5)]
        np.testing.assert_array_equal(to_caffe(batch["data"]), expected[records])
        np.testing.assert_array_equal(batch["label"], labels[records].astype(np.float32))


def test_rand_skip_starts_train_at_a_seeded_record_and_test_at_the_first(tmp_path):
    path, images, _ = raw_lmdb(tmp_path / "db", count=13, shape=(1, 2, 2))
    lay = data_layer(path, 13, extra="rand_skip: 12")
    train = [layer_pipeline(lay, "TRAIN", seed=s, data_format="channels_first") for s in range(6)]
    starts = set()
    for pipe in train:
        first = take(pipe, 1)[0]["data"]
        skip = next(i for i in range(13) if np.array_equal(first[0], images[i]))
        np.testing.assert_array_equal(first, images[[(skip + j) % 13 for j in range(13)]])
        starts.add(skip)
    assert len(starts) > 1
    test = take(layer_pipeline(lay, "TEST", data_format="channels_first"), 1)[0]["data"]
    np.testing.assert_array_equal(test, images)


# -- The API --------------------------------------------------------------------


def test_net_pipeline_combines_the_data_layers_of_the_phase(tmp_path):
    path, images, labels = raw_lmdb(tmp_path / "db", count=6, shape=(1, 3, 3))
    text = (f'name: "two" layer {{ name: "data" type: "Data" top: "data" top: "label" '
            f'include {{ phase: TRAIN }} data_param {{ source: "{path}" backend: LMDB '
            f'batch_size: 4 }} }}\n'
            f'layer {{ name: "test" type: "Data" top: "data" top: "label" '
            f'include {{ phase: TEST }} '
            f'data_param {{ source: "{path}" backend: LMDB batch_size: 2 }} }}\n'
            'layer { name: "aux" type: "DummyData" top: "aux" dummy_data_param { '
            'shape { dim: 4 dim: 2 } data_filler { type: "constant" value: 3 } } }\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
            'inner_product_param { num_output: 2 } }')
    pipe = net_pipeline(text, "TRAIN")
    assert pipe.layers == ("data", "aux") and pipe.tops == ("data", "label", "aux")
    assert pipe.shapes == {"data": (4, 3, 3, 1), "label": (4,), "aux": (4, 2)}
    assert pipe.batch_size == 4 and pipe.num_records == 6
    batch = take(pipe, 2)[1]
    np.testing.assert_array_equal(to_caffe(batch["data"]), images[[4, 5, 0, 1]])
    np.testing.assert_array_equal(batch["aux"], np.full((4, 2), 3.0, np.float32))
    with pytest.raises(LayerError, match="layer 'aux': data layers differ in batch size "
                                         "\\('test' has 2, 'aux' has 4\\)"):
        net_pipeline(text, "TEST")


def test_net_pipeline_refuses_a_net_without_data_layers_and_duplicate_tops(tmp_path):
    text = ('name: "plain" layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" '
            'inner_product_param { num_output: 2 } }')
    with pytest.raises(LayerError, match="layer 'plain': the net has no data layer in the TRAIN "
                                         "phase"):
        net_pipeline(text, "TRAIN")
    dummy = ('layer {{ name: "{}" type: "DummyData" top: "x" dummy_data_param {{ '
             'shape {{ dim: 2 dim: 3 }} }} }}\n')
    with pytest.raises(LayerError, match="layer 'b': top 'x' is also produced by data layer 'a'"):
        net_pipeline(dummy.format("a") + dummy.format("b"), "TRAIN")


def test_bad_arguments_raise_argument_errors(tmp_path):
    lay = layer('name: "d" type: "DummyData" top: "x" dummy_data_param { shape { dim: 2 } }')
    cases = [({"phase": "VAL"}, "`phase` must be 'TRAIN' or 'TEST', got 'VAL'"),
             ({"data_format": "NHWC"}, "`data_format` must be 'channels_last' or"),
             ({"num_shards": 0}, "`num_shards` must be >= 1, got 0"),
             ({"shard_index": 2, "num_shards": 2}, "`shard_index` must be < num_shards \\(2\\)"),
             ({"seed": 1.5}, "`seed` must be an integer, got 1.5"),
             ({"arrays": [1, 2]}, "`arrays` must be a dict")]
    for options, message in cases:
        with pytest.raises(ArgumentError, match=f"layer_pipeline: {message}"):
            layer_pipeline(lay, **options)
    with pytest.raises(ArgumentError, match="DataPipeline.dataset: `start_batch` must be >= 0"):
        layer_pipeline(lay).dataset(start_batch=-1)
    conv = layer('name: "c" type: "Convolution" bottom: "x" top: "y"')
    with pytest.raises(LayerError, match="layer 'c': type 'Convolution' is not a data layer"):
        layer_pipeline(conv)
    assert isinstance(layer_pipeline(lay, phase=caffe_pb2.TEST), DataPipeline)


def test_dataset_is_batched_float32_prefetched_and_endless(tmp_path):
    import tensorflow as tf

    path, _, _ = raw_lmdb(tmp_path / "db", count=3, shape=(1, 2, 2))
    pipe = layer_pipeline(data_layer(path, 2))
    ds = pipe.dataset()
    assert ds.cardinality() == tf.data.INFINITE_CARDINALITY
    assert ds.element_spec == {"data": tf.TensorSpec((2, 2, 2, 1), tf.float32),
                               "label": tf.TensorSpec((2,), tf.float32)}
    assert "DataPipeline(layers=['data'], batch_size=2, num_records=3" in repr(pipe)


# -- End to end: an imported TRAIN net trains from its own Data layer ----------


def test_imported_train_net_fits_from_its_data_layer_pipeline(tmp_path):
    """Generated LMDB -> Data layer -> conv/pool/ip/SoftmaxWithLoss + Accuracy:
    the pipeline's shapes, layout and dtypes are what the imported model takes."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 40)
    images = (rng.integers(0, 60, (40, 1, 12, 12)) + 60 * labels[:, None, None, None])
    images = images.astype(np.uint8)
    path = write_lmdb(tmp_path / "train_lmdb",
                      [raw_datum(im, lab) for im, lab in zip(images, labels)])
    prototxt = tmp_path / "train.prototxt"
    prototxt.write_text(_f.tiny_train_net("train_lmdb", "LMDB"))
    assert path == str(tmp_path / "train_lmdb")
    model = keras_caffe.import_model(prototxt, phase="TRAIN")  # source found next to the prototxt
    pipe = net_pipeline(prototxt, "TRAIN")
    assert [tuple(t.shape[1:]) for t in model.inputs] == [pipe.shapes["data"][1:]] == [(10, 10, 1)]
    model.compile(optimizer=keras_caffe.SGD(learning_rate=0.05, momentum=0.9),
                  **training_args(model))
    ds = pipe.dataset().map(lambda b: (b["data"], b["label"]))
    history = model.fit(ds, steps_per_epoch=5, epochs=2, verbose=0, shuffle=False)
    losses = history.history["loss"]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]

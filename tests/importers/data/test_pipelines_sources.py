"""What each data layer type reads, against numpy recomputations of Caffe's rules:
ImageData (PNG folders, resize, gray, shuffle), encoded and float Datums, HDF5
files, DummyData fillers, MemoryData and Input arrays, deprecated fields."""

import math
import warnings

import numpy as np
import pytest
import tensorflow as tf

from keras_caffe.importers.data import images
from keras_caffe.importers.data.pipelines import layer_pipeline, net_pipeline
from keras_caffe.proto import caffe_pb2


def _fixtures():
    """tests/support/pipeline_fixtures.py (tests/importers is on pythonpath)."""
    from support import pipeline_fixtures

    return pipeline_fixtures


_f = _fixtures()
data_layer, layer, png_bytes, raw_datum = _f.data_layer, _f.layer, _f.png_bytes, _f.raw_datum
random_images, take, to_caffe, write_lmdb = (_f.random_images, _f.take, _f.to_caffe,
                                             _f.write_lmdb)


# -- ImageData ------------------------------------------------------------------------


def _image_folder(tmp_path, count=7, shape=(3, 5, 6)):
    """PNGs 'pic i.png' (spaces in names) of BGR images, and list.txt."""
    pictures, labels = random_images(count, shape, seed=4)
    folder = tmp_path / "pics"
    folder.mkdir()
    for i, image in enumerate(pictures):
        (folder / f"pic {i}.png").write_bytes(png_bytes(image))
    (tmp_path / "list.txt").write_text("".join(f"pic {i}.png {labels[i]}\n" for i in range(count)))
    return pictures, labels


def _image_net(tmp_path, param, transform="", phase="TRAIN"):
    prototxt = tmp_path / "net.prototxt"
    prototxt.write_text(f'layer {{ name: "img" type: "ImageData" top: "data" top: "label" '
                        f'include {{ phase: {phase} }} transform_param {{ {transform} }} '
                        f'image_data_param {{ source: "list.txt" root_folder: "pics/" '
                        f'batch_size: 3 {param} }} }}')
    return prototxt


def test_image_data_reads_bgr_images_in_list_order_relative_to_the_prototxt(tmp_path,
                                                                             monkeypatch):
    """Relative list and images are found next to the prototxt (cwd elsewhere);
    values are (bgr - mean_value) * scale; labels are the list's."""
    pictures, labels = _image_folder(tmp_path)
    monkeypatch.chdir(tmp_path.parent)
    pipe = net_pipeline(_image_net(tmp_path, "", "scale: 0.5 mean_value: 10 mean_value: 20 "
                                                 "mean_value: 30"), "TRAIN")
    assert pipe.shapes == {"data": (3, 5, 6, 3), "label": (3,)} and pipe.num_records == 7
    expected = (pictures.astype(np.float32) - np.float32([10, 20, 30])[:, None, None]) * 0.5
    for b, batch in enumerate(take(pipe, 3)):
        records = [(3 * b + j) % 7 for j in range(3)]
        np.testing.assert_array_equal(to_caffe(batch["data"]), expected[records])
        np.testing.assert_array_equal(batch["label"], labels[records])


def test_image_data_resizes_with_opencv_linear_and_reads_gray(tmp_path):
    pictures, _ = _image_folder(tmp_path)
    pipe = net_pipeline(_image_net(tmp_path, "new_height: 9 new_width: 4 is_color: false"),
                        "TRAIN", data_format="channels_first")
    assert pipe.shapes["data"] == (3, 1, 9, 4)
    batch = take(pipe, 1)[0]["data"]
    for j in range(3):
        rgb = np.transpose(pictures[j], (1, 2, 0))[:, :, ::-1]
        gray = images.decode(tf.io.encode_png(rgb), "gray")  # libpng's gray, as OpenCV's imread
        resized = images.resize_linear(gray, 9, 4).numpy()
        np.testing.assert_array_equal(batch[j, 0], resized[:, :, 0].astype(np.float32))
        r, g, b = (rgb[..., i].astype(int) for i in range(3))
        direct = ((9797 * r + 19234 * g + 3737 * b) >> 15).astype(np.uint8)[..., None]
        np.testing.assert_array_equal(gray.numpy(), direct)


def test_image_data_shuffles_every_epoch_from_the_seed(tmp_path):
    _, labels = _image_folder(tmp_path, count=6)
    (tmp_path / "list.txt").write_text("".join(f"pic {i}.png {i}\n" for i in range(6)))
    prototxt = _image_net(tmp_path, "shuffle: true")

    def epochs(seed):
        got = np.concatenate([b["label"] for b in take(net_pipeline(prototxt, seed=seed), 8)])
        return got.reshape(4, 6).astype(int)

    first = epochs(None)
    for epoch in first:
        assert sorted(epoch) == list(range(6))
    assert len({tuple(e) for e in first}) > 1
    np.testing.assert_array_equal(epochs(None), first)
    assert not np.array_equal(epochs(5), first)
    unshuffled = np.concatenate([b["label"] for b in take(net_pipeline(_image_net(tmp_path, "")),
                                                          2)])
    np.testing.assert_array_equal(unshuffled, np.arange(6))


# -- Data: encoded and float Datums, deprecated fields ----------------------------------


@pytest.mark.filterwarnings("ignore:.*mirror is applied in TRAIN only:UserWarning")
def test_png_encoded_datums_equal_the_raw_ones(tmp_path):
    pictures, labels = random_images(5, (3, 4, 6), seed=8)
    raw = write_lmdb(tmp_path / "raw", [raw_datum(p, lab) for p, lab in zip(pictures, labels)])
    encoded = write_lmdb(tmp_path / "png", [caffe_pb2.Datum(data=png_bytes(p), label=int(lab),
                                                            encoded=True)
                                            for p, lab in zip(pictures, labels)])
    transform = "scale: 0.25 mean_value: 3 crop_size: 3"
    for phase, limit in (("TRAIN", 1 << 30), ("TEST", 1 << 30), ("TRAIN", 0)):
        a = take(layer_pipeline(data_layer(raw, 4, transform + " mirror: true"), phase), 3)
        b = take(layer_pipeline(data_layer(encoded, 4, transform + " mirror: true"), phase,
                                in_memory_limit=limit), 3)  # 0: read from the LMDB per batch
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x["data"], y["data"])
            np.testing.assert_array_equal(x["label"], y["label"])


def test_encoded_gray_stays_one_channel_unless_forced_to_color(tmp_path):
    gray = random_images(3, (1, 4, 4), seed=9)[0]
    path = write_lmdb(tmp_path / "gray", [caffe_pb2.Datum(data=png_bytes(g), encoded=True)
                                          for g in gray])
    native = take(layer_pipeline(data_layer(path, 3, tops=("data",)), "TEST"), 1)[0]["data"]
    np.testing.assert_array_equal(to_caffe(native), gray)
    for forced in (data_layer(path, 3, "force_color: true", tops=("data",)),
                   data_layer(path, 3, extra="force_encoded_color: true", tops=("data",))):
        color = take(layer_pipeline(forced, "TEST"), 1)[0]["data"]
        np.testing.assert_array_equal(to_caffe(color), np.repeat(gray, 3, axis=1))


def test_float_datums_and_deprecated_data_param_transform_fields(tmp_path):
    values = np.random.default_rng(2).normal(size=(4, 2, 3, 3)).astype(np.float32)
    path = write_lmdb(tmp_path / "f", [caffe_pb2.Datum(channels=2, height=3, width=3,
                                                       float_data=v.ravel(), label=i)
                                       for i, v in enumerate(values)])
    lay = data_layer(path, 4, extra="scale: 3 crop_size: 1")  # moved to transform_param by Caffe
    batch = take(layer_pipeline(lay, "TEST", data_format="channels_first"), 1)[0]
    np.testing.assert_array_equal(batch["data"], values[:, :, 1:2, 1:2] * np.float32(3))
    np.testing.assert_array_equal(batch["label"], np.arange(4, dtype=np.float32))


def test_mirror_in_test_is_not_applied_and_warns_once(tmp_path):
    pictures, _ = random_images(2, (1, 2, 3))
    path = write_lmdb(tmp_path / "db", [raw_datum(p, 0) for p in pictures])
    lay = data_layer(path, 2, "mirror: true", name="mirror_test_layer")
    with pytest.warns(UserWarning, match="layer 'mirror_test_layer': mirror is applied in "
                                         "TRAIN only"):
        pipe = layer_pipeline(lay, "TEST")
    np.testing.assert_array_equal(to_caffe(take(pipe, 1)[0]["data"]), pictures)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        layer_pipeline(lay, "TEST")


# -- HDF5Data ---------------------------------------------------------------------------


def _h5_files(tmp_path):
    import h5py

    rng = np.random.default_rng(3)
    data = {"a.h5": rng.normal(size=(5, 2, 3, 4)), "b.h5": rng.normal(size=(3, 2, 3, 4))}
    for i, (name, x) in enumerate(data.items()):
        with h5py.File(tmp_path / name, "w") as h5:
            h5["data"] = x
            h5["label"] = np.arange(len(x), dtype=np.int32) + 10 * i
    (tmp_path / "files.txt").write_text("a.h5\n  b.h5 ")  # names relative to the list file
    return np.concatenate(list(data.values())).astype(np.float32)


def test_hdf5_rows_in_file_order_wrapping_across_files(tmp_path, monkeypatch):
    rows = _h5_files(tmp_path)
    labels = np.float32([0, 1, 2, 3, 4, 10, 11, 12])
    monkeypatch.chdir(tmp_path.parent)
    lay = layer(f'name: "h5" type: "HDF5Data" top: "data" top: "label" hdf5_data_param {{ '
                f'source: "{tmp_path / "files.txt"}" batch_size: 3 }}')
    for limit in (1 << 30, 0):  # in memory, and read from the files per batch
        pipe = layer_pipeline(lay, in_memory_limit=limit)
        assert pipe.shapes == {"data": (3, 3, 4, 2), "label": (3,)} and pipe.num_records == 8
        for b, batch in enumerate(take(pipe, 4)):
            records = [(3 * b + j) % 8 for j in range(3)]
            np.testing.assert_array_equal(to_caffe(batch["data"]), rows[records])
            np.testing.assert_array_equal(batch["label"], labels[records])


def test_hdf5_shuffle_permutes_files_and_rows_every_epoch(tmp_path):
    _h5_files(tmp_path)
    lay = layer(f'name: "h5" type: "HDF5Data" top: "label" hdf5_data_param {{ '
                f'source: "{tmp_path / "files.txt"}" batch_size: 4 shuffle: true }}')
    got = np.concatenate([b["label"] for b in take(layer_pipeline(lay), 8)]).reshape(4, 8)
    for epoch in got.astype(int):
        assert sorted(epoch) == [0, 1, 2, 3, 4, 10, 11, 12]
        files = [v // 10 for v in epoch]
        assert files in ([0] * 5 + [1] * 3, [1] * 3 + [0] * 5)  # a file's rows stay together
    assert len({tuple(e) for e in got}) > 1


# -- DummyData, MemoryData, Input -----------------------------------------------------


def test_dummy_data_fillers(tmp_path):
    lay = layer('name: "d" type: "DummyData" top: "c" top: "g" top: "u" top: "x" top: "p" '
                'top: "b" dummy_data_param { '
                'shape { dim: 2 dim: 3 } shape { dim: 500 dim: 40 } shape { dim: 100 dim: 50 } '
                'shape { dim: 10 dim: 6 dim: 5 } shape { dim: 4 dim: 7 } '
                'shape { dim: 1 dim: 1 dim: 4 dim: 4 } '
                'data_filler { type: "constant" value: 2.5 } '
                'data_filler { type: "gaussian" mean: 1 std: 3 } '
                'data_filler { type: "uniform" min: -2 max: 5 } '
                'data_filler { type: "xavier" } data_filler { type: "positive_unitball" } '
                'data_filler { type: "bilinear" } }')
    pipe = layer_pipeline(lay, data_format="channels_first")
    first, second = take(pipe, 2)
    np.testing.assert_array_equal(first["c"], np.full((2, 3), 2.5, np.float32))
    np.testing.assert_array_equal(second["c"], first["c"])
    assert abs(first["g"].mean() - 1) < 0.05 and abs(first["g"].std() - 3) < 0.05
    assert not np.array_equal(first["g"], second["g"])
    assert first["u"].min() >= -2 and first["u"].max() < 5 and abs(first["u"].mean() - 1.5) < 0.1
    assert np.abs(first["x"]).max() <= np.sqrt(3 / 30) and first["x"].std() > 0.1  # fan_in 6*5
    np.testing.assert_allclose(first["p"].sum(axis=1), np.ones(4), rtol=1e-6)
    profile = np.float32([0.25, 0.75, 0.75, 0.25])  # f = 2, c = 0.75
    np.testing.assert_allclose(first["b"][0, 0], np.outer(profile, profile))
    other = take(layer_pipeline(lay, seed=3, data_format="channels_first"), 1)[0]
    assert not np.array_equal(other["g"], first["g"])
    legacy = layer('name: "l" type: "DummyData" top: "a" top: "b" dummy_data_param { num: 2 '
                   'channels: 3 channels: 1 height: 4 width: 5 }')
    assert layer_pipeline(legacy).shapes == {"a": (2, 4, 5, 3), "b": (2, 4, 5, 1)}


@pytest.mark.parametrize("filler, mean, std", [
    ('type: "gaussian" mean: 1 std: 3', 1.0, 3.0),
    ('type: "msra"', 0.0, math.sqrt(2.0 / 40)),  # fan_in: count / num = 40
])
def test_random_normal_fillers_are_normal(filler, mean, std):
    """The Box-Muller values (``stateless_fill._normal``) against the normal
    CDF (``math.erf``): the Kolmogorov-Smirnov distance of 40,000 values
    under 0.012 (the 1% critical value is 1.63 / sqrt(n) = 0.0082 for one
    sample; the bound leaves room for the seed), the moments and the
    fractions beyond 1, 2 and 3 standard deviations as a normal has them,
    and the cos and sin halves of each pair uncorrelated."""
    lay = layer('name: "d" type: "DummyData" top: "g" dummy_data_param { '
                f'shape {{ dim: 1000 dim: 40 }} data_filler {{ {filler} }} }}')
    values = take(layer_pipeline(lay), 1)[0]["g"].astype(np.float64).ravel()
    z = np.sort((values - mean) / std)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2.0)))
    n = z.size
    distance = max(np.max(np.arange(1, n + 1) / n - cdf), np.max(cdf - np.arange(n) / n))
    assert distance < 0.012
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02
    for k, tail in ((1, 0.3173), (2, 0.0455), (3, 0.0027)):
        assert abs(np.mean(np.abs(z) > k) - tail) < max(0.01, tail / 4), k
    halves = ((values - mean) / std)[: n // 2], ((values - mean) / std)[n // 2:]
    assert abs(np.corrcoef(*halves)[0, 1]) < 0.03


def test_dummy_data_gives_both_layouts_the_same_values():
    """The fillers draw channels last whatever the layout (no transpose per batch
    for the default one): each Caffe position (n, c, h, w) gets the same value in
    both layouts, for the random fillers, a row-normalized one and bilinear."""
    lay = layer('name: "d" type: "DummyData" top: "g" top: "s" top: "p" top: "b" top: "m" '
                'dummy_data_param { shape { dim: 3 dim: 4 dim: 5 dim: 6 } '
                'shape { dim: 2 dim: 3 dim: 7 } shape { dim: 4 dim: 2 dim: 3 dim: 3 } '
                'shape { dim: 2 dim: 3 dim: 4 dim: 4 } shape { dim: 2 dim: 5 } '
                'data_filler { type: "gaussian" std: 2 } '
                'data_filler { type: "gaussian" sparse: 1 } '
                'data_filler { type: "positive_unitball" } data_filler { type: "bilinear" } '
                'data_filler { type: "msra" } }')
    last = take(layer_pipeline(lay, data_format="channels_last"), 2)
    first = take(layer_pipeline(lay, data_format="channels_first"), 2)
    for b_last, b_first in zip(last, first):
        np.testing.assert_array_equal(b_last["g"], b_first["g"].transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(b_last["s"], b_first["s"].transpose(0, 2, 1))
        np.testing.assert_array_equal(b_last["p"], b_first["p"].transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(b_last["b"], b_first["b"].transpose(0, 2, 3, 1))
        np.testing.assert_array_equal(b_last["m"], b_first["m"])
    assert b_last["g"].shape == (3, 5, 6, 4) and b_first["g"].shape == (3, 4, 5, 6)
    assert not np.array_equal(last[0]["g"], last[1]["g"])
    # sparse 1 of num 2: half of the values kept (Caffe's sparse / num)
    assert 0.3 < np.mean(first[0]["s"] != 0) < 0.7
    np.testing.assert_allclose(first[0]["p"].reshape(4, -1).sum(axis=1), np.ones(4), rtol=1e-6)
    profile = np.float32([0.25, 0.75, 0.75, 0.25])  # f = 2, c = 0.75
    np.testing.assert_allclose(first[0]["b"][1, 2], np.outer(profile, profile))


def test_memory_data_and_input_serve_the_arrays_in_order_wrapping(tmp_path):
    data = np.random.default_rng(1).normal(size=(7, 2, 3, 4)).astype(np.float32)
    memory = layer('name: "m" type: "MemoryData" top: "data" top: "label" transform_param { '
                   'scale: 9 } memory_data_param { batch_size: 3 channels: 2 height: 3 width: 4 }')
    with pytest.warns(UserWarning, match="MemoryData does not transform array data"):
        pipe = layer_pipeline(memory, arrays={"data": data, "label": np.arange(7)})
    assert pipe.shapes == {"data": (3, 3, 4, 2), "label": (3,)} and pipe.num_records == 7
    for b, batch in enumerate(take(pipe, 4)):
        records = [(3 * b + j) % 7 for j in range(3)]
        np.testing.assert_array_equal(to_caffe(batch["data"]), data[records])
        np.testing.assert_array_equal(batch["label"], np.float32(records))
    inputs = layer('name: "in" type: "Input" top: "x" top: "y" input_param { '
                   'shape { dim: 2 dim: 2 dim: 3 dim: 4 } shape { dim: 2 dim: 5 } }')
    y = np.arange(35).reshape(7, 5)
    pipe = layer_pipeline(inputs, arrays={"x": data, "y": y}, data_format="channels_first")
    batch = take(pipe, 4)[3]
    np.testing.assert_array_equal(batch["x"], data[[6, 0]])
    np.testing.assert_array_equal(batch["y"], np.float32(y[[6, 0]]))

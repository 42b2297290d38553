"""Bad input to the data-layer pipelines: each raises keras-caffe's error naming the
layer and what is wrong, when the pipeline is created wherever that is possible,
else from the running pipeline (``DataPipeline.errors()`` turns it back into the
LayerError)."""

import re

import numpy as np
import pytest
import tensorflow as tf

from keras_caffe.errors import KerasCaffeError, LayerError
from keras_caffe.importers.data.pipelines import DataPipeline, layer_pipeline, pipeline_errors
from keras_caffe.proto import caffe_pb2


def _fixtures():
    """tests/support/pipeline_fixtures.py (tests/importers is on pythonpath)."""
    from support import pipeline_fixtures

    return pipeline_fixtures


_f = _fixtures()
data_layer, layer, png_bytes, raw_datum = _f.data_layer, _f.layer, _f.png_bytes, _f.raw_datum
raw_lmdb, take, write_lmdb = _f.raw_lmdb, _f.take, _f.write_lmdb


def _raises(message, fn, *args, **kwargs):
    with pytest.raises(LayerError, match=message) as info:
        fn(*args, **kwargs)
    return info.value


# -- Data (LMDB) ------------------------------------------------------------------


def test_missing_empty_and_unreadable_lmdb(tmp_path):
    missing = tmp_path / "nowhere_lmdb"
    _raises(f"layer 'data': Data source '{re.escape(str(missing))}' not found",
            layer_pipeline, data_layer(missing, 4))
    write_lmdb(tmp_path / "empty_lmdb", [])
    _raises(f"layer 'data': LMDB '{re.escape(str(tmp_path / 'empty_lmdb'))}' is empty",
            layer_pipeline, data_layer(tmp_path / "empty_lmdb", 4))
    (tmp_path / "junk_lmdb").mkdir()
    (tmp_path / "junk_lmdb" / "data.mdb").write_bytes(b"not an lmdb" * 500)
    _raises(f"layer 'data': cannot open LMDB '{re.escape(str(tmp_path / 'junk_lmdb'))}'",
            layer_pipeline, data_layer(tmp_path / "junk_lmdb", 4))
    write_lmdb(tmp_path / "text_lmdb", [b"\xff\xff\xff garbage"])
    _raises("record '00000000' is not a Caffe Datum", layer_pipeline,
            data_layer(tmp_path / "text_lmdb", 4))


def _bad_records(tmp_path):
    """7 good 2x3x3 records, a 2x4x3 one under key '00000007', then a short one."""
    images = np.zeros((7, 2, 3, 3), np.uint8)
    datums = [raw_datum(im, 1) for im in images]
    datums.append(raw_datum(np.zeros((2, 4, 3), np.uint8), 1))
    short = raw_datum(np.zeros((2, 3, 3), np.uint8), 1)
    short.data = short.data[:-2]
    datums.append(short)
    return write_lmdb(tmp_path / "bad_lmdb", datums)


def test_a_wrong_size_record_is_found_when_the_pipeline_is_created(tmp_path):
    """A database that fits in memory is checked completely up front."""
    path = _bad_records(tmp_path)
    _raises(f"layer 'data': LMDB '{re.escape(path)}' record '00000007' is 2x4x3 but the first "
            "record is 2x3x3", layer_pipeline, data_layer(path, 4))
    datums = [raw_datum(np.zeros((2, 3, 3), np.uint8), 0)] * 2
    short = raw_datum(np.zeros((2, 3, 3), np.uint8), 1)
    short.data = short.data[:-2]
    path = write_lmdb(tmp_path / "short_lmdb", [*datums, short])
    _raises("record '00000002' holds 16 bytes of data but channels x height x width is "
            "2x3x3 = 18", layer_pipeline, data_layer(path, 4))
    first = caffe_pb2.Datum(channels=1, height=2, width=2, float_data=[1.0, 2.0, 3.0])
    path = write_lmdb(tmp_path / "float_lmdb", [first])
    _raises("record '00000000' holds 3 float_data values but channels x height x width is "
            "1x2x2 = 4", layer_pipeline, data_layer(path, 4))


def test_a_wrong_size_record_in_a_streamed_database_is_reported_while_reading(tmp_path):
    """Too big for memory (here: in_memory_limit=0): the record is only seen while
    reading. The user gets the LayerError (with DataPipeline.errors()), or TensorFlow's
    error carrying the same message."""
    path = _bad_records(tmp_path)
    pipe = layer_pipeline(data_layer(path, 4), in_memory_limit=0)
    first = take(pipe, 1)[0]
    assert first["data"].shape == (4, 3, 3, 2)
    message = (f"layer 'data': LMDB '{path}' record '00000007' is 2x4x3 but the first record "
               "is 2x3x3")
    with pytest.raises(LayerError) as info:
        with DataPipeline.errors():
            take(pipe, 2)
    assert str(info.value) == message and info.value.layer == "data"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(message)):
        take(pipe, 2)
    with pytest.raises(LayerError, match="record '00000008' holds 16 bytes"):
        with pipeline_errors():
            take(pipe, 1, start=2)
    import keras

    model = keras.Sequential([keras.Input((3, 3, 2)), keras.layers.Flatten(),
                              keras.layers.Dense(2)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    with pytest.raises(LayerError, match="record '00000007' is 2x4x3"):  # what fit shows
        with DataPipeline.errors():
            model.fit(pipe.dataset().map(lambda b: (b["data"], b["label"])), steps_per_epoch=3,
                      verbose=0, shuffle=False)


def test_mean_file_of_another_shape_both_means_and_mean_value_count(tmp_path):
    path, _, _ = raw_lmdb(tmp_path / "db", count=3, shape=(3, 8, 8))
    mean = tmp_path / "mean.binaryproto"
    blob = caffe_pb2.BlobProto(num=1, channels=3, height=6, width=8, data=[0.0] * 144)
    mean.write_bytes(blob.SerializeToString())
    _raises(f"layer 'data': mean_file '{re.escape(str(mean))}' has shape 3x6x8 but the data is "
            "3x8x8", layer_pipeline, data_layer(path, 2, f'mean_file: "{mean}"'))
    _raises("layer 'data': cannot specify mean_file and mean_value at the same time",
            layer_pipeline, data_layer(path, 2, f'mean_file: "{mean}" mean_value: 1'))
    _raises("layer 'data': 2 mean_value\\(s\\) for 3 channel\\(s\\): give 1 or 3",
            layer_pipeline, data_layer(path, 2, "mean_value: 1 mean_value: 2"))
    _raises("layer 'data': Data mean_file 'no_mean.binaryproto' not found",
            layer_pipeline, data_layer(path, 2, 'mean_file: "no_mean.binaryproto"'))
    (tmp_path / "junk.binaryproto").write_bytes(b"\xff" * 10)
    _raises("layer 'data': cannot read mean_file .*junk.binaryproto", layer_pipeline,
            data_layer(path, 2, f'mean_file: "{tmp_path / "junk.binaryproto"}"'))


def test_crop_larger_than_the_image_and_bad_batch_size(tmp_path):
    path, _, _ = raw_lmdb(tmp_path / "db", count=3, shape=(1, 8, 6))
    _raises("layer 'data': crop_size 7 is larger than the 8x6 image", layer_pipeline,
            data_layer(path, 2, "crop_size: 7"))
    _raises("layer 'data': batch_size must be positive, got 0", layer_pipeline,
            data_layer(path, 0))
    _raises("layer 'data': Data has 1 to 2 tops, got 3", layer_pipeline,
            data_layer(path, 2, tops=("a", "b", "c")))


def test_encoded_record_that_is_no_image_or_of_another_size(tmp_path):
    good = caffe_pb2.Datum(data=png_bytes(np.zeros((3, 4, 4), np.uint8)), encoded=True)
    bigger = caffe_pb2.Datum(data=png_bytes(np.zeros((3, 5, 4), np.uint8)), encoded=True)
    junk = caffe_pb2.Datum(data=b"GIF? no, just bytes", encoded=True)
    path = write_lmdb(tmp_path / "a", [junk, good])
    _raises("layer 'data': cannot decode LMDB .* record '00000000'", layer_pipeline,
            data_layer(path, 2))
    path = write_lmdb(tmp_path / "b", [good, good, bigger, good])
    pipe = layer_pipeline(data_layer(path, 2))
    take(pipe, 1)
    with pytest.raises(LayerError, match="LMDB .* record '00000002' decodes to 5x4x3 \\(HxWxC\\); "
                                         "it must be 4x4x3 like the first record"):
        with pipeline_errors():
            take(pipe, 1, start=1)
    _raises("record '00000001' is raw but the first record is encoded", layer_pipeline,
            data_layer(write_lmdb(tmp_path / "c", [good, raw_datum(np.zeros((3, 4, 4)), 0)]), 2))


# -- ImageData ----------------------------------------------------------------------


def _image_layer(source, root="", extra="", transform=""):
    return layer(f'name: "img" type: "ImageData" top: "data" top: "label" transform_param {{ '
                 f'{transform} }} image_data_param {{ source: "{source}" root_folder: "{root}" '
                 f'batch_size: 2 {extra} }}')


def test_image_list_missing_empty_or_malformed(tmp_path):
    _raises("layer 'img': ImageData source 'none.txt' not found", layer_pipeline,
            _image_layer("none.txt"))
    (tmp_path / "empty.txt").write_text("\n  \n")
    _raises("ImageData source '.*empty.txt' lists no images", layer_pipeline,
            _image_layer(tmp_path / "empty.txt"))
    (tmp_path / "bad.txt").write_text("a.png 1\nb.png\n")
    _raises("bad.txt:2: expected 'image_path label' \\(an integer label after the last space\\), "
            "got 'b.png'", layer_pipeline, _image_layer(tmp_path / "bad.txt"))
    (tmp_path / "one.txt").write_text("missing.png 3\n")
    _raises("layer 'img': image 'missing.png' \\(the first listed in '.*one.txt'\\) not found",
            layer_pipeline, _image_layer(tmp_path / "one.txt"))
    (tmp_path / "x.png").write_bytes(b"this is text")
    (tmp_path / "text.txt").write_text("x.png 3\n")
    _raises("layer 'img': cannot decode image '.*x.png': not a JPEG, PNG, GIF or BMP image",
            layer_pipeline, _image_layer(tmp_path / "text.txt"))
    _raises("new_height and new_width must be set together \\(got 5 and 0\\)", layer_pipeline,
            _image_layer(tmp_path / "text.txt", extra="new_height: 5"))


def test_image_missing_or_of_another_size_while_reading(tmp_path):
    image = np.zeros((3, 4, 4), np.uint8)
    (tmp_path / "a.png").write_bytes(png_bytes(image))
    (tmp_path / "b.png").write_bytes(png_bytes(np.zeros((3, 4, 6), np.uint8)))
    (tmp_path / "c.png").write_text("text, not an image")
    (tmp_path / "list.txt").write_text("a.png 0\na.png 1\ngone.png 2\na.png 3\nb.png 4\na.png 5\n"
                                       "a.png 6\nc.png 7\n")
    pipe = layer_pipeline(_image_layer(tmp_path / "list.txt", f"{tmp_path}/"))
    assert take(pipe, 1)[0]["label"].tolist() == [0.0, 1.0]
    with pytest.raises(LayerError, match="layer 'img': cannot read image '.*gone.png': No such "
                                         "file or directory"):
        with pipeline_errors():
            take(pipe, 1, start=1)
    with pytest.raises(LayerError, match="layer 'img': image '.*b.png' decodes to 4x6x3 "
                                         "\\(HxWxC\\); it must be 4x4x3 like the first record"):
        with pipeline_errors():
            take(pipe, 1, start=2)
    with pytest.raises(LayerError, match="layer 'img': image '.*c.png' is not a JPEG, PNG, GIF "
                                         "or BMP image"):
        with pipeline_errors():
            take(pipe, 1, start=3)
    cropped = layer_pipeline(_image_layer(tmp_path / "list.txt", f"{tmp_path}/",
                                          transform="crop_size: 4"), "TEST")
    assert take(cropped, 1, start=2)[0]["data"].shape == (2, 4, 4, 3)  # larger is fine with crop
    _raises("layer 'img': rand_skip 9 can skip past the 8 records", layer_pipeline,
            _image_layer(tmp_path / "list.txt", f"{tmp_path}/", extra="rand_skip: 9"))


# -- HDF5Data -------------------------------------------------------------------------


def _h5(path, **datasets):
    import h5py

    with h5py.File(path, "w") as h5:
        for name, value in datasets.items():
            h5[name] = value
    return str(path)


def _hdf5_layer(source, transform=""):
    return layer(f'name: "h5" type: "HDF5Data" top: "data" top: "label" {transform} '
                 f'hdf5_data_param {{ source: "{source}" batch_size: 2 }}')


def test_hdf5_sources_and_files_checked_up_front(tmp_path):
    _raises("layer 'h5': HDF5Data source 'none.txt' not found", layer_pipeline,
            _hdf5_layer("none.txt"))
    (tmp_path / "empty.txt").write_text("")
    _raises("HDF5Data source '.*empty.txt' lists no files", layer_pipeline,
            _hdf5_layer(tmp_path / "empty.txt"))
    (tmp_path / "list.txt").write_text("gone.h5\n")
    _raises("layer 'h5': HDF5 file 'gone.h5' listed in '.*list.txt' not found", layer_pipeline,
            _hdf5_layer(tmp_path / "list.txt"))
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    (tmp_path / "list.txt").write_text("junk.h5\n")
    _raises("layer 'h5': cannot read HDF5 file '.*junk.h5'", layer_pipeline,
            _hdf5_layer(tmp_path / "list.txt"))
    _h5(tmp_path / "nolabel.h5", data=np.zeros((4, 3)))
    (tmp_path / "list.txt").write_text("nolabel.h5\n")
    _raises("layer 'h5': HDF5 file '.*nolabel.h5' has no dataset 'label' for the layer's top",
            layer_pipeline, _hdf5_layer(tmp_path / "list.txt"))
    _h5(tmp_path / "rows.h5", data=np.zeros((4, 3)), label=np.zeros(5))
    (tmp_path / "list.txt").write_text("rows.h5\n")
    _raises("HDF5 file '.*rows.h5': datasets differ in their number of rows \\('data' has 4, "
            "'label' has 5\\)", layer_pipeline, _hdf5_layer(tmp_path / "list.txt"))
    _h5(tmp_path / "a.h5", data=np.zeros((4, 3)), label=np.zeros(4))
    _h5(tmp_path / "b.h5", data=np.zeros((4, 2)), label=np.zeros(4))
    (tmp_path / "list.txt").write_text("a.h5 b.h5\n")
    _raises("HDF5 file '.*b.h5': dataset 'data' has rows of shape \\(2,\\) but the first file's "
            "are \\(3,\\)", layer_pipeline, _hdf5_layer(tmp_path / "list.txt"))
    (tmp_path / "list.txt").write_text("a.h5\n")
    _raises("layer 'h5': HDF5Data does not transform data; remove transform_param",
            layer_pipeline, _hdf5_layer(tmp_path / "list.txt", "transform_param { scale: 2 }"))
    _h5(tmp_path / "none.h5", data=np.zeros((0, 3)), label=np.zeros(0))
    (tmp_path / "list.txt").write_text("none.h5\n")
    _raises("HDF5 file '.*none.h5' has no rows", layer_pipeline, _hdf5_layer(tmp_path / "list.txt"))


# -- MemoryData, Input, DummyData ------------------------------------------------------


def test_memory_data_and_input_need_their_arrays():
    memory = layer('name: "m" type: "MemoryData" top: "data" top: "label" memory_data_param { '
                   'batch_size: 2 channels: 1 height: 2 width: 3 }')
    _raises("layer 'm': MemoryData reads no source: pass arrays=\\{'data': \\(N, 1, 2, 3\\) "
            "array, 'label': \\(N,\\) array\\}", layer_pipeline, memory)
    _raises("layer 'm': arrays has no entry for top\\(s\\) 'label'", layer_pipeline, memory,
            arrays={"data": np.zeros((4, 1, 2, 3))})
    _raises("layer 'm': arrays\\['data'\\] has shape \\(4, 2, 3\\); expected \\(N, 1, 2, 3\\) in "
            "Caffe's layout", layer_pipeline, memory,
            arrays={"data": np.zeros((4, 2, 3)), "label": np.zeros(4)})
    _raises("layer 'm': arrays differ in length: 'data' has 4, 'label' has 3", layer_pipeline,
            memory, arrays={"data": np.zeros((4, 1, 2, 3)), "label": np.zeros(3)})
    _raises("arrays\\['label'\\] is not numeric", layer_pipeline, memory,
            arrays={"data": np.zeros((1, 1, 2, 3)), "label": ["x"]})
    inputs = layer('name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 5 } }')
    _raises("layer 'in': Input reads no source: pass arrays=\\{'x': \\(N, 5\\) array\\}",
            layer_pipeline, inputs)
    _raises("arrays\\['x'\\] is empty", layer_pipeline, inputs, arrays={"x": np.zeros((0, 5))})


def test_dummy_data_fillers_and_shapes_as_caffe_checks_them():
    text = ('name: "d" type: "DummyData" top: "a" top: "b" dummy_data_param {{ {} }}')
    cases = [('shape { dim: 2 } data_filler { type: "magic" }', "unknown filler type 'magic'"),
             ('shape { dim: 2 } data_filler { } data_filler { } data_filler { }',
              "give 0, 1 or 2 data_filler\\(s\\), got 3"),
             ('shape { dim: 2 } shape { dim: 2 } shape { dim: 3 }',
              "give 'shape' once or once per top \\(2\\), got 3"),
             ('shape { dim: 2 } num: 2', "both shape and the legacy num/channels/height/width"),
             ('shape { dim: 2 dim: 0 }', "top 'a' has shape \\(2, 0\\); every dimension must be "
                                        "positive"),
             ('shape { dim: 2 dim: 3 } data_filler { type: "bilinear" }',
              "the bilinear filler needs a 4-D blob with height == width")]
    for body, message in cases:
        _raises(f"layer 'd': {message}", layer_pipeline, layer(text.format(body)))


def test_every_pipeline_error_is_a_keras_caffe_value_error():
    assert issubclass(LayerError, KerasCaffeError) and issubclass(LayerError, ValueError)


def test_an_nvidia_caffe_mean_file_of_raw_float16_subtracts_the_same_mean(tmp_path):
    """NVIDIA/caffe writes ``raw_data`` of ``raw_data_type``, not ``data``."""
    path, images, _ = raw_lmdb(tmp_path / "db", count=2, shape=(2, 4, 3))
    mean = (np.arange(24).reshape(2, 4, 3) % 5) * 0.5          # exact in float16
    nv = caffe_pb2.BlobProto(raw_data_type=caffe_pb2.BlobProto.FLOAT16,
                             raw_data=mean.astype("<f2").tobytes())
    nv.shape.dim.extend([1, 2, 4, 3])
    (tmp_path / "mean.binaryproto").write_bytes(nv.SerializeToString())
    pipe = layer_pipeline(data_layer(path, 2, f'mean_file: "{tmp_path / "mean.binaryproto"}"'),
                          data_format="channels_first")
    np.testing.assert_array_equal(take(pipe, 1)[0]["data"], images[:2] - mean)
    nv.raw_data = b"\0" * 3
    (tmp_path / "mean.binaryproto").write_bytes(nv.SerializeToString())
    _raises("layer 'data': cannot read mean_file .*mean.binaryproto: raw_data of 3 bytes is not "
            "a whole number of FLOAT16 values", layer_pipeline,
            data_layer(path, 2, f'mean_file: "{tmp_path / "mean.binaryproto"}"'))


@pytest.mark.parametrize("layer_type", ["ImageData", "DenseImageData", "VideoData"])
def test_a_list_file_that_cannot_be_read_names_the_layer_type_and_file(tmp_path, layer_type):
    from keras_caffe.importers.data.records import list_lines

    (tmp_path / "list.txt").write_text("a 1\n\n  \nb 2\n")
    one = caffe_pb2.LayerParameter(name="data", type=layer_type)
    assert list_lines(one, str(tmp_path / "list.txt")) == [(1, "a 1"), (4, "b 2")]
    _raises(f"layer 'data': cannot read {layer_type} source '{re.escape(str(tmp_path))}': "
            "Is a directory", list_lines, one, str(tmp_path))

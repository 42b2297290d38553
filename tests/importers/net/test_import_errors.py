"""Bad nets and weights: the project's own CaffeImportError, naming the problem."""

import resource
import shutil

import numpy as np
import pytest

import keras_caffe
from keras_caffe.backends import is_tensorflow
from keras_caffe.errors import (
    CaffeImportError,
    GraphError,
    LayerError,
    ProtoParseError,
    UnknownLayerError,
    UnsafeLayerError,
    WeightsError,
)
from keras_caffe.importers import registered_types

INPUT = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }\n'


def conv(name, bottom, top=None, num_output=4, kernel=3):
    return (f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{top or name}" '
            f'convolution_param {{ num_output: {num_output} kernel_size: {kernel} }} }}\n')


def test_every_error_is_a_value_error():
    for cls in (GraphError, LayerError, ProtoParseError, UnknownLayerError, UnsafeLayerError,
                WeightsError):
        assert issubclass(cls, CaffeImportError) and issubclass(cls, ValueError)


def test_malformed_prototxt_names_file_line_column(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(INPUT + 'layer {\n  name: "conv1"\n  type: "Convolution"\n  bottom "data"\n}\n')
    with pytest.raises(ProtoParseError) as info:
        keras_caffe.import_model(path)
    assert (info.value.line, info.value.column) == (5, 10)
    assert str(info.value).startswith(f"{path}:5:10: ")


def test_unknown_types_are_all_listed_at_once():
    text = INPUT + conv("c", "data") + (
        'layer { name: "a" type: "Frobnicate" bottom: "c" top: "a" }\n'
        'layer { name: "b" type: "Quux" bottom: "a" top: "b" }\n'
        'layer { name: "d" type: "Frobnicate" bottom: "b" top: "d" }\n')
    with pytest.raises(UnknownLayerError) as info:
        keras_caffe.import_model(text)
    assert info.value.types == ["Frobnicate", "Quux"]
    message = str(info.value)
    assert message.startswith("<prototxt text>: unsupported layer type(s) Frobnicate, Quux; supported: ")
    assert ", ".join(registered_types()) in message


def test_python_layer_is_refused_without_running_anything():
    text = INPUT + ('layer { name: "py" type: "Python" bottom: "data" top: "py" '
                    'python_param { module: "os" layer: "system" param_str: "touch /tmp/pwned" } }\n')
    with pytest.raises(UnsafeLayerError, match="Python layer\\(s\\) 'py' would run user code"):
        keras_caffe.import_model(text)


def test_python_layer_and_unknown_type_are_named_in_one_error():
    """A net with a Python layer and an unknown type: one error names both
    (the README: a net's unknown types are all reported in one error)."""
    text = INPUT + ('layer { name: "py" type: "Python" bottom: "data" top: "py" '
                    'python_param { module: "m" layer: "L" } }\n'
                    'layer { name: "f" type: "Frobnicate" bottom: "py" top: "f" }\n')
    with pytest.raises(UnknownLayerError) as info:
        keras_caffe.import_model(text)
    assert info.value.types == ["Frobnicate"]
    assert str(info.value) == (
        "<prototxt text>: unsupported layer type(s) Frobnicate; Python layer(s) 'py' would "
        "run user code named in the model file; keras-caffe never executes code from a model "
        f"file; supported: {', '.join(registered_types())}")


def test_bottom_nobody_produces():
    with pytest.raises(GraphError, match="layer 'c2' \\(Convolution\\) takes bottom 'missing', "
                                         "which no layer produces"):
        keras_caffe.import_model(INPUT + conv("c1", "data") + conv("c2", "missing"))


def test_cycle_is_named():
    text = INPUT + conv("a", "data_b", "a_out") + conv("b", "a_out", "data_b")
    with pytest.raises(GraphError, match="the net has a cycle: (a -> b -> a|b -> a -> b)"):
        keras_caffe.import_model(text)


def test_layer_out_of_order_is_not_a_cycle():
    text = INPUT + conv("late", "early_out") + conv("early", "data", "early_out")
    with pytest.raises(GraphError, match="takes bottom 'early_out' before layer 'early' produces it"):
        keras_caffe.import_model(text)


def test_shape_that_cannot_be_computed_names_the_layer():
    with pytest.raises(LayerError, match="layer 'big'"):
        keras_caffe.import_model(INPUT + conv("big", "data", kernel=11))


def test_net_without_input():
    with pytest.raises(GraphError, match="no Input layer"):
        keras_caffe.import_model('name: "empty"')


def test_absurd_sizes_are_refused_before_allocating():
    """2e9 outputs x 27 inputs would be 216 GB of weights: the size check runs
    before the Keras layer exists, and the process's peak memory stays put."""
    text = INPUT + conv("huge", "data", num_output=2000000000)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(LayerError, match="layer 'huge': weight blob 0 of 54,000,000,000 values exceed"):
        keras_caffe.import_model(text)
    ip = INPUT + ('layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" '
                  'inner_product_param { num_output: 2000000000 } }\n')
    with pytest.raises(LayerError, match="layer 'fc': weight blob 0 of 384,000,000,000 values"):
        keras_caffe.import_model(ip)
    huge_input = 'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 dim: 100000 dim: 100000 } } }'
    # the memory budget (112 GiB for the batch) refuses it first on machines with less
    with pytest.raises(LayerError, match=r"layer 'data': (input 'data' per sample of "
                       r"30,000,000,000|\(Input\) needs 111.76 GiB at once)"):
        keras_caffe.import_model(huge_input)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
    assert grown_kib < 200_000  # well under 1 GB, let alone 216 GB


@pytest.fixture
def lenet(golden):
    return golden / "forward" / "lenet"


def test_blob_shape_mismatch_names_layer_index_and_shapes(lenet, tmp_path):
    from keras_caffe.importers.net.export import write_atomically
    from keras_caffe.importers.net.weights import array_to_blob
    from keras_caffe.proto import caffe_pb2

    net = caffe_pb2.NetParameter()
    layer = net.layer.add(name="conv1", type="Convolution")
    layer.blobs.add().CopyFrom(array_to_blob(np.zeros((20, 1, 5, 5), np.float32)))
    layer.blobs.add().CopyFrom(array_to_blob(np.zeros((21,), np.float32)))
    path = tmp_path / "bad.caffemodel"
    write_atomically(path, net.SerializeToString())
    with pytest.raises(WeightsError, match=r"layer 'conv1': blob 1 has shape \(21,\) in the "
                                           r"weights, the net needs \(20,\)"):
        keras_caffe.import_model(lenet / "deploy_used.prototxt", weights=path)


@pytest.mark.parametrize("damage", ["truncated", "random", "text", "empty"])
def test_broken_weights_file(lenet, tmp_path, damage):
    path = tmp_path / "weights.caffemodel"
    original = (lenet / "weights.caffemodel").read_bytes()
    path.write_bytes({
        "truncated": original[: len(original) // 2],
        "random": np.random.RandomState(0).bytes(5000),
        "text": (lenet / "deploy_used.prototxt").read_bytes(),
        "empty": b"",
    }[damage])
    with pytest.raises(WeightsError, match=f"^{path}: "):
        keras_caffe.import_model(lenet / "deploy_used.prototxt", weights=path)


def test_hdf5_weights_load_too(lenet, tmp_path):
    import h5py

    from keras_caffe.importers import load_weights

    binary = load_weights(lenet / "weights.caffemodel")
    path = tmp_path / "weights.caffemodel.h5"
    with h5py.File(path, "w") as f:
        for layer, blobs in binary.items():
            for i, blob in enumerate(blobs):
                f[f"data/{layer}/{i}"] = blob
    loaded = load_weights(path)
    assert sorted(loaded) == sorted(binary)
    for layer in binary:
        for a, b in zip(loaded[layer], binary[layer]):
            np.testing.assert_array_equal(a, b)
    shutil.copy(path, tmp_path / "renamed.caffemodel")  # told apart by content, not name
    assert sorted(load_weights(tmp_path / "renamed.caffemodel")) == sorted(binary)


def test_hdf5_weights_with_slashes_in_layer_names(tmp_path):
    """HDF5 stores ``conv1/bn`` as nested groups; the reader finds it anyway."""
    import h5py

    from keras_caffe.importers import load_weights

    path = tmp_path / "w.caffemodel.h5"
    with h5py.File(path, "w") as f:
        f["data/conv1/0"] = np.ones((2, 1, 3, 3), np.float32)
        f["data/conv1/bn/0"] = np.full((2,), 3.0, np.float32)
        f["data/conv1/bn/1"] = np.full((2,), 4.0, np.float32)
        f["data/inception_3a/1x1/0"] = np.zeros((4, 2, 1, 1), np.float32)
        f.create_group("data/relu1")  # layers without blobs are empty groups
    loaded = load_weights(path)
    assert sorted(loaded) == ["conv1", "conv1/bn", "inception_3a/1x1"]
    assert [b.shape for b in loaded["conv1"]] == [(2, 1, 3, 3)]
    np.testing.assert_array_equal(loaded["conv1/bn"][1], np.full((2,), 4.0, np.float32))


def test_bad_data_format_and_phase():
    with pytest.raises(CaffeImportError, match="data_format must be"):
        keras_caffe.import_model(INPUT, data_format="NHWC")
    with pytest.raises(CaffeImportError, match="phase must be 'TRAIN' or 'TEST'"):
        keras_caffe.import_model(INPUT, phase="VAL")


class LMSLike:
    """A class offering LMS's ``attach_to`` (keras_caffe.LMS is TensorFlow's backend only)."""

    def attach_to(self, imported, **how):
        return imported.model


#: Not an LMS: a number, a text, a class offering attach_to (keras_caffe.LMS itself on
#: TensorFlow's backend, where it exists).
NOT_AN_LMS = [pytest.param(1000, id="number"), pytest.param("LMS(1000)", id="text"),
              pytest.param(LMSLike, id="a class"),
              *([pytest.param(keras_caffe.LMS, id="the class")]
                if is_tensorflow() else [])]


@pytest.mark.parametrize("lms", NOT_AN_LMS)
def test_an_lms_that_is_not_one_is_refused_before_importing(lms):
    """``import_model(lms=...)`` checks the object through the method LMS
    offers (the importers never import keras_caffe.lms): anything else, the
    class itself included, is refused with this message, before the net is read."""
    with pytest.raises(keras_caffe.ArgumentError) as info:
        keras_caffe.import_model("no such file.prototxt", lms=lms)
    assert str(info.value) == (
        f"import_model: `lms` must be a keras_caffe.LMS or None, got {lms!r}")


def test_an_lms_is_attached_through_its_attach_to():
    """What ``import_model`` hands an LMS: the ``ImportedNet`` (model and
    filtered net) and the import's phase, level, stages and data format."""
    calls = []

    class Recorder:
        def attach_to(self, imported, **how):
            calls.append((imported, how))
            return imported.model

    model = keras_caffe.import_model(INPUT + conv("c", "data"), lms=Recorder(), level=2,
                                     stages=("deploy",), data_format="channels_first")
    [(imported, how)] = calls
    assert imported.model is model
    assert [layer.name for layer in imported.net.layer] == ["data", "c"]
    assert how == {"phase": "TEST", "level": 2, "stages": ("deploy",),
                   "data_format": "channels_first"}

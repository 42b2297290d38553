"""Data layers as model inputs; a Caffe train_net + solver trained end to end."""

import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import param_multipliers, training_args

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


@pytest.mark.layer_type("HDF5Data")
@pytest.mark.parametrize("case", ["sgd", "adam", "sgd_itersize2", "sgd_lr_step"])
def test_caffe_train_net_and_solver_reproduce_caffe(golden, case):
    """train_net.prototxt + solver.prototxt + init.caffemodel, nothing written by
    hand: the imported TRAIN net trained by fit follows Caffe's trajectory."""
    folder = golden / "solvers" / case
    model = keras_caffe.import_model(folder / "train_net.prototxt",
                                     weights=folder / "init.caffemodel", phase="TRAIN")
    assert [t.shape for t in model.inputs] == [(None, 20)]  # data; label is a target
    assert model.caffe_training.labels == {"ip2": "label"}
    lr_mult, decay_mult = param_multipliers(model)
    optimizer = keras_caffe.optimizer_from_solver(folder / "solver.prototxt",
                                                  lr_mult=lr_mult, decay_mult=decay_mult)
    model.compile(optimizer=optimizer, **training_args(model))
    data = np.load(folder / "data.npz")
    ds = tf.data.Dataset.from_tensor_slices(
        (data["data"], data["label"])).batch(16).repeat()
    model.fit(ds, steps_per_epoch=30 * optimizer.iter_size, epochs=1, verbose=0, shuffle=False)
    trajectory = np.load(folder / "trajectory.npz")
    for layer in ("ip1", "ip2"):
        kernel, bias = model.get_layer(layer).get_weights()
        np.testing.assert_allclose(kernel.T, trajectory[f"{layer}_w"][30], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(bias, trajectory[f"{layer}_b"][30], rtol=1e-5, atol=1e-6)


@pytest.mark.layer_type("Data")
@pytest.mark.parametrize("net, phase", [("net_A_train_meanvalue.prototxt", "TRAIN"),
                                        ("net_B_test_crop_meanfile.prototxt", "TEST")])
def test_lmdb_data_layer_shape_from_first_datum(golden, net, phase, monkeypatch):
    """The golden LMDB holds 3x32x32 Datums; net B center-crops them."""
    from keras_caffe.importers import read_net

    folder = golden / "lmdb"
    param, _ = read_net(folder / net)
    crop = next(layer for layer in param.layer if layer.type == "Data").transform_param.crop_size
    monkeypatch.chdir(folder)  # Caffe resolves a relative source from the working directory
    text = (folder / net).read_text() + 'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }'
    model = keras_caffe.import_model(text, phase=phase)
    side = crop or 32
    assert tuple(model.inputs[0].shape) == (None, side, side, 3)


@pytest.mark.layer_type("DummyData")
@pytest.mark.layer_type("MemoryData")
@pytest.mark.layer_type("ImageData")
def test_shapes_from_parameters():
    dummy = ('layer { name: "d" type: "DummyData" top: "a" top: "b" dummy_data_param { '
             'shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 dim: 7 } } }\n'
             'layer { name: "c" type: "Concat" bottom: "b" bottom: "b" top: "c" }\n'
             'layer { name: "p" type: "Pooling" bottom: "a" top: "p" '
             'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }')
    model = keras_caffe.import_model(dummy)
    assert [tuple(t.shape) for t in model.inputs] == [(None, 8, 8, 3), (None, 7)]
    memory = ('layer { name: "m" type: "MemoryData" top: "data" top: "label" memory_data_param { '
              'batch_size: 5 channels: 2 height: 6 width: 4 } }\n'
              'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
              'inner_product_param { num_output: 3 } }\n'
              'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }')
    model = keras_caffe.import_model(memory, phase="TRAIN")
    assert tuple(model.inputs[0].shape) == (None, 6, 4, 2) and len(model.inputs) == 1
    images = ('layer { name: "i" type: "ImageData" top: "data" top: "label" transform_param { '
              'crop_size: 20 } image_data_param { source: "none.txt" batch_size: 2 new_height: 24 '
              'new_width: 32 is_color: false } }\n'
              'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }')
    model = keras_caffe.import_model(images, data_format="channels_first")
    assert tuple(model.inputs[0].shape) == (None, 1, 20, 20)


@pytest.mark.layer_type("Data")
def test_missing_source_says_what_to_do_and_input_shapes_override(tmp_path):
    text = ('layer { name: "data" type: "Data" top: "data" top: "label" data_param { '
            'source: "nowhere_lmdb" batch_size: 4 backend: LMDB } }\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
            'inner_product_param { num_output: 2 } }')
    with pytest.raises(LayerError, match="layer 'data': Data source 'nowhere_lmdb' not found .* "
                                         "input_shapes"):
        keras_caffe.import_model(text)
    model = keras_caffe.import_model(text, input_shapes={"data": (3, 4, 4), "label": ()})
    assert tuple(model.inputs[0].shape) == (None, 4, 4, 3)


@pytest.mark.layer_type("Data")
def test_analyze_reads_an_existing_source_as_the_importer_does(golden):
    """One shape rule: analyze takes a train net's shapes from its LMDB's
    first Datum (found next to the prototxt), as the importer does."""
    from keras_caffe.importers import read_net
    from keras_caffe.analysis import analyze

    net = golden / "lmdb" / "net_B_test_crop_meanfile.prototxt"
    layer = next(l for l in read_net(net)[0].layer if l.type == "Data")
    batch, crop = layer.data_param.batch_size, layer.transform_param.crop_size
    report = analyze(net, batch=None, phase="TEST")
    assert report.layer(layer.name).tops == (("data", (batch, 3, crop, crop)),
                                             ("label", (batch,)))
    assert analyze(net, batch=4).layer(layer.name).tops[0] == ("data", (4, 3, crop, crop))


@pytest.mark.layer_type("Data")
def test_analyze_of_a_missing_source_says_what_to_do():
    from keras_caffe.analysis import analyze

    text = ('layer { name: "data" type: "Data" top: "data" top: "label" data_param { '
            'source: "nowhere_lmdb" batch_size: 4 backend: LMDB } }')
    with pytest.raises(LayerError, match="layer 'data': Data source 'nowhere_lmdb' not found .* "
                                         "input_shapes"):
        analyze(text)
    report = analyze(text, batch=None, input_shapes={"data": (3, 4, 4), "label": ()})
    assert report.layer("data").tops == (("data", (1, 3, 4, 4)), ("label", (1,)))


@pytest.mark.layer_type("MemoryData")
def test_memory_data_label_is_one_value_per_sample():
    """memory_data_layer.cpp:22-24: label (batch_size,), in analyze as in the importer."""
    from keras_caffe.analysis import analyze

    text = ('layer { name: "m" type: "MemoryData" top: "data" top: "label" memory_data_param { '
            'batch_size: 5 channels: 2 height: 6 width: 4 } }')
    assert analyze(text, batch=None).layer("m").tops == (("data", (5, 2, 6, 4)), ("label", (5,)))
    model = keras_caffe.import_model(text, outputs=["data", "label"])
    assert [tuple(t.shape) for t in model.inputs] == [(None, 6, 4, 2), (None,)]
    with pytest.raises(LayerError, match="layer 'm': MemoryData has 2 tops, got 1"):
        analyze(text.replace(' top: "label"', ""))


@pytest.mark.layer_type("DummyData")
def test_dummy_data_one_shape_serves_every_top():
    """dummy_data_layer.cpp: shape given once applies to every top."""
    text = ('layer { name: "d" type: "DummyData" top: "a" top: "b" dummy_data_param { '
            'shape { dim: 2 dim: 3 } } }')
    model = keras_caffe.import_model(text, outputs=["a", "b"])
    assert [tuple(t.shape) for t in model.inputs] == [(None, 3), (None, 3)]
    with pytest.raises(LayerError, match="layer 'd': give 'shape' once or once per top"):
        keras_caffe.import_model(text.replace("shape {", "shape { dim: 1 } shape { dim: 1 } "
                                                         "shape {"))


@pytest.mark.layer_type("Input")
def test_input_without_a_shape_takes_it_from_input_shapes():
    """input_layer.cpp allows no shape (the caller reshapes): input_shapes gives it."""
    from keras_caffe.analysis import analyze

    text = ('layer { name: "in" type: "Input" top: "x" }\n'
            'layer { name: "r" type: "ReLU" bottom: "x" top: "r" }')
    with pytest.raises(LayerError, match="layer 'in': states no shape for top 'x'; .*"
                                         "input_shapes"):
        keras_caffe.import_model(text)
    model = keras_caffe.import_model(text, input_shapes={"x": (3, 4, 4)})
    assert tuple(model.inputs[0].shape) == (None, 4, 4, 3)
    assert analyze(text, batch=2, input_shapes={"x": (3, 4, 4)}).layer("r").tops == (
        ("r", (2, 3, 4, 4)),)


@pytest.mark.layer_type("WindowData")
@pytest.mark.layer_type("AnnotatedData")
@pytest.mark.parametrize("layer_type", ["WindowData", "AnnotatedData"])
def test_analyze_only_data_layers_take_input_shapes(layer_type):
    from keras_caffe.errors import UnknownLayerError
    from keras_caffe.analysis import analyze

    text = (f'layer {{ name: "w" type: "{layer_type}" top: "data" top: "label" }}\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
            'inner_product_param { num_output: 2 } }')
    with pytest.raises(LayerError, match=f"layer 'w': \\({layer_type}\\) reads its data from a "
                                         "database or file.*input_shapes"):
        analyze(text)
    report = analyze(text, batch=8, input_shapes={"data": (3, 5, 5), "label": ()})
    assert report.layer("w").tops == (("data", (8, 3, 5, 5)), ("label", (8,)))
    with pytest.raises(UnknownLayerError):
        keras_caffe.import_model(text, input_shapes={"data": (3, 5, 5), "label": ()})


def test_data_layer_types_come_from_the_registry():
    from keras_caffe.importers.layer_types._data import producing_types, source_types
    from keras_caffe.importers.data.pipelines import DATA_LAYER_TYPES

    assert set(DATA_LAYER_TYPES) == {"Data", "ImageData", "HDF5Data", "DummyData", "MemoryData",
                                     "Input", "DenseImageData", "VideoData"}
    assert set(producing_types()) == set(DATA_LAYER_TYPES) - {"Input"}
    assert set(source_types()) == {"Data", "ImageData", "HDF5Data", "WindowData",
                                   "AnnotatedData", "VideoData", "DenseImageData"}

"""Real public Caffe nets (tests/golden/forward): Caffe's numbers, both layouts.

For every model: every blob Caffe saved (net outputs and the intermediate
blobs kept in outputs.npz) within 1e-4 of the blob's largest magnitude, in
channels_last and channels_first; the weights re-exported bit-exactly; a
.keras save/load round trip giving the same outputs. The large nets' weights,
inputs and outputs are read outside the repository (support.golden_net).
"""

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.importers import load_weights
from support import from_keras_layout, golden_net, to_keras_layout

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

MODELS = ["lenet", "cifar10_quick", "nin_cifar10", "squeezenet_v1.1", "mobilenet_v1",
          "bvlc_googlenet"]


def test_every_golden_model_is_checked(golden):
    assert sorted(p.name for p in (golden / "forward").iterdir() if p.is_dir()) == sorted(MODELS)


def saved_blobs(folder, model_blobs):
    outputs = np.load(folder / "outputs.npz")
    # *_split_* blobs are Caffe's automatic Split copies: not blobs of the net.
    return {k: outputs[k] for k in outputs.files if "_split_" not in k and k in model_blobs}


def blob_names(folder):
    from keras_caffe.importers import read_net

    net, _ = read_net(folder / "deploy_used.prototxt")
    return {top for layer in net.layer for top in layer.top}


def run(model, x, data_format):
    result = model(to_keras_layout(x, data_format))
    if not isinstance(result, dict):
        result = {model.caffe_outputs[0]: result}
    return {k: from_keras_layout(keras.ops.convert_to_numpy(v), data_format) for k, v in result.items()}


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
@pytest.mark.parametrize("name", MODELS)
def test_blobs_match_caffe(golden, name, data_format):
    folder = golden_net(name)
    expected = saved_blobs(folder, blob_names(folder))
    model = keras_caffe.import_model(folder / "deploy_used.prototxt",
                                     weights=folder / "weights.caffemodel",
                                     data_format=data_format, outputs=sorted(expected))
    got = run(model, np.load(folder / "input.npy"), data_format)
    assert set(got) == set(expected) and len(expected) >= 2
    for blob, reference in expected.items():
        scale = np.abs(reference).max()
        error = np.abs(got[blob] - reference).max()
        assert error <= 1e-4 * scale, f"{name} {blob}: |error| {error:.3g} vs max {scale:.3g}"


@pytest.mark.parametrize("name", MODELS)
def test_weights_reexport_bit_exactly(golden, name, tmp_path):
    folder = golden_net(name)
    model = keras_caffe.import_model(folder / "deploy_used.prototxt",
                                     weights=folder / "weights.caffemodel")
    out = keras_caffe.export_caffemodel(model, tmp_path / "out.caffemodel")
    original, exported = load_weights(folder / "weights.caffemodel"), load_weights(out)
    assert sorted(exported) == sorted(original)
    for layer, blobs in original.items():
        assert len(exported[layer]) == len(blobs)
        for i, (a, b) in enumerate(zip(exported[layer], blobs)):
            assert a.shape == b.shape and np.array_equal(a, b), f"{layer} blob {i}"
    # ... and importing the export gives the same model.
    again = keras_caffe.import_model(folder / "deploy_used.prototxt", weights=out)
    for a, b in zip(again.get_weights(), model.get_weights()):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", ["mobilenet_v1", "bvlc_googlenet"])
def test_saved_keras_model_loads_and_agrees(golden, name, tmp_path):
    folder = golden_net(name)
    model = keras_caffe.import_model(folder / "deploy_used.prototxt",
                                     weights=folder / "weights.caffemodel")
    path = tmp_path / "net.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    x = to_keras_layout(np.load(folder / "input.npy"), "channels_last")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(loaded(x)),
                                  keras.ops.convert_to_numpy(model(x)))
    # Caffe names and multipliers survive the file.
    assert keras_caffe.param_multipliers(loaded) == keras_caffe.param_multipliers(model)


def test_param_multipliers_follow_the_prototxt(golden):
    folder = golden / "forward" / "bvlc_googlenet"
    model = keras_caffe.import_model(folder / "deploy_used.prototxt")
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    # deploy.prototxt: param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
    assert lr_mult["conv1_7x7_s2/kernel"] == 1.0 and decay_mult["conv1_7x7_s2/kernel"] == 1.0
    assert lr_mult["conv1_7x7_s2/bias"] == 2.0 and decay_mult["conv1_7x7_s2/bias"] == 0.0
    layer = model.get_layer("conv1_7x7_s2")
    assert layer.caffe_name == "conv1/7x7_s2"
    optimizer = keras_caffe.SGD(0.01, momentum=0.9, lr_mult=lr_mult, decay_mult=decay_mult)
    optimizer.build(model.trainable_variables)
    index = [v.path for v in model.trainable_variables].index("conv1_7x7_s2/bias")
    assert optimizer._lr_mults[index] == 2.0 and optimizer._decay_mults[index] == 0.0


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_fold_batchnorm(golden, data_format):
    """MobileNet's Conv+BatchNorm+Scale folded: same outputs, no BN/Scale layers."""
    folder = golden_net("mobilenet_v1")
    folded = keras_caffe.import_model(folder / "deploy_used.prototxt",
                                      weights=folder / "weights.caffemodel",
                                      data_format=data_format, fold_batchnorm=True)
    kinds = {type(layer).__name__ for layer in folded.layers}
    assert "BatchNorm" not in kinds and "Scale" not in kinds
    got = run(folded, np.load(folder / "input.npy"), data_format)["prob"]
    reference = np.load(folder / "outputs.npz")["prob"]
    assert np.abs(got - reference).max() <= 1e-4 * np.abs(reference).max()


def test_fold_batchnorm_needs_weights_and_test_phase(golden):
    from keras_caffe.errors import CaffeImportError

    net = golden_net("mobilenet_v1") / "deploy_used.prototxt"
    with pytest.raises(CaffeImportError, match="fold_batchnorm needs the weights"):
        keras_caffe.import_model(net, fold_batchnorm=True)
    with pytest.raises(CaffeImportError, match="fold_batchnorm is for inference"):
        keras_caffe.import_model(net, weights=net.with_name("weights.caffemodel"), phase="TRAIN",
                                 fold_batchnorm=True)

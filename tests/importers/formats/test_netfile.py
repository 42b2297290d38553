"""Loading nets: V0/V1 upgrades, deprecated input fields, phase rules."""

import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import CaffeImportError
from keras_caffe.importers import filter_net, net_state, read_net
from keras_caffe.importers.net.graph import build_model  # noqa: F401  (public for converters)
from keras_caffe.proto import caffe_pb2

V0_NET = """
name: "v0_lenet"
input: "data"
input_dim: 2 input_dim: 1 input_dim: 12 input_dim: 12
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers { layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 5 stride: 1
                 biasterm: true blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0 }
         bottom: "pad1" top: "conv1" }
layers { layer { name: "pool1" type: "pool" pool: MAX kernelsize: 2 stride: 2 }
         bottom: "conv1" top: "pool1" }
layers { layer { name: "relu1" type: "relu" } bottom: "pool1" top: "pool1" }
layers { layer { name: "ip1" type: "innerproduct" num_output: 3 } bottom: "pool1" top: "ip1" }
layers { layer { name: "prob" type: "softmax" } bottom: "ip1" top: "prob" }
"""

CURRENT_NET = """
name: "lenet"
layer { name: "input" type: "Input" top: "data" input_param { shape { dim: 2 dim: 1 dim: 12 dim: 12 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        convolution_param { num_output: 4 kernel_size: 5 stride: 1 pad: 2 bias_term: true } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1" inner_product_param { num_output: 3 } }
layer { name: "prob" type: "Softmax" bottom: "ip1" top: "prob" }
"""


def test_v0_net_upgrades_to_the_current_format():
    v0, _ = read_net(V0_NET)
    current, _ = read_net(CURRENT_NET)
    assert not v0.layers and not v0.input and not v0.input_dim
    assert [layer.type for layer in v0.layer] == [layer.type for layer in current.layer]
    for ours, theirs in zip(v0.layer, current.layer):
        assert list(ours.bottom) == list(theirs.bottom), ours.name
        for field in ("convolution_param", "pooling_param", "inner_product_param", "input_param"):
            assert getattr(ours, field) == getattr(theirs, field), (ours.name, field)
        assert [(p.lr_mult, p.decay_mult) for p in ours.param] == \
            [(p.lr_mult, p.decay_mult) for p in theirs.param]


def test_v0_and_current_nets_compute_the_same():
    rng = np.random.RandomState(0)
    x = rng.randn(2, 12, 12, 1).astype("float32")
    weights = {"conv1": [rng.randn(4, 1, 5, 5).astype("float32"), rng.randn(4).astype("float32")],
               "ip1": [rng.randn(3, 4 * 6 * 6).astype("float32"), rng.randn(3).astype("float32")]}
    outputs = []
    for text in (V0_NET, CURRENT_NET):
        model = keras_caffe.import_model(text)
        keras_caffe.importers.load_into(model, weights)
        outputs.append(np.asarray(model(x)))
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_v0_errors():
    with pytest.raises(CaffeImportError, match="V0 layer 'x' has unknown type 'warp'"):
        read_net('input: "data" input_dim: 1 input_dim: 1 input_dim: 2 input_dim: 2\n'
                 'layers { layer { name: "x" type: "warp" } bottom: "data" top: "x" }')
    with pytest.raises(CaffeImportError, match="parameter 'num_output' does not apply to type 'relu'"):
        read_net('input: "data" input_dim: 1 input_dim: 1 input_dim: 2 input_dim: 2\n'
                 'layers { layer { name: "r" type: "relu" num_output: 3 } bottom: "data" top: "r" }')


def test_v1_nin_matches_caffes_own_upgrade(golden):
    """The golden NiN's V1 train_val, upgraded by us, equals what Caffe's
    upgrade_net_proto_text wrote (deploy_used.prototxt) layer for layer."""
    folder = golden / "forward" / "nin_cifar10"
    ours, _ = read_net(folder / "original_train_val.prototxt")
    caffes, _ = read_net(folder / "deploy_used.prototxt")
    ours_by_name = {layer.name: layer for layer in ours.layer}
    compared = 0
    for layer in caffes.layer:
        if layer.type == "Input":
            continue
        mine = ours_by_name[layer.name]
        assert mine == layer, layer.name
        compared += 1
    assert compared >= 20


def test_deprecated_input_fields():
    net, _ = read_net('input: "a" input: "b" input_shape { dim: 1 dim: 3 } input_shape { dim: 1 dim: 5 }\n'
                      'layer { name: "c" type: "Concat" bottom: "a" bottom: "b" top: "c" }')
    assert net.layer[0].type == "Input" and list(net.layer[0].top) == ["a", "b"]
    assert [list(s.dim) for s in net.layer[0].input_param.shape] == [[1, 3], [1, 5]]
    with pytest.raises(CaffeImportError, match="1 `input` names need 4 `input_dim` values, got 3"):
        read_net('input: "a" input_dim: 1 input_dim: 2 input_dim: 3')


def test_old_batchnorm_params_are_zeroed():
    net, _ = read_net('layer { name: "bn" type: "BatchNorm" param { lr_mult: 1 } param { lr_mult: 1 } '
                      'param { lr_mult: 1 } }')
    assert [(p.lr_mult, p.decay_mult) for p in net.layer[0].param] == [(0, 0)] * 3


RULES = """
layer { name: "always" type: "ReLU" }
layer { name: "train" type: "ReLU" include { phase: TRAIN } }
layer { name: "test" type: "ReLU" include { phase: TEST } }
layer { name: "not_test" type: "ReLU" exclude { phase: TEST } }
layer { name: "deep" type: "ReLU" include { min_level: 2 } }
layer { name: "shallow" type: "ReLU" include { max_level: 1 } }
layer { name: "staged" type: "ReLU" include { stage: "deploy" } }
layer { name: "unstaged" type: "ReLU" include { not_stage: "deploy" } }
layer { name: "either" type: "ReLU" include { phase: TRAIN } include { stage: "deploy" } }
"""


@pytest.mark.parametrize("phase, level, stages, kept", [
    ("TEST", 0, (), ["always", "test", "shallow", "unstaged"]),
    ("TRAIN", 0, (), ["always", "train", "not_test", "shallow", "unstaged", "either"]),
    ("TEST", 3, ("deploy",), ["always", "test", "deep", "staged", "either"]),
])
def test_include_exclude_rules(phase, level, stages, kept):
    net, _ = read_net(RULES)
    filtered = filter_net(net, net_state(phase, level, stages))
    assert [layer.name for layer in filtered.layer] == kept


def test_include_and_exclude_together_is_refused():
    net, _ = read_net('layer { name: "x" type: "ReLU" include { phase: TRAIN } exclude { phase: TEST } }')
    with pytest.raises(CaffeImportError, match="layer 'x' specifies both include and exclude"):
        filter_net(net, net_state("TRAIN"))


def test_v1_and_current_layers_mixed_is_refused():
    with pytest.raises(CaffeImportError, match="mixes V1 `layers` and current `layer`"):
        read_net('layers { name: "a" type: RELU } layer { name: "b" type: "ReLU" }')


def test_message_input_is_taken_as_is():
    net = caffe_pb2.NetParameter(name="n")
    parsed, source = read_net(net)
    assert parsed is net and source == "<NetParameter>"

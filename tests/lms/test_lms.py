"""keras_caffe.LMS: arguments, the hard limit, the frac decision and its log,
the plan, and the ways to apply it (import_model, the context manager, apply)."""

import logging
import math

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import ArgumentError, LayerError
from keras_caffe.analysis import analyze
from keras_caffe.kernels import onednn_enabled
from keras_caffe.lms.policy import LMS, current, from_cli
from support.lms import batch_for, conv_stack

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)

#: TensorFlow runs Eigen's CPU kernels in this process (no oneDNN): their
#: forward convolutions hold an im2col workspace that the hard limit counts
EIGEN = not onednn_enabled()

CIFAR = "forward/cifar10_quick/deploy_used.prototxt"


# -- bad input --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-1, -0.001])
def test_negative_threshold_is_refused_by_name(value):
    with pytest.raises(ArgumentError) as err:
        LMS(threshold_kb=value)
    assert err.value.argument == "threshold_kb"
    assert str(err.value) == f"LMS: `threshold_kb` must be in [0, inf), got {value:g}"


@pytest.mark.parametrize("value", [-0.1, 1.01, 2, float("nan")])
def test_frac_outside_0_1_is_refused_by_name(value):
    with pytest.raises(ArgumentError) as err:
        LMS(threshold_kb=1000, frac=value)
    assert err.value.argument == "frac"
    assert str(err.value).startswith("LMS: `frac` must be")


@pytest.mark.parametrize("kwargs, argument", [
    ({"threshold_kb": "1000"}, "threshold_kb"),
    ({"threshold_kb": 1, "mechanism": "swap"}, "mechanism"),
    ({"threshold_kb": 1, "memory_limit": 0}, "memory_limit"),
    ({"threshold_kb": 1, "batch": 0}, "batch"),
    ({"threshold_kb": 1, "batch_parts": 1}, "batch_parts"),
])
def test_other_bad_arguments_are_refused_by_name(kwargs, argument):
    with pytest.raises(ArgumentError) as err:
        LMS(**kwargs)
    assert err.value.argument == argument


def test_the_edges_are_accepted():
    assert (LMS(0).threshold_kb, LMS(0).frac) == (0.0, 0.0)
    assert LMS(0, frac=1).frac == 1.0
    assert LMS(1000).threshold_bytes == 1024000


def test_cli_values():
    assert from_cli(None, None) is None
    lms = from_cli(1000, 0.4)
    assert (lms.threshold_kb, lms.frac) == (1000.0, 0.4)
    assert from_cli(5).frac == 0.0
    assert (from_cli(5).batch_parts, from_cli(5, None, True).batch_parts) == (False, True)
    with pytest.raises(ArgumentError, match=r"`--lms-frac` needs --lms N"):
        from_cli(None, 0.4)
    with pytest.raises(ArgumentError) as err:
        from_cli(-1, 0.4)
    assert err.value.argument == "--lms"
    assert str(err.value) == "keras-caffe train: `--lms` must be in [0, inf), got -1"
    with pytest.raises(ArgumentError) as err:
        from_cli(10, 1.5)
    assert err.value.argument == "--lms-frac"


def test_import_model_refuses_something_else(golden):
    with pytest.raises(ArgumentError, match=r"import_model: `lms` must be a keras_caffe.LMS"):
        keras_caffe.import_model(str(golden / CIFAR), lms=1000)


class SubclassedNet(keras.Model):
    """A subclassed model: no functional graph for LMS to plan."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(3)

    def call(self, x):
        return self.dense(x)


def test_subclassed_model_is_refused():
    with pytest.raises(ArgumentError, match="has no functional graph"):
        LMS(0).apply(SubclassedNet())


def test_shared_layer_is_refused():
    dense = keras.layers.Dense(4)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, dense(dense(inputs)))
    with pytest.raises(ArgumentError, match="called more than once"):
        LMS(0, batch=2).apply(model)


# -- the hard limit ---------------------------------------------------------------------


def test_hard_limit_names_the_largest_layer_before_training():
    model = conv_stack(depth=3, channels=8, size=16)
    # conv0: input 16x16x8 and output 16x16x8 at batch 4, 32 KiB each, and its
    # 3x3x8x8 + 8 weights: 2 x (32768 + 32768 + 2336) bytes; under Eigen also
    # the im2col matrix, 4x16x16 rows of 3x3x8 values: 288 KiB
    need = 2 * (2 * 4 * 16 * 16 * 8 * 4 + (3 * 3 * 8 * 8 + 8) * 4)
    if EIGEN:
        need += 4 * 16 * 16 * 3 * 3 * 8 * 4
    with pytest.raises(LayerError) as err:
        LMS(0, batch=4, memory_limit=need - 1).apply(model)
    assert err.value.layer == "conv0"
    what = (("420.56 KiB", "their gradients, and 288.00 KiB of Eigen's convolution workspace")
            if EIGEN else ("132.56 KiB", "their gradients"))
    assert str(err.value) == (
        f"layer 'conv0': needs {what[0]} at once to train (inputs, outputs and weights, and "
        f"{what[1]}, batch 4) but the memory limit is {what[0]} (memory_limit); LMS cannot "
        "split a layer: use a smaller batch")
    assert "call" not in vars(model)  # nothing was installed
    LMS(0, batch=4, memory_limit=need).apply(model)  # exactly fits


def test_hard_limit_of_an_imported_net(golden):
    # cifar10_quick at batch 2: pool1 takes conv1's 2x32x32x32 output and makes
    # 2x32x16x16: 2 x 4 x (65536 + 16384) bytes = 640 KiB; conv1 needs less
    # (its input is 2x3x32x32), ip1's 64x1024 weights too (2 x 266 KB).
    # Under Eigen, conv2 (32x16x16 -> 32x16x16, 5x5 kernel) adds its im2col
    # matrix, 2x16x16 rows of 5x5x32 values: 2 x 4 x (8192 + 8192 + 25632)
    # + 4 x 512 x 800 = 2105600 bytes, the largest.
    layer, need = ("conv2", 2105600) if EIGEN else ("pool1", 640 * 1024)
    with pytest.raises(LayerError) as err:
        keras_caffe.import_model(str(golden / CIFAR), lms=LMS(0, memory_limit=need - 1))
    assert err.value.layer == layer
    keras_caffe.import_model(str(golden / CIFAR), lms=LMS(0, memory_limit=need))


def test_eigen_convolution_workspace_is_its_im2col_matrix():
    from keras_caffe.lms.plan import model_graph

    x = inputs = keras.Input((16, 16, 8))
    conv = keras.layers.Conv2D(6, 3, name="conv")
    grouped = keras.layers.Conv2D(6, (3, 1), groups=2, name="grouped")
    others = [keras.layers.DepthwiseConv2D(3, padding="same", name="depthwise"),
              keras.layers.Conv2DTranspose(4, 2, name="transposed"), keras.layers.ReLU()]
    for layer in [conv, grouped, *others]:
        x = layer(x)
    model = keras.Model(inputs, keras.layers.Dense(3, name="fc")(x))
    eigen, onednn = model_graph(model, eigen=True), model_graph(model, eigen=False)
    workspace = {n.name: eigen.workspace(n, 5) for n in eigen.nodes}
    # (batch x H_out x W_out) rows of k_h x k_w x C_in/group values, float32
    assert workspace["conv"] == 5 * 14 * 14 * 3 * 3 * 8 * 4
    assert workspace["grouped"] == 5 * 12 * 14 * 3 * 1 * 3 * 4
    assert all(workspace[layer.name] == 0 for layer in others)
    assert workspace["fc"] == 0
    assert all(onednn.workspace(n, 5) == 0 for n in onednn.nodes)
    node = eigen.nodes[0]
    assert eigen.layer_need(node, 5) == onednn.layer_need(node, 5) + workspace["conv"]


def test_lms_returns_freed_blocks_to_the_system(caplog):
    import platform

    from keras_caffe.lms.execution import return_freed_blocks

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt only")
    # the threshold is clamped to glibc's range [128 KiB, 32 MiB]
    assert return_freed_blocks(0) == 128 * 1024
    assert return_freed_blocks(2 ** 40) == 32 * 2 ** 20
    assert return_freed_blocks(1000 * 1024) == 1000 * 1024
    with caplog.at_level(logging.INFO, logger="keras_caffe.lms"):
        LMS(1000, batch=4).apply(conv_stack(3, 8, 16, name="freed"))
    assert ("LMS for model 'freed' (batch 4): allocator: freed blocks of 1000.00 KiB or more go "
            "back to the system at once (glibc M_MMAP_THRESHOLD), so freed activations are "
            "free") in caplog.text
    assert ("kernels: Eigen (TensorFlow without oneDNN): the largest convolution workspace is "
            "288.00 KiB" in caplog.text) == EIGEN


def test_hard_limit_at_first_call_when_the_batch_is_unknown():
    model = conv_stack(depth=2, channels=4, size=8)
    LMS(0, memory_limit=20_000).apply(model)  # batch unknown: nothing planned yet
    x, _ = batch_for(model, 64)
    with pytest.raises(LayerError, match="layer 'conv0'"):
        model(x)


# -- frac: prediction and decision ------------------------------------------------------


def test_prediction_of_an_imported_net_is_analyze_d(golden, caplog):
    net = golden / CIFAR
    with caplog.at_level(logging.INFO, logger="keras_caffe.lms"):
        model = keras_caffe.import_model(str(net), lms=LMS(0))
    planner = model.caffe_lms
    report = analyze(str(net), batch=2)
    assert planner.predict(2) == (report.activation_bytes, "keras-caffe analyze of the Caffe net")
    assert planner.predict(64)[0] == analyze(str(net), batch=64).activation_bytes
    assert "LMS for model 'CIFAR10_quick_test' (batch 2): on:" in caplog.text


def test_prediction_of_a_keras_model_is_its_output_shapes():
    model = conv_stack(depth=3, channels=8, size=16)
    planner = LMS(0, batch=4).apply(model).caffe_lms
    per_map = 4 * 16 * 16 * 8 * 4
    expected = per_map + 6 * per_map + 4 * 8 * 4 + 4 * 10 * 4  # data, convs+relus, pool, fc
    assert planner.predict(4) == (expected, "the layers' output shapes")


def test_frac_switches_lms_off_below_and_on_above(caplog):
    d = 4 * 16 * 16 * 8 * 4 * 7 + 4 * 8 * 4 + 4 * 10 * 4
    with caplog.at_level(logging.INFO, logger="keras_caffe.lms"):
        off = LMS(0, frac=0.5, batch=4, memory_limit=2 * d).apply(
            conv_stack(3, 8, 16, name="small")).caffe_lms
        on = LMS(0, frac=0.5, batch=4, memory_limit=2 * d - 2).apply(
            conv_stack(3, 8, 16, name="big")).caffe_lms
    assert [b.kind for b in off.blocks[4]] == ["plain"]
    assert "remat" in [b.kind for b in on.blocks[4]]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "LMS for model 'small' (batch 4): off: predicted activations |D| 224.28 KiB (the layers' "
        "output shapes) <= frac 0.5 x 448.56 KiB (memory_limit) = 224.28 KiB")
    assert lines[1].startswith(
        "LMS for model 'big' (batch 4): on: predicted activations |D| 224.28 KiB (the layers' "
        "output shapes); exceeds frac 0.5 x 448.56 KiB (memory_limit) = 224.28 KiB; 8 of 8 "
        "layers over 0 KB: 8 rematerialized in ")
    assert lines[2] == ("LMS for model 'big' (batch 4): mechanism: remat everywhere: on a CPU "
                        "host memory is the device memory, so staging would save nothing")


def test_host_memory_is_the_limit_on_cpu():
    from keras_caffe.devices import device_memory

    limit, where = device_memory()
    assert 0 < limit <= 2 ** 50
    assert where in ("host RAM", "cgroup memory.max", "RLIMIT_DATA", "RLIMIT_AS")


# -- the plan ------------------------------------------------------------------------------


def test_segments_of_a_chain_are_about_sqrt_n():
    model = conv_stack(depth=16, channels=8, size=16)
    blocks = LMS(0, batch=4).apply(model).caffe_lms.blocks[4]
    remat = [b for b in blocks if b.kind == "remat"]
    n = sum(len(b.nodes) for b in remat)
    assert n == 34  # 16 convs, 16 relus, pool, fc
    assert math.sqrt(n) - 2 <= len(remat) <= math.sqrt(n) + 2
    assert all(len(b.nodes) >= 2 for b in remat)
    assert all(len(b.inputs) == 1 and len(b.outputs) == 1 for b in remat)


def test_threshold_selects_the_large_layers():
    # 16x16x8 maps at batch 4 are 32 KiB; the pool and fc outputs are tiny
    model = conv_stack(depth=4, channels=8, size=16)
    blocks = LMS(32, batch=4).apply(model).caffe_lms.blocks[4]
    assert [(b.kind, b.names) for b in blocks] == [("plain", "conv0..fc")]
    LMS.remove(model)
    blocks = LMS(31.9, batch=4).apply(model).caffe_lms.blocks[4]
    kinds = {node.name: b.kind for b in blocks for node in b.nodes}
    assert kinds == {**{f"{t}{i}": "remat" for t in ("conv", "relu") for i in range(4)},
                     "pool": "plain", "fc": "plain"}


def test_stateful_layers_are_never_rematerialized():
    model = conv_stack(depth=4, channels=8, size=16, dropout=True, batchnorm=True)
    blocks = LMS(0, batch=4).apply(model).caffe_lms.blocks[4]
    for block in blocks:
        for node in block.nodes:
            if node.name in ("bn1", "drop2"):
                assert block.kind == "plain", (node.name, block.kind)
    assert any(b.kind == "remat" for b in blocks)


def test_per_sample_layers():
    from keras_caffe.layers.conv import Convolution
    from keras_caffe.layers.elementwise import Bias, Eltwise, ReLU
    from keras_caffe.layers.lrn import LRN
    from keras_caffe.layers.pooling import Pooling
    from keras_caffe.lms.plan import model_graph

    class Subclassed(keras.layers.Conv2D):
        pass

    a = inputs = keras.Input((8, 8, 4))
    layers = {
        "conv": keras.layers.Conv2D(4, 3, padding="same"), "relu": keras.layers.ReLU(),
        "caffe_conv": Convolution(4, 3, pad=1), "caffe_relu": ReLU(), "lrn": LRN(3),
        "caffe_pool": Pooling("MAX", 3, stride=1, pad=1), "bias": Bias(axes=(3,)),
        "subclassed": Subclassed(4, 3, padding="same"),
        "bn": keras.layers.BatchNormalization(),
        "lambda": keras.layers.Lambda(lambda t: t - keras.ops.mean(t, axis=0)),
    }
    for name, layer in layers.items():
        layer.name = name
        a = layer(a)
    joined = {"concat_channels": keras.layers.Concatenate(axis=-1, name="concat_channels"),
              "concat_batch": keras.layers.Concatenate(axis=-4, name="concat_batch"),
              "eltwise": Eltwise("SUM", name="eltwise")}
    outs = [layer([a, inputs]) for layer in joined.values()]
    outs.append(keras.layers.Softmax(axis=0, name="softmax_batch")(a))
    outs.append(keras.layers.Softmax(axis=-1, name="softmax_channels")(a))
    graph = model_graph(keras.Model(inputs, outs))
    per_sample = {n.name: n.per_sample for n in graph.nodes}
    assert per_sample == {
        "conv": True, "relu": True, "caffe_conv": True, "caffe_relu": True, "lrn": True,
        "caffe_pool": True, "bias": False, "subclassed": False, "bn": False, "lambda": False,
        "concat_channels": True, "concat_batch": False, "eltwise": True,
        "softmax_batch": False, "softmax_channels": True}


def test_remat_segments_run_in_parts_of_the_batch_under_eigen():
    """A 3x3 convolution of 8 channels holds 9 activations of im2col matrix
    under Eigen: its segments run in ceil(9 / 2) = 5 parts, at most the batch."""
    from keras_caffe.lms.plan import model_graph, plan

    model = conv_stack(depth=6, channels=8, size=16)
    remat = lambda nodes, batch: "remat"  # noqa: E731
    # batch_parts off (the default): whole
    blocks = plan(model_graph(model, eigen=True), 10, 0, remat)
    assert any(b.kind == "remat" for b in blocks) and {b.chunks for b in blocks} == {1}
    for eigen, batch, parts in ((True, 10, 5), (True, 3, 3), (False, 10, 1)):
        blocks = plan(model_graph(model, eigen=eigen), batch, 0, remat, parts=True)
        convolving = [b for b in blocks if any(n.name.startswith("conv") for n in b.nodes)]
        assert {b.kind for b in convolving} == {"remat"}
        assert {b.chunks for b in convolving} == {parts}
        # the segment of pool and fc holds no workspace
        assert {b.chunks for b in blocks if b not in convolving} == {1}
    # a 1x1 convolution's matrix is one activation: no parts
    x = inputs = keras.Input((16, 16, 8))
    for i in range(4):
        x = keras.layers.ReLU()(keras.layers.Conv2D(8, 1, name=f"pointwise{i}")(x))
    pointwise = keras.Model(inputs, x)
    blocks = plan(model_graph(pointwise, eigen=True), 10, 0, remat, parts=True)
    assert {b.chunks for b in blocks} == {1}
    # a layer that mixes samples keeps its segment whole
    x = inputs = keras.Input((16, 16, 8))
    for i in range(4):
        x = keras.layers.Conv2D(8, 3, padding="same")(x)
        x = keras.layers.Lambda(lambda t: t - keras.ops.mean(t, axis=0))(x)
    mixed = keras.Model(inputs, x)
    blocks = plan(model_graph(mixed, eigen=True), 10, 0, remat, parts=True)
    assert any(b.kind == "remat" for b in blocks) and {b.chunks for b in blocks} == {1}


def test_batch_parts():
    from keras_caffe.lms.execution import batch_parts

    x10, y10 = np.zeros((10, 3), "float32"), np.zeros((10, 1), "float32")
    assert batch_parts([x10, y10], 4) == [3, 3, 2, 2]
    assert batch_parts([x10], 5) == [2] * 5
    assert batch_parts([x10], 30) == [1] * 10
    assert batch_parts([x10], 1) is None
    assert batch_parts([x10, np.zeros((9, 3))], 2) is None
    assert batch_parts([keras.KerasTensor((None, 3))], 2) is None


def test_the_log_gives_the_parts_under_eigen(caplog):
    with caplog.at_level(logging.INFO, logger="keras_caffe.lms"):
        LMS(0, batch=10, batch_parts=True).apply(conv_stack(6, 8, 16, name="parted"))
    # 5 parts of 2 samples: 2/10 of the 10 x 16 x 16 x 72 float32 matrix
    note = ("4 rematerialized segment(s) run in up to 5 parts of the batch, so a recomputed "
            "convolution holds at most 144.00 KiB")
    assert (note in caplog.text) == EIGEN, caplog.text


def test_forced_staging_stages_each_large_layer():
    model = conv_stack(depth=2, channels=8, size=16)
    blocks = LMS(0, batch=4, mechanism="stage").apply(model).caffe_lms.blocks[4]
    assert [b.kind for b in blocks] == ["stage"] * 6


# -- applying ------------------------------------------------------------------------------


def test_context_manager_applies_to_models_built_inside(caplog):
    keras_model = conv_stack(depth=2, channels=4, size=8, name="outside")
    with caplog.at_level(logging.INFO, logger="keras_caffe.lms"):
        with LMS(0, batch=2) as lms:
            assert current() is lms
            functional = conv_stack(depth=2, channels=4, size=8, name="inside")
            sequential = keras.Sequential([keras.Input((8, 8, 4)), keras.layers.Conv2D(4, 3),
                                           keras.layers.ReLU(), keras.layers.Flatten(),
                                           keras.layers.Dense(2)], name="seq")
        assert current() is None
    assert "caffe_lms" in vars(functional) and "caffe_lms" in vars(sequential)
    assert "caffe_lms" not in vars(keras_model)
    models = {r.getMessage().split("'")[1] for r in caplog.records}
    assert models == {"inside", "seq"}


def test_context_manager_reaches_import_model(golden):
    with LMS(0):
        model = keras_caffe.import_model(str(golden / CIFAR))
    assert model.caffe_lms.caffe_net is not None  # planned with analyze's |D|


def test_context_manager_warns_for_a_subclassed_model(caplog):
    with caplog.at_level(logging.WARNING, logger="keras_caffe.lms"):
        with LMS(0):
            net = SubclassedNet()
    assert "call" not in vars(net)
    assert "LMS not applied to" in caplog.text and "no functional graph" in caplog.text


def test_model_saves_and_loads_as_without_lms(tmp_path):
    model = conv_stack(depth=3, channels=4, size=8)
    x, _ = batch_for(model, 3)
    before = model.predict(x, verbose=0)
    LMS(0).apply(model)
    np.testing.assert_array_equal(model.predict(x, verbose=0), before)
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert "call" not in vars(loaded)
    np.testing.assert_array_equal(loaded.predict(x, verbose=0), before)


def test_remove_restores_the_plain_call():
    model = conv_stack(depth=2, channels=4, size=8)
    LMS(0).apply(model)
    LMS.remove(model)
    assert "call" not in vars(model) and "caffe_lms" not in vars(model)

"""Shared parameters (``param { name: "..." }``) as Caffe's ``Net::AppendParam``
treats them (caffe/src/caffe/net.cpp): one blob, the owner's, for every
layer naming it; gradients summed; the owner's multipliers (a sharer may
give those the owner leaves out, and must agree with those it gives); the
strict or PERMISSIVE shape check; snapshots and exports as Caffe writes them.

``data/siamese_mlp.prototxt``: two towers (ip1 -> ReLU -> ip2) sharing all
four blobs, their outputs summed under a softmax loss. ip1 fixes its
multipliers; ip2 gives none and its sharer ip2_p gives them (lr 3, bias
decay 0.5), which Caffe adopts for the shared blobs.
"""

import pathlib
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import load_snapshot, save_snapshot, training_args
from keras_caffe.importers.net.weights import load_weights
from support import NETS
from support.caffe_reference import apply_update

pytestmark = pytest.mark.kernels  # parity: run under oneDNN and Eigen

DATA = NETS
NET = (DATA / "siamese_mlp.prototxt").read_text()
N, D, H, K = 16, 20, 16, 5
RNG = np.random.RandomState(41)
XA, XB = RNG.randn(N, D).astype("float32"), RNG.randn(N, D).astype("float32")
Y = RNG.randint(0, K, N)
LR_MULT = {"ip1/kernel": 1.0, "ip1/bias": 2.0, "ip2/kernel": 3.0, "ip2/bias": 3.0}
DECAY_MULT = {"ip1/kernel": 1.0, "ip1/bias": 0.0, "ip2/kernel": 1.0, "ip2/bias": 0.5}
HYPER = {
    "SGD": {"lr": 0.05, "momentum": 0.9},
    "Nesterov": {"lr": 0.05, "momentum": 0.9},
    "AdaGrad": {"lr": 0.05},
    "RMSProp": {"lr": 0.005, "rms_decay": 0.95},
    "AdaDelta": {"lr": 1.0, "momentum": 0.95, "delta": 1e-6},
    "Adam": {"lr": 0.005, "momentum": 0.9, "momentum2": 0.999},
}
WEIGHT_DECAY, CLIP, ITERATIONS = 0.01, 0.5, 5


def siamese(**kwargs):
    return keras_caffe.import_model(NET, phase="TRAIN", **kwargs)


def tower(params, x):
    w1, b1, w2, b2 = params  # Caffe's shapes: (16, 20), (16,), (5, 16), (5,)
    z1 = x @ w1.T + b1
    h = np.maximum(z1, 0.0)
    return z1, h, h @ w2.T + b2


def summed_diffs(params, xa, xb, y):
    """float64 diffs of the mean softmax loss of tower(a) + tower(b): each
    blob's diff is the sum of its two towers' (Caffe's shared diff)."""
    w1, b1, w2, b2 = params
    za, ha, oa = tower(params, xa)
    zb, hb, ob = tower(params, xb)
    s = oa + ob
    p = np.exp(s - s.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    ds = (p - np.eye(K)[y]) / len(y)
    diffs = [np.zeros_like(w1), np.zeros_like(b1), ds.T @ ha + ds.T @ hb, 2 * ds.sum(0)]
    for x, z in ((xa, za), (xb, zb)):
        dz = (ds @ w2) * (z > 0)
        diffs[0] += dz.T @ x
        diffs[1] += dz.sum(0)
    return diffs


def test_towers_hold_one_copy_of_each_blob():
    model = siamese()
    assert [w.path for w in model.weights] == list(LR_MULT)
    assert keras_caffe.param_multipliers(model) == (LR_MULT, DECAY_MULT)
    from keras_caffe.importers.net.blobs import caffe_sharers

    assert caffe_sharers(model) == {"ip1_p": "ip1", "ip2_p": "ip2"}
    # the towers compute the same function: swapping a and b gives the same sum
    out = model([XA, XB])
    np.testing.assert_allclose(model([XB, XA]), out, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("solver", list(HYPER))
def test_shared_towers_train_as_one_tower_twice_with_summed_gradients(solver):
    model = siamese()
    hp = HYPER[solver]
    kwargs = {k: v for k, v in hp.items() if k in getattr(keras_caffe, solver).solver_fields}
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    optimizer = getattr(keras_caffe, solver)(
        learning_rate=hp["lr"], weight_decay=WEIGHT_DECAY, clip_gradients=CLIP,
        lr_mult=lr_mult, decay_mult=decay_mult, **kwargs)
    model.compile(optimizer=optimizer, **training_args(model))
    caffe_init = [np.asarray(b, np.float64) for layer in ("ip1", "ip2")
                  for b in model.get_layer(layer).caffe_blobs()]
    model.fit([XA, XB], Y, batch_size=N, epochs=ITERATIONS, shuffle=False, verbose=0)
    params, state = caffe_init, {}
    for it in range(ITERATIONS):
        diffs = summed_diffs(params, XA.astype(np.float64), XB.astype(np.float64), Y)
        params = apply_update(solver, dict(hp, weight_decay=WEIGHT_DECAY), params, diffs, state,
                              it, lr_mults=list(LR_MULT.values()),
                              decay_mults=list(DECAY_MULT.values()), clip_gradients=CLIP)
    assert state["clipped"] >= 1  # clipping sees the summed diff
    ours = [b for layer in ("ip1", "ip2") for b in model.get_layer(layer).caffe_blobs()]
    for a, b in zip(ours, params):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-6)


def test_keras_file_keeps_the_sharing(tmp_path):
    model = siamese()
    model.save(tmp_path / "siamese.keras")
    again = keras.models.load_model(tmp_path / "siamese.keras")
    assert [w.path for w in again.weights] == list(LR_MULT)
    np.testing.assert_array_equal(again([XA, XB]), model([XA, XB]))


def test_export_writes_every_layer_as_caffe_and_imports_back_bit_exactly(tmp_path):
    model = siamese()
    path = keras_caffe.export_caffemodel(model, tmp_path / "siamese.caffemodel")
    stored = load_weights(path)
    # Caffe's Net::ToProto writes the sharers' blobs too, in the net's order
    assert list(stored) == ["ip1", "ip2", "ip1_p", "ip2_p"]
    for owner in ("ip1", "ip2"):
        for a, b in zip(stored[owner], stored[owner + "_p"]):
            np.testing.assert_array_equal(a, b)
    again = siamese()
    keras_caffe.importers.net.importing.load_into(again, stored)
    for a, b in zip(again.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the owners' blobs alone are all the net needs
        keras_caffe.importers.net.importing.load_into(
            again, {k: [b * 2 for b in v] for k, v in stored.items() if not k.endswith("_p")})
    np.testing.assert_array_equal(again.get_layer("ip1").caffe_blobs()[0], stored["ip1"][0] * 2)


def test_a_sharer_later_in_the_file_wins_as_in_caffe():
    model = siamese()
    blobs = {"ip1": [np.ones((16, 20)), np.ones(16)], "ip2": [np.ones((5, 16)), np.ones(5)],
             "ip1_p": [np.full((16, 20), 3.0), np.full(16, 3.0)]}
    keras_caffe.importers.net.importing.load_into(model, blobs)
    np.testing.assert_array_equal(model.get_layer("ip1").caffe_blobs()[0], 3.0)


@pytest.mark.parametrize("fmt", ["caffe", "caffe_hdf5"])
def test_snapshot_holds_one_history_per_shared_blob_and_resumes(tmp_path, fmt):
    import h5py

    model = siamese()
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    optimizer = keras_caffe.Adam(learning_rate=0.01, lr_mult=lr_mult, decay_mult=decay_mult)
    model.compile(optimizer=optimizer, **training_args(model))
    model.fit([XA, XB], Y, batch_size=N, epochs=3, shuffle=False, verbose=0)
    files = save_snapshot(model, optimizer, str(tmp_path / "s"), format=fmt)
    if fmt == "caffe_hdf5":
        with h5py.File(files.weights, "r") as f:  # Net::ToHDF5: owners' params only
            assert {k: len(f["data"][k]) for k in f["data"]} == {
                "ip1": 2, "ip2": 2, "ip1_p": 0, "ip2_p": 0, "loss": 0, "pair": 0,
                "relu1": 0, "relu1_p": 0, "sum": 0}
        with h5py.File(files.solverstate, "r") as f:
            assert len(f["history"]) == 8  # Adam: m and v of the 4 learnable params
    else:
        from keras_caffe.proto import caffe_pb2

        state = caffe_pb2.SolverState()
        state.ParseFromString(pathlib.Path(files.solverstate).read_bytes())
        assert len(state.history) == 8
        assert list(load_weights(files.weights)) == ["ip1", "ip2", "ip1_p", "ip2_p"]
    resumed = siamese()
    optimizer2 = keras_caffe.Adam(learning_rate=0.01, lr_mult=lr_mult, decay_mult=decay_mult)
    resumed.compile(optimizer=optimizer2, **training_args(resumed))
    load_snapshot(files.solverstate, resumed, optimizer2)
    for a, b in zip(resumed.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)
    model.fit([XA, XB], Y, batch_size=N, epochs=2, shuffle=False, verbose=0)
    resumed.fit([XA, XB], Y, batch_size=N, epochs=2, shuffle=False, verbose=0)
    for a, b in zip(resumed.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


CONV_NET = """
layer {{ name: "in" type: "Input" top: "a" top: "b"
  input_param {{ shape {{ dim: 2 dim: 3 dim: 8 dim: 8 }} shape {{ dim: 2 dim: {cb} dim: 8 dim: 8 }} }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "a" top: "c1"
  param {{ name: "w" }} param {{ name: "b" }}
  convolution_param {{ num_output: 4 kernel_size: 3 weight_filler {{ type: "xavier" }} }} }}
layer {{ name: "conv1_p" type: "Convolution" bottom: "b" top: "c1_p"
  {params}
  convolution_param {{ num_output: 4 kernel_size: 3 {extra} }} }}
"""


def conv_net(params='param { name: "w" } param { name: "b" }', extra="", cb=3):
    return CONV_NET.format(params=params, extra=extra, cb=cb)


def one_tower(size, data_format):
    text = f"""
layer {{ name: "in" type: "Input" top: "a" input_param {{ shape {{ dim: 2 dim: 3 dim: {size} dim: {size} }} }} }}
layer {{ name: "conv1" type: "Convolution" bottom: "a" top: "c1"
  convolution_param {{ num_output: 4 kernel_size: 3 }} }}
"""
    return keras_caffe.import_model(text, data_format=data_format)


@pytest.mark.parametrize("data_format", ["channels_last", "channels_first"])
def test_conv_towers_share_and_sum_their_gradients(data_format):
    """Two convolutions sharing w and b, the sharer reading a larger image:
    the gradient of each shared blob is the sum of the two towers' (each
    computed by a one-tower net holding the same weights)."""
    text = conv_net().replace("dim: 2 dim: 3 dim: 8 dim: 8 } }", "dim: 2 dim: 3 dim: 11 dim: 11 } }")
    model = keras_caffe.import_model(text, outputs=["c1", "c1_p"], data_format=data_format)
    assert len(model.weights) == 2
    last = data_format == "channels_last"
    a = RNG.randn(*((2, 8, 8, 3) if last else (2, 3, 8, 8))).astype("float32")
    b = RNG.randn(*((2, 11, 11, 3) if last else (2, 3, 11, 11))).astype("float32")
    with tf.GradientTape() as tape:
        out = model([a, b])
        loss = tf.reduce_sum(out["c1"] ** 2) + tf.reduce_sum(out["c1_p"] ** 3)
    grads = tape.gradient(loss, model.trainable_variables)
    towers = []
    for x, size, power in ((a, 8, 2), (b, 11, 3)):
        single = one_tower(size, data_format)
        single.set_weights(model.get_weights())
        with tf.GradientTape() as tape:
            part = tf.reduce_sum(single(x) ** power)
        towers.append(tape.gradient(part, single.trainable_variables))
    for g, ga, gb in zip(grads, *towers):
        np.testing.assert_allclose(g, ga + gb, rtol=1e-5, atol=1e-4)


def test_strict_shape_mismatch_is_caffes_error():
    with pytest.raises(LayerError) as err:
        keras_caffe.import_model(conv_net(cb=5), outputs=["c1", "c1_p"])
    assert str(err.value) == (
        "layer 'conv1_p': cannot share param 'w' owned by layer 'conv1'; shape mismatch. "
        "Owner layer param shape is 4 3 3 3 (108); sharing layer expects shape 4 5 3 3 (180)")


def test_permissive_count_mismatch_is_caffes_error():
    params = 'param { name: "w" share_mode: PERMISSIVE } param { name: "b" }'
    with pytest.raises(LayerError) as err:
        keras_caffe.import_model(conv_net(params=params, cb=5), outputs=["c1", "c1_p"])
    assert str(err.value) == (
        "layer 'conv1_p': cannot share param 'w' owned by layer 'conv1'; count mismatch. "
        "Owner layer param shape is 4 3 3 3 (108); sharing layer shape is 4 5 3 3 (180)")


def test_permissive_share_of_equal_shapes_is_taken():
    params = 'param { name: "w" share_mode: PERMISSIVE } param { name: "b" }'
    model = keras_caffe.import_model(conv_net(params=params), outputs=["c1", "c1_p"])
    assert len(model.weights) == 2


def test_permissive_share_of_another_shape_is_refused_with_why():
    text = """
layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 12 } } }
layer { name: "ip" type: "InnerProduct" bottom: "a" top: "x" param { name: "w" }
  inner_product_param { num_output: 6 bias_term: false } }
layer { name: "ip_p" type: "InnerProduct" bottom: "x" top: "y"
  param { name: "w" share_mode: PERMISSIVE } inner_product_param { num_output: 12 bias_term: false } }
"""
    with pytest.raises(LayerError, match=r"layer 'ip_p': shares param 'w' with layer 'ip' under "
                                         r"PERMISSIVE as shape \(12, 6\) \(the owner's is "
                                         r"\(6, 12\)\); .*needs equal shapes"):
        keras_caffe.import_model(text)


def test_sharing_only_some_blobs_is_refused_with_why():
    with pytest.raises(LayerError, match=r"layer 'conv1_p': shares only some of its 2 blobs with "
                                         r"layer 'conv1' \(blob 0: 'conv1' blob 0, blob 1: its "
                                         r"own\)"):
        keras_caffe.import_model(conv_net(params='param { name: "w" }'), outputs=["c1", "c1_p"])


def test_sharing_with_another_configuration_is_refused_with_what_differs():
    with pytest.raises(LayerError, match=r"layer 'conv1_p': shares its parameters with layer "
                                         r"'conv1' but is configured differently \(stride: "
                                         r"\(2, 2\) vs \(1, 1\)\)"):
        keras_caffe.import_model(conv_net(extra="stride: 2"), outputs=["c1", "c1_p"])


def test_mismatched_multipliers_are_caffes_error():
    text = NET.replace('param { name: "ip1_w" }', 'param { name: "ip1_w" lr_mult: 5 }')
    with pytest.raises(LayerError) as err:
        keras_caffe.import_model(text, phase="TRAIN")
    assert str(err.value) == ("layer 'ip1_p': shared param 'ip1_w' has mismatched lr_mult: "
                              "5 here, 1 in layer 'ip1'")


def test_a_batchnorm_with_named_params_is_not_fused():
    text = """
layer { name: "in" type: "Input" top: "a" input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }
layer { name: "bn" type: "BatchNorm" bottom: "a" top: "a"
  param { name: "m" lr_mult: 0 } param { name: "v" lr_mult: 0 } param { name: "f" lr_mult: 0 } }
layer { name: "sc" type: "Scale" bottom: "a" top: "a" scale_param { bias_term: true } }
"""
    model = keras_caffe.import_model(text)
    assert [type(layer).__name__ for layer in model.layers[1:]] == ["BatchNorm", "Scale"]


def test_time_runs_a_train_net_whose_labels_come_from_an_input_layer():
    """``keras-caffe time`` feeds label tops of Input layers zeros (class 0),
    as a fresh Caffe blob holds; it used to fail with a KeyError inside
    TensorFlow."""
    import math

    from keras_caffe.training.timing import time_net

    report = time_net(NET, iterations=1, phase="TRAIN")
    assert math.isfinite(report.initial_loss) and report.initial_loss > 0
    assert {"ip1", "ip2"} <= {t.name for t in report.layers}

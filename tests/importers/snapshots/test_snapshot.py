"""Snapshots: Caffe's own files resume into Keras with Caffe's numbers; our
files in all three formats round-trip bitwise, parse as Caffe's, survive a
crash mid-write, and bad files are refused with errors naming them."""

import os
import re
import shutil

import h5py
import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import ArgumentError
from keras_caffe.importers import training_args
from keras_caffe.importers.snapshots.files import (SnapshotError, latest_snapshot, list_snapshots,
                                            load_snapshot, save_snapshot, snapshot_paths)
from keras_caffe.importers.snapshots.caffe_format import EXTRA_FIELD, current_step
from keras_caffe.proto import caffe_pb2
from support import golden_resume, golden_train_shapes, tiny_mlp

CASES = ["sgd_binaryproto", "sgd_hdf5", "adam_binaryproto", "adam_hdf5",
         "sgd_binaryproto_fullbatch64", "adam_hdf5_fullbatch64"]
SOLVERS = [keras_caffe.SGD, keras_caffe.Nesterov, keras_caffe.AdaGrad, keras_caffe.RMSProp,
           keras_caffe.AdaDelta, keras_caffe.Adam]
FORMATS = ["caffe", "caffe_hdf5", "keras"]

NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 16 dim: 20 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 16 } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 5 } }
"""

CONV_NET = """
name: "convbn"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 } }
layer { name: "conv1/bn" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "conv1/scale" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "fc" type: "InnerProduct" bottom: "conv1" top: "fc" inner_product_param { num_output: 3 } }
"""


# -- helpers ------------------------------------------------------------------------


def caffe_solverstate(folder, iteration=10):
    suffix = ".solverstate.h5" if "hdf5" in folder.name else ".solverstate"
    return folder / "snap" / f"run_iter_{iteration}{suffix}"


def blobs_of(model):
    """Caffe blobs ``ip1_w`` (out, in) etc. of the tiny net."""
    out = {}
    for layer in ("ip1", "ip2"):
        out[f"{layer}_w"], out[f"{layer}_b"] = model.get_layer(layer).caffe_blobs()
    return out


def history_of(model, optimizer):
    """The optimizer's slots as Caffe's history list (Caffe's layouts)."""
    out = []
    for slot in optimizer.slot_names:
        for layer in ("ip1", "ip2"):
            keras_layer = model.get_layer(layer)
            values = [optimizer.slot(getattr(optimizer, slot), v).numpy()
                      for v in keras_layer.caffe_variables()]
            out.extend(keras_layer.caffe_from_keras_weights(values))
    return out


def tiny_model(solver=keras_caffe.SGD, net=NET, **kwargs):
    model = keras_caffe.import_model(net, phase="TRAIN")
    optimizer = solver(**kwargs)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def randomize(model, optimizer, rng, everything=False):
    """Random weights, slots and iteration (all optimizer variables with
    ``everything``; the Caffe formats hold only the slots and ``iter``)."""
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype(w.dtype))
    variables = list(optimizer.variables) if everything else [
        v for slot in getattr(optimizer, "slot_names", ()) for v in getattr(optimizer, slot)]
    for v in variables:
        if "int" in str(v.dtype):
            v.assign(rng.integers(1, 1000))
        else:
            v.assign(np.abs(rng.standard_normal(v.shape)).astype(v.dtype))
    optimizer.iterations.assign(int(rng.integers(1, 1000)))


def snapshot_values(model, optimizer, everything=False):
    variables = list(optimizer.variables) if everything else [
        v for slot in optimizer.slot_names for v in getattr(optimizer, slot)]
    return [np.array(v.numpy()) for v in list(model.weights) + variables + [optimizer.iterations]]


def assert_bitwise(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert x.tobytes() == y.tobytes()


def without_temp_files(directory):
    leftovers = [n for n in os.listdir(directory) if n.startswith(".tmp-")]
    assert leftovers == []


# -- Caffe's own snapshots resume in Keras with Caffe's numbers ------------------------

def test_every_golden_snapshot_case_is_covered(golden):
    on_disk = sorted(p.name for p in (golden / "snapshot").iterdir() if p.is_dir())
    assert on_disk == sorted(CASES)


@pytest.mark.parametrize("case", CASES)
def test_resume_from_caffe_snapshot_equals_caffe_continuous_run(golden, case):
    folder = golden / "snapshot" / case
    model, optimizer = golden_resume(folder)
    state = load_snapshot(caffe_solverstate(folder), model, optimizer)
    assert state == {}
    assert int(optimizer.iterations) == 10
    weights10 = np.load(folder / "iter10_weights.npz")
    for name, value in blobs_of(model).items():
        np.testing.assert_array_equal(value, weights10[name], err_msg=name)
    saved = np.load(folder / "iter10_solverstate.npz")
    history = history_of(model, optimizer)
    assert len(history) == len([k for k in saved if k.startswith("history_")])
    for i, blob in enumerate(history):
        np.testing.assert_array_equal(blob, saved[f"history_{i}"], err_msg=f"history {i}")

    # Caffe's iteration k reads rows 16k..16k+15 (mod 64); full batch: all 64.
    data = np.load(folder / "data.npz")
    x, y = data["data"], data["label"].astype("int32")
    batch = 64 if case.endswith("fullbatch64") else 16
    for k in range(10, 20):
        rows = np.arange(batch * k, batch * (k + 1)) % 64
        model.train_on_batch(x[rows], y[rows])
    assert int(optimizer.iterations) == 20
    ours = blobs_of(model)
    continuous = np.load(folder / "continuous_iter20_weights.npz")
    for name in ours:
        np.testing.assert_allclose(ours[name], continuous[name], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{case}: {name} vs Caffe's continuous run")
    if case.endswith("fullbatch64"):
        resumed = np.load(folder / "iter20_weights.npz")  # Caffe's own resume
        for name in ours:
            np.testing.assert_allclose(ours[name], resumed[name], rtol=1e-5, atol=1e-6)


def test_learned_net_is_found_from_the_current_directory_as_caffe_does(golden, monkeypatch):
    folder = golden / "snapshot" / "sgd_binaryproto"
    model, optimizer = golden_resume(folder)
    monkeypatch.chdir(folder)  # learned_net is "snap/run_iter_10.caffemodel"
    load_snapshot("snap/run_iter_10.solverstate", model, optimizer)
    np.testing.assert_array_equal(blobs_of(model)["ip2_w"],
                                  np.load(folder / "iter10_weights.npz")["ip2_w"])


@pytest.mark.parametrize("case", ["adadelta", "sgd_lr_multistep", "sgd_itersize2"])
def test_our_history_after_training_equals_caffes_snapshot(golden, case, tmp_path):
    """30 iterations as Caffe ran them, then a Caffe snapshot: the history
    (AdaDelta's two sets in Caffe's order), iter and current_step equal the
    solverstate Caffe's binary wrote (solvers/<case>/bin_run)."""
    folder = golden / "solvers" / case
    model = keras_caffe.import_model(folder / "train_net.prototxt", phase="TRAIN",
                                     input_shapes=golden_train_shapes())
    init = np.load(folder / "init.npz")
    for layer in ("ip1", "ip2"):
        model.get_layer(layer).set_caffe_blobs([init[f"{layer}_w"], init[f"{layer}_b"]])
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    optimizer = keras_caffe.optimizer_from_solver(folder / "solver.prototxt",
                                                  lr_mult=lr_mult, decay_mult=decay_mult)
    model.compile(optimizer=optimizer, **training_args(model))
    data = np.load(folder / "data.npz")
    x, y = data["data"], data["label"].astype("int32")
    for k in range(30 * optimizer.iter_size):
        rows = np.arange(16 * k, 16 * (k + 1)) % 64
        model.train_on_batch(x[rows], y[rows])
    files = save_snapshot(model, optimizer, tmp_path / "snap", 30, format="caffe")
    ours, caffe = caffe_pb2.SolverState(), caffe_pb2.SolverState()
    ours.ParseFromString(open(files.solverstate, "rb").read())
    caffe.ParseFromString(open(folder / "bin_run" / "snap_iter_30.solverstate", "rb").read())
    assert (ours.iter, ours.current_step) == (caffe.iter, caffe.current_step) == \
        (30, 2 if case == "sgd_lr_multistep" else 0)
    assert len(ours.history) == len(caffe.history) == 4 * len(optimizer.slot_names)
    for i, (a, b) in enumerate(zip(ours.history, caffe.history)):
        assert list(a.shape.dim) == list(b.shape.dim)
        np.testing.assert_allclose(a.data, b.data, rtol=1e-5, atol=1e-7, err_msg=f"history {i}")


def test_current_step_is_caffes():
    step = keras_caffe.schedules.Step(0.1, gamma=0.5, stepsize=10)
    multi = keras_caffe.schedules.MultiStep(0.1, gamma=0.5, stepvalue=[8, 20])
    assert [current_step(keras_caffe.SGD(step), n) for n in (0, 10, 11, 30)] == [0, 0, 1, 2]
    assert [current_step(keras_caffe.SGD(multi), n) for n in (0, 8, 9, 21, 30)] == [0, 0, 1, 2, 2]
    warm = keras_caffe.schedules.Warmup(multi, warmup_iter=5)
    assert current_step(keras_caffe.SGD(warm), 9) == 1
    assert current_step(keras_caffe.SGD(0.1), 30) == 0


# -- our Caffe-format files are Caffe's --------------------------------------------------

@pytest.mark.parametrize("case", ["sgd_binaryproto", "adam_binaryproto"])
def test_binaryproto_solverstate_is_caffes_bytes_plus_one_ignored_field(golden, case, tmp_path,
                                                                       monkeypatch):
    folder = golden / "snapshot" / case
    model, optimizer = golden_resume(folder)
    load_snapshot(caffe_solverstate(folder), model, optimizer)
    monkeypatch.chdir(tmp_path)
    files = save_snapshot(model, optimizer, "snap/run", 10, format="caffe", state={"pos": 160})
    assert (files.weights, files.solverstate) == ("snap/run_iter_10.caffemodel",
                                                  "snap/run_iter_10.solverstate")
    ours = open(files.solverstate, "rb").read()
    caffe = open(caffe_solverstate(folder), "rb").read()
    assert ours.startswith(caffe)  # iter, learned_net, history, current_step: byte for byte
    parsed = caffe_pb2.SolverState()
    parsed.ParseFromString(ours)  # plain caffe_pb2 reads it; our JSON is one unknown field
    assert parsed.iter == 10 and parsed.learned_net == "snap/run_iter_10.caffemodel"
    extra = ours[len(caffe):]
    tag = EXTRA_FIELD << 3 | 2
    head = bytes([(tag >> (7 * i) & 0x7F) | (0x80 if tag >> (7 * (i + 1)) else 0)
                  for i in range((tag.bit_length() + 6) // 7)])
    assert extra.startswith(head) and b'"state": {"pos": 160}' in extra
    # the weights: Caffe's Net::ToProto, byte for byte (tests/importers/net/test_caffemodel_bytes.py)
    assert open(files.weights, "rb").read() == \
        open(folder / "snap" / "run_iter_10.caffemodel", "rb").read()
    assert load_snapshot(files.solverstate, model, optimizer) == {"pos": 160}


def h5_layout(path):
    items = {}

    def visit(name, obj):
        if isinstance(obj, h5py.Dataset):
            t = obj.id.get_type()
            pad = t.get_strpad() if isinstance(t, h5py.h5t.TypeStringID) else None
            items[name] = (obj.dtype.str, obj.shape, t.get_size(), pad)
        else:
            items[name] = "group"
    with h5py.File(path, "r") as f:
        f.visititems(visit)
    return items


@pytest.mark.parametrize("case", ["adam_hdf5", "sgd_hdf5"])
def test_hdf5_files_have_caffes_layout(golden, case, tmp_path, monkeypatch):
    folder = golden / "snapshot" / case
    model, optimizer = golden_resume(folder)
    load_snapshot(caffe_solverstate(folder), model, optimizer)
    monkeypatch.chdir(tmp_path)
    files = save_snapshot(model, optimizer, "snap/run", 10, format="caffe_hdf5")
    caffe_state, caffe_weights = caffe_solverstate(folder), folder / "snap/run_iter_10.caffemodel.h5"
    ours = h5_layout(files.solverstate)
    assert ours.pop("keras_caffe_state")[3] == h5py.h5t.STR_NULLTERM
    assert ours == h5_layout(caffe_state)
    assert h5_layout(files.weights) == h5_layout(caffe_weights)
    with h5py.File(files.solverstate, "r") as a, h5py.File(caffe_state, "r") as b:
        for key in ("iter", "current_step", "learned_net"):
            assert np.array_equal(a[key][()], b[key][()]), key
        for key in b["history"]:
            assert a["history"][key][()].tobytes() == b["history"][key][()].tobytes()
    with h5py.File(files.weights, "r") as a, h5py.File(caffe_weights, "r") as b:
        for layer in ("ip1", "ip2"):
            for i in ("0", "1"):
                assert a["data"][layer][i][()].tobytes() == b["data"][layer][i][()].tobytes()


# -- round trips -------------------------------------------------------------------------

@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.__name__)
def test_round_trip_is_bitwise_in_every_format(solver, tmp_path):
    model, optimizer = tiny_model(solver)
    rng = np.random.default_rng(0)
    for format in FORMATS:
        everything = format == "keras"
        randomize(model, optimizer, rng, everything)
        before = snapshot_values(model, optimizer, everything)
        state = {"format": format, "rows": [1, 2, 3], "nested": {"seed": 7}}
        files = save_snapshot(model, optimizer, tmp_path / format / "run", None, format=format,
                              state=state)
        assert files.iteration == int(optimizer.iterations)
        assert (files.weights, files.solverstate) == snapshot_paths(
            tmp_path / format / "run", files.iteration, format)
        randomize(model, optimizer, rng, everything)
        assert load_snapshot(files.solverstate, model, optimizer) == state
        assert_bitwise(snapshot_values(model, optimizer, everything), before)
        without_temp_files(tmp_path / format)


def test_batchnorm_scale_net_round_trips_in_caffe_formats(tmp_path):
    model, optimizer = tiny_model(keras_caffe.Adam, net=CONV_NET)
    assert "BatchNormScale" in [type(layer).__name__ for layer in model.layers]
    rng = np.random.default_rng(1)
    for format in ("caffe", "caffe_hdf5"):
        randomize(model, optimizer, rng)
        before = snapshot_values(model, optimizer)
        files = save_snapshot(model, optimizer, tmp_path / "bn", None, format=format)
        if format == "caffe":
            state = caffe_pb2.SolverState()
            state.ParseFromString(open(files.solverstate, "rb").read())
            # conv (2), BatchNorm (3 statistics), Scale (2), fc (2); m then v.
            shapes = [tuple(b.shape.dim) for b in state.history]
            param_shapes = [(4, 3, 3, 3), (4,), (4,), (4,), (1,), (4,), (4,), (3, 64), (3,)]
            assert shapes == param_shapes * 2
            for i in (2, 3, 4, 11, 12, 13):  # the statistics' history: zeros
                assert not np.any(state.history[i].data)
            conv = model.get_layer("conv1")
            m = optimizer.slot(optimizer.m, conv.kernel).numpy()  # (kh, kw, in, out)
            np.testing.assert_array_equal(
                np.reshape(state.history[0].data, (4, 3, 3, 3)), m.transpose(3, 2, 0, 1))
            net = caffe_pb2.NetParameter()
            net.ParseFromString(open(files.weights, "rb").read())
            assert [(layer.name, layer.type, len(layer.blobs)) for layer in net.layer] == [
                ("data", "Input", 0), ("conv1", "Convolution", 2), ("conv1/bn", "BatchNorm", 3),
                ("conv1/scale", "Scale", 2), ("relu1", "ReLU", 0), ("fc", "InnerProduct", 2)]
        randomize(model, optimizer, rng)
        load_snapshot(files.solverstate, model, optimizer)
        assert_bitwise(snapshot_values(model, optimizer), before)


def test_keras_optimizer_and_plain_model_round_trip(tmp_path):
    model = tiny_mlp()
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(2)
    randomize(model, optimizer, rng, everything=True)
    before = [np.array(v.numpy()) for v in list(model.weights) + list(optimizer.variables)]
    files = save_snapshot(model, optimizer, tmp_path / "k", None, state={"epoch": 3})
    with h5py.File(files.solverstate, "r") as f:
        assert f.attrs["format"] == "keras-caffe-snapshot" and f.attrs["version"] == 1
        assert f.attrs["weights_file"] == os.path.basename(files.weights)
        assert "adam/ip1_kernel_momentum" in f["optimizer_variables"]
    randomize(model, optimizer, rng, everything=True)
    assert load_snapshot(files.solverstate, model, optimizer) == {"epoch": 3}
    assert_bitwise([np.array(v.numpy()) for v in list(model.weights) + list(optimizer.variables)],
                   before)


@pytest.mark.tensorflow_only  # keras_caffe.distributed: Horovod
def test_a_distributed_optimizer_is_stored_as_its_inner_one(tmp_path):
    """A ``DistributedOptimizer`` (found through its ``inner_optimizer``: the
    snapshots never import keras_caffe.distributed) holds no state of its
    own: its snapshot is the inner optimizer's and restores into a bare one,
    as a horovodrun snapshot does in a single process."""
    from keras_caffe.distributed import DistributedOptimizer

    model, inner = tiny_model(keras_caffe.SGD, momentum=0.9)
    rng = np.random.default_rng(4)
    randomize(model, inner, rng)
    before = snapshot_values(model, inner)
    files = save_snapshot(model, DistributedOptimizer(inner), tmp_path / "d", None,
                          format="keras")
    model2, bare = tiny_model(keras_caffe.SGD, momentum=0.9)
    load_snapshot(files.solverstate, model2, bare)
    assert_bitwise(snapshot_values(model2, bare), before)


def test_a_loss_scale_optimizer_keeps_its_loss_scale(tmp_path):
    """Keras's ``LossScaleOptimizer`` also has an ``inner_optimizer`` but holds
    state of its own: the snapshot stores it whole, loss scale included."""
    model, inner = tiny_model(keras_caffe.SGD, momentum=0.9)
    optimizer = keras.optimizers.LossScaleOptimizer(inner)
    optimizer.build(model.trainable_variables)
    optimizer.dynamic_scale.assign(1024.0)
    files = save_snapshot(model, optimizer, tmp_path / "ls", None, format="keras")
    optimizer.dynamic_scale.assign(8.0)
    load_snapshot(files.solverstate, model, optimizer)
    assert float(optimizer.dynamic_scale.numpy()) == 1024.0


def test_yellowfin_resumes_exactly(tmp_path):
    """YellowFin's window and averages are optimizer variables: a resumed run
    continues bitwise as the uninterrupted one."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 20)).astype("float32")
    y = rng.integers(0, 5, 64).astype("int32")
    model = tiny_mlp()
    model.compile(optimizer=keras_caffe.YellowFin(curv_win_width=3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    for k in range(4):
        model.train_on_batch(x[16 * k:16 * k + 16], y[16 * k:16 * k + 16])
    files = save_snapshot(model, model.optimizer, tmp_path / "yf", 4, state={"k": 4})
    saved = [np.array(v.numpy()) for v in model.optimizer.variables]
    assert np.any(saved[[v.path for v in model.optimizer.variables].index("yellow_fin/curv_win")])

    def three_more():
        for k in range(4, 7):
            model.train_on_batch(x[16 * (k % 4):16 * (k % 4) + 16], y[16 * (k % 4):16 * (k % 4) + 16])
        return [np.array(v.numpy()) for v in list(model.weights) + list(model.optimizer.variables)]

    uninterrupted = three_more()
    assert load_snapshot(files.solverstate, model, model.optimizer) == {"k": 4}
    assert_bitwise([np.array(v.numpy()) for v in model.optimizer.variables], saved)
    assert_bitwise(three_more(), uninterrupted)


def test_iter_size_accumulators_restart_at_an_iteration_boundary(tmp_path):
    model, optimizer = tiny_model(keras_caffe.SGD, momentum=0.9, iter_size=2)
    rng = np.random.default_rng(4)
    randomize(model, optimizer, rng)
    optimizer.iterations.assign(5)
    optimizer._micro_step.assign(10)
    files = save_snapshot(model, optimizer, tmp_path / "acc", 5, format="caffe")
    optimizer._micro_step.assign(3)
    for total in optimizer._accumulators:
        total.assign(np.ones(total.shape, "float32"))
    load_snapshot(files.solverstate, model, optimizer)
    assert int(optimizer._micro_step) == 10
    assert not any(np.any(t.numpy()) for t in optimizer._accumulators)
    optimizer._micro_step.assign(11)  # between the micro-batches of iteration 5
    with pytest.raises(SnapshotError, match=r"between the micro-batches of an iteration"):
        save_snapshot(model, optimizer, tmp_path / "acc", 5, format="caffe")


def test_keras_format_allows_a_new_iter_size_only_between_iterations(tmp_path):
    model, single = tiny_model(keras_caffe.SGD, momentum=0.9)
    randomize(model, single, np.random.default_rng(7))
    single.iterations.assign(4)
    files = save_snapshot(model, single, tmp_path / "one", 4)
    _, double = tiny_model(keras_caffe.SGD, momentum=0.9, iter_size=2)
    double.build(model.trainable_variables)
    load_snapshot(files.solverstate, model, double)
    assert (int(double.iterations), int(double._micro_step)) == (4, 8)
    np.testing.assert_array_equal(double.history[0].numpy(), single.history[0].numpy())

    double._micro_step.assign(9)  # half-way through iteration 4
    double._accumulators[0].assign(np.ones((20, 16), "float32"))
    files = save_snapshot(model, double, tmp_path / "two", 4)
    with pytest.raises(SnapshotError, match=re.escape(
            f"{files.solverstate}: holds optimizer variable '{double.name}/ip1_kernel_iter_size_sum', "
            "which the optimizer does not have: the optimizer's configuration differs")):
        load_snapshot(files.solverstate, model, keras_caffe.SGD(momentum=0.9))


# -- crash safety ----------------------------------------------------------------------------

@pytest.mark.parametrize("format", FORMATS)
def test_crash_after_the_weights_leaves_the_previous_snapshot(format, tmp_path, monkeypatch):
    model, optimizer = tiny_model(keras_caffe.Adam)
    rng = np.random.default_rng(5)
    randomize(model, optimizer, rng, everything=format == "keras")
    optimizer.iterations.assign(1)
    first = save_snapshot(model, optimizer, tmp_path / "run", 1, format=format, state={"it": 1})
    good = snapshot_values(model, optimizer)

    real_replace = os.replace

    def crash_on_solverstate(src, dst):
        if ".solverstate" in os.fspath(dst):
            raise OSError("simulated crash")
        real_replace(src, dst)

    randomize(model, optimizer, rng, everything=format == "keras")
    optimizer.iterations.assign(2)
    monkeypatch.setattr(os, "replace", crash_on_solverstate)
    with pytest.raises(OSError, match="simulated crash"):
        save_snapshot(model, optimizer, tmp_path / "run", 2, format=format)
    monkeypatch.setattr(os, "replace", real_replace)
    weights2, state2 = snapshot_paths(tmp_path / "run", 2, format)
    assert os.path.exists(weights2) and not os.path.exists(state2)  # the half pair
    without_temp_files(tmp_path)
    assert list_snapshots(tmp_path / "run") == [first]
    assert latest_snapshot(tmp_path / "run") == first
    assert load_snapshot(first.solverstate, model, optimizer) == {"it": 1}
    assert_bitwise(snapshot_values(model, optimizer), good)


def test_crash_while_writing_the_weights_changes_nothing(tmp_path, monkeypatch):
    model, optimizer = tiny_model()

    def crash(src, dst):
        raise OSError("simulated crash")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match="simulated crash"):
        save_snapshot(model, optimizer, tmp_path / "run", 0, format="caffe")
    assert os.listdir(tmp_path) == []


def test_a_rewritten_weights_file_is_not_taken_for_the_old_pair(tmp_path, monkeypatch):
    """Rewriting snapshot N crashed after its new weights: the old solverstate
    N now sits next to weights it was not written with, and is refused."""
    model, optimizer = tiny_model()
    first = save_snapshot(model, optimizer, tmp_path / "run", 0, format="caffe")
    real_replace = os.replace

    def crash_on_solverstate(src, dst):
        if dst.endswith(".solverstate"):
            raise OSError("crash")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", crash_on_solverstate)
    model.get_layer("ip1").kernel.assign(np.ones((20, 16), "float32"))
    with pytest.raises(OSError, match="crash"):
        save_snapshot(model, optimizer, tmp_path / "run", 0, format="caffe")
    monkeypatch.setattr(os, "replace", real_replace)
    with pytest.raises(SnapshotError, match=re.escape(
            f"{first.weights}: is not the weights file {first.solverstate!r} was written with "
            "(its SHA-256 differs: changed, truncated or replaced since)")):
        load_snapshot(first.solverstate, model, optimizer)


# -- refusals ----------------------------------------------------------------------------------

@pytest.mark.parametrize("format", FORMATS)
def test_truncated_solverstate_is_refused(format, tmp_path):
    model, optimizer = tiny_model(keras_caffe.Adam)
    randomize(model, optimizer, np.random.default_rng(6), everything=format == "keras")
    files = save_snapshot(model, optimizer, tmp_path / "run", None, format=format)
    data = open(files.solverstate, "rb").read()
    with open(files.solverstate, "wb") as f:
        f.write(data[:len(data) // 2])
    expected = "truncated or corrupt" if format != "caffe" else \
        f"truncated at byte {len(data) // 2} of at least"
    with pytest.raises(SnapshotError, match=re.escape(f"{files.solverstate}: {expected}")):
        load_snapshot(files.solverstate, model, optimizer)


def test_garbage_and_empty_files_are_refused(tmp_path):
    model, optimizer = tiny_model()
    empty = tmp_path / "empty.solverstate"
    empty.write_bytes(b"")
    with pytest.raises(SnapshotError, match=re.escape(f"{empty}: empty file: not a solverstate")):
        load_snapshot(empty, model, optimizer)
    garbage = tmp_path / "garbage.solverstate"
    garbage.write_bytes(b"\xff\xff\xff\xff garbage")
    with pytest.raises(SnapshotError, match=re.escape(f"{garbage}: truncated or corrupt")):
        load_snapshot(garbage, model, optimizer)
    with pytest.raises(SnapshotError, match=re.escape(f"{tmp_path / 'nope'}: no such solverstate")):
        load_snapshot(tmp_path / "nope", model, optimizer)


def test_truncated_weights_file_is_refused(tmp_path):
    model, optimizer = tiny_model()
    files = save_snapshot(model, optimizer, tmp_path / "run", 0, format="caffe_hdf5")
    data = open(files.weights, "rb").read()
    with open(files.weights, "wb") as f:
        f.write(data[:200])
    with pytest.raises(SnapshotError, match=re.escape(f"{files.weights}: truncated or corrupt")):
        load_snapshot(files.solverstate, model, optimizer)


@pytest.mark.parametrize("format", ["caffe", "caffe_hdf5"])
def test_snapshot_from_another_net_names_the_first_mismatch(format, tmp_path):
    model, optimizer = tiny_model()
    files = save_snapshot(model, optimizer, tmp_path / "run", 0, format=format)
    other, other_opt = tiny_model(net=NET.replace("num_output: 16", "num_output: 8"))
    with pytest.raises(SnapshotError, match=re.escape(
            f"{files.solverstate}: snapshot from another net: history blob 0 has shape (16, 20), "
            "the net's layer 'ip1' blob 0 needs (8, 20)")):
        load_snapshot(files.solverstate, other, other_opt)
    bigger, bigger_opt = tiny_model(net=NET + 'layer { name: "ip3" type: "InnerProduct" '
                                    'bottom: "ip2" top: "ip3" inner_product_param { num_output: 4 } }')
    with pytest.raises(SnapshotError, match=re.escape(
            f"{files.solverstate}: snapshot from another net: 4 history blobs, the net has "
            "6 learnable blobs and SGD keeps 1 per blob (6 expected)")):
        load_snapshot(files.solverstate, bigger, bigger_opt)


def test_keras_snapshot_from_another_model_names_the_first_difference(tmp_path):
    model, optimizer = tiny_model()
    files = save_snapshot(model, optimizer, tmp_path / "run", 0)
    other, other_opt = tiny_model(net=NET.replace("num_output: 5", "num_output: 4"))
    with pytest.raises(SnapshotError) as info:
        load_snapshot(files.solverstate, other, other_opt)
    assert str(info.value) == (
        f"{files.solverstate}: snapshot from another model: weight 2 is 'ip2/kernel' (16, 5) "
        "in the snapshot, 'ip2/kernel' (16, 4) in the model (the shape differs)")


# -- a model rebuilt under another auto-generated name (issue 33) ----------------------------


def conv_sequential(filters=16, conv="conv1", extra=False):
    """The issue's model: a Sequential, whose auto-generated name ("sequential",
    "sequential_1"...) Keras writes into its weights' paths and slot names."""
    layers = [keras.Input((8, 8, 1)), keras.layers.Conv2D(filters, 3, name=conv),
              keras.layers.Flatten(), keras.layers.Dense(3, name="fc")]
    if extra:
        layers.append(keras.layers.Dense(2, name="fc2"))
    return keras.Sequential(layers)


def momentum_sgd(model):
    optimizer = keras.optimizers.SGD(0.01, momentum=0.9)
    optimizer.build(model.trainable_variables)
    return optimizer


def test_keras_snapshot_restores_into_the_model_rebuilt_under_another_name(tmp_path):
    """A snapshot of ``sequential_N`` restores into the same model built again
    (``sequential_M``, as a fresh process names it): weights and momentum
    bitwise, matched by layer paths and shapes as ``load_weights`` matches."""
    model = conv_sequential()
    optimizer = momentum_sgd(model)
    rng = np.random.default_rng(33)
    randomize(model, optimizer, rng, everything=True)
    assert model.weights[0].path == f"{model.name}/conv1/kernel"
    before = [np.array(v.numpy()) for v in list(model.weights) + list(optimizer.variables)]
    files = save_snapshot(model, optimizer, tmp_path / "run", None, state={"epoch": 1})
    with h5py.File(files.solverstate, "r") as f:
        assert f.attrs["model_name"] == model.name
    rebuilt = conv_sequential()
    rebuilt_optimizer = momentum_sgd(rebuilt)
    assert rebuilt.name != model.name
    assert load_snapshot(files.solverstate, rebuilt, rebuilt_optimizer) == {"epoch": 1}
    assert_bitwise([np.array(v.numpy()) for v in
                    list(rebuilt.weights) + list(rebuilt_optimizer.variables)], before)


def test_keras_snapshot_written_before_the_model_name_was_stored_still_restores(tmp_path):
    """Snapshots without ``model_name`` (written before it was stored): the
    name is the first component of their paths; they restore into the model
    they came from and into the model rebuilt under another name."""
    model = conv_sequential()
    optimizer = momentum_sgd(model)
    rng = np.random.default_rng(34)
    randomize(model, optimizer, rng, everything=True)
    before = [np.array(v.numpy()) for v in list(model.weights) + list(optimizer.variables)]
    files = save_snapshot(model, optimizer, tmp_path / "run", None)
    with h5py.File(files.solverstate, "a") as f:
        del f.attrs["model_name"]
        assert f"optimizer_variables/sgd/{model.name}_conv1_kernel_momentum" in f
    for target in (model, conv_sequential()):
        target_optimizer = optimizer if target is model else momentum_sgd(target)
        randomize(target, target_optimizer, rng, everything=True)
        load_snapshot(files.solverstate, target, target_optimizer)
        assert_bitwise([np.array(v.numpy()) for v in
                        list(target.weights) + list(target_optimizer.variables)], before)


@pytest.mark.parametrize("rebuilt, message", [
    (dict(conv="conv2"), "weight 0 is 'conv1/kernel' (3, 3, 1, 16) in the snapshot, "
     "'conv2/kernel' (3, 3, 1, 16) in the model (the path differs)"),
    (dict(filters=8), "weight 0 is 'conv1/kernel' (3, 3, 1, 16) in the snapshot, "
     "'conv1/kernel' (3, 3, 1, 8) in the model (the shape differs)"),
    (dict(conv="conv2", filters=8), "weight 0 is 'conv1/kernel' (3, 3, 1, 16) in the snapshot, "
     "'conv2/kernel' (3, 3, 1, 8) in the model (the path and the shape differ)"),
    (dict(extra=True), "4 weights in the snapshot, 6 in the model (first extra, in the model: "
     "'fc2/kernel' (3, 2))"),
], ids=["layer-name", "shape", "name-and-shape", "count"])
def test_a_rebuilt_model_that_really_differs_is_refused_saying_what_differs(rebuilt, message,
                                                                           tmp_path):
    """Without the model names, what differs is named exactly: a layer's
    name, a shape, the number of weights; nothing is changed."""
    model = conv_sequential()
    files = save_snapshot(model, momentum_sgd(model), tmp_path / "run", None)
    other = conv_sequential(**rebuilt)
    other_optimizer = momentum_sgd(other)
    values = [np.array(v.numpy()) for v in other.weights]
    with pytest.raises(SnapshotError) as info:
        load_snapshot(files.solverstate, other, other_optimizer)
    assert str(info.value) == f"{files.solverstate}: snapshot from another model: {message}"
    assert_bitwise([np.array(v.numpy()) for v in other.weights], values)


@pytest.mark.parametrize("damage, message", [
    (lambda f: f.attrs.__setitem__("model_name", 7),
     "corrupt solverstate: model_name is a int64, not a string"),
    (lambda f: (f.__delitem__("model_fingerprint"),
                f.create_dataset("model_fingerprint", data='{"conv1/kernel": [3, 3]}')),
     "corrupt fingerprint: not a list of [path, shape, dtype]"),
], ids=["model-name", "fingerprint"])
def test_a_corrupt_model_name_or_fingerprint_is_refused(damage, message, tmp_path):
    model = conv_sequential()
    optimizer = momentum_sgd(model)
    files = save_snapshot(model, optimizer, tmp_path / "run", None)
    with h5py.File(files.solverstate, "a") as f:
        damage(f)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(files.solverstate, model, optimizer)
    assert str(info.value) == f"{files.solverstate}: {message}"


def test_a_stored_name_never_hides_a_missing_slot(tmp_path):
    """The optimizer's slots are matched under the snapshot's model name: a
    slot the snapshot lacks (momentum 0 there: SGD keeps none) is still
    refused, named with the model's own path."""
    model = conv_sequential()
    plain = keras.optimizers.SGD(0.01)
    plain.build(model.trainable_variables)
    files = save_snapshot(model, plain, tmp_path / "run", None)
    rebuilt = conv_sequential()
    momentum = momentum_sgd(rebuilt)
    with pytest.raises(SnapshotError) as info:
        load_snapshot(files.solverstate, rebuilt, momentum)
    assert str(info.value) == (
        f"{files.solverstate}: has no value for optimizer variable "
        f"'{momentum.name}/{rebuilt.name}_conv1_kernel_momentum': the optimizer's "
        "configuration differs from the snapshot's")


def test_weights_of_another_net_are_refused(golden, tmp_path):
    """Caffe's own solverstate next to a caffemodel of a different net."""
    folder = golden / "snapshot" / "sgd_binaryproto"
    (tmp_path / "snap").mkdir()
    shutil.copy(caffe_solverstate(folder), tmp_path / "snap")
    other, _ = tiny_model(net=NET.replace("num_output: 16", "num_output: 8")
                          .replace("dim: 20", "dim: 40"))
    keras_caffe.export_caffemodel(other, tmp_path / "snap" / "run_iter_10.caffemodel")
    model, optimizer = golden_resume(folder)
    with pytest.raises(SnapshotError, match=re.escape(
            f"{tmp_path / 'snap' / 'run_iter_10.caffemodel'}: weights of another net: layer 'ip1' "
            "blob 0 has shape (8, 40), the net needs (16, 20)")):
        load_snapshot(tmp_path / "snap" / "run_iter_10.solverstate", model, optimizer)


def test_missing_learned_net_is_refused(golden, tmp_path):
    folder = golden / "snapshot" / "adam_hdf5"
    shutil.copy(caffe_solverstate(folder), tmp_path)
    model, optimizer = golden_resume(folder)
    path = tmp_path / "run_iter_10.solverstate.h5"
    with pytest.raises(SnapshotError, match=re.escape(
            f"{path}: its weights file 'snap/run_iter_10.caffemodel.h5' is missing (looked for "
            f"'snap/run_iter_10.caffemodel.h5', '{tmp_path / 'snap/run_iter_10.caffemodel.h5'}', "
            f"'{tmp_path / 'run_iter_10.caffemodel.h5'}')")):
        load_snapshot(path, model, optimizer)
    assert int(optimizer.iterations) == 0  # nothing was changed


def test_state_of_another_solver_type_is_refused(golden, tmp_path):
    model, adam = tiny_model(keras_caffe.Adam)
    files = save_snapshot(model, adam, tmp_path / "run", 0, format="caffe")
    sgd = keras_caffe.SGD()
    with pytest.raises(SnapshotError, match=re.escape(
            f"{files.solverstate}: holds the state of a solver with slots ['m', 'v']; "
            "SGD keeps ['history']")):
        load_snapshot(files.solverstate, model, sgd)
    caffe_adam = caffe_solverstate(golden / "snapshot" / "adam_binaryproto")
    sgd_model, sgd = golden_resume(golden / "snapshot" / "sgd_binaryproto")
    with pytest.raises(SnapshotError, match=re.escape(
            f"{caffe_adam}: holds 8 history blobs, 2 per learnable blob; SGD keeps 1 (history): "
            "the state of another solver type")):
        load_snapshot(caffe_adam, sgd_model, sgd)
    keras_files = save_snapshot(model, adam, tmp_path / "k", 0)
    with pytest.raises(SnapshotError, match=re.escape(
            f"{keras_files.solverstate}: holds the state of a keras_caffe.optimizers.adam.Adam "
            "optimizer; the model's optimizer is a keras_caffe.optimizers.sgd.SGD")):
        load_snapshot(keras_files.solverstate, model, keras_caffe.SGD())


@pytest.mark.parametrize("format", ["caffe", "caffe_hdf5"])
def test_caffe_formats_refuse_what_caffe_cannot_hold(format, tmp_path):
    model, _ = tiny_model()
    path = snapshot_paths(tmp_path / "run", 0, format)[1]
    for optimizer, name in ((keras_caffe.YellowFin(), "YellowFin"), (keras.optimizers.SGD(), "SGD")):
        with pytest.raises(SnapshotError, match=re.escape(
                f"{path}: {name} has no Caffe solver state (Caffe formats hold SGD, Nesterov, "
                "AdaGrad, RMSProp, AdaDelta and Adam); use format='keras'")):
            save_snapshot(model, optimizer, tmp_path / "run", 0, format=format)
    plain = tiny_mlp()
    with pytest.raises(SnapshotError, match=re.escape(
            f"{path}: model 'tiny_mlp' has no layers holding Caffe blobs; Caffe formats need a "
            "model from keras_caffe.import_model (use format='keras')")):
        save_snapshot(plain, keras_caffe.SGD(), tmp_path / "run", 0, format=format)
    assert not os.path.exists(tmp_path / "run_iter_0.caffemodel")


def test_bad_arguments_are_refused_with_their_names(tmp_path):
    model, optimizer = tiny_model()
    cases = [
        (dict(format="zip"), "format", "must be one of 'keras', 'caffe', 'caffe_hdf5', got 'zip'"),
        (dict(state=[1]), "state", "must be a dict, got list"),
        (dict(state={"x": object()}), "state", "must be JSON-serializable"),
    ]
    for kwargs, argument, message in cases:
        with pytest.raises(ArgumentError, match=re.escape(f"save_snapshot: `{argument}` {message}")):
            save_snapshot(model, optimizer, tmp_path / "run", 0, **kwargs)
    with pytest.raises(ArgumentError, match=re.escape(
            "save_snapshot: `iteration` is 3 but optimizer.iterations is 0 (Caffe's iter counts "
            "updates)")):
        save_snapshot(model, optimizer, tmp_path / "run", 3)
    assert os.listdir(tmp_path) == []

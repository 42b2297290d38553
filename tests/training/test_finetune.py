"""Fine-tuning as Caffe users do it: ``caffe train --solver S --weights W``
with the top layer renamed (learned from its filler) and the lower layers
frozen (``lr_mult: 0``).

Caffe's ``Net::CopyTrainedLayersFrom`` (caffe/src/caffe/net.cpp) copies
weights by layer name: a layer of the file the net lacks is ignored ("Ignoring
source layer"), a layer of the net the file lacks keeps its filler's values,
a blob of another shape is fatal ("rename the layer"). keras-caffe reports
all three and refuses weights that share no layer with the net. The numbers
are checked against the float64 port of Caffe's SGD (``caffe_reference``).
"""

import io
import shutil

import numpy as np
import pytest

import keras_caffe
from support.caffe_reference import apply_update, mlp_softmax_diffs
from support.forked import run as run_forked
from keras_caffe.errors import WeightsError
from keras_caffe.importers.net.blobs import caffe_layers

pytestmark = pytest.mark.kernels  # parity: run under oneDNN and Eigen

ITERATIONS = 12


def finetune_folder(golden, tmp_path, rename="ip2_ft", frozen=True, num_output=5):
    """The golden SGD case with ip2 renamed and ip1 frozen: a fine-tuning run."""
    work = tmp_path / "finetune"
    shutil.copytree(golden / "solvers" / "sgd", work, ignore=shutil.ignore_patterns("bin_run"))
    net = (work / "train_net.prototxt").read_text()
    net = net.replace('name: "ip2"', f'name: "{rename}"').replace(
        'top: "ip2"', f'top: "{rename}"').replace('bottom: "ip2"', f'bottom: "{rename}"')
    net = net.replace("num_output: 5", f"num_output: {num_output}")
    if frozen:
        net = net.replace("param { lr_mult: 1 decay_mult: 1 }\n  param { lr_mult: 2 decay_mult: 0 }",
                          "param { lr_mult: 0 decay_mult: 1 }\n  param { lr_mult: 0 decay_mult: 0 }")
        assert net.count("lr_mult: 0") == 2
    (work / "finetune_net.prototxt").write_text(net)
    solver = (work / "solver.prototxt").read_text().replace(
        'net: "train_net.prototxt"', 'net: "finetune_net.prototxt"').replace(
        "max_iter: 30", f"max_iter: {ITERATIONS}").replace("display: 1", "display: 4")
    (work / "solver.prototxt").write_text(solver + 'snapshot_after_train: true\n')
    return work


def test_finetune_copies_by_name_freezes_and_trains_the_renamed_layer(golden, tmp_path,
                                                                     monkeypatch):
    work = finetune_folder(golden, tmp_path)
    monkeypatch.chdir(work)
    stream = io.StringIO()
    solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log="caffe",
                                stream=stream)
    layers = caffe_layers(solver.net)
    init = np.load(work / "init.npz")
    # ip1 comes from the file, ip2_ft from its filler (the file's ip2 is ignored)
    for ours, theirs in zip(layers["ip1"].caffe_blobs(), (init["ip1_w"], init["ip1_b"])):
        np.testing.assert_array_equal(ours, theirs)
    start = [w.copy() for w in layers["ip2_ft"].caffe_blobs()]
    assert not np.allclose(start[0], init["ip2_w"])
    assert np.all(start[1] == 0.0) and 0.05 < start[0].std() < 0.2  # gaussian std 0.1
    log = stream.getvalue()
    assert "Copied 1 layer(s) from init.caffemodel: ip1" in log
    assert "Ignoring source layer ip2" in log
    assert "Not in init.caffemodel, learned from their fillers: ip2_ft" in log
    solver.solve()
    # the float64 port of Caffe's run: ip1 frozen, ip2_ft from its filler
    data = np.load(work / "data.npz")
    params = [init["ip1_w"].T, init["ip1_b"], start[0].T, start[1]]
    params, state = [np.asarray(p, np.float64) for p in params], {}
    hp = {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.0005}
    for it in range(ITERATIONS):
        rows = slice(16 * (it % 4), 16 * (it % 4) + 16)
        diffs = mlp_softmax_diffs(params, data["data"][rows].astype(np.float64),
                                  data["label"][rows].astype(int))
        params = apply_update("SGD", hp, params, diffs, state, it, lr_mults=[0, 0, 1, 1],
                              decay_mults=[1, 0, 1, 1])
    ours = layers["ip1"].caffe_blobs() + layers["ip2_ft"].caffe_blobs()
    np.testing.assert_array_equal(ours[0], init["ip1_w"])  # frozen: never moves
    for got, want in zip(ours, [params[0].T, params[1], params[2].T, params[3]]):
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)
    assert not np.allclose(ours[2], start[0], atol=1e-3)  # the new layer learned


def test_a_changed_shape_is_refused_as_caffe_refuses_it(golden, tmp_path, monkeypatch):
    work = finetune_folder(golden, tmp_path, rename="ip2", num_output=3)
    monkeypatch.chdir(work)
    with pytest.raises(WeightsError) as err:
        keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
    assert str(err.value) == (
        "init.caffemodel: layer 'ip2': blob 0 has shape (5, 16) in the weights, the net needs "
        "(3, 16) To learn this layer's parameters from scratch rather than copying from a "
        "saved net, rename the layer.")


def cli(*args, cwd):
    """``python -m keras_caffe.cli ARGS``, forked (``forked.run``)."""
    return run_forked(["-m", "keras_caffe.cli", *args], cwd=cwd, timeout=600)


def test_cli_refuses_weights_of_another_net(golden, tmp_path):
    work = finetune_folder(golden, tmp_path)
    other = keras_caffe.import_model("""
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv_a" type: "Convolution" bottom: "x" top: "a" convolution_param { num_output: 2 kernel_size: 3 } }
layer { name: "fc_b" type: "InnerProduct" bottom: "a" top: "b" inner_product_param { num_output: 2 } }
""")
    path = keras_caffe.export_caffemodel(other, tmp_path / "other.caffemodel")
    result = cli("train", "--solver", "solver.prototxt", "--weights", str(path), cwd=work)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    line = [l for l in result.stderr.splitlines() if l.startswith("keras-caffe: error:")]
    assert line == [f"keras-caffe: error: {path}: none of its layers (conv_a, fc_b) is a layer "
                    "of the net with blobs (ip1, ip2_ft): weights of another net? Caffe copies "
                    "weights by layer name"]
    assert not list(work.glob("bin_run/*"))  # nothing trained, nothing written


def test_cli_progress_mode_reports_what_it_copied(golden, tmp_path):
    work = finetune_folder(golden, tmp_path)
    result = cli("train", "--solver", "solver.prototxt", "--weights", "init.caffemodel",
                 "--log", "progress", cwd=work)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Copied 1 layer(s) from init.caffemodel: ip1" in result.stderr
    assert "Not in init.caffemodel, learned from their fillers: ip2_ft" in result.stderr

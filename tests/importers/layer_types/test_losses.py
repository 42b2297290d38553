"""TRAIN-phase loss and Accuracy layers: Caffe's numbers as Keras losses/metrics."""

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.errors import CaffeImportError, LayerError
from keras_caffe.importers import training_args
from support import DATA_FORMATS, to_keras_layout

RNG = np.random.RandomState(3)
FLT_MIN = np.float32(1.1754943508222875e-38)


def train_net(shape, label_shape, loss_text):
    dims = lambda s: " ".join(f"dim: {d}" for d in s)  # noqa: E731
    return (f'layer {{ name: "input" type: "Input" top: "data" top: "label" input_param {{ '
            f'shape {{ {dims(shape)} }} shape {{ {dims(label_shape)} }} }} }}\n' + loss_text)


def loss_value(text, x, label, data_format="channels_last"):
    model = keras_caffe.import_model(text, phase="TRAIN", data_format=data_format)
    args = training_args(model)
    pred = model(to_keras_layout(x, data_format))
    return float(args["loss"](label, pred)), model, args


def softmax_reference(x, label, axis=1, ignore=None, normalization="VALID"):
    """SoftmaxWithLossLayer::Forward_cpu, (N, C, ...) scores."""
    x = np.moveaxis(x.astype(np.float64), axis, -1)
    prob = np.exp(x - x.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    label = label.reshape(x.shape[:-1]).astype(int)
    valid = np.ones_like(label, bool) if ignore is None else label != ignore
    picked = np.take_along_axis(prob, np.where(valid, label, 0)[..., None], -1)[..., 0]
    loss = -np.log(np.maximum(picked, FLT_MIN))[valid].sum()
    norm = {"FULL": label.size, "VALID": valid.sum(), "BATCH_SIZE": label.shape[0], "NONE": 1}
    return loss / max(1, norm[normalization])


@pytest.mark.layer_type("SoftmaxWithLoss")
@pytest.mark.parametrize("normalization, extra", [
    ("VALID", ""), ("FULL", "loss_param { normalization: FULL }"),
    ("BATCH_SIZE", "loss_param { normalize: false }"), ("NONE", "loss_param { normalization: NONE }")])
@pytest.mark.parametrize("ignore", [None, 2])
def test_softmax_with_loss(normalization, extra, ignore):
    x = RNG.randn(6, 5).astype("float32") * 3
    label = np.array([0, 2, 4, 2, 1, 3], "float32")
    param = extra
    if ignore is not None:
        param = (extra[:-1] + f" ignore_label: {ignore} }}") if extra else f"loss_param {{ ignore_label: {ignore} }}"
    text = train_net((6, 5), (6,), f'layer {{ name: "loss" type: "SoftmaxWithLoss" bottom: "data" '
                                   f'bottom: "label" top: "loss" {param} }}')
    value, model, _ = loss_value(text, x, label)
    assert model.inputs[0].shape == (None, 5) and len(model.inputs) == 1  # label is a target
    assert value == pytest.approx(softmax_reference(x, label, 1, ignore, normalization), rel=1e-5)


@pytest.mark.layer_type("SoftmaxWithLoss")
@pytest.mark.parametrize("data_format", DATA_FORMATS)
def test_softmax_with_loss_spatial_segmentation(data_format):
    x = RNG.randn(2, 4, 3, 5).astype("float32")
    label = RNG.randint(0, 4, (2, 1, 3, 5)).astype("float32")
    label[0, 0, 1, :] = 255
    text = train_net((2, 4, 3, 5), (2, 1, 3, 5),
                     'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "data" bottom: "label" '
                     'top: "loss" loss_param { ignore_label: 255 } }')
    value, _, _ = loss_value(text, x, label, data_format)
    assert value == pytest.approx(softmax_reference(x, label, 1, 255), rel=1e-5)


@pytest.mark.layer_type("EuclideanLoss")
def test_euclidean_loss():
    x, target = RNG.randn(4, 3).astype("float32"), RNG.randn(4, 3).astype("float32")
    text = train_net((4, 3), (4, 3), 'layer { name: "loss" type: "EuclideanLoss" '
                                     'bottom: "data" bottom: "label" top: "loss" }')
    value, _, _ = loss_value(text, x, target)
    assert value == pytest.approx(((x - target) ** 2).sum() / 8, rel=1e-5)


def sigmoid_ce_reference(x, t, ignore=None, normalization="BATCH_SIZE"):
    x, t = x.astype(np.float64).ravel(), t.astype(np.float64).ravel()
    valid = np.ones_like(x, bool) if ignore is None else t.astype(int) != ignore
    pos = (x >= 0).astype(float)
    loss = -(x * (t - pos) - np.log(1 + np.exp(x - 2 * x * pos)))
    norm = {"BATCH_SIZE": 4, "VALID": valid.sum(), "FULL": x.size}[normalization]
    return loss[valid].sum() / max(norm, 1)


@pytest.mark.layer_type("SigmoidCrossEntropyLoss")
@pytest.mark.parametrize("param, ignore, normalization", [
    ("", None, "BATCH_SIZE"), ("loss_param { ignore_label: -1 normalization: VALID }", -1, "VALID")])
def test_sigmoid_cross_entropy_loss(param, ignore, normalization):
    x = RNG.randn(4, 6).astype("float32") * 5
    t = RNG.randint(0, 2, (4, 6)).astype("float32")
    t[1, :3] = -1 if ignore is not None else t[1, :3]
    text = train_net((4, 6), (4, 6), f'layer {{ name: "loss" type: "SigmoidCrossEntropyLoss" '
                                     f'bottom: "data" bottom: "label" top: "loss" {param} }}')
    value, _, _ = loss_value(text, x, t)
    assert value == pytest.approx(sigmoid_ce_reference(x, t, ignore, normalization), rel=1e-5)


@pytest.mark.layer_type("HingeLoss")
@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_hinge_loss(norm):
    x = RNG.randn(5, 4).astype("float32")
    label = np.array([0, 3, 1, 1, 2], "float32")
    text = train_net((5, 4), (5,), f'layer {{ name: "loss" type: "HingeLoss" bottom: "data" '
                                   f'bottom: "label" top: "loss" hinge_loss_param {{ norm: {norm} }} }}')
    diff = x.astype(np.float64).copy()
    diff[np.arange(5), label.astype(int)] *= -1
    margin = np.maximum(0, 1 + diff)
    expected = (margin.sum() if norm == "L1" else (margin**2).sum()) / 5
    value, _, _ = loss_value(text, x, label)
    assert value == pytest.approx(expected, rel=1e-5)


@pytest.mark.layer_type("Accuracy")
@pytest.mark.parametrize("top_k, ignore, expected", [(1, None, 2 / 5), (2, None, 4 / 5), (1, 3, 2 / 4)])
def test_accuracy(top_k, ignore, expected):
    x = np.array([[5, 1, 0, 0], [1, 5, 5, 0], [0, 2, 1, 3], [9, 8, 7, 6], [0, 0, 0, 1]], "float32")
    # Rows: right; a tie with the best (counts as right); 2nd best; 4th best; 2nd best.
    label = np.array([0, 2, 1, 3, 0], "float32")
    extra = f" ignore_label: {ignore}" if ignore is not None else ""
    text = train_net((5, 4), (5,), f'layer {{ name: "acc" type: "Accuracy" bottom: "data" '
                                   f'bottom: "label" top: "acc" accuracy_param {{ top_k: {top_k}{extra} }} }}')
    model = keras_caffe.import_model(text, phase="TRAIN")
    (metric,) = training_args(model)["metrics"]
    metric.update_state(label, model(x))
    assert float(metric.result()) == pytest.approx(expected)


@pytest.mark.layer_type("Accuracy")
@pytest.mark.layer_type("SoftmaxWithLoss")
def test_train_net_fits_with_caffe_loss_and_accuracy():
    """Input(data, label) -> InnerProduct -> SoftmaxWithLoss + Accuracy, trained by fit."""
    text = train_net((8, 6), (8,), """
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" include { phase: TRAIN } }
""")
    model = keras_caffe.import_model(text, phase="TRAIN")
    assert model.caffe_outputs == ["ip"] and model.caffe_training.labels == {"ip": "label"}
    x = RNG.randn(32, 6).astype("float32")
    y = RNG.randint(0, 3, 32).astype("float32")
    model.compile(optimizer=keras_caffe.SGD(0.1, momentum=0.9), **training_args(model))
    w, b = model.get_layer("ip").get_weights()
    logits = x[:8] @ w + b
    first = model.evaluate(x[:8], y[:8], batch_size=8, verbose=0, return_dict=True)
    assert first["loss"] == pytest.approx(softmax_reference(logits, y[:8]), rel=1e-5)
    assert first["acc"] == pytest.approx(np.mean(logits.argmax(1) == y[:8]))
    history = model.fit(x, y, batch_size=8, epochs=20, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.layer_type("EuclideanLoss")
def test_two_losses_with_loss_weight():
    text = train_net((4, 5), (4,), """
layer { name: "target" type: "Input" top: "target" input_param { shape { dim: 4 dim: 2 } } }
layer { name: "cls" type: "InnerProduct" bottom: "data" top: "cls" inner_product_param { num_output: 3 } }
layer { name: "reg" type: "InnerProduct" bottom: "data" top: "reg" inner_product_param { num_output: 2 } }
layer { name: "l1" type: "SoftmaxWithLoss" bottom: "cls" bottom: "label" top: "l1" }
layer { name: "l2" type: "EuclideanLoss" bottom: "reg" bottom: "target" top: "l2" loss_weight: 0.5 }
""")
    model = keras_caffe.import_model(text, phase="TRAIN")
    assert sorted(model.caffe_outputs) == ["cls", "reg"] and len(model.inputs) == 1
    args = training_args(model)
    assert args["loss_weights"] == {"cls": 1.0, "reg": 0.5}
    model.compile(optimizer="sgd", **args)
    x, label, target = RNG.randn(4, 5), RNG.randint(0, 3, 4).astype("float32"), RNG.randn(4, 2)
    out = model(x.astype("float32"))
    expected = (softmax_reference(keras.ops.convert_to_numpy(out["cls"]), label)
                + 0.5 * ((keras.ops.convert_to_numpy(out["reg"]) - target) ** 2).sum() / 8)
    total = model.evaluate(x, {"cls": label, "reg": target}, batch_size=4, verbose=0)
    assert (total[0] if isinstance(total, list) else total) == pytest.approx(expected, rel=1e-5)


@pytest.mark.layer_type("SoftmaxWithLoss")
def test_loss_errors():
    with pytest.raises(LayerError, match="layer 'loss': \\(SoftmaxWithLoss\\) takes a prediction and a label"):
        keras_caffe.import_model(train_net((2, 3), (2,), 'layer { name: "loss" type: "SoftmaxWithLoss" '
                                                         'bottom: "data" top: "loss" }'), phase="TRAIN")
    text = train_net((2, 3), (2,), 'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "data" '
                                   'bottom: "label" top: "loss" }\n'
                                   'layer { name: "r" type: "ReLU" bottom: "loss" top: "r" }')
    with pytest.raises(LayerError, match="layer 'r': reads 'loss', a loss or metric output"):
        keras_caffe.import_model(text, phase="TRAIN")
    with pytest.raises(CaffeImportError, match="the net computes nothing"):
        keras_caffe.import_model(train_net((2, 3), (2,), ""))
    model = keras_caffe.import_model(train_net((2, 3), (2,), 'layer { name: "ip" type: "InnerProduct" '
                                               'bottom: "data" top: "ip" inner_product_param { num_output: 2 } }'))
    with pytest.raises(CaffeImportError, match="has no loss or Accuracy layers"):
        training_args(model)

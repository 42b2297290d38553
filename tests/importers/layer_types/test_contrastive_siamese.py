"""ContrastiveLoss, and BVLC's siamese example (shared weights + ContrastiveLoss).

``contrastive_reference`` is a float64 port of ContrastiveLossLayer's
Forward_cpu / Backward_cpu (caffe/src/caffe/layers/contrastive_loss_layer.cpp):
``loss = sum(sim ? d^2 : max(margin - d, 0)^2) / 2N`` (legacy:
``max(margin - d^2, 0)``); the dissimilar diff is ``-(margin - d) / (d + 1e-4)
* (a - b) / N`` where ``margin > d`` (legacy: ``-(a - b) / N``), similar
``(a - b) / N``, and ``-`` that for ``b``.

The two ``bvlc_mnist_siamese_train_test*.prototxt`` files are BVLC Caffe's
examples/siamese net in its current and its V1 form (named in their first line).
"""

import numpy as np
import pytest
from keras import ops

import keras_caffe
from keras_caffe.errors import LayerError
from keras_caffe.importers import training_args
from support import NETS
from support.layer_gradients import gradients, weighted_sum

pytestmark = pytest.mark.kernels  # parity: run under oneDNN and Eigen
DATA = NETS
RNG = np.random.RandomState(5)


def contrastive_reference(a, b, sim, margin=1.0, legacy=False):
    a, b = a.astype(np.float64), b.astype(np.float64)
    n = len(a)
    diff = a - b
    dist_sq = (diff ** 2).sum(1)
    dist = np.sqrt(dist_sq)
    loss, grad_a = 0.0, np.zeros_like(a)
    for i in range(n):
        if sim[i]:
            loss += dist_sq[i]
            grad_a[i] = diff[i] / n
        elif legacy:
            loss += max(margin - dist_sq[i], 0.0)
            grad_a[i] = -diff[i] / n if margin - dist_sq[i] > 0 else 0.0
        else:
            gap = max(margin - dist[i], 0.0)
            loss += gap * gap
            grad_a[i] = -(margin - dist[i]) / (dist[i] + 1e-4) * diff[i] / n if gap > 0 else 0.0
    return loss / n / 2, grad_a, -grad_a


def loss_net(c, extra=""):
    return (f'layer {{ name: "in" type: "Input" top: "a" top: "b" top: "sim" input_param {{ '
            f'shape {{ dim: 6 dim: {c} }} shape {{ dim: 6 dim: {c} }} shape {{ dim: 6 }} }} }}\n'
            f'layer {{ name: "loss" type: "ContrastiveLoss" bottom: "a" bottom: "b" bottom: "sim" '
            f'top: "loss" {extra} }}')


@pytest.mark.layer_type("ContrastiveLoss")
@pytest.mark.parametrize("margin, legacy", [(1.0, False), (2.5, False), (1.0, True), (4.0, True)])
def test_contrastive_loss_is_caffes_forward_and_backward(margin, legacy):
    c = 3
    a = (RNG.randn(6, c) * 0.6).astype("float32")
    b = (RNG.randn(6, c) * 0.6).astype("float32")
    b[0] = a[0]  # a dissimilar pair at distance 0: Caffe's 1e-4 keeps it finite
    sim = np.array([0, 1, 0, 1, 0, 0], "float32")
    param = f"contrastive_loss_param {{ margin: {margin} legacy_version: {str(legacy).lower()} }}"
    model = keras_caffe.import_model(loss_net(c, param), phase="TRAIN")
    assert model.caffe_outputs == ["loss_pair"] and model.caffe_inputs == ["a", "b"]
    loss_fn = training_args(model)["loss"]
    (ga, gb), _ = gradients(lambda ta, tb: loss_fn(sim, model([ta, tb])), [a, b])
    value = ops.convert_to_numpy(loss_fn(sim, model([a, b])))
    ref, ref_a, ref_b = contrastive_reference(a, b, sim, margin, legacy)
    assert float(value) == pytest.approx(ref, rel=1e-5)
    np.testing.assert_allclose(ga, ref_a, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gb, ref_b, rtol=1e-4, atol=1e-6)
    assert np.all(np.isfinite(ga))


@pytest.mark.layer_type("ContrastiveLoss")
def test_contrastive_loss_checks_its_bottoms():
    text = (loss_net(3).replace('top: "b" top: "sim"', 'top: "b" top: "sim" top: "x"')
            .replace("shape { dim: 6 } }", "shape { dim: 6 } shape { dim: 6 dim: 2 dim: 2 dim: 2 } }")
            .replace('bottom: "b" bottom: "sim"', 'bottom: "x" bottom: "sim"'))
    with pytest.raises(LayerError, match=r"layer 'loss': \(ContrastiveLoss\) features must be "
                                         r"\(N, C\) or \(N, C, 1, 1\), got \(6, 2, 2, 2\)"):
        keras_caffe.import_model(text, phase="TRAIN")
    with pytest.raises(LayerError, match=r"takes two features and a similarity label, got 2"):
        keras_caffe.import_model(loss_net(3).replace('bottom: "b" ', ""), phase="TRAIN")


SHAPES = {"pair_data": (2, 28, 28), "sim": ()}


@pytest.mark.parametrize("name", ["bvlc_mnist_siamese_train_test.prototxt",
                                  "bvlc_mnist_siamese_train_test_v1.prototxt"])
def test_bvlc_siamese_imports_with_one_copy_of_each_tower_blob(name):
    model = keras_caffe.import_model(DATA / name, phase="TRAIN", input_shapes=SHAPES)
    assert [w.path for w in model.weights] == [
        f"{layer}/{kind}" for layer in ("conv1", "conv2", "ip1", "ip2", "feat")
        for kind in ("kernel", "bias")]
    lr_mult, _ = keras_caffe.param_multipliers(model)
    assert set(lr_mult.values()) == {1.0, 2.0}  # blobs_lr / lr_mult 1 and 2, as the file says
    from keras_caffe.importers.net.blobs import caffe_sharers

    assert caffe_sharers(model) == {f"{n}_p": n for n in ("conv1", "conv2", "ip1", "ip2", "feat")}


def one_tower():
    """The siamese file's first tower (conv1 ... feat) on an Input "data"."""
    from google.protobuf import text_format

    from keras_caffe.proto import caffe_pb2

    net = text_format.Parse((DATA / "bvlc_mnist_siamese_train_test.prototxt").read_text(),
                            caffe_pb2.NetParameter())
    tower = caffe_pb2.NetParameter(name="tower")
    tower.layer.add().CopyFrom(text_format.Parse(
        'name: "in" type: "Input" top: "data" input_param { shape { dim: 8 dim: 1 dim: 28 '
        'dim: 28 } }', caffe_pb2.LayerParameter()))
    names = ("conv1", "pool1", "conv2", "pool2", "ip1", "relu1", "ip2", "feat")
    tower.layer.extend(layer for layer in net.layer if layer.name in names)
    return tower


def test_bvlc_siamese_trains_as_one_tower_applied_twice():
    """One SGD step of the imported siamese net equals one of BVLC's deploy
    tower (mnist_siamese.prototxt's layers: conv1 ... feat) run on each half
    of the pair with the gradients summed, under the float64 contrastive port."""
    model = keras_caffe.import_model(DATA / "bvlc_mnist_siamese_train_test.prototxt",
                                     phase="TRAIN", input_shapes=SHAPES)
    pair = RNG.rand(8, 28, 28, 2).astype("float32")  # channels-last (N, H, W, 2)
    sim = np.array([1, 0, 0, 1, 0, 1, 0, 0], "float32")
    tower = keras_caffe.import_model(one_tower(), outputs=["feat"])
    tower.set_weights(model.get_weights())
    fa, fb = (ops.convert_to_numpy(tower(half)) for half in (pair[..., :1], pair[..., 1:]))
    _, da, db = contrastive_reference(fa, fb, sim)
    da, db = da.astype("float32"), db.astype("float32")

    def surrogate(left, right):  # chain rule from the port
        return weighted_sum(tower(left), da) + weighted_sum(tower(right), db)

    _, expected = gradients(surrogate, [pair[..., :1], pair[..., 1:]], tower.trainable_variables)
    before = [w.copy() for w in model.get_weights()]
    lr_mult, _ = keras_caffe.param_multipliers(model)
    model.compile(optimizer=keras_caffe.SGD(learning_rate=0.01, lr_mult=lr_mult),
                  **training_args(model))
    model.fit(pair, sim, batch_size=8, epochs=1, shuffle=False, verbose=0)
    for variable, start, grad in zip(model.weights, before, expected):
        step = 0.01 * lr_mult[variable.path] * grad
        np.testing.assert_allclose(variable.numpy(), start - step, rtol=1e-4, atol=1e-7)

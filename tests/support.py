"""Helpers shared by the tests: the golden Caffe data and its nets."""

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
GOLDEN = Path(os.environ.get("KERAS_CAFFE_GOLDEN", REPO.parent / "shared" / "golden"))


def tiny_mlp(init=None):
    """The golden solvers' net: ip1 (20->16) + ReLU + ip2 (16->5), logits out.

    ``init`` holds Caffe's blobs (``ip1_w`` as (out, in)); Keras kernels are
    their transposes.
    """
    inputs = keras.Input((20,), name="data")
    x = keras.layers.Dense(16, name="ip1")(inputs)
    x = keras.layers.ReLU(name="relu1")(x)
    outputs = keras.layers.Dense(5, name="ip2")(x)
    model = keras.Model(inputs, outputs, name="tiny_mlp")
    if init is not None:
        set_caffe_weights(model, init)
    return model


def set_caffe_weights(model, blobs):
    for layer in ("ip1", "ip2"):
        model.get_layer(layer).set_weights(
            [np.asarray(blobs[f"{layer}_w"]).T, np.asarray(blobs[f"{layer}_b"])]
        )


def caffe_weights(model):
    """The model's weights as Caffe blobs (``ip1_w`` as (out, in))."""
    out = {}
    for layer in ("ip1", "ip2"):
        kernel, bias = model.get_layer(layer).get_weights()
        out[f"{layer}_w"], out[f"{layer}_b"] = kernel.T, bias
    return out


def net_multipliers(prototxt):
    """``lr_mult``/``decay_mult`` dicts for the Keras twin of a Caffe net.

    Param 0 of an InnerProduct layer is its kernel, param 1 its bias.
    """
    from keras_caffe.importers import read_text
    from keras_caffe.proto import caffe_pb2

    net = read_text(prototxt, caffe_pb2.NetParameter)
    lr_mult, decay_mult = {}, {}
    for layer in net.layer:
        for spec, blob in zip(layer.param, ("kernel", "bias")):
            lr_mult[f"{layer.name}/{blob}"] = spec.lr_mult
            decay_mult[f"{layer.name}/{blob}"] = spec.decay_mult
    return lr_mult, decay_mult


def sparse_softmax_loss():
    """Caffe's SoftmaxWithLoss (normalization VALID, no ignore_label)."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def golden_dataset(folder, batch_size=16):
    """Caffe's HDF5Data order: rows in order, wrapping, never shuffled."""
    import tensorflow as tf

    data = np.load(folder / "data.npz")
    x, y = data["data"], data["label"].astype("int32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size).repeat()

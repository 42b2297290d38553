"""Small data sources for the pipeline tests, written into tmp_path."""

import os

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from keras_caffe.importers import parse_text  # noqa: E402
from keras_caffe.proto import caffe_pb2  # noqa: E402


def layer(text):
    """A ``LayerParameter`` from prototxt text."""
    return parse_text(text, caffe_pb2.LayerParameter)


def data_layer(source, batch, transform="", name="data", extra="", tops=("data", "label")):
    top_text = " ".join(f'top: "{t}"' for t in tops)
    return layer(f'name: "{name}" type: "Data" {top_text} transform_param {{ {transform} }} '
                 f'data_param {{ source: "{source}" backend: LMDB batch_size: {batch} {extra} }}')


def raw_datum(image, label):
    """A raw uint8 Datum of a (C, H, W) image."""
    c, h, w = image.shape
    return caffe_pb2.Datum(channels=c, height=h, width=w,
                           data=np.asarray(image, np.uint8).tobytes(), label=int(label))


def png_bytes(image_chw):
    """PNG bytes of a (C, H, W) uint8 image whose channels are BGR (Caffe's order)."""
    hwc = np.transpose(np.asarray(image_chw, np.uint8), (1, 2, 0))
    if hwc.shape[2] == 3:
        hwc = hwc[:, :, ::-1]  # BGR -> RGB for the PNG
    return tf.io.encode_png(hwc).numpy()


def write_lmdb(path, datums, keys=None):
    """An LMDB of Datums (or raw bytes) under keys '%08d' in order."""
    import lmdb

    env = lmdb.open(str(path), map_size=1 << 28)
    with env.begin(write=True) as txn:
        for i, datum in enumerate(datums):
            key = keys[i] if keys else b"%08d" % i
            value = datum if isinstance(datum, bytes) else datum.SerializeToString()
            txn.put(key, value)
    env.close()
    return str(path)


def random_images(count, shape, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (count, *shape)).astype(np.uint8),
            rng.integers(0, 10, count).astype(np.int64))


def raw_lmdb(path, count=23, shape=(2, 6, 5), seed=0):
    """An LMDB of ``count`` random raw Datums; returns (path, images, labels)."""
    images, labels = random_images(count, shape, seed)
    write_lmdb(path, [raw_datum(im, lab) for im, lab in zip(images, labels)])
    return str(path), images, labels


def take(pipe, count, start=0):
    """The first ``count`` batches of ``pipe.dataset(start)`` as numpy dicts."""
    return [{k: v.numpy() for k, v in b.items()} for b in pipe.dataset(start).take(count)]


def to_caffe(batch, data_format="channels_last"):
    """A model-layout image batch back in Caffe's (N, C, H, W)."""
    if data_format == "channels_last" and batch.ndim >= 3:
        return np.moveaxis(batch, -1, 1)
    return batch


def tiny_train_net(source, backend):
    """A TRAIN net reading ``source`` (1x12x12 Datums, 3 classes) with random
    crop and mirror: conv/pool/ip, SoftmaxWithLoss and Accuracy."""
    return (
        'name: "tiny"\n'
        'layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TRAIN } '
        'transform_param { scale: 0.00390625 crop_size: 10 mirror: true } '
        f'data_param {{ source: "{source}" backend: {backend} batch_size: 8 }} }}\n'
        'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" '
        'convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }\n'
        'layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" '
        'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip" '
        'inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }\n'
        'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }\n'
        'layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" }\n')

"""Throughput of keras-caffe's data-layer pipelines (images/s).

    python benchmarks/pipelines.py [--batches N]

Cases: the golden LMDB (raw 3x32x32, 50 records) with net A's transform
(scale + mean_value) at batch 64, and a generated LMDB of 5000 28x28 gray
digits-like raw Datums (LeNet's: scale 1/256) at batch 64; plus the same
5000 digits PNG-encoded in the LMDB, and as PNG files through ImageData.
"""

import argparse
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import lmdb  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_caffe.importers import parse_text  # noqa: E402
from keras_caffe.importers.data.pipelines import layer_pipeline  # noqa: E402
from keras_caffe.proto import caffe_pb2  # noqa: E402

GOLDEN = os.environ.get("KERAS_CAFFE_GOLDEN", os.path.join(os.path.dirname(__file__), "..", "..", "shared", "golden"))


def digits(n=5000, seed=0):
    rng = np.random.default_rng(seed)
    images = np.zeros((n, 1, 28, 28), np.uint8)
    yy, xx = np.mgrid[:28, :28]
    for i in range(n):
        cy, cx, r = rng.integers(8, 20), rng.integers(8, 20), rng.integers(4, 9)
        ring = np.abs(np.hypot(yy - cy, xx - cx) - r) < 1.5
        images[i, 0][ring] = rng.integers(128, 256)
    return images, rng.integers(0, 10, n)


def write_lmdb(path, images, labels, encoded=False):
    env = lmdb.open(path, map_size=1 << 30)
    with env.begin(write=True) as txn:
        for i, (im, lab) in enumerate(zip(images, labels)):
            if encoded:
                png = tf.io.encode_png(np.transpose(im, (1, 2, 0))).numpy()
                d = caffe_pb2.Datum(channels=im.shape[0], height=im.shape[1], width=im.shape[2], data=png, label=int(lab), encoded=True)
            else:
                d = caffe_pb2.Datum(channels=im.shape[0], height=im.shape[1], width=im.shape[2], data=im.tobytes(), label=int(lab))
            txn.put(b"%08d" % i, d.SerializeToString())
    env.close()


def layer(text):
    return parse_text(text, caffe_pb2.LayerParameter)


def measure(name, pipe, batches):
    ds = iter(pipe.dataset())
    for _ in range(5):
        next(ds)
    t = time.perf_counter()
    for _ in range(batches):
        next(ds)
    dt = time.perf_counter() - t
    print(f"{name:60s} {batches * pipe.batch_size / dt:10.0f} images/s  ({dt / batches * 1e3:.2f} ms/batch)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args()
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPUs")
    golden = os.path.join(GOLDEN, "lmdb", "images_lmdb")
    pipe = layer_pipeline(layer(f'name: "data" type: "Data" top: "data" top: "label" transform_param {{ scale: 0.00390625 mean_value: 104 mean_value: 117 mean_value: 123 }} data_param {{ source: "{golden}" backend: LMDB batch_size: 64 }}'))
    measure("golden LMDB raw 3x32x32, scale+mean_value, batch 64", pipe, args.batches)
    pipe = layer_pipeline(layer(f'name: "data" type: "Data" top: "data" top: "label" transform_param {{ scale: 0.00390625 mean_value: 104 mean_value: 117 mean_value: 123 crop_size: 28 mirror: true }} data_param {{ source: "{golden}" backend: LMDB batch_size: 64 }}'))
    measure("golden LMDB raw 3x32x32, + random crop 28 + mirror, batch 64", pipe, args.batches)
    with tempfile.TemporaryDirectory() as tmp:
        images, labels = digits()
        raw, enc = os.path.join(tmp, "raw"), os.path.join(tmp, "png")
        write_lmdb(raw, images, labels)
        write_lmdb(enc, images, labels, encoded=True)
        t = time.perf_counter()
        pipe = layer_pipeline(layer(f'name: "mnist" type: "Data" top: "data" top: "label" transform_param {{ scale: 0.00390625 }} data_param {{ source: "{raw}" backend: LMDB batch_size: 64 }}'))
        print(f"(opening the 5000-record LMDB took {time.perf_counter() - t:.3f} s)")
        measure("digits LMDB raw 1x28x28, scale, batch 64 (in memory)", pipe, args.batches)
        pipe = layer_pipeline(layer(f'name: "mnist" type: "Data" top: "data" top: "label" transform_param {{ scale: 0.00390625 }} data_param {{ source: "{raw}" backend: LMDB batch_size: 64 }}'), in_memory_limit=0)
        measure("digits LMDB raw 1x28x28, scale, batch 64 (streamed)", pipe, args.batches)
        pipe = layer_pipeline(layer(f'name: "mnist" type: "Data" top: "data" top: "label" transform_param {{ scale: 0.00390625 }} data_param {{ source: "{enc}" backend: LMDB batch_size: 64 }}'))
        measure("digits LMDB PNG-encoded 1x28x28, scale, batch 64", pipe, args.batches // 3)
        folder = os.path.join(tmp, "files")
        os.makedirs(folder)
        with open(os.path.join(tmp, "list.txt"), "w") as f:
            for i in range(len(images)):
                tf.io.write_file(os.path.join(folder, f"{i}.png"), tf.io.encode_png(np.transpose(images[i], (1, 2, 0))))
                f.write(f"files/{i}.png {labels[i]}\n")
        pipe = layer_pipeline(layer(f'name: "img" type: "ImageData" top: "data" top: "label" transform_param {{ scale: 0.00390625 }} image_data_param {{ source: "{tmp}/list.txt" root_folder: "{tmp}/" batch_size: 64 is_color: false shuffle: true }}'))
        measure("digits ImageData PNG files, gray, shuffle, batch 64", pipe, args.batches // 3)


if __name__ == "__main__":
    main()

"""Write the LMDBs the LeNet example trains on: digits-like 28x28 images.

    python examples/lenet_solver/make_data.py [--train 10000] [--test 2000] [--out DIR]

These machines have no internet, so instead of MNIST this draws digits:
each class is its seven-segment stroke pattern, drawn with a random
thickness, slant, scale and offset, plus pixel noise, then stored as Caffe
``Datum`` records (raw uint8, 1x28x28, keys ``%08d``) with the ``lmdb``
package, as Caffe's ``convert_mnist_data`` writes MNIST. Seeded: the same
arguments write the same databases. ``digits_train_lmdb`` and
``digits_test_lmdb`` are created next to this file unless ``--out`` says
otherwise; existing ones are replaced.
"""

import argparse
import os
import shutil

import numpy as np

# Seven segments on a unit box: (x0, y0, x1, y1), y downwards.
SEGMENTS = {
    "a": (0, 0, 1, 0), "b": (1, 0, 1, 0.5), "c": (1, 0.5, 1, 1), "d": (0, 1, 1, 1),
    "e": (0, 0.5, 0, 1), "f": (0, 0, 0, 0.5), "g": (0, 0.5, 1, 0.5),
}
DIGITS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg"]
SIZE = 28


def draw(digit, rng):
    """One 28x28 uint8 image of ``digit``."""
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    width, height = rng.uniform(8, 12), rng.uniform(14, 19)
    left = rng.uniform(4, SIZE - 4 - width)
    top = rng.uniform(3, SIZE - 3 - height)
    slant = rng.uniform(-0.3, 0.3)
    thickness = rng.uniform(0.6, 1.4)
    image = np.zeros((SIZE, SIZE), np.float32)
    for name in DIGITS[digit]:
        x0, y0, x1, y1 = SEGMENTS[name]
        # Box coordinates -> pixels, slanted around the box centre.
        p0 = np.array([left + width * x0 + slant * height * (0.5 - y0), top + height * y0])
        p1 = np.array([left + width * x1 + slant * height * (0.5 - y1), top + height * y1])
        d = p1 - p0
        t = np.clip(((xx - p0[0]) * d[0] + (yy - p0[1]) * d[1]) / max(d @ d, 1e-6), 0, 1)
        dist = np.hypot(xx - (p0[0] + t * d[0]), yy - (p0[1] + t * d[1]))
        image = np.maximum(image, np.clip(thickness + 0.5 - dist, 0, 1))
    image = image * rng.uniform(0.7, 1.0) + rng.normal(0, 0.08, image.shape)
    return (np.clip(image, 0, 1) * 255).round().astype(np.uint8)


def write_lmdb(path, count, seed):
    import lmdb

    from keras_caffe.proto import caffe_pb2

    rng = np.random.default_rng(seed)
    if os.path.exists(path):
        shutil.rmtree(path)
    tmp = path + ".tmp"
    if os.path.exists(tmp):
        shutil.rmtree(tmp)
    env = lmdb.open(tmp, map_size=max(count * 2048, 1 << 20))
    with env.begin(write=True) as txn:
        for i in range(count):
            label = int(rng.integers(10))
            datum = caffe_pb2.Datum(channels=1, height=SIZE, width=SIZE, label=label,
                                    data=draw(label, rng).tobytes())
            txn.put(f"{i:08d}".encode(), datum.SerializeToString())
    env.close()
    os.replace(tmp, path)  # a finished database, or none
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=10000, help="training images")
    parser.add_argument("--test", type=int, default=2000, help="test images")
    parser.add_argument("--out", default=os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    for name, count, seed in (("digits_train_lmdb", args.train, args.seed),
                              ("digits_test_lmdb", args.test, args.seed + 1)):
        path = write_lmdb(os.path.join(args.out, name), count, seed)
        print(f"wrote {path}: {count} images")


if __name__ == "__main__":
    main()

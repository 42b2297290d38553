"""Fine-tuning the Caffe way: the train step of an imported ResNet-50 whose
lower three quarters are frozen (``param { lr_mult: 0 }``), against the same
net fully trainable, in one process.

    python benchmarks/finetune_frozen.py [--batch 4] [--steps 3] [--repeats 4] [--xla]

The frozen net is the net of ``import_speed.resnet50_prototxt`` with
``lr_mult: 0`` on every Convolution and Scale blob of conv1 and stages
res2-res4 (the lower 3/4 of its 53 convolutions by depth; res5 and fc1000
learn). Caffe computes no gradient for such blobs and no backward below the
lowest learning layer; keras-caffe stops their gradients, so TensorFlow does
neither. Both nets train with ``keras_caffe.SGD`` (momentum 0.9, the nets'
``param_multipliers``) on the same batch, alternating A/B/B/A; prints the
median step times and the ratio frozen / trainable.
"""

import argparse
import os
import platform
import re
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_caffe  # noqa: E402
from import_speed import resnet50_prototxt  # noqa: E402
from keras_caffe.kernels import cpu_kernels, cpu_model  # noqa: E402

FROZEN = re.compile(r'name: "(?:bn_|scale_)?(conv1|res[234][a-f])')


def frozen_prototxt():
    """ResNet-50 with lr_mult 0 on the blobs of conv1 and res2-res4."""
    lines = []
    for line in resnet50_prototxt().split("\n"):
        if FROZEN.search(line) and 'type: "Convolution"' in line:
            line = line.replace('type: "Convolution"', 'type: "Convolution" param { lr_mult: 0 }')
        elif FROZEN.search(line) and 'type: "Scale"' in line:
            line = line.replace('type: "Scale"',
                                'type: "Scale" param { lr_mult: 0 } param { lr_mult: 0 }')
        lines.append(line)
    return "\n".join(lines)


def build(text, jit_compile):
    model = keras_caffe.import_model(text, phase="TRAIN")
    # the learned blobs' multipliers (BatchNorm's statistics are not trained)
    trainable = {v.path for v in model.trainable_variables}
    lr_mult, decay_mult = ({k: v for k, v in d.items() if k in trainable}
                           for d in keras_caffe.param_multipliers(model))
    optimizer = keras_caffe.SGD(learning_rate=0.01, momentum=0.9, weight_decay=1e-4,
                                lr_mult=lr_mult, decay_mult=decay_mult)
    model.compile(optimizer=optimizer, jit_compile=jit_compile,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    frozen = sum(1 for v in lr_mult.values() if v == 0)
    return model, frozen, len(lr_mult)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--xla", action="store_true", help="compile the steps with XLA")
    args = parser.parse_args()
    x = np.random.RandomState(0).randn(args.batch, 224, 224, 3).astype("float32")
    y = np.random.RandomState(1).randint(0, 1000, args.batch)
    models, counts = {}, {}
    for name, text in (("trainable", resnet50_prototxt()), ("frozen 3/4", frozen_prototxt())):
        model, frozen, total = build(text, args.xla)
        model.train_on_batch(x, y)  # trace (and compile)
        models[name], counts[name] = model, (frozen, total)
    timings = {name: [] for name in models}
    for r in range(args.repeats):
        order = list(models) if r % 2 == 0 else list(models)[::-1]
        for name in order:
            start = time.perf_counter()
            for _ in range(args.steps):
                models[name].train_on_batch(x, y)
            timings[name].append((time.perf_counter() - start) / args.steps)
    print(f"machine: {cpu_model()} ({platform.machine()}), {os.cpu_count()} cores; TensorFlow "
          f"{tf.__version__} ({cpu_kernels()} CPU kernels), Keras {keras.__version__}; "
          f"batch {args.batch}, {'XLA' if args.xla else 'no XLA'}, median of {args.repeats} "
          f"windows of {args.steps} steps")
    median = {name: statistics.median(t) for name, t in timings.items()}
    for name, seconds in median.items():
        frozen, total = counts[name]
        print(f"{name:>12}: {seconds:.3f} s/step ({frozen} of {total} learned blobs frozen)")
    print(f"ratio frozen / trainable: {median['frozen 3/4'] / median['trainable']:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

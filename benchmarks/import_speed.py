"""Importer speed, and the training speed of what it builds.

    python benchmarks/import_speed.py [--golden ../shared/golden] [--batch 4] [--steps 5]

1. GoogLeNet: prototxt + caffemodel -> Keras model, seconds (median of 5),
   TensorFlow already imported (goal < 1 s).
2. ResNet-50 written as Caffe writes it (conv + BatchNorm + Scale + ReLU,
   He et al. 2016, stride on the first 1x1 of a block), imported, against
   ``keras.applications.ResNet50(weights=None)``: train-step time on the same
   batch, both compiled with XLA, in one process, alternating A/B/B/A; prints
   the ratio imported / Keras (goal <= 1.03).
"""

import argparse
import gzip
import os
import statistics
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import keras_caffe  # noqa: E402


def resnet50_prototxt(batch=1):
    """ResNet-50 deploy prototxt in Kaiming He's Caffe layout (generated)."""
    lines = [f'name: "ResNet-50"\nlayer {{ name: "data" type: "Input" top: "data" '
             f'input_param {{ shape {{ dim: {batch} dim: 3 dim: 224 dim: 224 }} }} }}']

    def conv_bn(name, bottom, out, kernel, stride=1, pad=0, relu=True):
        lines.append(
            f'layer {{ name: "{name}" type: "Convolution" bottom: "{bottom}" top: "{name}" '
            f'convolution_param {{ num_output: {out} kernel_size: {kernel} stride: {stride} '
            f'pad: {pad} bias_term: false }} }}\n'
            f'layer {{ name: "bn_{name}" type: "BatchNorm" bottom: "{name}" top: "{name}" '
            f'batch_norm_param {{ use_global_stats: false }} }}\n'
            f'layer {{ name: "scale_{name}" type: "Scale" bottom: "{name}" top: "{name}" '
            f'scale_param {{ bias_term: true }} }}')
        if relu:
            lines.append(f'layer {{ name: "{name}_relu" type: "ReLU" bottom: "{name}" top: "{name}" }}')
        return name

    x = conv_bn("conv1", "data", 64, 7, 2, 3)
    lines.append(f'layer {{ name: "pool1" type: "Pooling" bottom: "{x}" top: "pool1" '
                 f'pooling_param {{ pool: MAX kernel_size: 3 stride: 2 }} }}')
    x = "pool1"
    for stage, (blocks, width) in enumerate([(3, 64), (4, 128), (6, 256), (3, 512)], start=2):
        for b in range(blocks):
            name = f"res{stage}{'abcdef'[b]}"
            stride = 2 if b == 0 and stage > 2 else 1
            shortcut = (conv_bn(f"{name}_branch1", x, width * 4, 1, stride, relu=False)
                        if b == 0 else x)
            y = conv_bn(f"{name}_branch2a", x, width, 1, stride)
            y = conv_bn(f"{name}_branch2b", y, width, 3, 1, 1)
            y = conv_bn(f"{name}_branch2c", y, width * 4, 1, relu=False)
            lines.append(f'layer {{ name: "{name}" type: "Eltwise" bottom: "{shortcut}" '
                         f'bottom: "{y}" top: "{name}" }}\n'
                         f'layer {{ name: "{name}_relu" type: "ReLU" bottom: "{name}" top: "{name}" }}')
            x = name
    lines.append(f'layer {{ name: "pool5" type: "Pooling" bottom: "{x}" top: "pool5" '
                 f'pooling_param {{ pool: AVE global_pooling: true }} }}\n'
                 'layer { name: "fc1000" type: "InnerProduct" bottom: "pool5" top: "fc1000" '
                 'inner_product_param { num_output: 1000 } }')
    return "\n".join(lines)


def import_time(golden):
    folder = golden / "forward" / "bvlc_googlenet"
    times = []
    for _ in range(5):
        keras.backend.clear_session()
        start = time.perf_counter()
        keras_caffe.import_model(folder / "deploy_used.prototxt", weights=folder / "weights.caffemodel")
        times.append(time.perf_counter() - start)
    return statistics.median(times)


IRV2 = Path(__file__).resolve().parent / "data" / "inception-resnet-v2_deploy.prototxt.gz"


def big_net_build_ratio(repeats):
    """Seconds to import Inception-ResNet-v2's prototxt and to build Keras's
    InceptionResNetV2, alternating, fresh session each time."""
    text = gzip.decompress(IRV2.read_bytes()).decode()
    builders = {
        "keras-caffe import": lambda: keras_caffe.import_model(text),
        "keras.applications": lambda: keras.applications.InceptionResNetV2(weights=None),
    }
    timings, sizes = {name: [] for name in builders}, {}
    for r in range(repeats):
        order = list(builders) if r % 2 == 0 else list(builders)[::-1]
        for name in order:
            keras.backend.clear_session()
            start = time.perf_counter()
            model = builders[name]()
            timings[name].append(time.perf_counter() - start)
            sizes[name] = (len(model.layers), len(model.weights), model.count_params())
    return {name: statistics.median(t) for name, t in timings.items()}, sizes


def train_step_ratio(batch, steps, repeats):
    x = np.random.RandomState(0).randn(batch, 224, 224, 3).astype("float32")
    y = np.random.RandomState(1).randint(0, 1000, batch)
    imported = keras_caffe.import_model(resnet50_prototxt(), phase="TRAIN")
    reference = keras.applications.ResNet50(weights=None, classifier_activation=None)
    models = {"imported": imported, "keras.applications": reference}
    for model in models.values():
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), jit_compile=True,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.train_on_batch(x, y)  # compile
    timings = {name: [] for name in models}
    for r in range(repeats):
        order = list(models) if r % 2 == 0 else list(models)[::-1]
        for name in order:
            start = time.perf_counter()
            for _ in range(steps):
                models[name].train_on_batch(x, y)
            timings[name].append((time.perf_counter() - start) / steps)
    params = {name: m.count_params() for name, m in models.items()}
    return {name: statistics.median(t) for name, t in timings.items()}, params


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--golden", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "golden")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--build-repeats", type=int, default=6)
    args = parser.parse_args()
    console = Console()
    device = (tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU"))[0].name
    console.print(f"TensorFlow {tf.__version__}, Keras {keras.__version__}, {device}, "
                  f"{os.cpu_count()} CPUs")
    seconds = import_time(args.golden)
    console.print(f"GoogLeNet prototxt + caffemodel -> Keras model: {seconds:.3f} s (goal < 1 s)")
    build, sizes = big_net_build_ratio(args.build_repeats)
    table = Table(title=f"Inception-ResNet-v2: model built, median of {args.build_repeats} (s)")
    for column in ("built by", "Keras layers", "variables", "parameters", "s"):
        table.add_column(column)
    for name, seconds in build.items():
        layers_, variables, params = sizes[name]
        table.add_row(name, str(layers_), str(variables), f"{params:,}", f"{seconds:.2f}")
    console.print(table)
    console.print(f"ratio keras-caffe import / keras.applications build: "
                  f"{build['keras-caffe import'] / build['keras.applications']:.2f} (goal <= 1.2)")
    step, params = train_step_ratio(args.batch, args.steps, args.repeats)
    table = Table(title=f"ResNet-50 train step, batch {args.batch}, XLA (median s/step)")
    for column in ("model", "parameters", "s/step"):
        table.add_column(column)
    for name in step:
        table.add_row(name, f"{params[name]:,}", f"{step[name]:.3f}")
    console.print(table)
    console.print(f"ratio imported / keras.applications: "
                  f"{step['imported'] / step['keras.applications']:.3f} (goal <= 1.03)")


if __name__ == "__main__":
    main()

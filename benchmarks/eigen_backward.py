"""keras-caffe's own MAX pooling, convolution and LRN backward against
TensorFlow's gradient kernels, layer by layer, on Eigen's CPU kernels.

    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/eigen_backward.py [--rounds 7]

For each layer of LeNet (batch 64), CIFAR-10 quick (batch 100) and CaffeNet
(batch 16; its first layers of each kind) that the own backward covers, two one-layer models are built from the same Caffe
layer: one traced with the own backward (``keras_caffe.kernels.eigen_cpu``
true), one with ``KERAS_CAFFE_CPU_TUNING=0`` (TensorFlow's
``MaxPoolGrad``, ``Conv2DBackpropFilter``, ``Conv2DBackpropInput``, ``LRN``
and ``LRNGrad``). Each
step is a ``tf.function``: forward, then the gradients a training step needs
(the parameters'; the input's too except for a net's first layer, whose
input is data). The two alternate, ``--rounds`` times; the table gives the
median milliseconds per step and TensorFlow's over the own.

On oneDNN's kernels (``TF_ENABLE_ONEDNN_OPTS=1``, TensorFlow's default on
AVX-512 CPUs) MAX pooling and convolutions of fewer than 8 input channels
keep oneDNN's backward (``keras_caffe.layers.conv.takes_own_backward``); the
script then forces the own backward on for every layer, to show both sides
of that choice. LRN's own forward and backward (one XLA program each,
``keras_caffe.layers.tensorflow_kernels.compiled_lrn``) are taken on both
kernel families, so its rows need no forcing.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

LAYERS = [  # (label, input (N, C, H, W), type, parameters, input needs a gradient)
    ("LeNet conv1", (64, 1, 28, 28), "Convolution", "num_output: 20 kernel_size: 5", False),
    ("LeNet pool1", (64, 20, 24, 24), "Pooling", "pool: MAX kernel_size: 2 stride: 2", True),
    ("LeNet conv2", (64, 20, 12, 12), "Convolution", "num_output: 50 kernel_size: 5", True),
    ("LeNet pool2", (64, 50, 8, 8), "Pooling", "pool: MAX kernel_size: 2 stride: 2", True),
    ("CIFAR-10 quick conv1", (100, 3, 32, 32), "Convolution",
     "num_output: 32 kernel_size: 5 pad: 2", False),
    ("CIFAR-10 quick pool1", (100, 32, 32, 32), "Pooling", "pool: MAX kernel_size: 3 stride: 2",
     True),
    ("CIFAR-10 quick conv2", (100, 32, 16, 16), "Convolution",
     "num_output: 32 kernel_size: 5 pad: 2", True),
    ("CIFAR-10 quick conv3", (100, 32, 8, 8), "Convolution",
     "num_output: 64 kernel_size: 5 pad: 2", True),
    ("CaffeNet conv1", (16, 3, 227, 227), "Convolution",
     "num_output: 96 kernel_size: 11 stride: 4", False),
    ("CaffeNet pool1", (16, 96, 55, 55), "Pooling", "pool: MAX kernel_size: 3 stride: 2", True),
    ("CaffeNet conv2", (16, 96, 27, 27), "Convolution",
     "num_output: 256 pad: 2 kernel_size: 5 group: 2", True),
    ("CaffeNet conv3", (16, 256, 13, 13), "Convolution",
     "num_output: 384 pad: 1 kernel_size: 3", True),
    ("CaffeNet norm1", (16, 96, 27, 27), "LRN", "local_size: 5 alpha: 0.0001 beta: 0.75", True),
    ("CaffeNet norm2", (16, 256, 13, 13), "LRN", "local_size: 5 alpha: 0.0001 beta: 0.75", True),
]

#: Each layer type's parameter field in the prototxt.
FIELDS = {"Convolution": "convolution_param", "Pooling": "pooling_param", "LRN": "lrn_param"}


def one_layer_net(shape, layer_type, params):
    field = FIELDS[layer_type]
    dims = " ".join(f"dim: {d}" for d in shape)
    return (f'layer {{ name: "data" type: "Input" top: "data" input_param {{ shape {{ {dims} }} }} }}\n'
            f'layer {{ name: "l" type: "{layer_type}" bottom: "data" top: "l" '
            f'{field} {{ {params} }} }}')


def step_function(tf, shape, layer_type, params, input_gradient, tf_gradients):
    from keras_caffe.importers import import_model
    from keras_caffe.kernels import CPU_TUNING

    os.environ.pop(CPU_TUNING, None)
    if tf_gradients:
        os.environ[CPU_TUNING] = "0"
    model = import_model(one_layer_net(shape, layer_type, params))
    n, c, h, w = shape
    x = tf.constant(np.random.default_rng(0).standard_normal((n, h, w, c)).astype(np.float32))
    r = tf.constant(np.random.default_rng(1).standard_normal(model(x).shape).astype(np.float32))

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(model(x, training=True) * r)
        sources = ([x] if input_gradient else []) + list(model.trainable_variables)
        return tape.gradient(loss, sources)

    step.get_concrete_function(x)  # traced now, under this setting
    os.environ.pop(CPU_TUNING, None)
    return lambda: step(x)


def time_it(fn, count):
    out = fn()
    _ = [np.asarray(o) for o in out]
    start = time.perf_counter()
    for _ in range(count):
        out = fn()
    _ = [np.asarray(o) for o in out]
    return (time.perf_counter() - start) / count * 1000


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--layers", help="comma-separated substrings of the layer labels to run")
    parser.add_argument("--steps", type=int, default=20, help="steps per timing")
    args = parser.parse_args(argv)
    import tensorflow as tf

    import keras_caffe.layers.conv as conv
    import keras_caffe.layers.pooling as pooling
    from keras_caffe.kernels import cpu_kernels, cpu_model, eigen_cpu

    forced = not eigen_cpu()
    if forced:  # show what the own backward would cost on these kernels
        pooling.eigen_cpu = lambda: os.environ.get("KERAS_CAFFE_CPU_TUNING") != "0"
        conv.takes_own_backward = lambda channels: pooling.eigen_cpu()
    print(f"{cpu_model()}, {os.cpu_count()} logical CPUs; TensorFlow {tf.__version__}, "
          f"{cpu_kernels()} kernels{' (own backward forced on)' if forced else ''}; "
          f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("ms per forward + backward step, median of the rounds (min-max)")
    print(f"{'layer':22s} {'input NCHW':>18s} {'TensorFlow':>18s} {'keras-caffe':>18s} {'TF / own':>9s}")
    for label, shape, layer_type, params, input_gradient in LAYERS:
        if args.layers and not any(part in label for part in args.layers.split(",")):
            continue
        theirs = step_function(tf, shape, layer_type, params, input_gradient, True)
        ours = step_function(tf, shape, layer_type, params, input_gradient, False)
        times = {"tf": [], "own": []}
        for _ in range(args.rounds):
            times["tf"].append(time_it(theirs, args.steps))
            times["own"].append(time_it(ours, args.steps))
        cells = {k: (statistics.median(v), min(v), max(v)) for k, v in times.items()}
        text = {k: f"{m:.2f} ({lo:.2f}-{hi:.2f})" for k, (m, lo, hi) in cells.items()}
        print(f"{label:22s} {'x'.join(map(str, shape)):>18s} {text['tf']:>18s} "
              f"{text['own']:>18s} {cells['tf'][0] / cells['own'][0]:8.2f}x", flush=True)


if __name__ == "__main__":
    sys.exit(main())

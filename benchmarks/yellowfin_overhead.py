"""YellowFin's cost in a whole training step: ResNet-20 (CIFAR-sized).

    python benchmarks/yellowfin_overhead.py [--batch 32] [--steps 5] [--repeats 6] [--no-xla]

The same ResNet-20 (He et al. 2016, 3x3 stacks of 16/32/64 filters, 0.27M
parameters) trained on the same batch with ``keras_caffe.YellowFin()`` and
with ``keras.optimizers.SGD(momentum=0.9)``, XLA (``--no-xla``: without), in
one process, alternating A/B/B/A; prints the median step times and their
ratio (goal <= 1.05). The update-only ratio on 27M parameters is in
``optimizer_step.py``.
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_caffe  # noqa: E402
from bench_nets import resnet20  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=6)
    parser.add_argument("--no-xla", action="store_true")
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    x = rng.randn(args.batch, 32, 32, 3).astype("float32")
    y = rng.randint(0, 10, args.batch)
    models = {}
    for name, optimizer in (("YellowFin", keras_caffe.YellowFin()),
                            ("SGD momentum 0.9", keras.optimizers.SGD(0.01, momentum=0.9))):
        keras.utils.set_random_seed(1)
        model = resnet20()
        model.compile(optimizer=optimizer, jit_compile=not args.no_xla,
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.train_on_batch(x, y)
        models[name] = model
    times = {name: [] for name in models}
    for r in range(args.repeats):
        for name in (list(models) if r % 2 == 0 else list(models)[::-1]):
            start = time.perf_counter()
            for _ in range(args.steps):
                models[name].train_on_batch(x, y)
            times[name].append((time.perf_counter() - start) / args.steps * 1e3)
    params = next(iter(models.values())).count_params()
    print(f"ResNet-20 ({params:,} parameters), batch {args.batch}, "
          f"XLA {'off' if args.no_xla else 'on'}, {os.cpu_count()} CPUs")
    for name, t in times.items():
        print(f"  {name:18s} {statistics.median(t):8.2f} ms/step")
    ratio = statistics.median(times["YellowFin"]) / statistics.median(times["SGD momentum 0.9"])
    print(f"ratio YellowFin / SGD: {ratio:.3f} (goal <= 1.05)")


if __name__ == "__main__":
    main()

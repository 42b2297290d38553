"""YellowFin's cost over momentum SGD: a 27M-parameter update and a ResNet-20 step.

    python benchmarks/yellowfin_overhead.py [--batch 32] [--steps 10] [--repeats 16]
                                            [--xla on|off|both] [--update auto|xla|ops]

First the update alone on 27M parameters (``optimizer_step.py``'s stack and
timing; goal <= 1.3), then the same ResNet-20 (He et al. 2016, 3x3 stacks of
16/32/64 filters, 0.27M parameters) trained on the same batch with
``keras_caffe.YellowFin()`` and with ``keras.optimizers.SGD(momentum=0.9)``,
the model compiled with XLA
(``on``, Keras's "auto" on a GPU) or not (``off``, its default on CPU;
``both``, the default, measures each), in one process, alternating A/B/B/A;
prints the median step times, their ratio and the median ratio of adjacent
windows (goal <= 1.05).
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_caffe  # noqa: E402
import optimizer_step  # noqa: E402
from bench_nets import resnet20  # noqa: E402


UPDATES = {"auto": "auto", "xla": True, "ops": False}  # --update: YellowFin's jit_compile


def measure(jit, args, x, y):
    """Median ms per training step of each optimizer, ABBA over ``args.repeats``."""
    models = {}
    for name, optimizer in (("YellowFin", keras_caffe.YellowFin(jit_compile=UPDATES[args.update])),
                            ("SGD momentum 0.9", keras.optimizers.SGD(0.01, momentum=0.9))):
        keras.utils.set_random_seed(1)
        model = resnet20()
        model.compile(optimizer=optimizer, jit_compile=jit,
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
    return ({name: statistics.median(t) for name, t in times.items()},
            optimizer_step.paired_median(times["YellowFin"], times["SGD momentum 0.9"]),
            next(iter(models.values())).count_params())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=16)
    parser.add_argument("--xla", choices=sorted(optimizer_step.XLA_MODES), default="both",
                        help="compile the model with XLA (default: both, one after the other)")
    parser.add_argument("--update", choices=sorted(UPDATES), default="auto",
                        help="YellowFin's jit_compile: auto (default), xla (True), ops (False)")
    args = parser.parse_args()
    rng = np.random.RandomState(0)
    x = rng.randn(args.batch, 32, 32, 3).astype("float32")
    y = rng.randint(0, 10, args.batch)
    count = sum(int(np.prod(s)) for s in optimizer_step.SHAPES)
    for jit in optimizer_step.XLA_MODES[args.xla]:
        ours, theirs, paired = optimizer_step.measure(
            lambda: keras_caffe.YellowFin(jit_compile=UPDATES[args.update]),
            lambda: keras.optimizers.SGD(0.01, momentum=0.9), jit, 60, 10, rng)
        print(f"{count / 1e6:.1f}M-parameter update, XLA {'on' if jit else 'off'}: YellowFin "
              f"{ours:.2f} ms, SGD momentum 0.9 {theirs:.2f} ms, ratio {ours / theirs:.3f} of "
              f"the medians, {paired:.3f} paired (goal <= 1.3)")
        times, paired, params = measure(jit, args, x, y)
        print(f"ResNet-20 ({params:,} parameters), batch {args.batch}, "
              f"XLA {'on' if jit else 'off'}, YellowFin(jit_compile={UPDATES[args.update]!r}), "
              f"{os.cpu_count()} CPUs")
        for name, t in times.items():
            print(f"  {name:18s} {t:8.2f} ms/step")
        ratio = times["YellowFin"] / times["SGD momentum 0.9"]
        print(f"ratio YellowFin / SGD: {ratio:.3f} of the medians, {paired:.3f} the median "
              "of the paired windows (goal <= 1.05)")


if __name__ == "__main__":
    main()

"""Update time per step: keras-caffe's solvers against Keras's own optimizers.

    python benchmarks/optimizer_step.py [--steps 60] [--repeats 10] [--xla on|off|both]
                                        [--only TEXT]

Both optimizers update the same 27M parameters with the same fixed
gradients inside one ``tf.function``, in the same process, alternating
A/B/B/A so that machine noise hits both alike. The step is compiled with XLA
(``on``: as Keras's ``jit_compile="auto"`` does on a GPU) or not (``off``: its
default on CPU); ``both`` (the default) measures each. Prints milliseconds per
update (median over repeats), their ratio keras-caffe / Keras and the median
ratio of adjacent windows (robust to drift); the goal is
<= 1.05 for the Caffe solvers and <= 1.3 for YellowFin over momentum SGD.

YellowFin compiles its own update with XLA here (``jit_compile="auto"``, its
default, does where big variables hold most parameters, as in this stack),
so in a step that is not compiled it runs as one fused program where Keras's
SGD runs kernel by kernel; the row "YellowFin(jit_compile=False)" shows the
update in plain TensorFlow ops.

When both are compiled, the update is memory-bound, and YellowFin's floor is
about 1.8x momentum SGD, not 1.3x. Per float32 parameter, SGD moves 20
bytes: it reads g, v, w and writes v, w. YellowFin's mu and rate for this
step depend on ||g||^2 and ||g - avg(g)||^2, so it must first read g and
avg(g) (8 bytes), and only then read g, avg(g), v, w and write avg(g), v, w
(28 bytes): 36 bytes, 1.8x. XLA on the CPU writes each variable in a loop of
its own (no multi-output fusion), so SGD makes 6 passes over the parameters
and YellowFin 11: 1.83x. Even with the reduction for free, reading and
writing avg(g) (the variance estimate needs it) costs 8 bytes more than SGD's
20: 1.4x. Only a different algorithm (statistics one step late, a
lower-precision avg(g)) could go below that.
"""

import argparse
import os
import platform
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import keras_caffe  # noqa: E402

# A VGG-classifier-like stack: 4096x4096 + 4096x2048 + 2048x1000 and biases.
SHAPES = [(4096, 4096), (4096,), (4096, 2048), (2048,), (2048, 1000), (1000,)]

PAIRS = [
    ("SGD momentum 0.9", lambda: keras_caffe.SGD(0.01, momentum=0.9),
     lambda: keras.optimizers.SGD(0.01, momentum=0.9)),
    ("Adam", lambda: keras_caffe.Adam(0.001, momentum=0.9, momentum2=0.999, delta=1e-8),
     lambda: keras.optimizers.Adam(0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8)),
    # YellowFin's overhead over the optimizer it tunes (issue goal: <= 1.3).
    ("YellowFin vs SGD momentum 0.9", lambda: keras_caffe.YellowFin(),
     lambda: keras.optimizers.SGD(0.01, momentum=0.9)),
    ("YellowFin(jit_compile=False) vs SGD momentum 0.9",
     lambda: keras_caffe.YellowFin(jit_compile=False),
     lambda: keras.optimizers.SGD(0.01, momentum=0.9)),
]


#: --xla: which step modes to measure (True: compiled with XLA).
XLA_MODES = {"on": (True,), "off": (False,), "both": (True, False)}


def paired_median(ours, theirs):
    """The median ratio of adjacent windows (A B | B A pair up): it cancels the
    machine's slow drift, which moves both medians alike."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def make_step(optimizer, variables, grads, jit):
    optimizer.build(variables)

    @tf.function(jit_compile=jit)
    def step():
        optimizer.apply(grads, variables)

    return step


def time_steps(step, variables, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    variables[0].numpy()  # wait for the device
    return (time.perf_counter() - start) / steps * 1e3


def measure(ours_factory, theirs_factory, jit, steps, repeats, rng):
    """Median ms per update of ours and Keras's (``steps`` updates a window,
    ABBA over ``repeats``) and the median ratio of adjacent windows."""
    timings, made = {}, {}
    for name, factory in (("ours", ours_factory), ("keras", theirs_factory)):
        variables = [keras.Variable(rng.randn(*s).astype("float32") * 0.01) for s in SHAPES]
        grads = [tf.constant(rng.randn(*s).astype("float32") * 1e-3) for s in SHAPES]
        made[name] = (make_step(factory(), variables, grads, jit), variables)
        time_steps(*made[name], steps=3)  # compile and warm up
        timings[name] = []
    for repeat in range(repeats):
        order = ("ours", "keras") if repeat % 2 == 0 else ("keras", "ours")  # ABBA
        for name in order:
            timings[name].append(time_steps(*made[name], steps=steps))
    return (statistics.median(timings["ours"]), statistics.median(timings["keras"]),
            paired_median(timings["ours"], timings["keras"]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--xla", choices=sorted(XLA_MODES), default="both",
                        help="compile the step with XLA (default: both, one after the other)")
    parser.add_argument("--only", metavar="TEXT", help="only the rows whose label contains TEXT")
    args = parser.parse_args()

    rng = np.random.RandomState(0)
    count = sum(int(np.prod(s)) for s in SHAPES)
    device = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    console = Console() if sys.stdout.isatty() else Console(width=120)
    console.print(
        f"{count / 1e6:.1f}M parameters, {args.steps} updates x {args.repeats} repeats, "
        f"device {device[0].name}, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} CPUs, TensorFlow {tf.__version__}, Keras {keras.__version__}"
    )
    table = Table(title="optimizer update time (ms per step, median)")
    for column in ("optimizer", "step XLA", "keras-caffe", "Keras", "ratio", "paired ratio"):
        table.add_column(column, justify="right" if column != "optimizer" else "left")
    for jit in XLA_MODES[args.xla]:
        for label, ours_factory, theirs_factory in PAIRS:
            if args.only and args.only.lower() not in label.lower():
                continue
            ours, theirs, paired = measure(ours_factory, theirs_factory, jit, args.steps,
                                           args.repeats, rng)
            table.add_row(label, "on" if jit else "off", f"{ours:.2f}", f"{theirs:.2f}",
                          f"{ours / theirs:.3f}", f"{paired:.3f}")
    console.print(table)


if __name__ == "__main__":
    main()

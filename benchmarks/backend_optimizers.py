"""Training-step time through model.fit: keras-caffe's solvers against Keras's, any backend.

    KERAS_BACKEND=tensorflow|jax|torch python benchmarks/backend_optimizers.py
        [--steps 20] [--repeats 10] [--batch 128] [--widths 784,1024,1024,10]
        [--only TEXT] [--json PATH]

Each row trains the same MLP (``--widths``: input, hidden layers, classes;
ReLU, softmax cross-entropy on logits, no metrics) from the same initial
weights on the same random batches, once compiled with keras-caffe's solver
and once with Keras's own optimizer, in one process on the backend Keras runs
on. What is timed is the whole training step as users run it: one
``model.fit`` call of ``--steps`` batches per window (its per-call setup
spread over the window), ended by reading a weight back so that work queued
asynchronously (JAX) is counted. ``compile`` keeps its default
``jit_compile="auto"``: on JAX the step is jit-compiled, on TensorFlow it is
a ``tf.function`` without XLA on CPU (YellowFin compiles its own update with
XLA there, its ``jit_compile="auto"``), on PyTorch it runs eagerly. A
warm-up window per model (compilation, first allocations) is left out; then
the two alternate A/B/B/A over ``--repeats`` windows each, so that machine
noise hits both alike. Printed: milliseconds per step (median over the
windows) of each, their ratio keras-caffe / Keras, and the median ratio of
adjacent windows (robust to drift), with a machine line (CPU model and SIMD
flags, TensorFlow's CPU kernel family on TensorFlow, backend and versions,
load average at the start and the end).

On PyTorch, Keras's SGD, Adagrad, RMSprop, Adadelta and Adam run their own
multi-tensor updates (``keras/src/backend/torch/optimizers``:
``torch._foreach_*`` over all variables at once), where keras-caffe's
solvers run their ``keras.ops`` formula variable by variable, eagerly: each
op of the formula is a kernel launch and a pass over the variable.

How the hyperparameters map (the same update, step for step, except where
said; Caffe's formulas are in each solver's docstring):

- ``keras_caffe.SGD(0.01, momentum=0.9)`` against
  ``keras.optimizers.SGD(0.01, momentum=0.9)``: Caffe's history holds
  ``lr * g`` summed with momentum, Keras's velocity its negative; with a
  constant rate the weights follow the same path.
- ``keras_caffe.Nesterov(0.01, momentum=0.9)`` against
  ``SGD(0.01, momentum=0.9, nesterov=True)``: Caffe's
  ``w -= (1 + m) h_new - m h`` is Keras's ``w += m v_new - lr g``.
- ``keras_caffe.AdaGrad(0.01, delta=1e-8)`` against
  ``Adagrad(0.01, initial_accumulator_value=0.0, epsilon=1e-8)``: Caffe
  divides by ``sqrt(h) + delta``, Keras by ``sqrt(h + epsilon)`` (the same
  work per parameter).
- ``keras_caffe.RMSProp(0.01, rms_decay=0.99, delta=1e-8)`` against
  ``RMSprop(0.01, rho=0.99, epsilon=1e-8)`` (no momentum, not centered);
  epsilon placed as for AdaGrad.
- ``keras_caffe.AdaDelta(1.0, momentum=0.95, delta=1e-6)`` against
  ``Adadelta(1.0, rho=0.95, epsilon=1e-6)``: the same formula.
- ``keras_caffe.Adam(0.001, momentum=0.9, momentum2=0.999, delta=1e-8)``
  against ``Adam(0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8)``: the same
  formula (bias correction in the rate).
- ``keras_caffe.YellowFin()`` (its defaults) against
  ``SGD(0.01, momentum=0.9)``: YellowFin tunes momentum SGD's rate and
  momentum each step; the ratio is the tuner's cost over the optimizer it
  tunes.
"""

import argparse
import importlib
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import keras_caffe  # noqa: E402
from keras_caffe.kernels import cpu_kernels, cpu_model  # noqa: E402

from arguments import positive_int  # noqa: E402  (benchmarks/arguments.py)

#: (label, Keras's counterpart as shown, keras-caffe's optimizer, Keras's).
PAIRS = [
    ("SGD", "SGD momentum 0.9",
     lambda: keras_caffe.SGD(0.01, momentum=0.9),
     lambda: keras.optimizers.SGD(0.01, momentum=0.9)),
    ("Nesterov", "SGD momentum 0.9 nesterov",
     lambda: keras_caffe.Nesterov(0.01, momentum=0.9),
     lambda: keras.optimizers.SGD(0.01, momentum=0.9, nesterov=True)),
    ("AdaGrad", "Adagrad",
     lambda: keras_caffe.AdaGrad(0.01, delta=1e-8),
     lambda: keras.optimizers.Adagrad(0.01, initial_accumulator_value=0.0, epsilon=1e-8)),
    ("RMSProp", "RMSprop",
     lambda: keras_caffe.RMSProp(0.01, rms_decay=0.99, delta=1e-8),
     lambda: keras.optimizers.RMSprop(0.01, rho=0.99, epsilon=1e-8)),
    ("AdaDelta", "Adadelta",
     lambda: keras_caffe.AdaDelta(1.0, momentum=0.95, delta=1e-6),
     lambda: keras.optimizers.Adadelta(1.0, rho=0.95, epsilon=1e-6)),
    ("Adam", "Adam",
     lambda: keras_caffe.Adam(0.001, momentum=0.9, momentum2=0.999, delta=1e-8),
     lambda: keras.optimizers.Adam(0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-8)),
    ("YellowFin", "SGD momentum 0.9",
     lambda: keras_caffe.YellowFin(),
     lambda: keras.optimizers.SGD(0.01, momentum=0.9)),
]

#: The columns of the table, in order.
COLUMNS = ("keras-caffe", "Keras", "keras-caffe ms", "Keras ms", "ratio", "paired ratio")

#: SIMD flags of /proc/cpuinfo worth naming in the machine line.
SIMD_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
              "amx_tile")

#: Each backend's packages whose versions the machine line names.
BACKEND_PACKAGES = {"tensorflow": ("tensorflow",), "jax": ("jax", "jaxlib"), "torch": ("torch",)}


# -- the machine -----------------------------------------------------------------------


def cpu_flags(path="/proc/cpuinfo"):
    """The SIMD flags of interest the first CPU of ``path`` lists, sorted."""
    try:
        text = Path(path).read_text()
    except OSError:
        return []
    for line in text.splitlines():
        if line.startswith("flags"):
            return sorted(set(line.split(":", 1)[1].split()) & set(SIMD_FLAGS))
    return []


def machine():
    """What the numbers ran on: CPU, backend and versions, load average now."""
    backend = keras.backend.backend()
    versions = {"keras": keras.__version__, "keras_caffe": keras_caffe.__version__,
                "numpy": np.__version__, "python": platform.python_version()}
    for package in BACKEND_PACKAGES.get(backend, (backend,)):
        versions[package] = importlib.import_module(package).__version__
    return {"cpu": cpu_model(), "logical_cpus": os.cpu_count(), "flags": cpu_flags(),
            "backend": backend,
            # TensorFlow's CPU kernel family; the other backends have none of it.
            "kernels": cpu_kernels() if backend == "tensorflow" else None,
            "versions": versions, "load_start": list(os.getloadavg())}


def machine_line(info):
    kernels = f" ({info['kernels']} CPU kernels)" if info["kernels"] else ""
    versions = ", ".join(f"{name} {version}" for name, version in info["versions"].items())
    load = " ".join(f"{x:.2f}" for x in info["load_start"])
    return (f"{info['cpu']}, {info['logical_cpus']} logical CPUs, flags "
            f"{' '.join(info['flags']) or 'none listed'}; backend {info['backend']}{kernels}; "
            f"{versions}; load average at start {load}")


# -- the measurement -------------------------------------------------------------------


def paired_median(ours, theirs):
    """The median ratio of adjacent windows (A B | B A pair up): it cancels the
    machine's slow drift, which moves both medians alike."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def make_model(widths):
    """An MLP ``widths[0] -> ... -> widths[-1]``, ReLU between, logits out."""
    layers = [keras.Input((widths[0],))]
    layers += [keras.layers.Dense(w, activation="relu") for w in widths[1:-1]]
    layers.append(keras.layers.Dense(widths[-1]))
    return keras.Sequential(layers)


def make_data(widths, batch, steps, seed=0):
    """``steps`` batches of random inputs and class labels."""
    rng = np.random.RandomState(seed)
    x = rng.randn(steps * batch, widths[0]).astype("float32")
    y = rng.randint(0, widths[-1], size=steps * batch).astype("int32")
    return x, y


def compiled(optimizer, widths, weights):
    model = make_model(widths)
    model.set_weights(weights)
    model.compile(optimizer=optimizer,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def time_window(model, x, y, batch):
    """Milliseconds per step of one ``fit`` over ``x`` (a whole number of batches)."""
    start = time.perf_counter()
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    keras.ops.convert_to_numpy(model.trainable_variables[-1])  # wait for queued work
    return (time.perf_counter() - start) / (len(x) // batch) * 1e3


def measure(ours_factory, theirs_factory, widths, batch, steps, repeats):
    """Per-window ms per step of ours and Keras's (``steps`` steps a window,
    A/B/B/A over ``repeats`` windows each, after a warm-up window each)."""
    keras.backend.clear_session()  # the previous row's models and traces go
    keras.utils.set_random_seed(0)
    weights = make_model(widths).get_weights()
    x, y = make_data(widths, batch, steps)
    models = {"ours": compiled(ours_factory(), widths, weights),
              "keras": compiled(theirs_factory(), widths, weights)}
    for model in models.values():
        time_window(model, x, y, batch)  # compile and warm up
    timings = {"ours": [], "keras": []}
    for repeat in range(repeats):
        order = ("ours", "keras") if repeat % 2 == 0 else ("keras", "ours")  # ABBA
        for name in order:
            timings[name].append(time_window(models[name], x, y, batch))
    return timings["ours"], timings["keras"]


def row(label, counterpart, ours, theirs):
    """One result: the medians, their ratio, the paired ratio, the windows."""
    ours_ms, keras_ms = statistics.median(ours), statistics.median(theirs)
    return {"optimizer": label, "keras": counterpart, "keras_caffe_ms": ours_ms,
            "keras_ms": keras_ms, "ratio": ours_ms / keras_ms,
            "paired_ratio": paired_median(ours, theirs),
            "windows_ms": {"keras_caffe": ours, "keras": theirs}}


def failed_row(label, counterpart, error):
    return {"optimizer": label, "keras": counterpart,
            "error": f"{type(error).__name__}: {error}",
            "traceback": "".join(traceback.format_exception(error))}


def table(rows, title):
    out = Table(title=title)
    for column in COLUMNS:
        out.add_column(column, justify="left" if column in ("keras-caffe", "Keras") else "right")
    for r in rows:
        if "error" in r:
            out.add_row(r["optimizer"], r["keras"], "failed", "-", "-", "-")
        else:
            out.add_row(r["optimizer"], r["keras"], f"{r['keras_caffe_ms']:.2f}",
                        f"{r['keras_ms']:.2f}", f"{r['ratio']:.3f}", f"{r['paired_ratio']:.3f}")
    return out


# -- the command line ------------------------------------------------------------------


def widths_list(text):
    parts = text.split(",")
    if len(parts) < 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(
            f"expected at least two positive integers separated by commas "
            f"(input, hidden..., classes), got {text!r}")
    return [int(p) for p in parts]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=20,
                        help="training steps per timed window (default 20)")
    parser.add_argument("--repeats", type=positive_int, default=10,
                        help="timed windows per optimizer, alternated A/B/B/A (default 10)")
    parser.add_argument("--batch", type=positive_int, default=128, help="batch size (default 128)")
    parser.add_argument("--widths", type=widths_list, default=[784, 1024, 1024, 10],
                        help="the MLP's layer widths: input,hidden...,classes "
                             "(default 784,1024,1024,10)")
    parser.add_argument("--only", metavar="TEXT",
                        help="only the rows whose keras-caffe optimizer contains TEXT")
    parser.add_argument("--json", metavar="PATH", type=Path,
                        help="also write the machine, settings and rows to PATH")
    return parser.parse_args(argv)


def main(argv=None):
    """Measure, print the table; exit status 1 when a row failed."""
    args = parse_args(argv)
    info = machine()
    pairs = [p for p in PAIRS if not args.only or args.only.lower() in p[0].lower()]
    console = Console() if sys.stdout.isatty() else Console(width=120)
    params = sum(a * b + b for a, b in zip(args.widths, args.widths[1:]))
    console.print(machine_line(info), markup=False, highlight=False)
    console.print(f"MLP {'-'.join(map(str, args.widths))} ({params / 1e6:.2f}M parameters), "
                  f"batch {args.batch}, {args.steps} steps a window x {args.repeats} windows "
                  f"each, model.fit on {info['backend']}", markup=False, highlight=False)
    rows = []
    for label, counterpart, ours_factory, theirs_factory in pairs:
        try:
            ours, theirs = measure(ours_factory, theirs_factory, args.widths, args.batch,
                                   args.steps, args.repeats)
        except Exception as error:  # a solver that fails on this backend: its row says so
            rows.append(failed_row(label, counterpart, error))
        else:
            rows.append(row(label, counterpart, ours, theirs))
    info["load_end"] = list(os.getloadavg())
    console.print(table(rows, f"training step through model.fit on {info['backend']} "
                              f"(ms per step, median)"))
    for r in rows:
        if "error" in r:
            console.print(f"{r['optimizer']} failed: {r['error']}", markup=False,
                          highlight=False)
    console.print("load average at end " + " ".join(f"{x:.2f}" for x in info["load_end"]))
    if args.json:
        settings = {"steps": args.steps, "repeats": args.repeats, "batch": args.batch,
                    "widths": args.widths, "parameters": params}
        args.json.write_text(json.dumps({"machine": info, "settings": settings, "rows": rows},
                                        indent=1) + "\n")
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())

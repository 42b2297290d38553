"""The float32 matrix-product rate these cores reach: the ceiling a training step
made of large products can approach.

    python benchmarks/matmul_rate.py [--sizes 1024,2048,4096] [--repeats 5]

For each size ``n``, an ``n x n`` by ``n x n`` float32 product (``2 n^3``
floating-point operations) is timed ``--repeats`` times after one warm-up, in
four processes one after the other: TensorFlow's ``tf.linalg.matmul`` with
``TF_ENABLE_ONEDNN_OPTS=1`` and ``=0`` (oneDNN's and Eigen's kernels, what
``keras-caffe train`` runs on each CPU kind), and numpy's ``matmul``
(OpenBLAS, the BLAS Caffe is built with) with ``OPENBLAS_NUM_THREADS=1`` and
``=2``. The table gives the best GFLOP/s of each (the rate the kernel can
reach, where a median would measure the machine's other load) and each
TensorFlow family's rate over OpenBLAS's better thread count.

``benchmarks/train_vs_caffe.py`` times whole training steps; dividing a net's
operations per step (``keras-caffe analyze``) by a step's time and by this
ceiling says how far a step is from what the cores can do.
"""

import argparse
import json
import os
import subprocess
import sys
import time

#: column key -> (engine, environment variables, heading)
ENGINES = {
    "tf_onednn": ("tensorflow", {"TF_ENABLE_ONEDNN_OPTS": "1"}, "TF oneDNN"),
    "tf_eigen": ("tensorflow", {"TF_ENABLE_ONEDNN_OPTS": "0"}, "TF Eigen"),
    "openblas_1": ("numpy", {"OPENBLAS_NUM_THREADS": "1"}, "OpenBLAS 1 thr"),
    "openblas_2": ("numpy", {"OPENBLAS_NUM_THREADS": "2"}, "OpenBLAS 2 thr"),
}


def gflops(n, seconds):
    """GFLOP/s of one ``n x n`` by ``n x n`` product (``2 n^3`` operations) in ``seconds``."""
    return 2.0 * n ** 3 / seconds / 1e9


def time_products(engine, n, repeats):
    """Seconds of each of ``repeats`` products of two random ``n x n`` float32
    matrices, after one warm-up product, with ``engine`` ("tensorflow" or "numpy")."""
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    if engine == "tensorflow":
        import tensorflow as tf

        a, b = tf.constant(a), tf.constant(b)

        def product():
            return tf.linalg.matmul(a, b).numpy()  # .numpy() waits for the kernel
    else:
        def product():
            return np.matmul(a, b)
    product()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        times.append(time.perf_counter() - start)
    return times


def worker(engine, sizes, repeats):
    """Print ``{size: best GFLOP/s}`` as JSON (run in a child with the engine's variables)."""
    best = {n: gflops(n, min(time_products(engine, n, repeats))) for n in sizes}
    print(json.dumps(best))


def table(results, sizes):
    """The table's lines: one row per size, GFLOP/s per engine, TF over OpenBLAS's best."""
    keys = [k for k in ENGINES if k in results]
    head = ["n"] + [ENGINES[k][2] for k in keys] + ["oneDNN / OpenBLAS", "Eigen / OpenBLAS"]
    rows = []
    for n in sizes:
        rates = {k: results[k][str(n)] for k in keys}
        blas = max((rates[k] for k in ("openblas_1", "openblas_2") if k in rates), default=None)
        ratios = [f"{rates[k] / blas:.2f}x" if blas and k in rates else "-"
                  for k in ("tf_onednn", "tf_eigen")]
        rows.append([str(n)] + [f"{rates[k]:.1f}" for k in keys] + ratios)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    return ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in [head] + rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1024,2048,4096")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--worker", choices=("tensorflow", "numpy"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker:
        return worker(args.worker, sizes, args.repeats)
    results = {}
    for key, (engine, variables, heading) in ENGINES.items():
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **variables)
        out = subprocess.run([sys.executable, __file__, "--worker", engine, "--sizes", args.sizes,
                              "--repeats", str(args.repeats)],
                             env=env, capture_output=True, text=True, check=True)
        results[key] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{heading}: done", file=sys.stderr)
    from train_vs_caffe import cpu_info  # the sibling script (its folder is on sys.path)

    model, flags, cpus = cpu_info()
    print(f"{model}; {', '.join(flags) or 'no SIMD flags read'}; {cpus} logical CPUs; "
          f"load average {os.getloadavg()[0]:.2f}; best of {args.repeats} products, GFLOP/s")
    print("\n".join(table(results, sizes)))
    return None


if __name__ == "__main__":
    main()

"""LMS's rematerialization against ``keras.remat``: wrong gradients per step.

    python benchmarks/lms_race.py [--seconds 600] [--steps 40] [--golden DIR]

The golden SGD net (``golden/solvers/sgd``: HDF5Data, InnerProduct, ReLU,
InnerProduct, SoftmaxWithLoss) is trained by ``keras_caffe.Solver`` without
LMS once, keeping ip1's weights after every step. Then, until the time is
up, alternating, a fresh Solver with ``LMS(threshold_kb=0)`` (every layer
rematerialized) runs ``--steps`` steps with one of two mechanisms:

- ``keras.remat``: LMS's blocks through ``keras.remat`` (``tf.recompute_grad``),
  what LMS used before;
- ``keras-caffe``: LMS's own remat (``lms_exec._recomputing``), which reads
  the weights once, in the forward pass, and recomputes with those values.

A step whose weights differ (bitwise) from the run without LMS counts as a
failure and ends that run. Without a race every count is 0: remat
recomputes the same operations from the same values. Run it with the CPU
busy (``yes > /dev/null &``): the race needs the step's ops to interleave.
Prints the counts and their ratio.
"""

import argparse
import io
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main():
    here = Path(__file__).resolve().parent
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--golden", default=os.environ.get(
        "KERAS_CAFFE_GOLDEN", here.parent.parent / "shared" / "golden"))
    args = parser.parse_args()

    import keras
    import tensorflow as tf

    import keras_caffe
    from keras_caffe.lms import execution as lms_exec
    from keras_caffe.importers.net.blobs import caffe_layers

    case = Path(args.golden) / "solvers" / "sgd"
    ours = lms_exec._recomputing

    def keras_remat(forward, weights, host=False):
        return lambda xs, values: keras.remat(forward)(*xs)

    def solver(lms):
        work = Path(tempfile.mkdtemp()) / "sgd"
        shutil.copytree(case, work, ignore=shutil.ignore_patterns("bin_run"))
        os.chdir(work)
        keras.backend.clear_session(free_memory=False)
        return keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None,
                                  stream=io.StringIO(), lms=lms)

    def weights(s):
        return caffe_layers(s.net)["ip1"].caffe_blobs()[0].copy()

    plain = solver(None)
    reference = []
    for _ in range(args.steps):
        plain.step(1)
        reference.append(weights(plain))

    mechanisms = {"keras.remat": keras_remat, "keras-caffe": ours}
    counts = {name: {"runs": 0, "steps": 0, "failures": 0, "at": []} for name in mechanisms}
    deadline = time.time() + args.seconds
    while time.time() < deadline:
        for name, remat in mechanisms.items():
            lms_exec._recomputing = remat
            s = solver(keras_caffe.LMS(threshold_kb=0))
            c = counts[name]
            c["runs"] += 1
            for i in range(args.steps):
                s.step(1)
                c["steps"] += 1
                if not np.array_equal(weights(s), reference[i]):
                    c["failures"] += 1
                    c["at"].append(i + 1)
                    break
    lms_exec._recomputing = ours

    print(f"TensorFlow {tf.__version__}, TF_ENABLE_ONEDNN_OPTS="
          f"{os.environ.get('TF_ENABLE_ONEDNN_OPTS', '(default)')}, {os.cpu_count()} CPUs")
    for name, c in counts.items():
        print(f"{name:12s} {c['failures']} wrong step(s) in {c['steps']} steps "
              f"({c['runs']} runs; at steps {c['at']})")
    old, new = counts["keras.remat"], counts["keras-caffe"]
    rate = lambda c: c["failures"] / max(c["steps"], 1)
    print(f"failure rate keras-caffe / keras.remat: {rate(new):.2e} / {rate(old):.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``keras-caffe train`` speed against BVLC Caffe's, and the input pipeline's.

    python benchmarks/train_vs_caffe.py [--iterations 200] [--golden ../shared/golden]

Trains the nets Caffe was timed on (``golden/timing``: LeNet, batch 64, and
CIFAR-10 quick, batch 100, DummyData input, the BVLC example solvers) with
``keras_caffe.Solver``, XLA off and on, and prints milliseconds per training
iteration (median of 5 windows of ``--iterations / 5`` after a warm-up,
updates included) beside Caffe's recorded figures on this kind of machine:
its best ``caffe train`` rate (from the ``Iteration N (x iter/s, ...)`` lines
of its logs, after iteration 50) and its best ``caffe time`` forward-backward.
Caffe cannot run here, so its side is the recorded run, not the same run:
the golden README says the VM is noisy (+-30%), so the ratio has that error.

Then the data pipeline alone: images per second that the LMDB ``Data``
layer pipeline delivers (5000 digits-like 28x28 images written by the LeNet
example's ``make_data.py``, batch 64, scale), against what the train step
consumes, so the input never starves the step.
"""

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import keras_caffe  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NETS = {"LeNet (batch 64)": "lenet", "CIFAR-10 quick (batch 100)": "cifar10_quick"}


def caffe_figures(timing, net):
    """(best train ms/iter, best `caffe time` fwd+bwd ms) over the thread settings."""
    train = []
    for log in timing.glob(f"train_{net}_threads-*.log"):
        for it, rate in re.findall(r"Iteration (\d+) \(([\d.e+-]+) iter/s", log.read_text()):
            if int(it) > 50:
                train.append(1e3 / float(rate))
    timed = [float(m) for log in timing.glob(f"time_{net}_threads-*.log")
             for m in re.findall(r"Average Forward-Backward: ([\d.e+-]+) ms", log.read_text())]
    return min(train), min(timed)


def ours(timing, net, iterations, jit):
    with tempfile.TemporaryDirectory() as tmp:
        cwd = os.getcwd()
        os.chdir(tmp)  # snapshots, if any, land here
        try:
            solver = keras_caffe.Solver(timing / f"{net}_dummy_solver.prototxt", log=None,
                                        jit_compile=jit)
            solver.step(10)  # trace, compile, warm up
            window = max(iterations // 5, 1)
            times = []
            for _ in range(5):
                start = time.perf_counter()
                solver.step(window)
                times.append((time.perf_counter() - start) / window * 1e3)
        finally:
            os.chdir(cwd)
    return statistics.median(times)


def pipeline_rate(batches=300):
    sys.path.insert(0, str(REPO / "examples" / "lenet_solver"))
    import make_data

    from keras_caffe.importers.netfile import filter_net, net_state, read_net
    from keras_caffe.importers.pipelines import net_pipeline

    with tempfile.TemporaryDirectory() as tmp:
        make_data.write_lmdb(os.path.join(tmp, "digits_train_lmdb"), 5000, 0)
        text = (REPO / "examples" / "lenet_solver" / "lenet_train_test.prototxt").read_text()
        net_file = Path(tmp) / "net.prototxt"
        net_file.write_text(text)
        param, _ = read_net(str(net_file))
        param = filter_net(param, net_state("TRAIN", 0, ()))
        pipe = net_pipeline(param, "TRAIN", net_source=str(net_file))
        it = iter(pipe.dataset())
        for _ in range(20):
            next(it)
        start = time.perf_counter()
        for _ in range(batches):
            batch = next(it)
        batch["data"].numpy()
        return batches * pipe.batch_size / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--golden", default=str(REPO.parent / "shared" / "golden"))
    args = parser.parse_args()
    timing = Path(args.golden) / "timing"
    console = Console()
    console.print(f"{os.cpu_count()} CPUs, TensorFlow {tf.__version__}, "
                  f"GPU: {bool(tf.config.list_logical_devices('GPU'))}")
    table = Table(title="ms per training iteration (lower is better)")
    for column in ("net", "Caffe train (best)", "Caffe time fwd+bwd (best)", "keras-caffe",
                   "keras-caffe XLA", "speed-up vs Caffe train"):
        table.add_column(column, justify="left" if column == "net" else "right")
    for label, net in NETS.items():
        caffe_train, caffe_time = caffe_figures(timing, net)
        plain = ours(timing, net, args.iterations, False)
        xla = ours(timing, net, args.iterations, True)
        best = min(plain, xla)
        table.add_row(label, f"{caffe_train:.1f}", f"{caffe_time:.1f}", f"{plain:.1f}",
                      f"{xla:.1f}", f"{caffe_train / best:.2f}x")
    console.print(table)
    rate = pipeline_rate()
    console.print(f"LMDB Data pipeline (LeNet, batch 64): {rate:,.0f} images/s "
                  f"= {rate / 64:,.0f} batches/s")


if __name__ == "__main__":
    main()

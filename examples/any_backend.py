"""keras-caffe on any Keras backend: the README's solver and import examples, without TensorFlow.

    KERAS_BACKEND=jax python examples/any_backend.py [--golden tests/golden] [--out DIR]

(``KERAS_BACKEND=torch`` or ``tensorflow`` as well.) What README.md's "Use"
section shows under "Caffe's solvers, and YellowFin, in model.compile" and
"Importing Caffe models", on the golden files kept in the repository
(tests/golden: the ``sgd`` solver case's solver.prototxt and BVLC Caffe's
LeNet with its weights and outputs):

1. a Caffe ``SGD`` with a ``step`` lr policy and ``lr_mult``/``decay_mult``,
   and the optimizer a solver file describes (``optimizer_from_solver``);
2. ``YellowFin`` training a small classifier through ``model.fit``;
3. LeNet imported (``import_model``), its output compared with BVLC Caffe's,
   saved as a ``.keras`` file and loaded back, exported to Caffe's bytes
   (``export_caffemodel``: the same bytes as Caffe's file) and imported
   again from them.

It prints the backend, each step's result and whether TensorFlow was
imported: after ``import keras_caffe``, after ``import_model``, at the end
(on JAX and PyTorch it never is; on TensorFlow Keras imports it).
"""

import argparse
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_caffe  # noqa: E402

#: Whether TensorFlow is imported, at the points the example reports it.
TENSORFLOW_IMPORTED = {"after import keras_caffe": "tensorflow" in sys.modules}


def _yes_no(flag):
    return "yes" if flag else "no"


def solvers(solver_file):
    """The README's solver block: a Caffe SGD with Caffe's step policy and
    multipliers, and the optimizer of a solver file."""
    model = keras.Sequential([keras.Input((20,)), keras.layers.Dense(5, name="ip1")])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    sched = keras_caffe.schedules.Step(base_lr=0.01, gamma=0.1, stepsize=100000)
    opt = keras_caffe.SGD(learning_rate=sched, momentum=0.9, weight_decay=5e-4,
                          lr_mult={"*/bias": 2.0}, decay_mult={"*/bias": 0.0})
    model.compile(optimizer=opt, loss=loss)
    print(f"SGD: {opt}")
    print(f"{solver_file.name} -> {keras_caffe.optimizer_from_solver(solver_file)}")
    return model, loss


def yellowfin(model, loss):
    """The README's YellowFin line: it tunes its own rate and momentum in ``fit``."""
    opt = keras_caffe.YellowFin()
    model.compile(optimizer=opt, loss=loss)
    rng = np.random.RandomState(0)
    history = model.fit(rng.rand(640, 20).astype("float32"), rng.randint(0, 5, 640),
                        batch_size=32, epochs=2, verbose=0)
    losses = history.history["loss"]
    print(f"YellowFin: {int(opt.iterations)} steps, loss {losses[0]:.4f} -> {losses[-1]:.4f}, "
          f"tuned lr {float(opt.tuned_learning_rate):.4g}, "
          f"tuned momentum {float(opt.tuned_momentum):.4g}")


def import_lenet(lenet, out):
    """The README's import block on BVLC Caffe's LeNet, checked against Caffe's output."""
    model = keras_caffe.import_model(lenet / "deploy_used.prototxt",
                                     weights=lenet / "weights.caffemodel")
    TENSORFLOW_IMPORTED["after import_model"] = "tensorflow" in sys.modules
    x = np.load(lenet / "input.npy").transpose(0, 2, 3, 1)  # Caffe's NCHW -> channels_last
    prob = model.predict(x, verbose=0)
    caffe = np.load(lenet / "outputs.npz")["prob"]
    print(f"LeNet imported: output {tuple(prob.shape)}, largest |Keras - BVLC Caffe| "
          f"difference {np.abs(prob - caffe).max():.2e}")

    saved = out / "lenet.keras"
    model.save(saved)
    loaded = keras.saving.load_model(saved)  # keras_caffe's layers: known once it is imported
    print(f"{saved.name} loaded back: largest difference "
          f"{np.abs(loaded.predict(x, verbose=0) - prob).max():.2e}")

    exported = out / "out.caffemodel"
    keras_caffe.export_caffemodel(model, exported)
    same = exported.read_bytes() == (lenet / "weights.caffemodel").read_bytes()
    again = keras_caffe.import_model(lenet / "deploy_used.prototxt", weights=exported)
    print(f"{exported.name}: {exported.stat().st_size} bytes, the same as weights.caffemodel: "
          f"{_yes_no(same)}; imported again: largest difference "
          f"{np.abs(again.predict(x, verbose=0) - prob).max():.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # the recordings kept in the repository
    parser.add_argument("--golden", type=Path,
                        default=Path(__file__).resolve().parents[1] / "tests" / "golden")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for lenet.keras and out.caffemodel (default: a temporary one)")
    args = parser.parse_args()
    print(f"keras-caffe {importlib.metadata.version('keras-caffe')} on Keras {keras.__version__}, "
          f"backend {keras.backend.backend()}")
    keras.utils.set_random_seed(0)
    model, loss = solvers(args.golden / "solvers" / "sgd" / "solver.prototxt")
    yellowfin(model, loss)
    with tempfile.TemporaryDirectory(prefix="any-backend-") as folder:
        out = args.out or Path(folder)
        out.mkdir(parents=True, exist_ok=True)
        import_lenet(args.golden / "forward" / "lenet", out)
    TENSORFLOW_IMPORTED["at the end"] = "tensorflow" in sys.modules
    print("TensorFlow imported: " + ", ".join(f"{point} {_yes_no(flag)}"
                                              for point, flag in TENSORFLOW_IMPORTED.items()))


if __name__ == "__main__":
    main()

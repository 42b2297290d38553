"""keras-caffe demo: a Caffe solver file drives a Keras model, with Caffe's numbers.

    python examples/demo.py [--golden tests/golden]

1. Reads a Caffe solver file into an optimizer and lr schedule and prints the
   schedule as Caffe would step it.
2. Trains a small Keras classifier with it through model.fit.
3. If the golden Caffe recordings are present, replays one of them and
   prints how far the Keras weights are from the weights BVLC Caffe wrote,
   and imports a Caffe model (LeNet prototxt + caffemodel) and compares its
   output with the output BVLC Caffe computed.
"""

import argparse
import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import keras_caffe  # noqa: E402

SOLVER = """
# An ordinary Caffe solver file.
type: "SGD"
base_lr: 0.05
lr_policy: "multistep"
gamma: 0.1
stepvalue: 150
stepvalue: 250
momentum: 0.9
weight_decay: 0.0005
iter_size: 2            # two batches per update, as Caffe accumulates them
clip_gradients: 10
max_iter: 300
"""

console = Console()


def show_schedule():
    schedule = keras_caffe.schedules.from_solver(SOLVER)
    console.print(f"lr schedule: {schedule!r}")
    table = Table(title="lr as Caffe steps it")
    table.add_column("iteration", justify="right")
    table.add_column("lr", justify="right")
    for it in (0, 149, 150, 249, 250, 299):
        table.add_row(str(it), f"{float(schedule(it)):g}")
    console.print(table)


def train_classifier(optimizer):
    import tensorflow as tf

    rng = np.random.RandomState(0)
    centers = rng.randn(5, 20) * 2.0
    labels = rng.randint(0, 5, 2048)
    data = (centers[labels] + 2.5 * rng.randn(2048, 20)).astype("float32")
    model = keras.Sequential(
        [keras.Input((20,)), keras.layers.Dense(64, activation="relu", name="ip1"),
         keras.layers.Dense(5, name="ip2")]
    )
    model.compile(optimizer=optimizer, jit_compile=True, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices((data, labels)).shuffle(2048, seed=0).repeat().batch(64)
    # max_iter 300 x iter_size 2 = 600 batches of 64.
    history = model.fit(ds, epochs=20, steps_per_epoch=30, verbose=0, shuffle=False)
    console.print(
        f"trained {int(optimizer.iterations)} Caffe iterations "
        f"({int(optimizer.iterations) * optimizer.iter_size} batches): "
        f"loss {history.history['loss'][0]:.3f} -> {history.history['loss'][-1]:.3f}, "
        f"accuracy {history.history['accuracy'][-1]:.3f}, final lr {float(optimizer.learning_rate):g}"
    )


def replay_golden(golden):
    import tensorflow as tf

    folder = golden / "solvers" / "adam"
    init, trajectory = np.load(folder / "init.npz"), np.load(folder / "trajectory.npz")
    data = np.load(folder / "data.npz")
    inputs = keras.Input((20,))
    hidden = keras.layers.Dense(16, activation="relu", name="ip1")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(5, name="ip2")(hidden))
    for layer in ("ip1", "ip2"):
        model.get_layer(layer).set_weights([init[f"{layer}_w"].T, init[f"{layer}_b"]])
    # train_net.prototxt gives ip1's bias param { lr_mult: 2 decay_mult: 0 }.
    optimizer = keras_caffe.optimizer_from_solver(
        folder / "solver.prototxt", lr_mult={"ip1/bias": 2.0}, decay_mult={"ip1/bias": 0.0})
    model.compile(optimizer=optimizer, jit_compile=True,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ds = tf.data.Dataset.from_tensor_slices(
        (data["data"], data["label"].astype("int32"))).batch(16).repeat()
    model.fit(ds, steps_per_epoch=30, epochs=1, verbose=0, shuffle=False)
    final = {}
    for layer in ("ip1", "ip2"):
        kernel, bias = model.get_layer(layer).get_weights()
        final[f"{layer}_w"], final[f"{layer}_b"] = kernel.T, bias  # Caffe's (out, in)
    worst = max(np.abs(value - trajectory[name][30]).max() for name, value in final.items())
    console.print(
        f"golden replay ({folder}): 30 Adam iterations, largest |Keras - BVLC Caffe| "
        f"weight difference {worst:.2e}"
    )


def import_golden(golden):
    folder = golden / "forward" / "lenet"
    imported = keras_caffe.importers.import_net(folder / "deploy_used.prototxt",
                                                weights=folder / "weights.caffemodel")
    table = Table(title=imported.net.name)
    for column in ("layer", "type", "output shape (N, C, H, W)", "params"):
        table.add_column(column)
    for row in keras_caffe.importers.layer_summary(imported):
        shapes = ", ".join("loss" if s is None else str(s) for s in row.shapes)
        table.add_row(row.name, row.type, shapes, f"{row.params:,}" if row.params else "")
    console.print(table)
    x = np.load(folder / "input.npy").transpose(0, 2, 3, 1)  # channels_last
    prob = keras.ops.convert_to_numpy(imported.model(x))
    caffe = np.load(folder / "outputs.npz")["prob"]
    console.print(f"imported LeNet: largest |Keras - BVLC Caffe| output difference "
                  f"{np.abs(prob - caffe).max():.2e}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # The recordings kept in the repository (tests/golden: the solver cases and LeNet)
    default = Path(__file__).resolve().parents[1] / "tests" / "golden"
    parser.add_argument("--golden", type=Path, default=default)
    args = parser.parse_args()

    optimizer = keras_caffe.optimizer_from_solver(SOLVER, lr_mult={"*/bias": 2.0},
                                                  decay_mult={"*/bias": 0.0})
    console.print(f"solver file -> {type(optimizer).__name__}(momentum={optimizer.momentum:g}, "
                  f"weight_decay={optimizer.caffe_weight_decay:g}, iter_size={optimizer.iter_size}, "
                  f"clip_gradients={optimizer.clip_gradients:g})")
    show_schedule()
    train_classifier(optimizer)
    if (args.golden / "solvers").is_dir():
        replay_golden(args.golden)
        import_golden(args.golden)
    else:
        console.print(f"(no golden Caffe data at {args.golden}: replay skipped)")


if __name__ == "__main__":
    main()

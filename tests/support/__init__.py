"""Helpers shared by the tests: the golden Caffe data and its nets.

The package holds every helper of the suite (tests/ is the one folder on
``sys.path``, pyproject.toml's ``pythonpath``): this module's names (``from
support import REPO, GOLDEN``), and its submodules (``from support.cli_runner
import run_cli``), among them the scripts the tests run as processes
(``fuzz_worker.py``, ``mirrored_worker.py``, ``collectives_worker.py``,
``fit_worker.py``, ``elastic_cli.py``, ``lms.py``, ``forked.py``,
``horovod_jobs.py``), which import no other helper."""

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
#: The case folders of tests/golden/solvers.
GOLDEN_SOLVER_CASES = [
    "sgd", "nesterov", "adagrad", "rmsprop", "adadelta", "adam",
    "sgd_l1", "sgd_clip", "sgd_itersize2",
    "sgd_lr_step", "sgd_lr_multistep", "sgd_lr_exp", "sgd_lr_inv", "sgd_lr_poly",
    "sgd_lr_sigmoid",
]
#: BVLC Caffe's recordings the suite reads, in the repository (README.md there):
#: everything but the large forward nets' weights, input and outputs.
GOLDEN = REPO / "tests" / "golden"
#: Net files of public Caffe nets and forks the tests read (tests/nets).
NETS = REPO / "tests" / "nets"
#: The full recordings outside the repository (``../shared/golden``, or the
#: folder KERAS_CAFFE_GOLDEN names): where the large forward nets are read.
GOLDEN_OUTSIDE = Path(os.environ.get("KERAS_CAFFE_GOLDEN",
                                     REPO.parent / "shared" / "golden")).absolute()
#: The forward nets whose weights.caffemodel, input.npy and outputs.npz stay
#: outside (their size there); tests/golden/forward holds their text files.
GOLDEN_LARGE_NETS = {"squeezenet_v1.1": "26 MB", "mobilenet_v1": "25 MB", "bvlc_googlenet": "40 MB"}


def golden_net(name):
    """The folder of golden forward net ``name`` with its weights, input and outputs.

    lenet, cifar10_quick and nin_cifar10 are in tests/golden/forward. The
    large nets are read from GOLDEN_OUTSIDE/forward: without that folder (a
    clone alone) the test is skipped, saying so in one line; with it (CI, or
    KERAS_CAFFE_GOLDEN set) a net missing there fails the test.
    """
    import pytest

    if name not in GOLDEN_LARGE_NETS:
        return GOLDEN / "forward" / name
    folder = GOLDEN_OUTSIDE / "forward" / name
    if not GOLDEN_OUTSIDE.is_dir() and "KERAS_CAFFE_GOLDEN" not in os.environ:
        pytest.skip(f"golden net {name} is not in the repository ({GOLDEN_LARGE_NETS[name]}); "
                    f"it is read from {GOLDEN_OUTSIDE / 'forward'} when present: not there")
    missing = [f for f in ("deploy_used.prototxt", "weights.caffemodel", "input.npy", "outputs.npz")
               if not (folder / f).is_file()]
    if missing:
        what = f"{', '.join(missing)} missing in {folder}" if folder.is_dir() else f"no folder {folder}"
        pytest.fail(f"golden net {name}: {what} (the golden data outside the repository: "
                    f"../shared/golden, or KERAS_CAFFE_GOLDEN)", pytrace=False)
    if (folder / "deploy_used.prototxt").read_bytes() != \
            (GOLDEN / "forward" / name / "deploy_used.prototxt").read_bytes():
        pytest.fail(f"golden net {name}: {folder / 'deploy_used.prototxt'} differs from "
                    f"tests/golden's copy", pytrace=False)
    return folder


def tiny_mlp(init=None):
    """The golden solvers' net: ip1 (20->16) + ReLU + ip2 (16->5), logits out.

    ``init`` holds Caffe's blobs (``ip1_w`` as (out, in)); Keras kernels are
    their transposes.
    """
    inputs = keras.Input((20,), name="data")
    x = keras.layers.Dense(16, name="ip1")(inputs)
    x = keras.layers.ReLU(name="relu1")(x)
    outputs = keras.layers.Dense(5, name="ip2")(x)
    model = keras.Model(inputs, outputs, name="tiny_mlp")
    if init is not None:
        set_caffe_weights(model, init)
    return model


def set_caffe_weights(model, blobs):
    for layer in ("ip1", "ip2"):
        model.get_layer(layer).set_weights(
            [np.asarray(blobs[f"{layer}_w"]).T, np.asarray(blobs[f"{layer}_b"])]
        )


def caffe_weights(model):
    """The model's weights as Caffe blobs (``ip1_w`` as (out, in))."""
    out = {}
    for layer in ("ip1", "ip2"):
        kernel, bias = model.get_layer(layer).get_weights()
        out[f"{layer}_w"], out[f"{layer}_b"] = kernel.T, bias
    return out


def net_multipliers(prototxt):
    """``lr_mult``/``decay_mult`` dicts for the Keras twin of a Caffe net.

    Param 0 of an InnerProduct layer is its kernel, param 1 its bias.
    """
    from keras_caffe.importers import read_text
    from keras_caffe.proto import caffe_pb2

    net = read_text(prototxt, caffe_pb2.NetParameter)
    lr_mult, decay_mult = {}, {}
    for layer in net.layer:
        for spec, blob in zip(layer.param, ("kernel", "bias")):
            lr_mult[f"{layer.name}/{blob}"] = spec.lr_mult
            decay_mult[f"{layer.name}/{blob}"] = spec.decay_mult
    return lr_mult, decay_mult


def sparse_softmax_loss():
    """Caffe's SoftmaxWithLoss (normalization VALID, no ignore_label)."""
    return keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def golden_dataset(folder, batch_size=16, skip=0):
    """Caffe's HDF5Data order: rows in order, wrapping, never shuffled; the
    batches of tf.data's ``.batch(batch_size).repeat()`` (a short last batch
    when the rows do not divide), the first ``skip`` left out, as a
    generator any Keras backend's ``model.fit`` takes."""
    data = np.load(folder / "data.npz")
    return repeated_batches(data["data"], data["label"].astype("int32"), batch_size, skip)


def repeated_batches(x, y, batch_size, skip=0):
    """``(x, y)`` in batches of ``batch_size``, in order and wrapping (a short
    last batch when the rows do not divide: tf.data's
    ``.batch(batch_size).repeat()``), the first ``skip`` left out."""
    count = 0
    while True:
        for start in range(0, len(x), batch_size):
            if count >= skip:
                yield x[start:start + batch_size], y[start:start + batch_size]
            count += 1


def linear_batches(seed=0, n=256, skip=0):
    """Batches of 16 of a seeded linear problem (20 features, 5 classes),
    ``repeated_batches``: the YellowFin tests' ``model.fit`` data."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 20)).astype("float32")
    y = np.argmax(x @ rng.normal(size=(20, 5)), axis=1).astype("int32")
    return repeated_batches(x, y, 16, skip)


def run_layers(layers_text, inputs, weights=None, data_format="channels_last", phase="TEST",
               outputs=None, training=False):
    """Run Caffe layer(s) through the importer on numpy inputs.

    ``inputs`` maps input blob names to arrays in Caffe's layout (N, C, H, W);
    an Input layer for them is prepended to ``layers_text``. ``weights`` maps
    Caffe layer names to their blobs. Returns ``{blob: array}`` in Caffe's
    layout for the model's outputs (all net outputs unless ``outputs``).
    """
    from keras_caffe.importers import import_model, load_into

    shapes = "".join(
        f"  shape {{ {' '.join(f'dim: {d}' for d in np.shape(a))} }}\n" for a in inputs.values()
    )
    tops = "".join(f'  top: "{name}"\n' for name in inputs)
    text = f'layer {{\n  name: "input"\n  type: "Input"\n{tops}  input_param {{\n{shapes}  }}\n}}\n'
    model = import_model(text + layers_text, phase=phase, data_format=data_format, outputs=outputs)
    if weights:
        load_into(model, weights)
    feed = [to_keras_layout(np.asarray(a, np.float32), data_format) for a in inputs.values()]
    result = model(feed if len(feed) > 1 else feed[0], training=training)
    if not isinstance(result, dict):
        result = {model.caffe_outputs[0]: result}
    return {name: from_keras_layout(keras.ops.convert_to_numpy(r), data_format)
            for name, r in result.items()}


def to_keras_layout(array, data_format):
    if data_format == "channels_last" and array.ndim >= 3:
        return np.moveaxis(array, 1, -1)
    return array


def from_keras_layout(array, data_format):
    if data_format == "channels_last" and array.ndim >= 3:
        return np.moveaxis(array, -1, 1)
    return array


DATA_FORMATS = ["channels_last", "channels_first"]


def golden_train_shapes():
    """``input_shapes`` for the HDF5Data layer of the golden solver and
    snapshot nets: None on TensorFlow, where tf.data reads the shapes from its
    source; on JAX and PyTorch given (its tops become Inputs)."""
    return None if keras.backend.backend() == "tensorflow" else {"data": (20,), "label": ()}


def golden_resume(folder):
    """The golden net of ``folder`` (TRAIN phase) compiled with the optimizer
    of its solver file, as a resume of Caffe's snapshot starts."""
    import keras_caffe
    from keras_caffe.importers import training_args

    model = keras_caffe.import_model(folder / "train_net.prototxt", phase="TRAIN",
                                     input_shapes=golden_train_shapes())
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    optimizer = keras_caffe.optimizer_from_solver(folder / "solver.prototxt",
                                                  lr_mult=lr_mult, decay_mult=decay_mult)
    model.compile(optimizer=optimizer, **training_args(model))
    return model, optimizer


def solver_weights(folder, iterations):
    """The weights after ``iterations`` of ``keras_caffe.Solver`` on
    ``folder``'s solver.prototxt from its init.caffemodel, run from there."""
    import keras_caffe

    cwd = os.getcwd()
    os.chdir(folder)
    try:
        solver = keras_caffe.Solver("solver.prototxt", weights="init.caffemodel", log=None)
        solver.step(iterations)
        return [v.numpy() for v in solver.net.weights]
    finally:
        os.chdir(cwd)

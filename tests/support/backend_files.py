"""The small files each Keras backend writes for the others to read
(``tests/saved_models/backends/``, written by ``tests/saved_models/make.py``
run once per backend): an imported Caffe net trained a few iterations with
keras-caffe's solvers, saved as ``.keras`` files and as snapshots in the
three snapshot formats, and the numbers they hold and training goes on to
(``expected_<backend>.npz``).

What is written and what is checked are built here, once: the net, its
starting weights (NumPy's, the same on every backend), the data, the
solvers and the training steps.
"""

import keras
import numpy as np

import keras_caffe
from keras_caffe import schedules

from support import REPO

#: The backends that write files, each named in its files' names.
BACKENDS = ("tensorflow", "jax", "torch")
FOLDER = REPO / "tests" / "saved_models" / "backends"
#: Iterations (optimizer updates) trained before the files are written, and after.
SAVED_AT = 3
CONTINUED = 3
BATCH = 4

#: One InnerProduct layer (the fewest HDF5 objects, so the smallest files),
#: with Caffe's usual multipliers: the bias learns twice as fast, undecayed.
NET = """
name: "small"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 6 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 3 } }
"""


def _sgd(lr_mult, decay_mult):
    """Caffe's SGD on a step policy, with momentum, weight decay, the net's
    multipliers and iter_size 2 (an integer micro-step counter of its own)."""
    return keras_caffe.SGD(schedules.Step(0.1, gamma=0.5, stepsize=2), momentum=0.9,
                           weight_decay=5e-4, lr_mult=lr_mult, decay_mult=decay_mult,
                           iter_size=2)


def _adam(lr_mult, decay_mult):
    """Caffe's Adam (its bias correction reads the iteration counter)."""
    return keras_caffe.Adam(0.01, momentum=0.9, momentum2=0.999, delta=1e-8,
                            weight_decay=5e-4, lr_mult=lr_mult, decay_mult=decay_mult)


def _yellowfin(lr_mult, decay_mult):
    """YellowFin with a short curvature window (its window and averages)."""
    return keras_caffe.YellowFin(learning_rate=0.1, curv_win_width=3, lr_mult=lr_mult,
                                 decay_mult=decay_mult)


#: File stem -> the optimizer a model of that file trains with.
SOLVERS = {"sgd": _sgd, "adam": _adam, "yellowfin": _yellowfin}
#: The snapshot formats: each written from the "sgd" model after SAVED_AT
#: iterations, with the prefix ``<format>_<backend>``.
SNAPSHOT_FORMATS = ("caffe", "caffe_hdf5", "keras")
SNAPSHOT_SOLVER = "sgd"


def data():
    """``(x, y)``: 4 micro-batches' worth of rows, drawn by NumPy."""
    rng = np.random.default_rng(35)
    return (rng.standard_normal((4 * BATCH, 6)).astype("float32"),
            rng.integers(0, 3, 4 * BATCH).astype("int32"))


def build(solver):
    """The net imported, with NumPy's starting weights, compiled with
    ``SOLVERS[solver]``."""
    model = keras_caffe.import_model(NET, phase="TRAIN")
    rng = np.random.default_rng(7)
    layer = model.get_layer("ip")
    layer.set_caffe_blobs([0.5 * rng.standard_normal(shape).astype("float32")
                           for shape in layer.caffe_blob_shapes()])
    lr_mult, decay_mult = keras_caffe.param_multipliers(model)
    model.compile(optimizer=SOLVERS[solver](lr_mult, decay_mult),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def train(model, iterations):
    """``iterations`` optimizer updates (``iter_size`` micro-batches each),
    micro-batch k reading rows ``4k..4k+3`` (mod 16) from where the
    optimizer's counter stands."""
    x, y = data()
    optimizer = model.optimizer
    size = getattr(optimizer, "iter_size", 1)
    first = int(keras.ops.convert_to_numpy(optimizer.iterations)) * size
    for k in range(first, first + iterations * size):
        rows = np.arange(BATCH * k, BATCH * (k + 1)) % len(x)
        model.train_on_batch(x[rows], y[rows])


def _local(path, owner):
    """A variable's path after its owner's name (``sgd/ip1_kernel_momentum`` ->
    ``ip1_kernel_momentum``): optimizer names are numbered per process."""
    return path.split("/", 1)[1] if path.startswith(f"{owner}/") else path


def state(model):
    """``{key: value}`` of the model's weights (``weights/<path>``) and its
    optimizer's variables (``variables/<path after the optimizer's name>``),
    copies."""
    optimizer = model.optimizer
    out = {f"weights/{w.path}": np.array(keras.ops.convert_to_numpy(w), copy=True)
           for w in model.weights}
    out.update({f"variables/{_local(v.path, optimizer.name)}":
                np.array(keras.ops.convert_to_numpy(v), copy=True) for v in optimizer.variables})
    return out


def expected_path(backend):
    return FOLDER / f"expected_{backend}.npz"


def keras_path(solver, backend):
    return FOLDER / f"{solver}_{backend}.keras"


def snapshot_prefix(format, backend):
    """Relative to FOLDER, as written there (Caffe's ``learned_net`` keeps the
    prefix as given)."""
    return f"{format}_{backend}"


def own_types(solver):
    """``{key: dtype}`` of ``state`` for a model of ``solver`` built here: the
    types this backend keeps each weight and optimizer variable in."""
    model = build(solver)
    model.optimizer.build(model.trainable_variables)
    return {key: value.dtype for key, value in state(model).items()}


def stored(expected, prefix):
    """``{key: value}`` of ``expected``'s entries ``<prefix>/<key>``."""
    return {k[len(prefix) + 1:]: expected[k] for k in expected.files if k.startswith(prefix + "/")}


def assert_state(held, want, rtol=None, atol=0.0):
    """``held`` (``state(model)``) holds ``want``'s keys and values: floats bit
    for bit, or to ``rtol``/``atol``; integers (counters) by value, whatever
    integer type each backend keeps them in."""
    assert sorted(held) == sorted(want)
    for key, value in held.items():
        assert value.shape == want[key].shape, key
        if np.issubdtype(want[key].dtype, np.integer):
            assert np.issubdtype(value.dtype, np.integer), key
            np.testing.assert_array_equal(value, want[key], err_msg=key)
        elif rtol is None:
            assert value.dtype == want[key].dtype, key
            assert value.tobytes() == want[key].tobytes(), key
        else:
            np.testing.assert_allclose(value, want[key], rtol=rtol, atol=atol, err_msg=key)

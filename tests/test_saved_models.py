"""``.keras`` files load on every Keras backend, whichever wrote them, and
those of an older keras-caffe load with this one.

``tests/saved_models/backends/`` holds the files each backend wrote
(``make.py backends``, run once per backend; ``support/backend_files.py``):
an imported Caffe net trained with Caffe's SGD (a step policy, momentum,
multipliers, iter_size 2), Adam and YellowFin. Loaded on this backend, the
weights and every optimizer variable are the stored ones (floats bit for
bit; integer counters by value, in this backend's own type), and training
goes on to the numbers it went on to on the backend that saved the file.

``tests/saved_models/`` holds files written by commit 892259b, before the
restructuring of issue 34 moved most modules: an imported Caffe LeNet
compiled with keras-caffe's SGD on a ``ScaledLearningRate`` (TensorFlow
only: ``keras_caffe.distributed``) over a ``Step`` policy, and a Keras model
trained with YellowFin (it loads on every backend). Loaded now, the
optimizer state is the stored one (YellowFin's bit for bit; LeNet's recorded
as float64 sums, to NumPy's summation order), and the outputs are the
recorded ones to float32 rounding: they
were recorded with oneDNN's kernels, and Eigen's (``TF_ENABLE_ONEDNN_OPTS=0``)
and the other backends' sum in another order."""

import os

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.importers.snapshots.files import snapshot_paths
from support import REPO
from support import backend_files as bf

SAVED = REPO / "tests" / "saved_models"
#: Outputs across CPU kernel families: measured 8.0e-6 relative at most (LeNet, Eigen
#: against the oneDNN recording, 2-core AMD EPYC); the Dense model 0.
RTOL = 5e-5


@pytest.fixture(scope="module")
def expected():
    return np.load(SAVED / "expected.npz")


@pytest.mark.tensorflow_only  # its rate is keras_caffe.distributed's ScaledLearningRate
def test_an_imported_caffe_net_with_caffes_sgd_loads(expected):
    model = keras.saving.load_model(SAVED / "lenet_sgd.keras")
    optimizer = model.optimizer
    assert type(optimizer) is keras_caffe.SGD
    rate = optimizer.get_config()["learning_rate"]
    assert (rate["class_name"], rate["config"]["workers"]) == ("ScaledLearningRate", 2)
    assert rate["config"]["base"]["class_name"] == "Step"
    assert int(optimizer.iterations.numpy()) == int(expected["lenet_iterations"]) == 1
    sums = [np.sum(np.asarray(v.numpy(), "float64")) for v in optimizer.variables]
    # the recorded sums are NumPy 2's: NumPy 1 sums in another order (1.6e-16 measured)
    np.testing.assert_allclose(sums, expected["lenet_variables"], rtol=1e-15, atol=0)
    np.testing.assert_allclose(model.predict(expected["lenet_input"], verbose=0),
                               expected["lenet_output"], rtol=RTOL, atol=0)


def test_a_keras_model_with_yellowfin_loads(expected):
    model = keras.saving.load_model(SAVED / "yellowfin_dense.keras")
    assert type(model.optimizer) is keras_caffe.YellowFin
    values = np.concatenate([np.ravel(np.asarray(v.numpy(), "float64"))
                             for v in model.optimizer.variables])
    np.testing.assert_array_equal(values, expected["dense_variables"])
    np.testing.assert_allclose(model.predict(expected["dense_input"], verbose=0),
                               expected["dense_output"], rtol=RTOL, atol=0)


# -- files saved on each backend -----------------------------------------------------------

#: Weights and optimizer variables after CONTINUED iterations here against
#: those the saving backend went on to: the same updates in another backend's
#: float32 kernels (summation order). Measured beyond the atol: 7.0e-7 relative
#: at most (Adam saved on PyTorch, trained on here; YellowFin 3.2e-7; SGD 0),
#: on one backend 0 (2-core AMD EPYC, oneDNN).
CONTINUE_RTOL, CONTINUE_ATOL = 1e-5, 1e-7


def test_every_backend_wrote_its_files():
    """``make.py backends`` ran on each backend: a .keras file per solver,
    the snapshots in three formats and the expected numbers each."""
    names = {p.name for p in bf.FOLDER.iterdir()}
    for backend in bf.BACKENDS:
        wanted = {bf.keras_path(s, backend).name for s in bf.SOLVERS}
        wanted.add(bf.expected_path(backend).name)
        for format in bf.SNAPSHOT_FORMATS:
            wanted.update(os.path.basename(p) for p in snapshot_paths(
                bf.snapshot_prefix(format, backend), bf.SAVED_AT, format))
        assert wanted <= names, backend
    assert sum(p.stat().st_size for p in bf.FOLDER.iterdir()) < 400_000


@pytest.mark.parametrize("solver", list(bf.SOLVERS))
@pytest.mark.parametrize("saved_on", bf.BACKENDS)
def test_a_keras_file_saved_on_each_backend_loads_and_trains_on(saved_on, solver):
    """The file's weights and optimizer variables, in this backend's types
    (Keras's own format carries them across), then CONTINUED iterations to
    the saving backend's numbers."""
    expected = np.load(bf.expected_path(saved_on))
    model = keras.saving.load_model(bf.keras_path(solver, saved_on))
    assert type(model.optimizer) is type(bf.build(solver).optimizer)
    held = bf.state(model)
    bf.assert_state(held, bf.stored(expected, f"{solver}/saved"))
    assert {key: value.dtype for key, value in held.items()} == bf.own_types(solver)
    bf.train(model, bf.CONTINUED)
    bf.assert_state(bf.state(model), bf.stored(expected, f"{solver}/continued"),
                    rtol=CONTINUE_RTOL, atol=CONTINUE_ATOL)

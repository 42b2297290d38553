"""Snapshots written on each Keras backend restore on this one.

``tests/saved_models/backends/`` holds, for each backend, the snapshot its
``make.py backends`` run wrote in the three formats (an imported Caffe net
after 3 iterations of Caffe's SGD with iter_size 2; ``support/backend_files.py``).
Restored here: the weights and the optimizer's state are the stored ones
(counters, int64 in our files and int32 in Caffe's, into this backend's own
integer type), training goes on to the saving backend's numbers, and a
snapshot written here of the restored state is the saving backend's:
Caffe's formats byte for byte, ours with the same values and types.
"""

import re

import h5py
import keras
import numpy as np
import pytest

from keras_caffe.importers.snapshots.files import SnapshotError, load_snapshot, save_snapshot, \
    snapshot_paths
from support import backend_files as bf

#: As tests/test_saved_models.py's: the same updates in another backend's
#: float32 kernels (measured: 0 for this net and SGD, every pair of backends).
CONTINUE_RTOL, CONTINUE_ATOL = 1e-5, 1e-7


def committed(format, saved_on):
    """``(weights, solverstate)`` of the snapshot ``saved_on`` wrote."""
    return snapshot_paths(bf.FOLDER / bf.snapshot_prefix(format, saved_on), bf.SAVED_AT, format)


def restored(format, saved_on):
    """A fresh model with the snapshot of ``saved_on`` restored into it."""
    model = bf.build(bf.SNAPSHOT_SOLVER)
    model.optimizer.build(model.trainable_variables)
    state = load_snapshot(committed(format, saved_on)[1], model, model.optimizer)
    assert state == {"backend": saved_on}
    return model


@pytest.mark.parametrize("format", bf.SNAPSHOT_FORMATS)
@pytest.mark.parametrize("saved_on", bf.BACKENDS)
def test_a_snapshot_of_each_backend_restores_and_trains_on(saved_on, format):
    """Weights, history, counters as stored (Caffe's formats: the iteration
    boundary, so iter_size's sums are zero as they were), in this backend's
    types; then the saving backend's numbers after CONTINUED iterations."""
    expected = np.load(bf.expected_path(saved_on))
    model = restored(format, saved_on)
    held = bf.state(model)
    bf.assert_state(held, bf.stored(expected, f"{bf.SNAPSHOT_SOLVER}/saved"))
    assert {key: value.dtype for key, value in held.items()} == bf.own_types(bf.SNAPSHOT_SOLVER)
    bf.train(model, bf.CONTINUED)
    bf.assert_state(bf.state(model), bf.stored(expected, f"{bf.SNAPSHOT_SOLVER}/continued"),
                    rtol=CONTINUE_RTOL, atol=CONTINUE_ATOL)


@pytest.mark.parametrize("format", ["caffe", "caffe_hdf5"])
@pytest.mark.parametrize("saved_on", bf.BACKENDS)
def test_caffes_formats_written_here_are_the_saving_backends_bytes(saved_on, format, tmp_path,
                                                                   monkeypatch):
    """The restored state written again on this backend: the same
    .caffemodel(.h5) and .solverstate(.h5) bytes (iter and current_step int32
    as caffe.proto and Caffe's HDF5 writer have them)."""
    model = restored(format, saved_on)
    monkeypatch.chdir(tmp_path)  # learned_net: the prefix as given, as make.py gave it
    files = save_snapshot(model, model.optimizer, bf.snapshot_prefix(format, saved_on),
                          bf.SAVED_AT, format=format, state={"backend": saved_on})
    for ours, theirs in zip((files.weights, files.solverstate), committed(format, saved_on)):
        assert (tmp_path / ours).read_bytes() == open(theirs, "rb").read(), ours
    if format == "caffe_hdf5":
        with h5py.File(files.solverstate, "r") as f:
            assert (f["iter"].dtype, f["iter"][()].tolist()) == (np.dtype("<i4"), [bf.SAVED_AT])


def _variables(path):
    """``{path after the optimizer's name: dataset value}`` of our solverstate."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                out[name.split("/", 1)[1]] = obj[()]
        f["optimizer_variables"].visititems(visit)
    return out


@pytest.mark.parametrize("saved_on", bf.BACKENDS)
def test_our_format_written_here_holds_the_saving_backends_values_and_types(saved_on, tmp_path):
    """Our solverstate from this backend: every optimizer variable with the
    value and file type the saving backend's has; the counters int64 (Keras
    keeps them in int32 on JAX and PyTorch)."""
    model = restored("keras", saved_on)
    files = save_snapshot(model, model.optimizer, tmp_path / "run", bf.SAVED_AT, format="keras",
                          state={"backend": saved_on})
    ours, theirs = _variables(files.solverstate), _variables(committed("keras", saved_on)[1])
    assert sorted(ours) == sorted(theirs)
    for key, value in theirs.items():
        assert ours[key].dtype == value.dtype and ours[key].tobytes() == value.tobytes(), key
    counters = {key: value.dtype for key, value in ours.items() if value.dtype.kind in "iu"}
    assert counters == {"iteration": np.dtype("int64"), "iter_size_micro_step": np.dtype("int64")}


def test_a_counter_past_this_backends_integer_type_is_refused(tmp_path):
    """Our files hold counters in int64: one past int32 restores on
    TensorFlow (int64 there) and is refused on JAX and PyTorch, which keep
    it in int32, naming the variable, the value and the type; nothing is
    changed."""
    model = bf.build(bf.SNAPSHOT_SOLVER)
    optimizer = model.optimizer
    optimizer.build(model.trainable_variables)
    files = save_snapshot(model, optimizer, tmp_path / "run", 0)
    with h5py.File(files.solverstate, "a") as f:
        f["optimizer_variables"][f"{optimizer.name}/iteration"][()] = 2 ** 31 + 5
    before = bf.state(model)
    own = np.dtype(optimizer.iterations.dtype)
    if own == np.int64:
        load_snapshot(files.solverstate, model, optimizer)
        assert int(keras.ops.convert_to_numpy(optimizer.iterations)) == 2 ** 31 + 5
        return
    with pytest.raises(SnapshotError, match=re.escape(
            f"{files.solverstate}: optimizer variable '{optimizer.name}/iteration' is 2147483653 "
            f"in the snapshot, outside the range of {own.name}, the type Keras's "
            f"{keras.backend.backend()} backend keeps it in")):
        load_snapshot(files.solverstate, model, optimizer)
    bf.assert_state(bf.state(model), before)

"""A file of the wrong kind says what it is and where it goes (issue 33):
a solver file given as a net, a net file given as a solver, a solverstate
given as weights and weights given as a solverstate, from the Python API and
from the command line. Files of the right kind, and genuine mistakes in
them, are reported as before."""

import shutil

import pytest

import keras_caffe
from keras_caffe.errors import ProtoParseError, WeightsError
from keras_caffe.importers.snapshots.files import SnapshotError, load_snapshot, save_snapshot
from keras_caffe.importers.net.weights import load_weights

SOLVER_FIELDS = "net, base_lr, type, lr_policy, max_iter, ..."
NOT_A_NET = (f"this is a solver file (it sets {SOLVER_FIELDS}), not a net: give it to "
             "`keras-caffe train --solver` (Python: keras_caffe.Solver)")
NOT_A_SOLVER = ("this is a net file (it sets layer, name), not a solver: give it to "
                "`keras-caffe import` (Python: import_model), or name it in a solver file's `net`")
NOT_WEIGHTS = ("this is a solverstate (a snapshot's solver state), not Caffe weights: resume "
               "from it with `keras-caffe train --snapshot` (Python: Solver.restore or "
               "load_snapshot)")
NOT_A_SOLVERSTATE = ("this is a Caffe weights file (a net's layers and blobs), not a "
                     "solverstate: start from it with `keras-caffe train --weights` (Python: "
                     "Solver.copy_from, or import_model's weights)")

NET = """
name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 20 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param { num_output: 5 } }
"""


@pytest.fixture
def case(golden, tmp_path):
    """A copy of the golden SGD snapshot case: solver.prototxt, train_net.prototxt,
    init.caffemodel and snap/run_iter_10.{solverstate,caffemodel}."""
    folder = tmp_path / "case"
    shutil.copytree(golden / "snapshot" / "sgd_binaryproto", folder)
    return folder


def message_of(error, call, *args, **kwargs):
    with pytest.raises(error) as info:
        call(*args, **kwargs)
    return str(info.value)


# -- text: solver files and net files -----------------------------------------------------------


def test_a_solver_file_given_as_a_net_says_it_is_a_solver(case):
    solver = case / "solver.prototxt"
    assert message_of(ProtoParseError, keras_caffe.import_model, solver) == \
        f"{solver}: {NOT_A_NET}"
    text = "base_lr: 0.01\nnet: 'train_net.prototxt'\n"
    assert message_of(ProtoParseError, keras_caffe.import_model, text) == (
        "<prototxt text>: this is a solver file (it sets net, base_lr), not a net: give it to "
        "`keras-caffe train --solver` (Python: keras_caffe.Solver)")


def test_a_net_file_given_as_a_solver_says_it_is_a_net(case):
    net = case / "train_net.prototxt"
    expected = f"{net}: {NOT_A_SOLVER}"
    assert message_of(ProtoParseError, keras_caffe.optimizer_from_solver, net) == expected
    assert message_of(ProtoParseError, keras_caffe.Solver, net) == expected
    assert message_of(ProtoParseError, keras_caffe.optimizer_from_solver, NET) == \
        f"<solver text>: {NOT_A_SOLVER}"


def test_v1_nets_and_input_fields_are_nets_too():
    v1 = 'name: "v1"\ninput: "data"\ninput_dim: 1\nlayers { name: "ip" type: INNER_PRODUCT }\n'
    assert message_of(ProtoParseError, keras_caffe.optimizer_from_solver, v1) == (
        "<solver text>: this is a net file (it sets layers, input, input_dim, name), not a "
        "solver: give it to `keras-caffe import` (Python: import_model), or name it in a "
        "solver file's `net`")


def test_mistakes_in_a_file_of_the_right_kind_are_reported_as_before():
    """A misspelt solver field is the parser's error at its line; a net with a
    fork's field is the fork-field error naming the layer, as before."""
    solver = "net: 'x.prototxt'\nbase_lrr: 0.1\n"
    assert message_of(ProtoParseError, keras_caffe.optimizer_from_solver, solver) == (
        '<solver text>:2:1: Message type "SolverParameter" has no field named "base_lrr".')
    fork = NET.replace("num_output: 5", "num_output: 5 fork_x: 1")
    assert message_of(ProtoParseError, keras_caffe.import_model, fork) == (
        "<prototxt text>:5:45: layer 'ip1' (InnerProduct): field 'fork_x' is not in "
        "keras-caffe's schema (a Caffe fork's?), so its meaning would be lost: Message type "
        '"InnerProductParameter" has no field named "fork_x".')


def test_the_command_line_says_the_same(case):
    from support.cli_runner import run_cli

    proc = run_cli("import", "solver.prototxt", cwd=case)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"keras-caffe: error: solver.prototxt: {NOT_A_NET}\n"
    proc = run_cli("train", "--solver", "train_net.prototxt", cwd=case)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == f"keras-caffe: error: train_net.prototxt: {NOT_A_SOLVER}\n"


# -- binary: solverstates and weights -----------------------------------------------------------


def test_a_solverstate_given_as_weights_says_it_is_a_solverstate(case):
    """A NetParameter's field 1 is its name (a string), a SolverState's its
    ``iter`` (a number): a walk of the top-level fields tells them apart."""
    state = case / "snap" / "run_iter_10.solverstate"
    expected = f"{state}: {NOT_WEIGHTS}; its weights are in 'snap/run_iter_10.caffemodel'"
    assert message_of(WeightsError, load_weights, state) == expected
    assert message_of(WeightsError, keras_caffe.import_model, case / "train_net.prototxt",
                      weights=state, phase="TRAIN") == expected


def test_weights_given_as_a_solverstate_say_they_are_weights(case):
    from support import golden_resume

    model, optimizer = golden_resume(case)
    weights = case / "snap" / "run_iter_10.caffemodel"
    assert message_of(SnapshotError, load_snapshot, weights, model, optimizer) == \
        f"{weights}: {NOT_A_SOLVERSTATE}"
    assert int(optimizer.iterations) == 0


def test_hdf5_files_of_the_other_kind_say_so(golden, tmp_path):
    """Caffe's HDF5 solverstate and our Keras-format one given as weights;
    Caffe's HDF5 weights given as a solverstate."""
    from support import golden_resume

    snap = golden / "snapshot" / "sgd_hdf5" / "snap"
    state = snap / "run_iter_10.solverstate.h5"
    assert message_of(WeightsError, load_weights, state) == f"{state}: {NOT_WEIGHTS}"
    model, optimizer = golden_resume(golden / "snapshot" / "sgd_hdf5")
    weights = snap / "run_iter_10.caffemodel.h5"
    assert message_of(SnapshotError, load_snapshot, weights, model, optimizer) == \
        f"{weights}: {NOT_A_SOLVERSTATE}"
    tiny = keras_caffe.import_model(NET, phase="TRAIN")
    sgd = keras_caffe.SGD()
    sgd.build(tiny.trainable_variables)
    files = save_snapshot(tiny, sgd, tmp_path / "k", 0, format="keras")
    assert message_of(WeightsError, load_weights, files.solverstate) == \
        f"{files.solverstate}: {NOT_WEIGHTS}"


def test_the_command_line_says_which_binary_file_is_which(case):
    from support.cli_runner import run_cli

    proc = run_cli("import", "train_net.prototxt", "--phase", "TRAIN", "--weights",
                   "snap/run_iter_10.solverstate", cwd=case)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == (f"keras-caffe: error: snap/run_iter_10.solverstate: {NOT_WEIGHTS}; "
                           "its weights are in 'snap/run_iter_10.caffemodel'\n")
    proc = run_cli("train", "--solver", "solver.prototxt", "--snapshot",
                   "snap/run_iter_10.caffemodel", cwd=case)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == \
        f"keras-caffe: error: snap/run_iter_10.caffemodel: {NOT_A_SOLVERSTATE}\n"

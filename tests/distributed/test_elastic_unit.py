"""keras_caffe.distributed.elastic in one process (no horovodrun): what a
commit holds, restore, the seeds' re-basing at a sync, ElasticCommit, run
without an elastic launch, and the arguments. Never initializes Horovod in
the test process. The real elastic jobs are in test_elastic.py."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from support.horovod_jobs import require_horovod

import keras_caffe
import keras_caffe.distributed as kd
from keras_caffe.callbacks import ElasticCommit
from keras_caffe.distributed import faults
from keras_caffe.errors import ArgumentError, DistributedError, KerasCaffeError
from keras_caffe.importers.snapshots.random_states import seed_variables


@pytest.fixture(scope="module")
def elastic():
    require_horovod()
    return kd.elastic


def compiled_model(dropout=True):
    layers = [keras.Input((4,)), keras.layers.Dense(3, name="ip1")]
    if dropout:
        layers.append(keras.layers.Dropout(0.5, seed=3, name="drop"))
    layers.append(keras.layers.Dense(2, name="ip2"))
    model = keras.Sequential(layers, name="small")
    model.compile(optimizer=keras_caffe.SGD(0.1, momentum=0.9), loss="mse")
    return model


def data(n=32):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 2)).astype("float32")


def snapshot_of(model):
    return [np.array(v.numpy()) for v in model.variables + model.optimizer.variables]


def test_restore_returns_to_the_commit(elastic):
    model = compiled_model()
    x, y = data()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    state = elastic.KerasState(model, epoch=3, positions=[1, 2])
    committed = snapshot_of(model)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # 4 more updates, dropout draws
    state.epoch, state.positions[0] = 9, 99
    assert int(model.optimizer.iterations.numpy()) == 8
    state.restore()
    assert int(model.optimizer.iterations.numpy()) == 4
    for a, b in zip(snapshot_of(model), committed):
        np.testing.assert_array_equal(a, b)  # weights, momentum, iteration, dropout state
    assert (state.epoch, state.positions) == (3, [1, 2])
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    state.epoch = 4
    state.commit()  # one worker: no host updates to check
    after = snapshot_of(model)
    state.restore()
    assert state.epoch == 4
    for a, b in zip(snapshot_of(model), after):
        np.testing.assert_array_equal(a, b)


def test_sync_rebases_the_seeds_on_the_new_rank(elastic):
    """A worker that was rank 2 and is now rank 0 of 1: its dropout seed
    goes back to rank 0's stream (what rank 0's snapshot would hold)."""
    model = compiled_model()
    (seed,) = seed_variables(model)
    base = np.array(seed.numpy())
    elastic.shift_seeds(model, 0, 2)
    assert int(seed.numpy()[0]) == base[0] + 2 * kd.RANK_SEED_STRIDE
    state = elastic.KerasState(model, step=5)
    state._seed_rank = 2
    state.sync()
    np.testing.assert_array_equal(seed.numpy(), base)
    assert state.step == 5 and state._seed_rank == 0


def test_reset_makes_fit_trace_again(elastic):
    model = compiled_model(dropout=False)
    x, y = data()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert model.train_function is not None
    elastic.KerasState(model).reset()
    assert model.train_function is None


def test_run_without_an_elastic_launch_syncs_once_and_calls(elastic):
    model = compiled_model(dropout=False)
    state = elastic.KerasState(model, step=0)
    calls = []

    @elastic.run
    def train(state, value):
        calls.append(value)
        state.step = 7
        return value * 2

    assert train(state, 21) == 42 and calls == [21] and state.step == 7
    assert not elastic.elastic_launch()


def test_run_lets_other_errors_through(elastic):
    @elastic.run
    def train(state):
        raise KeyError("not a worker loss")

    with pytest.raises(KeyError):
        train(elastic.KerasState(compiled_model(dropout=False)))


def test_failures_inside_recoverable_let_the_loss_through():
    err = tf.errors.UnknownError(None, None, "Horovod has been shut down. This was caused by ...")
    with pytest.raises(DistributedError):
        with faults.failures():
            raise err
    with pytest.raises(tf.errors.UnknownError):
        with faults.recoverable(), faults.failures():
            raise err


class Counter:
    def __init__(self):
        self.at = []
        self.model = None

    def commit(self):
        self.at.append(int(self.model.optimizer.iterations.numpy()))


def test_elastic_commit_every_n_iterations():
    model = compiled_model(dropout=False)
    x, y = data(80)
    counter = Counter()
    counter.model = model
    model.fit(x, y, batch_size=8, epochs=2, verbose=0,
              callbacks=[ElasticCommit(counter, every=3, on_epoch_end=True)])
    assert counter.at == [3, 6, 9, 10, 12, 15, 18, 20]


@pytest.mark.parametrize("kwargs, message", [
    ({"state": object()}, "ElasticCommit: `state` must have a commit() method (a "
     "keras_caffe.distributed.elastic.KerasState), got object"),
    ({"state": Counter(), "every": 0}, "ElasticCommit: `every` must be an integer >= 1, got 0"),
    ({"state": Counter(), "every": True}, "ElasticCommit: `every` must be an integer >= 1, "
     "got True"),
])
def test_elastic_commit_arguments(kwargs, message):
    with pytest.raises(ArgumentError) as info:
        ElasticCommit(**kwargs)
    assert str(info.value) == message


def test_state_arguments(elastic):
    model = compiled_model(dropout=False)
    with pytest.raises(ArgumentError, match="`save` is a name of the state itself"):
        elastic.KerasState(model, save=1)
    bare = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    with pytest.raises(ArgumentError, match="`optimizer` is missing: compile the model"):
        elastic.KerasState(bare)


@pytest.mark.parametrize("kwargs, message", [
    ({"elastic": "yes"}, "Solver: elastic must be True or False, got 'yes'"),
    ({"elastic": True, "commit_every": 0}, "Solver: commit_every must be an integer >= 1, got 0"),
    ({"elastic": True, "shard_index": 0, "num_shards": 2},
     "Solver: elastic training shards the data by the workers' ranks, which change; do not "
     "give shard_index / num_shards"),
])
def test_solver_elastic_arguments(kwargs, message):
    with pytest.raises(KerasCaffeError) as info:
        keras_caffe.Solver('net: "absent.prototxt"\nbase_lr: 0.1\nmax_iter: 1\n', **kwargs)
    assert str(info.value) == message


def test_cli_commit_every_needs_elastic(capsys):
    from keras_caffe.cli import main

    assert main(["train", "--solver", "s.prototxt", "--commit-every", "5"]) == 2
    assert capsys.readouterr().err.strip() == (
        "keras-caffe: error: --commit-every 5: needs --elastic and N >= 1")


def test_without_horovod_elastic_says_how_to_install(tmp_path):
    """``kd.elastic`` needs Horovod: without it, one ``HorovodUnavailableError``
    naming the install command; the rest of the package and ElasticCommit import."""
    from support.horovod_jobs import check, python

    from keras_caffe.distributed._hvd import INSTALL_HINT

    child = ("import sys\nsys.modules['horovod'] = None\n"
             "import keras_caffe.distributed as kd\n"
             "from keras_caffe.callbacks import ElasticCommit\n"
             "try:\n    kd.elastic\nexcept kd.HorovodUnavailableError as err:\n"
             "    print('ERR', err)\n")
    out = check(python(["-c", child], cwd=tmp_path)).stdout
    assert f"ERR {INSTALL_HINT} (" in out, out

"""CaffeSnapshot: Caffe's ``snapshot: N`` during ``model.fit``, counted in
updates (iter_size batches make one), with ``keep`` and exact restores."""

import os
import re

import keras
import numpy as np
import pytest

import keras_caffe
from keras_caffe.callbacks.snapshot import CaffeSnapshot, restore_snapshot
from keras_caffe.errors import ArgumentError
from keras_caffe.importers.snapshots.files import SnapshotError, list_snapshots, snapshot_paths

NET = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 20 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1" inner_product_param {
        num_output: 16 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param {
        num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
"""


def data(n=40):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 20)).astype("float32"), rng.integers(0, 5, n).astype("int32")


def compiled(iter_size=2):
    keras.utils.set_random_seed(1)
    model = keras_caffe.import_model(NET, phase="TRAIN")
    model.compile(optimizer=keras_caffe.SGD(0.05, momentum=0.9, weight_decay=5e-4,
                                            iter_size=iter_size),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def values(model, everything):
    optimizer = model.optimizer
    variables = list(optimizer.variables) if everything else \
        [*optimizer.history, optimizer.iterations]
    return [np.array(v.numpy()) for v in list(model.weights) + variables]


class Recorder(keras.callbacks.Callback):
    """The state at the batch where each iteration is first reached."""

    def __init__(self, everything):
        super().__init__()
        self.everything, self.seen = everything, {}

    def on_train_batch_end(self, batch, logs=None):
        iteration = int(self.model.optimizer.iterations)
        if iteration not in self.seen:
            self.seen[iteration] = values(self.model, self.everything)


@pytest.mark.parametrize("format", ["keras", "caffe_hdf5"])
def test_snapshots_every_n_updates_keep_the_newest_and_restore_exactly(format, tmp_path):
    model = compiled(iter_size=2)
    prefix = tmp_path / "snaps" / "run"  # the directory does not exist yet
    everything = format == "keras"
    snapshot = CaffeSnapshot(prefix, every_n_iter=3, format=format, keep=2,
                             state=lambda: {"seen": int(model.optimizer.iterations)})
    recorder = Recorder(everything)
    x, y = data(40)  # 20 batches of 2 = 10 updates with iter_size 2
    model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0,
              callbacks=[snapshot, recorder])
    assert int(model.optimizer.iterations) == 10
    assert [s.iteration for s in list_snapshots(prefix)] == [6, 9]  # 3 was deleted (keep=2)
    assert snapshot.written == list_snapshots(prefix)
    expected = sorted(os.path.basename(p) for n in (6, 9) for p in snapshot_paths(prefix, n, format))
    assert sorted(os.listdir(prefix.parent)) == expected
    for files in snapshot.written:
        assert restore_snapshot(model, files.solverstate) == {"seen": files.iteration}
        recorded = recorder.seen[files.iteration]
        restored = values(model, everything)
        for a, b in zip(restored, recorded):
            assert a.tobytes() == b.tobytes()


def test_snapshot_after_train_and_a_resumed_fit(tmp_path):
    model = compiled(iter_size=1)
    x, y = data(8)
    prefix = tmp_path / "run"
    first = CaffeSnapshot(prefix, every_n_iter=3, snapshot_after_train=True)
    model.fit(x[:4], y[:4], batch_size=1, epochs=1, shuffle=False, verbose=0, callbacks=[first])
    assert [s.iteration for s in first.written] == [3, 4]  # 4: after training
    CaffeSnapshot.restore(model, first.written[0].solverstate)
    assert int(model.optimizer.iterations) == 3
    resumed = CaffeSnapshot(prefix, every_n_iter=3)
    model.fit(x[:4], y[:4], batch_size=1, epochs=1, shuffle=False, verbose=0, callbacks=[resumed])
    assert [s.iteration for s in resumed.written] == [6]  # 3 is not written again
    assert [s.iteration for s in list_snapshots(prefix)] == [3, 4, 6]


def test_should_write_false_writes_nothing(tmp_path):
    class NotRankZero(CaffeSnapshot):
        def should_write(self):
            return False

    model = compiled(iter_size=1)
    x, y = data(4)
    callback = NotRankZero(tmp_path / "sub" / "run", every_n_iter=1, snapshot_after_train=True)
    model.fit(x, y, batch_size=1, epochs=1, verbose=0, callbacks=[callback])
    assert callback.written == [] and os.listdir(tmp_path) == []


@pytest.mark.parametrize("kwargs, argument, message", [
    (dict(every_n_iter=0), "every_n_iter", "must be >= 1, got 0"),
    (dict(every_n_iter="3"), "every_n_iter", "must be an integer, got '3'"),
    (dict(every_n_iter=3, format="zip"), "format",
     "must be one of 'keras', 'caffe', 'caffe_hdf5', got 'zip'"),
    (dict(every_n_iter=3, keep=0), "keep", "must be >= 1, got 0"),
    (dict(every_n_iter=3, state={"a": 1}), "state",
     "must be a zero-argument callable returning a dict, or None; got dict"),
    (dict(every_n_iter=3, snapshot_after_train=1), "snapshot_after_train",
     "must be True or False, got 1"),
])
def test_bad_arguments_name_the_argument(kwargs, argument, message):
    with pytest.raises(ArgumentError, match=re.escape(f"CaffeSnapshot: `{argument}` {message}")):
        CaffeSnapshot("snap/run", **kwargs)
    with pytest.raises(ArgumentError, match=re.escape("CaffeSnapshot: `prefix` must be a "
                                                      "non-empty path, got ''")):
        CaffeSnapshot("", 3)


def test_restore_needs_a_compiled_model(tmp_path):
    model = keras_caffe.import_model(NET, phase="TRAIN")
    with pytest.raises(SnapshotError, match=re.escape(
            f"{tmp_path / 'x.solverstate'}: model '{model.name}' has no optimizer: compile it "
            "before restoring a snapshot")):
        restore_snapshot(model, tmp_path / "x.solverstate")

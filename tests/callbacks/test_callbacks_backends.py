"""``keras_caffe.callbacks`` on every Keras backend: ``CaffeSnapshot``,
``restore_snapshot``, ``CaffeLogger`` and ``YellowFinMonitor`` import and run
without TensorFlow (every process writes: Horovod, which picks rank 0, runs on
TensorFlow only); Horovod's callbacks load on first use, and on JAX or
PyTorch say in one line that they need TensorFlow's backend."""

import importlib
import io
import sys

import keras
import numpy as np
import pytest

import keras_caffe
import keras_caffe.callbacks as callbacks
from keras_caffe.errors import TensorFlowRequirementError

BACKEND = keras.backend.backend()
EVERYWHERE = ["CaffeLogger", "CaffeSnapshot", "restore_snapshot", "YellowFinMonitor"]
HOROVOD = {"BroadcastGlobalState": "keras_caffe.callbacks.distributed",
           "MetricAverage": "keras_caffe.callbacks.distributed",
           "ElasticCommit": "keras_caffe.callbacks.elastic"}
off_tensorflow = pytest.mark.skipif(BACKEND == "tensorflow",
                                    reason="TensorFlow's backend runs Horovod's callbacks")


def refusal(feature):
    return (f"{feature} needs Keras's TensorFlow backend and the backend is {BACKEND!r}: "
            "run with KERAS_BACKEND=tensorflow (TensorFlow >= 2.16: pip install "
            f"'keras-caffe[tensorflow]'); on {BACKEND} keras-caffe offers the solvers, "
            "schedules, importer, snapshots and callbacks (docs/backends.md)")


def test_the_callbacks_of_every_backend_fit_and_restore(tmp_path):
    """A fit with the four: YellowFin's values in the logs, Caffe's log lines,
    a snapshot written by this process and restored; TensorFlow and
    keras_caffe.distributed never imported off TensorFlow."""
    assert callbacks.__all__[:4] == EVERYWHERE
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 4)).astype("float32"), rng.integers(0, 2, 8).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras_caffe.YellowFin(learning_rate=0.1, curv_win_width=3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    stream = io.StringIO()
    snapshot = callbacks.CaffeSnapshot(tmp_path / "run", every_n_iter=2)
    history = model.fit(x, y, batch_size=2, epochs=1, shuffle=False, verbose=0, callbacks=[
        callbacks.YellowFinMonitor(), callbacks.CaffeLogger(stream=stream), snapshot])
    assert len(history.history["yf_lr"]) == 1 and history.history["yf_lr"][0] > 0
    assert stream.getvalue().count("Train net output #0: loss = ") == 4
    assert [files.iteration for files in snapshot.written] == [2, 4]
    kernel = np.array(model.weights[0].numpy(), copy=True)
    model.weights[0].assign(np.zeros_like(kernel))
    assert callbacks.restore_snapshot(model, snapshot.written[-1].solverstate) == {}
    assert model.weights[0].numpy().tobytes() == kernel.tobytes()
    if BACKEND != "tensorflow":
        assert "tensorflow" not in sys.modules and "keras_caffe.distributed" not in sys.modules


@pytest.mark.tensorflow_only
def test_horovods_callbacks_load_on_first_use_on_tensorflow():
    assert callbacks.__all__ == EVERYWHERE + list(HOROVOD)
    assert set(HOROVOD) <= set(dir(callbacks))
    for name, module in HOROVOD.items():
        cls = getattr(callbacks, name)
        assert (cls.__name__, cls.__module__) == (name, module)
        assert issubclass(cls, keras.callbacks.Callback)


@off_tensorflow
@pytest.mark.parametrize("name", list(HOROVOD))
def test_horovods_callbacks_say_they_need_tensorflow(name):
    assert callbacks.__all__ == EVERYWHERE and name not in dir(callbacks)
    with pytest.raises(TensorFlowRequirementError) as caught:
        getattr(callbacks, name)
    assert str(caught.value) == refusal(f"keras_caffe.callbacks.{name} (Horovod)")
    with pytest.raises(TensorFlowRequirementError):
        exec(f"from keras_caffe.callbacks import {name}", {})


@off_tensorflow
@pytest.mark.parametrize("module, feature", [
    ("keras_caffe.callbacks.elastic", "keras_caffe.callbacks.ElasticCommit (Horovod)"),
    ("keras_caffe.callbacks.distributed", "keras_caffe.distributed (Horovod, MirroredStrategy)"),
])
def test_horovods_callback_modules_say_they_need_tensorflow(module, feature):
    sys.modules.pop(module, None)
    with pytest.raises(TensorFlowRequirementError) as caught:
        importlib.import_module(module)
    assert str(caught.value) == refusal(feature)

"""Writes the files in this folder that the tests load, with the numbers
they must load back with.

``backends/`` (``tests/test_saved_models.py`` and
``tests/importers/snapshots/test_snapshot_backends.py`` load them on every
backend): run once per Keras backend with this keras-caffe installed, from
outside the source tree; each run writes the files named after its backend::

    cd /tmp && KERAS_BACKEND=jax python /path/to/tests/saved_models/make.py backends

An imported Caffe net (``support/backend_files.py``: the net, NumPy's
starting weights and data) trained ``SAVED_AT`` iterations with each solver
there (Caffe's SGD with iter_size 2, Adam, YellowFin) and saved:
``<solver>_<backend>.keras``; the SGD model also as snapshots,
``<format>_<backend>_iter_3.*`` in the three formats. ``expected_<backend>.npz``
holds the weights and optimizer variables saved (``<solver>/saved/...``) and
those after ``CONTINUED`` more iterations (``<solver>/continued/...``).

``lenet_sgd.keras``, ``yellowfin_dense.keras`` and ``expected.npz``
(``tests/test_saved_models.py``: files of an older keras-caffe still load):
written once against the keras-caffe of commit 892259b (the layout before
the restructuring of issue 34), on TensorFlow::

    cd /tmp && python /path/to/tests/saved_models/make.py legacy /path/to/tests/saved_models
"""

import os
import sys

import keras
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def backends():
    """This backend's files in ``backends/``."""
    sys.path.insert(0, os.path.dirname(HERE))  # tests/: the support package
    from support import backend_files as bf
    from keras_caffe.importers.snapshots.files import save_snapshot

    backend = keras.backend.backend()
    os.makedirs(bf.FOLDER, exist_ok=True)
    expected = {}
    for solver in bf.SOLVERS:
        keras.backend.clear_session()
        model = bf.build(solver)
        bf.train(model, bf.SAVED_AT)
        model.save(bf.keras_path(solver, backend))
        expected.update({f"{solver}/saved/{k}": v for k, v in bf.state(model).items()})
        if solver == bf.SNAPSHOT_SOLVER:
            os.chdir(bf.FOLDER)  # Caffe's learned_net names the weights as the prefix does
            for format in bf.SNAPSHOT_FORMATS:
                save_snapshot(model, model.optimizer, bf.snapshot_prefix(format, backend),
                              bf.SAVED_AT, format=format, state={"backend": backend})
        bf.train(model, bf.CONTINUED)
        expected.update({f"{solver}/continued/{k}": v for k, v in bf.state(model).items()})
    np.savez_compressed(bf.expected_path(backend), **expected)
    print(f"{backend}: {sorted(os.listdir(bf.FOLDER))}")


def legacy(out):
    """The files of keras-caffe 892259b (its module layout: run against it)."""
    import keras_caffe
    from keras_caffe import schedules
    from keras_caffe.distributed.schedules import ScaledLearningRate
    from keras_caffe.importers.keras_file import save_keras

    golden = os.path.join(HERE, "..", "golden", "forward", "lenet")
    keras.utils.set_random_seed(0)

    # LeNet imported from Caffe, compiled with Caffe's SGD on a scaled, stepped rate
    lenet = keras_caffe.import_model(os.path.join(golden, "deploy_used.prototxt"),
                                     os.path.join(golden, "weights.caffemodel"))
    rate = ScaledLearningRate(schedules.Step(0.01, gamma=0.1, stepsize=100), workers=2,
                              warmup_steps=10)
    lenet.compile(optimizer=keras_caffe.SGD(rate, momentum=0.9, weight_decay=5e-4,
                                            lr_mult={"*/bias": 2.0}),
                  loss="categorical_crossentropy")
    x = np.load(os.path.join(golden, "input.npy"))[:8]
    x = np.transpose(x, (0, 2, 3, 1)) if lenet.input_shape[-1] == 1 else x
    y = keras.utils.to_categorical(np.arange(len(x)) % 10, 10)
    lenet.fit(x, y, epochs=1, batch_size=len(x), verbose=0)
    save_keras(lenet, os.path.join(out, "lenet_sgd.keras"))

    # a plain Keras model trained with YellowFin
    small = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="relu"),
                              keras.layers.Dense(2)])
    small.compile(optimizer=keras_caffe.YellowFin(learning_rate=0.1, curv_win_width=3),
                  loss="mse")
    xs = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
    ys = np.random.default_rng(1).normal(size=(8, 2)).astype("float32")
    small.fit(xs, ys, epochs=3, batch_size=4, verbose=0)
    small.save(os.path.join(out, "yellowfin_dense.keras"))

    np.savez(os.path.join(out, "expected.npz"),
             lenet_input=x, lenet_output=lenet.predict(x, verbose=0),
             lenet_iterations=int(lenet.optimizer.iterations.numpy()),
             lenet_variables=np.array([np.sum(np.asarray(v.numpy(), "float64"))
                                       for v in lenet.optimizer.variables]),
             dense_input=xs, dense_output=small.predict(xs, verbose=0),
             dense_variables=np.concatenate([np.ravel(np.asarray(v.numpy(), "float64"))
                                             for v in small.optimizer.variables]))
    print(lenet.optimizer, small.optimizer)


if __name__ == "__main__":
    if sys.argv[1:2] == ["backends"]:
        backends()
    elif sys.argv[1:2] == ["legacy"] and len(sys.argv) == 3:
        legacy(sys.argv[2])
    else:
        sys.exit(__doc__)

"""Writes the .keras files in this folder, with the outputs and optimizer
state they must load back with (``expected.npz``).

Run once against the keras-caffe of commit 892259b (the layout before the
restructuring of issue 34), from outside the source tree::

    cd /tmp && python /path/to/tests/saved_models/make.py /path/to/tests/saved_models

``tests/test_saved_models.py`` loads them with the installed package: a
``.keras`` file written by an older keras-caffe must still load.
"""

import os
import sys

import keras
import numpy as np

import keras_caffe
from keras_caffe import schedules
from keras_caffe.distributed.schedules import ScaledLearningRate
from keras_caffe.importers.keras_file import save_keras

out = sys.argv[1]
golden = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden", "forward", "lenet")
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
small.compile(optimizer=keras_caffe.YellowFin(learning_rate=0.1, curv_win_width=3), loss="mse")
xs = np.random.default_rng(0).normal(size=(8, 4)).astype("float32")
ys = np.random.default_rng(1).normal(size=(8, 2)).astype("float32")
small.fit(xs, ys, epochs=3, batch_size=4, verbose=0)
small.save(os.path.join(out, "yellowfin_dense.keras"))

np.savez(os.path.join(out, "expected.npz"),
         lenet_input=x, lenet_output=lenet.predict(x, verbose=0),
         lenet_iterations=int(lenet.optimizer.iterations.numpy()),
         lenet_variables=np.array([np.sum(np.asarray(v.numpy(), "float64")) for v in lenet.optimizer.variables]),
         dense_input=xs, dense_output=small.predict(xs, verbose=0),
         dense_variables=np.concatenate([np.ravel(np.asarray(v.numpy(), "float64"))
                                         for v in small.optimizer.variables]))
print(lenet.optimizer, small.optimizer)

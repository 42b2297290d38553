"""``score_net``: a trained net's outputs over N batches, as ``caffe test``.

Caffe's ``test`` (tools/caffe.cpp ``test()``) runs ``Net::Forward`` on the
TEST-phase net ``iterations`` times, reading the next batch of its data
layers each time; it keeps each net output per batch, averages them over the
batches, and averages the forward's loss (the sum of the loss layers' values
times their ``loss_weight``). The outputs here are the net's loss and
Accuracy layers' tops (``NetOutputs``), in the net's order.
"""

import numpy as np
import tensorflow as tf

from keras_caffe.errors import KerasCaffeError
from keras_caffe.importers.data.pipelines import net_pipeline
from keras_caffe.importers.layer_types._data import producing_types
from keras_caffe.importers.net.importing import import_net
from keras_caffe.training.step import NetOutputs, resolve_jit


class Scores:
    """``names``/``weights`` of the outputs, ``batches`` (one list of
    values per batch), their ``means`` and the mean weighted ``loss``."""

    def __init__(self, names, weights, batches, losses):
        self.names, self.weights = list(names), list(weights)
        self.batches = [list(map(float, values)) for values in batches]
        self.means = [float(np.mean([b[i] for b in self.batches]))
                      for i in range(len(self.names))]
        self.loss = float(np.mean(losses))

    def to_dict(self):
        return {"iterations": len(self.batches), "loss": self.loss,
                "outputs": [{"name": n, "loss_weight": w, "mean": m}
                            for n, w, m in zip(self.names, self.weights, self.means)],
                "batches": [dict(zip(self.names, values)) for values in self.batches]}


def score_net(net, weights, *, iterations=50, phase="TEST", data_format="channels_last",
              jit_compile="auto", input_shapes=None):
    """Score ``net`` (a prototxt path, its text or a NetParameter) with
    ``weights`` over ``iterations`` batches of its data layers; a ``Scores``."""
    if isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 1:
        raise KerasCaffeError(f"test: iterations must be an integer >= 1, got {iterations!r}")
    imported = import_net(net, weights, phase=phase, data_format=data_format,
                          input_shapes=input_shapes)
    if not any(layer.type in producing_types() for layer in imported.net.layer):
        raise KerasCaffeError(f"{imported.source}: the {phase} net has no data layer to read "
                              "batches from (test scores a train_val net's data)")
    outputs = NetOutputs(imported.model)
    pipe = net_pipeline(imported.net, phase, net_source=imported.source, data_format=data_format)

    @tf.function(jit_compile=resolve_jit(jit_compile))
    def forward(batch):
        loss, values = outputs(batch, training=False)
        return loss, tf.stack(values)

    batches, losses = [], []
    for batch in pipe.dataset().repeat().take(iterations):
        loss, values = forward(batch)
        losses.append(float(loss))
        batches.append(values.numpy())
    return Scores(outputs.names, outputs.weights, batches, losses)

"""Caffe's per-layer control of the backward pass and the objective:
``propagate_down`` (no gradient into a bottom) and ``loss_weight`` on a top
that is not a loss layer's (its weighted sum joins the loss)."""

import keras
from keras import ops

from keras_caffe.layers.base import register


@register
class StopGradient(keras.layers.Layer):
    """The identity, with no gradient flowing back through it: a bottom
    with ``propagate_down: false`` (caffe/src/caffe/net.cpp, ``Net::Init``:
    the layer computes no diff for it, so nothing below learns from this
    layer through it; the layer's own parameters still do)."""

    def call(self, x):
        return ops.stop_gradient(x)

    def compute_output_shape(self, input_shape):
        return input_shape


@register
class TopLoss(keras.layers.Layer):
    """The identity, adding ``weight * sum(x)`` to the model's losses.

    Caffe lets any layer's top carry a ``loss_weight`` (``Layer::SetLossWeights``,
    caffe/include/caffe/layer.hpp): the top's elements, every one of them
    (the batch axis included, nothing averaged), are summed into the
    objective with that weight, and its gradient is ``weight`` at each
    element. Keras's ``model.fit`` and keras-caffe's training loop both add
    ``model.losses`` to the loss.
    """

    #: its call adds a loss (LMS runs such layers plain: a loss added inside
    #: a rematerialized block would have no gradient)
    adds_loss = True

    def __init__(self, weight, **kwargs):
        super().__init__(**kwargs)
        self.weight = float(weight)

    def call(self, x):
        self.add_loss(self.weight * ops.sum(ops.cast(x, "float32")))
        return x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config["weight"] = self.weight
        return config

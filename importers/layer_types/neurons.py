"""Neuron layers: one bottom, one top of its shape, computed value by value
(BVLC: neuron_layer.cpp and relu_layer.cpp, dropout_layer.cpp, elu_layer.cpp,
sigmoid_layer.cpp, tanh_layer.cpp, absval_layer.cpp, bnll_layer.cpp,
power_layer.cpp, exp_layer.cpp, log_layer.cpp, threshold_layer.cpp,
clip_layer.cpp). Each keeps its blob's layout, so no transposes."""

import math

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    Example,
    LayerType,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.layers import elementwise as layers


class Neuron(LayerType):
    """A one-bottom layer whose top has the bottom's shape and layout."""

    examples = (Example("", [(2, 3, 4, 4)]), Example("", [(3, 5)]))

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        self.check(layer)
        return same_shape(layer, bottoms)

    def check(self, layer):
        """Caffe's checks of the layer's parameters (``LayerSetUp``)."""

    def build(self, layer, bottoms, ctx):
        return [ctx.elementwise(self.keras_layer(layer, ctx, ctx.keras_name(layer.name)),
                                bottoms[0])]

    def keras_layer(self, layer, ctx, name):
        """The Keras layer named ``name`` computing the neuron."""
        raise NotImplementedError


@layer_type("ReLU")
class ReLU(Neuron):
    """ReLU with negative_slope (leaky; a negative slope too)."""

    examples = (Example("", [(2, 3, 4, 4)]),
                Example("relu_param { negative_slope: 0.1 }", [(2, 3, 4, 4)]),
                Example("relu_param { negative_slope: -0.5 }", [(3, 5)]))

    def keras_layer(self, layer, ctx, name):
        slope = layer.relu_param.negative_slope
        # Keras's ReLU refuses a negative slope, which Caffe allows.
        if slope >= 0:
            return keras.layers.ReLU(negative_slope=slope, name=name)
        return layers.ReLU(negative_slope=slope, name=name)


@layer_type("Dropout")
class Dropout(Neuron):
    """Dropout (dropout_ratio), kept units scaled by 1/(1-p) while training.

    Caffe scales as Keras does. In a TEST-phase net it is the identity even
    under ``training=True`` (Caffe's TEST phase never drops). With
    caffe-fast-rcnn's ``scale_train: false`` (dropout_layer.cpp there) the
    kept units are not scaled while training and the TEST phase scales by 1-p."""

    examples = (Example("dropout_param { dropout_ratio: 0.3 }", [(2, 3, 4, 4)]),
                Example("dropout_param { dropout_ratio: 0.5 }", [(4, 6)], phase="TRAIN"))

    def check(self, layer):
        ratio = layer.dropout_param.dropout_ratio
        if not 0.0 <= ratio < 1.0:
            raise LayerError(layer.name, f"(Dropout) dropout_ratio must be in [0, 1), got "
                                         f"{ratio:g}")

    def keras_layer(self, layer, ctx, name):
        p = layer.dropout_param
        if ctx.phase == "TEST":
            if not p.scale_train:
                return keras.layers.Rescaling(1.0 - p.dropout_ratio, name=name)
            return keras.layers.Identity(name=name)
        if not p.scale_train:
            return keras.Sequential([keras.layers.Dropout(p.dropout_ratio),
                                     keras.layers.Rescaling(1.0 - p.dropout_ratio)], name=name)
        return keras.layers.Dropout(p.dropout_ratio, name=name)


@layer_type("ELU")
class ELU(Neuron):
    """ELU with alpha."""

    examples = (Example("elu_param { alpha: 0.5 }", [(2, 3, 4, 4)]), Example("", [(3, 5)]))

    def keras_layer(self, layer, ctx, name):
        return layers.ELU(alpha=layer.elu_param.alpha, name=name)


@layer_type("Sigmoid")
class Sigmoid(Neuron):
    """Sigmoid."""

    def keras_layer(self, layer, ctx, name):
        return keras.layers.Activation("sigmoid", name=name)


@layer_type("TanH")
class TanH(Neuron):
    """TanH."""

    def keras_layer(self, layer, ctx, name):
        return keras.layers.Activation("tanh", name=name)


@layer_type("AbsVal")
class AbsVal(Neuron):
    """AbsVal; like Caffe, refuses to run in place."""

    def check(self, layer):
        if layer.top and layer.bottom and layer.top[0] == layer.bottom[0]:
            raise LayerError(layer.name, "(AbsVal) does not allow in-place computation "
                                         f"(top {layer.top[0]!r} is its bottom)")

    def keras_layer(self, layer, ctx, name):
        return layers.AbsVal(name=name)


@layer_type("BNLL")
class BNLL(Neuron):
    """BNLL: log(1 + exp(x)), without overflow."""

    def keras_layer(self, layer, ctx, name):
        return layers.BNLL(name=name)


@layer_type("Power")
class Power(Neuron):
    """Power: (shift + scale * x) ** power (every float value is valid)."""

    examples = (Example("power_param { power: 2 scale: 0.5 shift: 1 }", [(2, 3, 4, 4)]),
                Example("power_param { scale: -2 }", [(3, 5)]))

    def keras_layer(self, layer, ctx, name):
        p = layer.power_param
        return layers.Power(power=p.power, scale=p.scale, shift=p.shift, name=name)


def _check_base(layer, base, log):
    """Caffe's checks on ``base`` (-1 means e); ``log`` adds Log's 1/log(base)."""
    if base == -1:
        return
    if not base > 0:
        raise LayerError(layer.name, f"({layer.type}) base must be strictly positive (or -1 for "
                                     f"e), got {base:g}")
    log_base = math.log(base)
    if math.isinf(log_base):
        raise LayerError(layer.name, f"({layer.type}) log(base) = log({base:g}) is infinite")
    if log and log_base == 0:
        raise LayerError(layer.name, f"({layer.type}) 1 / log(base) = 1 / log({base:g}) is "
                                     "infinite; base 1 has no logarithm")


@layer_type("Exp")
class Exp(Neuron):
    """Exp: base ** (shift + scale * x), base -1 meaning e."""

    examples = (Example("", [(2, 3, 4, 4)]),
                Example("exp_param { base: 2 scale: 0.5 shift: -1 }", [(3, 5)]))

    def check(self, layer):
        _check_base(layer, layer.exp_param.base, log=False)

    def keras_layer(self, layer, ctx, name):
        p = layer.exp_param
        return layers.ExpLayer(base=p.base, scale=p.scale, shift=p.shift, name=name)


@layer_type("Log")
class Log(Neuron):
    """Log: log_base(shift + scale * x), base -1 meaning e."""

    examples = (Example("log_param { shift: 10 }", [(2, 3, 4, 4)]),
                Example("log_param { base: 10 scale: 0.5 shift: 8 }", [(3, 5)]))

    def check(self, layer):
        _check_base(layer, layer.log_param.base, log=True)

    def keras_layer(self, layer, ctx, name):
        p = layer.log_param
        return layers.Log(base=p.base, scale=p.scale, shift=p.shift, name=name)


@layer_type("Threshold")
class Threshold(Neuron):
    """Threshold: 1 where x > threshold, else 0."""

    examples = (Example("threshold_param { threshold: 0.2 }", [(2, 3, 4, 4)]),
                Example("", [(3, 5)]))

    def keras_layer(self, layer, ctx, name):
        return layers.Threshold(layer.threshold_param.threshold, name=name)


@layer_type("Clip")
class Clip(Neuron):
    """Clip to [min, max].

    Both fields are required in a clip_param, as Caffe's parser requires;
    with no clip_param at all Caffe clips to [0, 0], and so does this."""

    examples = (Example("clip_param { min: -1 max: 0.5 }", [(2, 3, 4, 4)]),
                Example("clip_param { min: 0 max: 6 }", [(3, 5)]))

    def check(self, layer):
        p = layer.clip_param
        if not layer.HasField("clip_param"):
            return
        missing = [f for f in ("min", "max") if not p.HasField(f)]
        if missing:
            raise LayerError(layer.name, f"(Clip) clip_param lacks the required field(s) "
                                         f"{', '.join(missing)}")

    def keras_layer(self, layer, ctx, name):
        p = layer.clip_param
        return layers.Clip(p.min, p.max, name=name)

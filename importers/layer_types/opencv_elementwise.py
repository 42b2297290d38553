"""The layer names OpenCV 4's Caffe importer accepts beyond BVLC's: its
elementwise functions, Identity, and the aliases SoftMax and ChannelsPReLU.

OpenCV's Caffe importer (opencv/opencv: modules/dnn/src/caffe/caffe_importer.cpp)
hands a layer's ``type`` to its layer factory (modules/dnn/src/init.cpp
registers every name) with the fields of the layer's ``*_param`` messages,
flattened (``extractLayerParams``: every set field, nested messages
included), as its parameters. So a Caffe prototxt naming e.g. ``HardSwish``
imports in OpenCV; the functions are the functors of
modules/dnn/src/layers/elementwise_layers.cpp (``calculate``, the CPU path),
computed by ``keras_caffe.layers.opencv``.

Parameters (Celu alpha, HardSigmoid alpha/beta, Selu alpha/gamma,
ThresholdedRelu alpha, Shrink bias/lambd) default to OpenCV's; like
OpenCV, they are read from a field of that name in any ``*_param`` of the
layer (e.g. ``elu_param { alpha: 0.5 }``). A parameter written as a field of
the layer itself (``alpha: 0.5``, not in Caffe's schema) is refused by the
net reader, naming the layer and field (``importers/formats/netfile.py``).

Each type is its own registered unit (``_FUNCTIONS`` below makes one class
per entry), with its own examples.
"""

import math

import keras

from keras_caffe.errors import LayerError
from keras_caffe.importers.layer_types.base import (
    OPENCV,
    YOLO,
    Example,
    LayerType,
    Shapes,
    layer_type,
    need_bottoms,
    same_shape,
)
from keras_caffe.importers.layer_types.eltwise import PReLU
from keras_caffe.importers.layer_types.softmax import Softmax
from keras_caffe.layers.opencv import FUNCTIONS, OpenCVElementwise

_PLAIN = (Example("", [(2, 3, 4, 4)]), Example("", [(3, 5)]))


def opencv_params(layer):
    """``{name: [values]}`` of the scalar fields OpenCV's ``extractLayerParams``
    would read from ``layer``: those set in its ``*_param`` messages and in
    their nested messages (the first item of a repeated one)."""
    found = {}

    def walk(message):
        for field, value in message.ListFields():
            if field.type == field.TYPE_MESSAGE:
                items = value if field.label == field.LABEL_REPEATED else [value]
                if items:
                    walk(items[0])
            else:
                found.setdefault(field.name, []).append(value)

    for field, value in layer.ListFields():
        if field.name.endswith("_param") and field.type == field.TYPE_MESSAGE:
            walk(value)
    return found


class OpenCVFunction(LayerType):
    """An elementwise function of OpenCV's dnn module (one bottom, its shape)."""

    origin = OPENCV
    examples = _PLAIN
    #: The function's name in ``keras_caffe.layers.opencv.FUNCTIONS``.
    function = None

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1)
        self.params(layer)
        return same_shape(layer, bottoms)

    def params(self, layer):
        """The function's parameters as OpenCV reads them (its defaults where
        no ``*_param`` field names them)."""
        defaults = FUNCTIONS[self.function][1]
        found = opencv_params(layer)
        params = {}
        for name, default in defaults.items():
            values = found.get(name, [])
            if not values:
                params[name] = default
                continue
            if any(isinstance(v, (str, bytes, bool)) for v in values):
                raise LayerError(layer.name, f"({layer.type}) parameter {name!r} must be a "
                                             f"number, got {values[0]!r}")
            if len(set(float(v) for v in values)) > 1:
                raise LayerError(layer.name, f"({layer.type}) parameter {name!r} is given "
                                             f"several values ({', '.join(map(str, values))}) "
                                             "in its *_param fields")
            value = float(values[0])
            if not math.isfinite(value):
                raise LayerError(layer.name, f"({layer.type}) parameter {name!r} must be "
                                             f"finite, got {value:g}")
            params[name] = value
        return params

    def build(self, layer, bottoms, ctx):
        keras_layer = OpenCVElementwise(self.function, self.params(layer),
                                        name=ctx.keras_name(layer.name))
        return [ctx.elementwise(keras_layer, bottoms[0])]


@layer_type("Mish")
class Mish(OpenCVFunction):
    """Mish: ``x * tanh(softplus(x))``, computed as OpenCV's ``MishFunctor``
    (``x (1 + 2y) / (1 + 2y + 2y^2)``, ``y = exp(-x)``; 0 below -36.73). The
    type comes from the YOLOv4 Caffe ports (troyliu0105/caffe:
    src/caffe/layers/mish_layer.cpp, ``caffe_fn_mish`` = ``x *
    tanh(softplus(x))``, the same function)."""

    origin = YOLO
    function = "Mish"


def _unit(name, doc, examples=_PLAIN):
    """Register a unit class for OpenCV's function ``name``."""
    cls = type(name, (OpenCVFunction,), {"__doc__": doc, "function": name,
                                         "examples": tuple(examples),
                                         "__module__": __name__, "__qualname__": name})
    return layer_type(name)(cls)


def _domain(high, shape=(2, 3, 4, 4)):
    """An example fed the registry test's integer values in [0, high)."""
    return (Example("", [shape], integer_bottoms=(0,), integer_high=high),)


#: (type, docstring with OpenCV's formula, examples).
_FUNCTIONS = (
    ("HardSwish", "HardSwish: ``x * max(0, min(1, x / 6 + 0.5))``.", _PLAIN),
    ("HardSigmoid", "HardSigmoid: ``max(0, min(1, alpha x + beta))``, alpha 0.2, beta 0.5.",
     _PLAIN + (Example("elu_param { alpha: 0.5 } lrn_param { beta: 0.25 }", [(3, 5)]),)),
    ("Softplus", "Softplus: ``log1p(exp(x))`` (infinite above x = 88.7, as OpenCV's CPU path).",
     _PLAIN),
    ("Softsign", "Softsign: ``x / (1 + |x|)``.", _PLAIN),
    ("Selu", "Selu: ``gamma * (x if x > 0 else alpha * expm1(x))``, alpha 1.6732632, "
             "gamma 1.050701 (OpenCV's float constants).",
     _PLAIN + (Example("elu_param { alpha: 2 }", [(3, 5)]),)),
    ("Celu", "Celu: ``max(0, x) + min(0, alpha * expm1(x / alpha))``, alpha 1.",
     _PLAIN + (Example("elu_param { alpha: 0.5 }", [(3, 5)]),)),
    ("Gelu", "Gelu: ``0.5 x (1 + erf(x / sqrt(2)))``.", _PLAIN),
    ("GeluApproximation", "GeluApproximation: ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 "
                          "x^3)))`` with OpenCV's float constants.", _PLAIN),
    ("Erf", "Erf: ``erf(x)``.", _PLAIN),
    ("Sqrt", "Sqrt: ``sqrt(x)`` (NaN below 0, IEEE).", _domain(4)),
    ("Ceil", "Ceil: ``ceil(x)``.", _PLAIN),
    ("Floor", "Floor: ``floor(x)``.", _PLAIN),
    ("Round", "Round: ``nearbyint(x)`` rounding to nearest, halves to even (2.5 -> 2).", _PLAIN),
    ("Sign", "Sign: 1 for x > 0, -1 for x < 0, else 0 (NaN too).", _PLAIN),
    ("Reciprocal", "Reciprocal: ``1 / x`` (IEEE: +-inf at +-0).", _PLAIN),
    ("Not", "Not: ``floor(1 - x)`` (OpenCV 4.x's float Not: 1 for 0, 0 for 1).", _domain(2)),
    ("Acos", "Acos: ``acos(x)`` (NaN outside [-1, 1]).", _domain(2)),
    # The registry test seeds its integer feed: (2, 3) below 100 draws values >= 1.
    ("Acosh", "Acosh: ``acosh(x)`` (NaN below 1).", _domain(100, (2, 3))),
    ("Asin", "Asin: ``asin(x)`` (NaN outside [-1, 1]).", _domain(2)),
    ("Asinh", "Asinh: ``asinh(x)``.", _PLAIN),
    ("Atan", "Atan: ``atan(x)``.", _PLAIN),
    ("Atanh", "Atanh: ``atanh(x)`` (+-inf at +-1, NaN beyond).", _domain(1)),
    ("Cos", "Cos: ``cos(x)``.", _PLAIN),
    ("Cosh", "Cosh: ``cosh(x)``.", _PLAIN),
    ("Sin", "Sin: ``sin(x)``.", _PLAIN),
    ("Sinh", "Sinh: ``sinh(x)``.", _PLAIN),
    ("Tan", "Tan: ``tan(x)``.", _PLAIN),
    ("ThresholdedRelu", "ThresholdedRelu: ``x if x > alpha else 0``, alpha 1.", _PLAIN),
    ("Shrink", "Shrink: ``x - bias if x > lambd, x + bias if x < -lambd, else 0``, bias 0, "
               "lambd 0.5.", _PLAIN),
)

for _name, _doc, _examples in _FUNCTIONS:
    globals()[_name] = _unit(_name, _doc, _examples)


@layer_type("Identity")
class Identity(LayerType):
    """Identity (OpenCV's ``BlankLayer``): each top is its bottom, unchanged."""

    origin = OPENCV
    examples = (Example("", [(2, 3, 4, 4)]), Example("", [(3, 5), (2, 4)], tops=2))

    def shapes(self, layer, bottoms, state):
        need_bottoms(layer, bottoms, 1, math.inf)
        if len(layer.top) != len(bottoms):
            raise LayerError(layer.name, f"(Identity) needs one top per bottom, got "
                                         f"{len(bottoms)} bottom(s) and {len(layer.top)} top(s)")
        return Shapes([tuple(b) for b in bottoms])

    def build(self, layer, bottoms, ctx):
        return [ctx.elementwise(keras.layers.Identity(name=ctx.keras_name(layer.name)), blob)
                for blob in bottoms]


@layer_type("SoftMax")
class SoftMax(Softmax):
    """SoftMax, OpenCV's other name of Softmax (init.cpp registers both with
    ``SoftmaxLayer``): softmax over softmax_param's axis."""

    origin = OPENCV


@layer_type("ChannelsPReLU")
class ChannelsPReLU(PReLU):
    """ChannelsPReLU, OpenCV's name of PReLU (init.cpp registers PReLU and
    ChannelsPReLU with ``ChannelsPReLULayer``): a learned slope per channel,
    or one with prelu_param channel_shared."""

    origin = OPENCV

"""One home per Caffe layer type: the ``LayerType`` unit and its registry.

Everything keras-caffe knows about a Caffe layer type lives in one class,
registered with ``@layer_type``::

    @layer_type("ReLU")
    class ReLU(LayerType):
        '''ReLU with negative_slope (leaky).  Caffe: relu_layer.cpp.'''

        examples = (Example("relu_param { negative_slope: 0.1 }", [(2, 3, 4, 4)]),)

        def shapes(self, layer, bottoms, state):     # checks, shapes, cost
            return same_shape(layer, bottoms)

        def build(self, layer, bottoms, ctx):        # the Keras layers
            return [ctx.elementwise(keras.layers.ReLU(...), bottoms[0])]

The pieces (the registry-wide test, ``tests/importers/net/test_registry.py``,
fails for a built-in type that lacks one):

- ``shapes(layer, bottoms, state)``: the parameter checks and the shape rule,
  from Caffe shapes (batch first) of the bottoms to ``Shapes`` (the tops'
  shapes, the learnable blobs' shapes in Caffe's order, the multiply-adds of
  one forward pass). ``analyze`` and LMS's prediction use it alone; the
  importer runs it before ``build`` and checks that the Keras layers give
  the same shapes, so the two cannot disagree.
- ``build(layer, bottoms, ctx)``: the Keras layers, on ``Blob``s.
- ``examples``: small layers (parameters and bottom shapes) that the
  registry-wide test imports, runs in both data formats and analyzes.
- ``origin``: BVLC Caffe, or the fork the type comes from.
- a test marked ``@pytest.mark.layer_type(type)``.
- data layers only: ``source_shapes(layer, net_source)`` (the tops' shapes
  from the layer's parameters or its source's first record, as Caffe's
  ``DataLayerSetUp`` finds them) and ``pipeline(layer, ctx)`` (its tf.data).

Modules of this package are found and imported on first use, so adding a
layer type is one new module (or class) and its test.
"""

import dataclasses
import importlib
import math
import pkgutil

from keras_caffe.backends import SUPPORTED, backend_name
from keras_caffe.errors import BackendRequirementError, DuplicateLayerTypeError, LayerError

BVLC = "BVLC Caffe"
SSD = "SSD (weiliu89/caffe)"
SEGNET = "SegNet (alexgkendall/caffe-segnet)"
PSPNET = "PSPNet (hszhao/PSPNet), DeepLab"
SHUFFLENET = "ShuffleNet (farmingyard/ShuffleNet)"
FASTER_RCNN = "Faster R-CNN (rbgirshick/caffe-fast-rcnn)"
MOBILENET = "MobileNet forks (depthwise convolution)"
SENET = "SENet (hujie-frank/SENet)"
MOBILENET_V2 = "MobileNet-v2 forks (ReLU6)"
#: VideoData comes from several forks, each with its own video_data_param.
VIDEO = "video forks (C3D: facebook/C3D; TSN: yjxiong/caffe)"
C3D = "C3D (facebook/C3D)"
RFCN = "R-FCN (daijifeng001/caffe-rfcn)"
MASK_RCNN = "ROIAlign forks (Mask R-CNN ports; ncnn, OpenCV)"
YOLO = "YOLO Caffe ports (Reorg/Region/YOLO detection outputs; ncnn, OpenCV)"
LRCN = "recurrent forks (ContinuationIndicator: CRNN/LRCN ports)"
FLOWNET2 = "FlowNet 2.0 (lmb-freiburg/flownet2)"
OPENCV = "OpenCV 4 dnn (layer names its Caffe importer accepts)"
#: Every origin a built-in unit may name.
ORIGINS = (BVLC, SSD, SEGNET, PSPNET, SHUFFLENET, FASTER_RCNN, MOBILENET, SENET, MOBILENET_V2,
           VIDEO, C3D, RFCN, MASK_RCNN, YOLO, LRCN, FLOWNET2, OPENCV)


@dataclasses.dataclass(frozen=True)
class Shapes:
    """What a layer computes, found without allocating anything: one Caffe
    shape (batch first) per top, the shapes of the learnable blobs it owns
    (Caffe's order and shapes), and the multiply-adds of one forward pass
    (the work ``analyze`` counts)."""

    tops: list
    weights: list = ()
    macs: int = 0


@dataclasses.dataclass(frozen=True)
class Example:
    """A small instance of a layer type for the registry-wide test: the text
    of its ``*_param`` (and other fields, e.g. ``param { }``) and the Caffe
    shapes of its bottoms; ``type`` picks one of a multi-type unit's types,
    ``tops`` how many tops it names, ``integer_bottoms`` which bottoms hold
    integer values (labels, indices) below ``integer_high``."""

    params: str
    bottoms: tuple
    type: str = None
    tops: int = 1
    phase: str = "TEST"
    integer_bottoms: tuple = ()
    integer_high: int = 4


class LayerType:
    """The unit of one Caffe layer type (or of types that share all of it)."""

    #: The Caffe type names (set by ``@layer_type``).
    types = ()
    #: Where the type comes from: ``BVLC`` or a fork.
    origin = BVLC
    #: Bottom indices read as labels (no gradient, not model inputs).
    label_bottoms = ()
    #: Whether the tops' batch size depends on the data (Filter): the shape
    #: rule then gives the largest it can be.
    data_dependent_batch = False
    #: Whether the type brings data into the net (no bottoms; a model input).
    data_layer = False
    #: ``Example``s for the registry-wide test.
    examples = ()
    #: Whether the tops are the bottom itself (Caffe's Split shares the
    #: bottom's data): ``analyze`` counts no activations for them.
    aliases_bottom = False
    #: Why the importer does not build this type (``build`` is then None and
    #: only ``analyze`` sizes it); empty for every type it builds.
    analyze_only = ""
    #: ``{Keras backend: why}`` for the backends this type's Keras layers
    #: cannot run on (eagerly and compiled: ``predict``, ``fit``): its
    #: ``build`` refuses the type there first (``refuse_backend``); empty for
    #: a type that runs on every backend keras-caffe supports.
    unsupported_backends = {}

    @property
    def backends(self):
        """The Keras backends this type's Keras layers run on."""
        return tuple(b for b in SUPPORTED if b not in self.unsupported_backends)

    def shapes(self, layer, bottoms, state):
        """``Shapes`` of ``layer`` given its bottoms' Caffe shapes; raises
        ``LayerError`` for bad parameters or shapes."""
        raise NotImplementedError

    def build(self, layer, bottoms, ctx):
        """The tops (``Blob``s) of ``layer`` built from Keras layers."""
        raise NotImplementedError

    @property
    def builtin(self):
        return type(self).__module__.startswith("keras_caffe.")



def refuse_backend(unit, layer):
    """Raise ``BackendRequirementError``, one line naming the layer, its type
    and the backend, where Keras's backend is one of ``unit``'s
    ``unsupported_backends``."""
    name = backend_name()
    why = unit.unsupported_backends.get(name)
    if why:
        others = " or ".join(unit.backends)
        raise BackendRequirementError(
            f"layer {layer.name!r} ({layer.type}) does not run on Keras's {name} backend: "
            f"{why}; run it with KERAS_BACKEND set to {others}", found=name)


class FunctionLayerType(LayerType):
    """A user's layer type, registered as a build function with
    ``keras_caffe.importers.register_layer_type``: it builds Keras layers;
    with no shape rule, ``analyze`` cannot size the type."""

    def __init__(self, fn):
        self.fn = fn
        self.label_bottoms = tuple(getattr(fn, "label_bottoms", ()))
        self.origin = f"user ({fn.__module__}.{fn.__qualname__})"

    shapes = None
    builtin = False

    def build(self, layer, bottoms, ctx):
        return self.fn(layer, bottoms, ctx)


_UNITS = {}
_LOADED = []


def layer_type(*types):
    """Class decorator: register one instance of the ``LayerType`` subclass
    as the unit of each Caffe type in ``types``."""
    if not types or not all(isinstance(t, str) and t for t in types):
        raise TypeError("layer_type() takes one or more layer type strings")

    def register(cls):
        cls.types = tuple(types)
        _register(types, cls())
        return cls

    return register


def _register(types, unit):
    for name in types:
        old = _UNITS.get(name)
        if old is not None:
            where = (f"{old.fn.__module__}.{old.fn.__qualname__}"
                     if isinstance(old, FunctionLayerType)
                     else f"{type(old).__module__}.{type(old).__qualname__}")
            raise DuplicateLayerTypeError(f"layer type {name!r} is already registered "
                                          f"({where}); unregister_layer_type() it first")
    for name in types:
        _UNITS[name] = unit


def unit(name):
    """The ``LayerType`` of Caffe type ``name``, or None."""
    load_builtin()
    return _UNITS.get(name)


def units():
    """``{type: LayerType}`` of every registered type."""
    load_builtin()
    return dict(_UNITS)


def remove(name):
    return _UNITS.pop(name)


def load_builtin():
    """Import every module of this package once (each registers its units)."""
    if _LOADED:
        return
    _LOADED.append(True)
    package = importlib.import_module(__package__)
    # the tf.data data layers' modules import TensorFlow: on another backend, stand-ins
    skipped = importlib.import_module(f"{__package__}._tensorflow_data").stand_in_for_tensorflow()
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if not info.name.startswith("_") and info.name != "base" and info.name not in skipped:
            importlib.import_module(f"{__package__}.{info.name}")


# -- helpers shared by the shape rules ------------------------------------------


def count(shape):
    """The number of values in a blob of ``shape``."""
    return math.prod(shape)


def fmt(shape):
    """A shape as Python writes a tuple: ``(2,)``, ``(2, 3)``."""
    return str(tuple(shape))


def canonical_axis(axis, rank):
    """Caffe's ``CanonicalAxisIndex``."""
    canonical = axis + rank if axis < 0 else axis
    if not 0 <= canonical < rank:
        raise ValueError(f"axis {axis} is out of range for a {rank}-D blob")
    return canonical


def need_bottoms(layer, bottoms, low, high=None):
    """Refuse a layer with fewer than ``low`` or more than ``high`` bottoms
    (``high`` None: exactly ``low``; ``math.inf``: no upper bound)."""
    high = low if high is None else high
    if low <= len(bottoms) <= high:
        return
    if low == high:
        wanted = str(low)
    elif high < math.inf:
        wanted = f"{low} to {high}"
    else:
        wanted = f"{low} or more"
    raise LayerError(layer.name, f"({layer.type}) takes {wanted} bottom(s), got {len(bottoms)}")


def same_shape(layer, bottoms, weights=()):
    """``Shapes`` of a layer whose tops have its first bottom's shape."""
    if not bottoms:
        raise LayerError(layer.name, f"({layer.type}) needs a bottom")
    return Shapes([tuple(bottoms[0])] * len(layer.top), list(weights), 0)


def run_shapes(found, layer, bottoms, state):
    """``found.shapes(layer, bottoms, state)`` with its errors as ``LayerError``
    naming the layer, and the tops checked (one per top, no empty axis).
    ``state.notes`` of the bottoms pass on to the tops, and end the message
    of an error here."""
    notes = getattr(state, "notes", {})
    inherited = tuple(dict.fromkeys(n for b in layer.bottom for n in notes.get(b, ())))
    try:
        result = _checked_shapes(found, layer, bottoms, state)
    except LayerError as err:
        if inherited:
            err.args = ("; ".join((str(err), *inherited)),)  # one line: the CLI prints one
        raise
    for top in layer.top if inherited else ():
        notes[top] = tuple(dict.fromkeys((*inherited, *notes.get(top, ()))))
    return result


def _checked_shapes(found, layer, bottoms, state):
    try:
        result = found.shapes(layer, bottoms, state)
    except LayerError:
        raise
    except (ValueError, ZeroDivisionError, IndexError, TypeError) as err:
        given = ", ".join(fmt(s) for s in bottoms) or "none"
        raise LayerError(layer.name, f"({layer.type}) cannot compute its output shape from "
                                     f"input shape(s) {given}: {err}") from None
    if len(result.tops) != len(layer.top):
        raise LayerError(layer.name, f"({layer.type}) produces {len(result.tops)} top(s) but "
                                     f"names {len(layer.top)}")
    for top, shape in zip(layer.top, result.tops):
        if any(d is not None and d <= 0 for d in shape):
            given = ", ".join(fmt(s) for s in bottoms) or "none"
            raise LayerError(layer.name, f"({layer.type}) top {top!r} would have shape "
                                         f"{fmt(shape)} (input shape(s) {given})")
    return result


class ShapeState:
    """What the shape rules of data layers read: the batch (None: the net's
    own), ``input_shapes`` ({top: shape without the batch}) and the net's
    source (where data layers' sources are looked up)."""

    def __init__(self, batch, input_shapes, source):
        self.batch = batch
        self.input_shapes = input_shapes
        self.source = source
        self.used_inputs = set()
        #: {blob: notes}: what a shape rule knows that explains a later shape
        #: error on blobs computed from that blob (Pooling: the Caffe fork
        #: whose rule would keep a darknet maxpool's size); see ``run_shapes``.
        self.notes = {}

    def input_shape(self, layer, top, stated):
        """The shape of an input top: ``input_shapes``, else ``stated`` (batch first)."""
        if top in self.input_shapes:
            self.used_inputs.add(top)
            per_sample = tuple(int(d) for d in self.input_shapes[top])
            batch = self.batch if self.batch is not None else (stated[0] if stated else 1)
            return (batch, *per_sample)
        if stated is None:
            raise LayerError(layer.name, f"({layer.type}) reads its data from a database or "
                                         f"file, so the shape of top {top!r} is unknown; give it "
                                         f"with input_shapes={{{top!r}: (C, H, W)}} or analyze "
                                         "the deploy net")
        stated = tuple(int(d) for d in stated)
        if not stated:
            raise LayerError(layer.name, f"({layer.type}) top {top!r} has an empty shape")
        return stated if self.batch is None else (self.batch, *stated[1:])

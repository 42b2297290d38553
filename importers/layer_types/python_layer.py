"""Caffe's ``Python`` layer: code a model file names (``python_param { module
layer }``), which keras-caffe never runs. A few well-known Python layers are
recognised by their module and class names and computed by keras-caffe's own
implementation instead: the units in ``PYTHON_LAYERS``, keyed by ``(module,
layer)`` and registered with ``@python_layer``. Every other Python layer is
refused (``UnsafeLayerError``) by the importer and by ``analyze``.
"""

from keras_caffe.errors import UnsafeLayerError
from keras_caffe.importers.layer_types import base
from keras_caffe.importers.layer_types.base import BVLC, Example, LayerType, layer_type

#: ``{(module, layer): unit}``: the Python layers keras-caffe runs its own code for.
PYTHON_LAYERS = {}


def python_layer(module, name):
    """Class decorator: an instance of the ``LayerType`` subclass computes the
    Python layer whose ``python_param`` names ``module`` and ``name``."""

    def register(cls):
        PYTHON_LAYERS[(module, name)] = cls()
        return cls

    return register


def recognised(layer):
    """The unit computing Python layer ``layer``, or None."""
    base.load_builtin()
    p = layer.python_param
    return PYTHON_LAYERS.get((p.module, p.layer))


def unsafe_layers(net):
    """The names of the net's Python layers keras-caffe does not recognise."""
    return [layer.name for layer in net.layer
            if layer.type == "Python" and recognised(layer) is None]


def refusal(source, names):
    """The error for Python layers that would run user code."""
    return UnsafeLayerError(
        f"{source}: {refusal_reason(names)}. "
        "Register a layer type for the layer's behaviour (keras_caffe.importers."
        "register_layer_type), or replace it in the prototxt")


def refusal_reason(names):
    """Why the Python layers ``names`` are refused (also one of an
    ``UnknownLayerError``'s notes when the net has unknown types too)."""
    return (f"Python layer(s) {', '.join(repr(n) for n in names)} would run user code named "
            "in the model file; keras-caffe never executes code from a model file")


def fields_known(known):
    """``known`` (a layer type -> whether keras-caffe reads every field of it)
    for ``netfile.load_net``, less ``Python``: a fork's field on a Python
    layer is not refused while loading; an unrecognised Python layer is
    refused as unsafe after, a recognised one reads only python_param."""
    return lambda layer_type: layer_type != "Python" and known(layer_type)


def _unit(layer):
    found = recognised(layer)
    if found is None:
        raise refusal("<net>", [layer.name])
    return found


@layer_type("Python")
class Python(LayerType):
    """A Python layer keras-caffe recognises by ``python_param``'s module and
    layer (``PYTHON_LAYERS``: py-faster-rcnn's ``rpn.proposal_layer``
    ``ProposalLayer``), computed by its own unit; no code from the model
    file runs, and any other Python layer is refused."""

    examples = (
        Example('python_param { module: "rpn.proposal_layer" layer: "ProposalLayer" '
                "param_str: \"'feat_stride': 16\" }", [(1, 18, 3, 4), (1, 36, 3, 4), (1, 3)]),
    )

    def shapes(self, layer, bottoms, state):
        return _unit(layer).shapes(layer, bottoms, state)

    def build(self, layer, bottoms, ctx):
        return _unit(layer).build(layer, bottoms, ctx)

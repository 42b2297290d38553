"""The registry of layer types: one unit per Caffe type, every unit complete.

Each built-in type must have every piece of its unit (a docstring, an
origin, a shape rule, a Keras construction, examples, a test marked
``@pytest.mark.layer_type(type)``; data layers their source shapes and
pipeline), and each example must give the same shapes and weight blobs
through ``analyze`` (the shape rule alone) as through the importer (the
Keras layers), in both data formats, and a finite forward pass.
"""

import ast
import dataclasses
import functools
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_caffe.importers import (
    converter,
    register_layer_type,
    registered_types,
    unregister_converter,
    unregister_layer_type,
)
from keras_caffe.analysis import analyze
from keras_caffe.importers.net.blobs import caffe_layers
from keras_caffe.importers.net.importing import import_net
from keras_caffe.importers.layer_types import base
from keras_caffe.errors import BackendRequirementError
from keras_caffe.importers.net.registry import DuplicateLayerTypeError, is_builtin, origin

#: tests/importers, whose folders hold the layer types' tests.
IMPORTER_TESTS = Path(__file__).resolve().parents[1]
DATA_FORMATS = ("channels_last", "channels_first")


@functools.cache
def _tested_types():
    """Layer types named by @pytest.mark.layer_type(...) in tests/importers/
    and its folders (parsed once: every registered type asks)."""
    types = set()
    for path in IMPORTER_TESTS.rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "layer_type"
                    and isinstance(getattr(node.func, "value", None), ast.Attribute)
                    and node.func.value.attr == "mark"):
                types.update(a.value for a in node.args if isinstance(a, ast.Constant))
    return types


def _builtin_units():
    return {name: unit for name, unit in sorted(base.units().items()) if unit.builtin}


def _examples():
    cases = []
    for name, unit in _builtin_units().items():
        for i, example in enumerate(unit.examples):
            if (example.type or unit.types[0]) == name:
                cases += [pytest.param(name, i, fmt, id=f"{name}-{i}-{fmt}")
                          for fmt in DATA_FORMATS]
    return cases


@pytest.mark.parametrize("layer_type", registered_types())
def test_every_layer_type_has_a_test(layer_type):
    assert layer_type in _tested_types(), f"no test marked @pytest.mark.layer_type({layer_type!r})"


@pytest.mark.parametrize("layer_type", sorted(_builtin_units()))
def test_every_unit_has_every_piece(layer_type):
    unit = base.unit(layer_type)
    cls = type(unit)
    assert cls.__doc__ and cls.__doc__.strip(), f"{cls.__qualname__} has no docstring"
    assert unit.origin in base.ORIGINS, f"{layer_type}: unknown origin {unit.origin!r}"
    assert origin(layer_type) == unit.origin
    assert cls.shapes is not base.LayerType.shapes, f"{layer_type} has no shape rule"
    if unit.analyze_only:
        # Sized by analyze, refused by the importer as an unknown type, with the reason.
        assert unit.build is None and layer_type not in registered_types()
        return
    assert cls.build is not base.LayerType.build and unit.build is not None, \
        f"{layer_type} has no Keras construction"
    assert is_builtin(layer_type)
    if unit.data_layer:
        assert callable(getattr(unit, "source_shapes", None)), f"{layer_type}: no source_shapes"
        assert hasattr(unit, "pipeline"), f"{layer_type}: no pipeline"
    else:
        own = [e for e in unit.examples if (e.type or unit.types[0]) == layer_type]
        assert own, f"{layer_type} has no example for the registry-wide test"


def _net_text(layer_type, example):
    """An Input layer feeding each bottom (none for a data layer), then the layer."""
    bottoms = [f"b{i}" for i in range(len(example.bottoms))]
    text = ""
    if bottoms:
        shapes = "".join("  shape { " + " ".join(f"dim: {d}" for d in shape) + " }\n"
                         for shape in example.bottoms)
        tops = "".join(f'  top: "{b}"\n' for b in bottoms)
        text = f'layer {{\n  name: "in"\n  type: "Input"\n{tops}  input_param {{\n{shapes}  }}\n}}\n'
    text += (f'layer {{\n  name: "x"\n  type: "{layer_type}"\n'
             + "".join(f'  bottom: "{b}"\n' for b in bottoms)
             + "".join(f'  top: "t{i}"\n' for i in range(example.tops))
             + f"  {example.params}\n}}\n")
    return text


def _feed(example, data_format, rng):
    arrays = []
    for i, shape in enumerate(example.bottoms):
        if i in example.integer_bottoms:
            value = rng.integers(0, example.integer_high, size=shape).astype(np.float32)
        else:
            value = rng.standard_normal(shape).astype(np.float32)
        if data_format == "channels_last" and value.ndim >= 3:
            value = np.moveaxis(value, 1, -1)
        arrays.append(value)
    return arrays


@pytest.mark.kernels
@pytest.mark.parametrize("layer_type, index, data_format", _examples())
def test_example_shapes_agree(layer_type, index, data_format):
    """analyze's shape rule and the importer's Keras layers agree on the tops'
    shapes and the weight blobs; the forward pass is finite."""
    unit = base.unit(layer_type)
    example = unit.examples[index]
    text = _net_text(layer_type, example)
    report = analyze(text, batch=None, phase=example.phase)
    row = next(r for r in report.layers if r.name == "x")
    # A loss or metric's tops are no tensors, a Silence has none: the model
    # then outputs the layer's first bottom.
    wanted = [t for t, _ in row.tops] if row.tops and not unit.label_bottoms else ["b0"]
    if unit.data_layer:  # the model outputs its inputs: a ReLU makes them computed
        text += "".join(f'layer {{ name: "r{i}" type: "ReLU" bottom: "{t}" top: "r{i}" }}\n'
                        for i, (t, _) in enumerate(row.tops))
        wanted = [f"r{i}" for i in range(len(row.tops))]
    if keras.backend.backend() not in unit.backends:
        # a type that cannot run on this backend (Filter on JAX) is refused by name
        with pytest.raises(BackendRequirementError, match=rf"^layer 'x' \({layer_type}\) does "
                           rf"not run on Keras's {keras.backend.backend()} backend: "):
            import_net(text, phase=example.phase, data_format=data_format, outputs=wanted)
        return
    imported = import_net(text, phase=example.phase, data_format=data_format, outputs=wanted)
    keras_layer = caffe_layers(imported.model).get("x")
    blobs = keras_layer.caffe_blob_shapes() if keras_layer is not None else []
    assert [tuple(b) for b in blobs] == [tuple(w) for w in row.weight_shapes]
    if unit.data_layer:  # its tops are the model's inputs: feed them
        example = dataclasses.replace(example, bottoms=tuple(s for _, s in row.tops))
    feed = _feed(example, data_format, np.random.default_rng(index))
    # Label bottoms are training targets, not model inputs.
    feed = [a for i, a in enumerate(feed) if i not in unit.label_bottoms]
    outputs = imported.model(feed if len(feed) > 1 else feed[0])
    if not isinstance(outputs, dict):
        outputs = {imported.model.caffe_outputs[0]: outputs}
    expected = dict(row.tops)
    for name, value in outputs.items():
        value = keras.ops.convert_to_numpy(value)
        if data_format == "channels_last" and value.ndim >= 3:
            value = np.moveaxis(value, -1, 1)
        if name in expected and unit.data_dependent_batch:
            assert value.shape[1:] == expected[name][1:] and value.shape[0] <= expected[name][0]
        elif name in expected:
            assert value.shape == expected[name], name
        elif name.startswith("r") and unit.data_layer:
            assert value.shape == row.tops[int(name[1:])][1], name
        assert np.all(np.isfinite(value)), name


def test_analyze_only_types_say_why_they_are_not_imported():
    from keras_caffe.errors import UnknownLayerError
    from keras_caffe.importers import import_model

    text = ('layer { name: "in" type: "Input" top: "p" top: "l" input_param { '
            "shape { dim: 2 dim: 3 } shape { dim: 2 } } }\n"
            'layer { name: "loss" type: "InfogainLoss" bottom: "p" bottom: "l" top: "loss" }\n')
    with pytest.raises(UnknownLayerError, match="InfogainLoss is sized by analyze but not "
                                                "built: its H matrix comes from a binaryproto"):
        import_model(text, phase="TRAIN")
    assert analyze(text, phase="TRAIN").layers[-1].tops == (("loss", ()),)


def test_duplicate_registration_is_an_error():
    """Registering a built-in type again names the unit that holds it."""
    with pytest.raises(DuplicateLayerTypeError) as info:
        register_layer_type("ReLU")(lambda layer, bottoms, ctx: bottoms)
    assert str(info.value) == (
        "layer type 'ReLU' is already registered "
        "(keras_caffe.importers.layer_types.neurons.ReLU); unregister_layer_type() it first")


def test_the_former_names_are_the_same_objects():
    """``converter``, ``unregister_converter`` and ``DuplicateConverterError``
    (the names before "layer type") are the new ones, not copies."""
    import keras_caffe
    from keras_caffe.importers.net import registry

    assert converter is register_layer_type is registry.register_layer_type
    assert unregister_converter is unregister_layer_type is registry.unregister_layer_type
    assert keras_caffe.DuplicateConverterError is keras_caffe.DuplicateLayerTypeError
    assert registry.DuplicateConverterError is DuplicateLayerTypeError
    assert {"DuplicateLayerTypeError", "DuplicateConverterError"} <= set(keras_caffe.__all__)
    assert {"register_layer_type", "unregister_layer_type", "converter",
            "unregister_converter"} <= set(keras_caffe.importers.__all__)
    with pytest.raises(keras_caffe.DuplicateConverterError):  # old code catching the old name
        converter("ReLU")(lambda layer, bottoms, ctx: bottoms)


def test_users_register_their_own_types():
    @register_layer_type("MyIdentity")
    def my_identity(layer, bottoms, ctx):
        """Passes its bottom through."""
        return bottoms

    try:
        assert "MyIdentity" in registered_types()
        assert not is_builtin("MyIdentity")
        assert origin("MyIdentity").startswith("user (")
    finally:
        assert unregister_layer_type("MyIdentity") is my_identity
    assert "MyIdentity" not in registered_types()


def test_a_user_layer_type_feeds_later_shape_rules():
    """A user's layer type has no shape rule: the shapes of its tops come from
    the Keras layers it built, and the layers after it are checked as usual."""

    @register_layer_type("Doubler")
    def doubler(layer, bottoms, ctx):
        """Concatenates its bottom with itself on the channel axis."""
        blob = bottoms[0]
        axis = ctx.axis(blob, 1)
        return [ctx.same_layout(keras.layers.Concatenate(axis=axis)([blob.tensor] * 2), blob)]

    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 '
            'dim: 4 dim: 4 } } }\n'
            'layer { name: "d" type: "Doubler" bottom: "x" top: "y" }\n'
            'layer { name: "c" type: "Convolution" bottom: "y" top: "z" '
            'convolution_param { num_output: 3 kernel_size: 3 } }\n')
    try:
        model = import_net(text).model
        conv = caffe_layers(model)["c"]
        assert conv.caffe_blob_shapes() == [(3, 4, 3, 3), (3,)]
        assert tuple(model.output.shape) == (None, 2, 2, 3)
    finally:
        unregister_layer_type("Doubler")

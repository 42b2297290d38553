"""Which Keras backends each layer type runs on, its unit's declaration
(``LayerType.backends``, ``unsupported_backends``) against what happens on
the backend this run uses; runs on every backend (tests/support/tiers.py
BACKENDS).

For every built-in layer type the importer builds (the tf.data data layers
are stand-ins off TensorFlow: tests/importers/net/test_backend_support.py),
each of its examples: where the backend is declared, the net imports, its
eager forward pass is finite, and the same net compiled as Keras compiles a
prediction on this backend (``predict_on_batch``: XLA on JAX) gives the
same numbers; where it is not, ``import_model`` refuses the layer in one
line naming it, its type, the backend and why, and ``analyze`` still sizes it.
"""

import keras
import numpy as np
import pytest

from keras_caffe.analysis import analyze
from keras_caffe.backends import SUPPORTED
from keras_caffe.errors import BackendRequirementError
from keras_caffe.importers.layer_types import base
from keras_caffe.importers.net.importing import import_net

BACKEND = keras.backend.backend()

#: Where a backend's compiled program may sum in another order than its eager ops.
COMPILED_TOLERANCE = dict(rtol=2e-5, atol=2e-5)


def _built_units():
    return {name: unit for name, unit in sorted(base.units().items())
            if unit.builtin and not unit.data_layer and not unit.analyze_only}


def _examples():
    return [pytest.param(name, i, id=f"{name}-{i}")
            for name, unit in _built_units().items()
            for i, example in enumerate(unit.examples) if (example.type or unit.types[0]) == name]


def _net_text(layer_type, example):
    """An Input layer feeding each bottom, then the layer (named ``x``)."""
    bottoms = [f"b{i}" for i in range(len(example.bottoms))]
    shapes = "".join("  shape { " + " ".join(f"dim: {d}" for d in shape) + " }\n"
                     for shape in example.bottoms)
    tops = "".join(f'  top: "{b}"\n' for b in bottoms)
    return (f'layer {{\n  name: "in"\n  type: "Input"\n{tops}  input_param {{\n{shapes}  }}\n}}\n'
            f'layer {{\n  name: "x"\n  type: "{layer_type}"\n'
            + "".join(f'  bottom: "{b}"\n' for b in bottoms)
            + "".join(f'  top: "t{i}"\n' for i in range(example.tops))
            + f"  {example.params}\n}}\n")


def _feed(unit, example, index):
    """The example's bottoms (channels-last), its label bottoms left out."""
    rng = np.random.default_rng(index)
    arrays = []
    for i, shape in enumerate(example.bottoms):
        if i in unit.label_bottoms:
            continue
        if i in example.integer_bottoms:
            value = rng.integers(0, example.integer_high, size=shape).astype(np.float32)
        else:
            value = rng.standard_normal(shape).astype(np.float32)
        arrays.append(np.moveaxis(value, 1, -1) if value.ndim >= 3 else value)
    return arrays


def _as_dict(model, outputs):
    if not isinstance(outputs, dict):
        outputs = {model.caffe_outputs[0]: outputs}
    return {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}


def test_every_unit_declares_backends_keras_caffe_supports():
    """``unsupported_backends`` names supported backends only, each with a
    reason, and leaves every type at least one backend (TensorFlow)."""
    for name, unit in _built_units().items():
        assert set(unit.unsupported_backends) <= set(SUPPORTED), name
        assert all(isinstance(why, str) and why for why in unit.unsupported_backends.values())
        assert "tensorflow" in unit.backends, name
        assert unit.backends == tuple(b for b in SUPPORTED if b not in unit.unsupported_backends)


def test_the_types_not_on_every_backend():
    """The declared exceptions, by name: Filter's tops have the data's batch
    size, which no compiled JAX function can hold."""
    partial = {name: unit.backends for name, unit in _built_units().items()
               if unit.unsupported_backends}
    assert partial == {"Filter": ("tensorflow", "torch")}


@pytest.mark.parametrize("layer_type, index", _examples())
def test_the_declaration_holds_on_this_backend(layer_type, index):
    unit = base.unit(layer_type)
    example = unit.examples[index]
    text = _net_text(layer_type, example)
    row = next(r for r in analyze(text, batch=None, phase=example.phase).layers if r.name == "x")
    # A loss or metric's tops are no tensors, a Silence has none: the model
    # then outputs the layer's first bottom.
    wanted = [t for t, _ in row.tops] if row.tops and not unit.label_bottoms else ["b0"]
    if BACKEND not in unit.backends:
        with pytest.raises(BackendRequirementError) as err:
            import_net(text, phase=example.phase, outputs=wanted)
        others = " or ".join(unit.backends)
        assert str(err.value) == (
            f"layer 'x' ({layer_type}) does not run on Keras's {BACKEND} backend: "
            f"{unit.unsupported_backends[BACKEND]}; run it with KERAS_BACKEND set to {others}")
        return
    model = import_net(text, phase=example.phase, outputs=wanted).model
    feed = _feed(unit, example, index)
    feed = feed if len(feed) > 1 else feed[0]
    eager = _as_dict(model, model(feed))
    for name, value in eager.items():
        assert np.all(np.isfinite(value)), name
    compiled = _as_dict(model, model.predict_on_batch(feed))
    assert sorted(compiled) == sorted(eager)
    for name, value in eager.items():
        np.testing.assert_allclose(compiled[name], value, err_msg=name, **COMPILED_TOLERANCE)

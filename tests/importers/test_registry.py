"""The converter registry: duplicates refused, every converter tested."""

import ast
from pathlib import Path

import pytest

from keras_caffe.importers import converter, registered_types, unregister_converter
from keras_caffe.importers.registry import DuplicateConverterError

HERE = Path(__file__).parent


def _tested_types():
    """Layer types named by @pytest.mark.converter(...) in tests/importers/."""
    types = set()
    for path in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "converter"
                    and isinstance(getattr(node.func, "value", None), ast.Attribute)
                    and node.func.value.attr == "mark"):
                types.update(a.value for a in node.args if isinstance(a, ast.Constant))
    return types


@pytest.mark.parametrize("layer_type", registered_types())
def test_every_converter_has_a_test(layer_type):
    assert layer_type in _tested_types(), f"no test marked @pytest.mark.converter({layer_type!r})"


def test_duplicate_registration_is_an_error():
    with pytest.raises(DuplicateConverterError, match="'ReLU' already has a converter"):
        converter("ReLU")(lambda layer, bottoms, ctx: bottoms)


def test_users_register_their_own_types():
    @converter("MyIdentity")
    def my_identity(layer, bottoms, ctx):
        return bottoms

    try:
        assert "MyIdentity" in registered_types()
    finally:
        assert unregister_converter("MyIdentity") is my_identity
    assert "MyIdentity" not in registered_types()

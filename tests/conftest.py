"""Fixtures shared by the suite; helpers live in support.py."""

import keras
import pytest

from support import GOLDEN


@pytest.fixture(scope="session")
def golden():
    """``../shared/golden``; the suite fails (not skips) without it."""
    if not (GOLDEN / "README.md").is_file():
        pytest.fail(f"golden Caffe data not found at {GOLDEN} (set KERAS_CAFFE_GOLDEN)")
    return GOLDEN


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts with float32 and an empty Keras graph state."""
    keras.mixed_precision.set_dtype_policy("float32")
    keras.backend.clear_session()
    yield
    keras.mixed_precision.set_dtype_policy("float32")

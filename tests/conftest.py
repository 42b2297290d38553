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
    """Each test starts with float32 and fresh Keras names (layer/optimizer
    auto-names restart); free_memory=False skips a 0.4 s gc.collect per test."""
    keras.mixed_precision.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
    yield
    keras.mixed_precision.set_dtype_policy("float32")

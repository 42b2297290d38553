"""Fixtures shared by the suite; helpers live in support.py."""

import os
import tempfile

import keras
import pytest

from support import GOLDEN


@pytest.fixture(scope="session")
def golden():
    """``../shared/golden``; the suite fails (not skips) without it."""
    if not (GOLDEN / "README.md").is_file():
        pytest.fail(f"golden Caffe data not found at {GOLDEN} (set KERAS_CAFFE_GOLDEN)")
    return GOLDEN


@pytest.fixture(scope="session", autouse=True)
def _outside_the_source_tree():
    """The suite runs from an empty folder: ``make test`` starts pytest in the
    repository root, where a child ``python -m keras_caffe`` or ``python -c``
    would import the source tree (its first ``sys.path`` entry is the current
    folder), which is not the installed package (``keras_caffe.importers``
    exists only as installed). Tests that need another folder chdir there
    themselves."""
    before = os.getcwd()
    with tempfile.TemporaryDirectory(prefix="keras-caffe-tests-") as folder:
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(before)


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts with float32 and fresh Keras names (layer/optimizer
    auto-names restart); free_memory=False skips a 0.4 s gc.collect per test."""
    keras.mixed_precision.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
    yield
    keras.mixed_precision.set_dtype_policy("float32")

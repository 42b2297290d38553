"""Fixtures shared by the suite, and the order its files run in; helpers
live in support.py."""

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import keras
import pytest
from keras_caffe.importers.atomic import atomic_output

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
    """Each test starts with float32, fresh Keras names (layer/optimizer
    auto-names restart) and the same random state (Python, NumPy,
    TensorFlow and Keras seeded with 0): what a test draws does not depend
    on which tests ran before it in its process, which under ``make test``'s
    pytest-xdist workers changes from run to run. free_memory=False skips a
    0.4 s gc.collect per test."""
    keras.mixed_precision.set_dtype_policy("float32")
    keras.backend.clear_session(free_memory=False)
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_dtype_policy("float32")


#: Seconds each test file took (``tests/...py``: seconds), recorded by
#: ``make test-durations``; only their order matters.
DURATIONS = Path(__file__).with_name("durations.json")


def _file_of(nodeid):
    return nodeid.split("::", 1)[0]


def _recorded():
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


def pytest_collection_modifyitems(items):
    """The longest files first, each whole and in its own order: ``make
    test``'s pytest-xdist workers take whole files in collection order
    (``--no-loadscope-reorder``), so a long file started last would leave
    one worker alone at the end. Lengths are those recorded in
    ``durations.json``; a file not there counts a second per test."""
    recorded = _recorded()
    tests = Counter(_file_of(item.nodeid) for item in items)
    seconds = {name: recorded.get(name, float(count)) for name, count in tests.items()}
    items.sort(key=lambda item: -seconds[_file_of(item.nodeid)])  # stable: files stay whole


class _DurationRecorder:
    """Sums each file's setup, call and teardown times over a run and merges
    them into ``durations.json`` (files that did not run keep their
    figures), written atomically (``atomic_output``)."""

    def __init__(self):
        self.seconds = {}

    def pytest_runtest_logreport(self, report):
        name = _file_of(report.nodeid)
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self):
        merged = _recorded()
        merged.update({name: round(value, 1) for name, value in self.seconds.items()})
        with atomic_output(DURATIONS) as tmp:
            Path(tmp).write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def pytest_configure(config):
    """KERAS_CAFFE_RECORD_DURATIONS=1 records the files' times; under
    pytest-xdist only the controller, which sees every worker's reports."""
    if os.environ.get("KERAS_CAFFE_RECORD_DURATIONS") == "1" and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(), "keras-caffe-durations")

"""Fixtures shared by the suite, and the order its files run in; helpers
live in the package tests/support."""

import json
import os
import tempfile
from collections import Counter
from pathlib import Path

import keras
import pytest
from keras_caffe.importers.formats.atomic import atomic_output

from support import GOLDEN
from support.tiers import BACKENDS, COMPAT, NOT_QUICK

#: The Keras backend this run uses (make test-backends sets KERAS_BACKEND).
BACKEND = keras.backend.backend()


@pytest.fixture(scope="session")
def golden():
    """``tests/golden``, BVLC Caffe's recordings in the repository; the suite
    fails (not skips) without it. The large forward nets: support.golden_net."""
    if not (GOLDEN / "README.md").is_file():
        pytest.fail(f"golden Caffe data not found at {GOLDEN} (tests/golden, part of the repository)")
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


def _mark_tiers(items):
    """The tiers' markers (tests/support/tiers.py): ``compat`` for tests marked
    ``kernels`` and files in COMPAT; ``quick`` for tests not marked ``slow``
    in files outside NOT_QUICK."""
    for item in items:
        name = _file_of(item.nodeid)
        if name in COMPAT or item.get_closest_marker("kernels"):
            item.add_marker(pytest.mark.compat)
        if name not in NOT_QUICK and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.quick)
        if name in BACKENDS:
            item.add_marker(pytest.mark.backends)


def pytest_ignore_collect(collection_path, config):
    """On JAX or PyTorch, only the files in BACKENDS (tests/support/tiers.py)
    are collected: the others test TensorFlow-only features, and may import
    TensorFlow, which those venvs lack."""
    if BACKEND == "tensorflow" or collection_path.suffix != ".py" \
            or not collection_path.name.startswith("test_"):
        return None
    name = collection_path.resolve().relative_to(Path(__file__).resolve().parent.parent)
    return None if name.as_posix() in BACKENDS else True


def _leave_out_tensorflow_only(items, config):
    """On JAX or PyTorch, tests marked ``tensorflow_only`` (XLA through
    ``tf.function``, oneDNN/Eigen kernels, tf.data) are deselected."""
    if BACKEND == "tensorflow":
        return
    left_out = [item for item in items if item.get_closest_marker("tensorflow_only")]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if not item.get_closest_marker("tensorflow_only")]


def pytest_report_header(config):
    return f"keras-caffe: Keras {keras.__version__} on the {BACKEND} backend"


def pytest_collection_modifyitems(config, items):
    """The tiers' markers, then the longest files first, each whole and in
    its own order: ``make test``'s pytest-xdist workers take whole files in
    collection order (``--no-loadscope-reorder``), so a long file started
    last would leave one worker alone at the end. Lengths are those recorded
    in ``durations.json``; a file not there counts a second per test."""
    _leave_out_tensorflow_only(items, config)
    _mark_tiers(items)
    recorded = _recorded()
    tests = Counter(_file_of(item.nodeid) for item in items)
    seconds = {name: recorded.get(name, float(count)) for name, count in tests.items()}
    items.sort(key=lambda item: -seconds[_file_of(item.nodeid)])  # stable: files stay whole


class _DurationRecorder:
    """Sums each file's setup, call and teardown times over a run and writes
    them to ``path`` atomically (``atomic_output``); with ``merge``, into
    what the file holds (files that did not run keep their figures)."""

    def __init__(self, path, merge):
        self.path, self.merge = path, merge
        self.seconds = {}

    def pytest_runtest_logreport(self, report):
        name = _file_of(report.nodeid)
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self):
        merged = _recorded() if self.merge else {}
        merged.update({name: round(value, 1) for name, value in self.seconds.items()})
        with atomic_output(self.path) as tmp:
            Path(tmp).write_text(json.dumps(dict(sorted(merged.items())), indent=1) + "\n")


def pytest_configure(config):
    """The files' times recorded, under
    pytest-xdist by the controller only, which sees every worker's reports:
    KERAS_CAFFE_RECORD_DURATIONS=1 merges them into durations.json (make
    test-durations), KERAS_CAFFE_DURATIONS_OUT=PATH writes this run's alone
    to PATH (.ci/run prints the slowest files from it)."""
    if hasattr(config, "workerinput"):
        return
    if os.environ.get("KERAS_CAFFE_RECORD_DURATIONS") == "1":
        config.pluginmanager.register(_DurationRecorder(DURATIONS, merge=True),
                                      "keras-caffe-durations")
    out = os.environ.get("KERAS_CAFFE_DURATIONS_OUT")
    if out:
        config.pluginmanager.register(_DurationRecorder(Path(out), merge=False),
                                      "keras-caffe-durations-out")

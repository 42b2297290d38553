"""The package's structure, from its own imports (tests/support/import_graph.py):
imports run one way, no cycles, no library code importing the command
line, every function-local import says why it is local, and a module's
basename appears twice only where its folder makes the difference plain."""

import collections

from support import REPO
from support.import_graph import LAYERS, figures, modules

FIGURES = figures(REPO)


def test_no_import_cycles_even_through_function_local_imports():
    assert FIGURES["cycles at load"] == []
    assert FIGURES["cycles, function-local imports included"] == []


def test_library_code_never_imports_the_command_line():
    assert FIGURES["library imports of the command line"] == []


def test_imports_run_from_the_command_line_down_to_the_foundation():
    """LAYERS, lowest first: Caffe's files import no Keras object, the
    importers no training loop, nothing below the public API imports it."""
    assert [name for name, _ in LAYERS] == [
        "foundation", "Caffe's files", "Keras objects", "nets, data, snapshots",
        "LMS, analysis", "training", "public API", "command line"]
    assert FIGURES["imports against the direction"] == []


def test_every_function_local_import_says_why_it_is_local():
    """Local only to keep start-up fast or TensorFlow (Horovod, ...) optional,
    with a comment saying which, on the import's line or the line above."""
    assert FIGURES["function-local project imports without a reason"] == []


#: Basenames that live in two folders on purpose: a Caffe layer type's unit
#: (``importers/layer_types/X.py``) and the Keras layer it builds
#: (``keras_caffe/layers/X.py``); a callback and what it watches; a base class
#: per folder; each subsystem's own progress lines; ``python -m`` entries.
PAIRED = {
    ("importers/layer_types", "keras_caffe/layers"),
    ("importers/layer_types", "keras_caffe"),
    ("callbacks", "keras_caffe/optimizers"),
    ("callbacks", "keras_caffe/distributed"),
    ("keras_caffe/horovod_build", "keras_caffe/training"),
    ("keras_caffe", "keras_caffe/cli"),
}


def test_a_basename_is_shared_only_by_paired_folders():
    folders = collections.defaultdict(set)
    for path in modules(REPO).values():
        relative = path.relative_to(REPO)
        if relative.name != "__init__.py":
            folders[relative.name].add(relative.parent.as_posix())
    unpaired = {}
    for name, places in folders.items():
        if len(places) < 2 or name == "base.py":
            continue
        pairs = {(a, b) for a in places for b in places if a < b}
        if not pairs <= PAIRED:
            unpaired[name] = sorted(places)
    assert unpaired == {}

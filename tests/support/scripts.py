"""The benchmarks/ scripts (not installed) as modules, for their tests."""

import importlib.util
import sys
from pathlib import Path

from support import REPO

#: Where the scripts live.
BENCHMARKS = REPO / "benchmarks"


def load_script(path):
    """The script at ``path`` (relative: in benchmarks/) as a fresh module,
    with benchmarks/ on ``sys.path`` as when the script runs (its own
    modules: ``arguments``, ``train_vs_caffe``)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    path = Path(path)
    if not path.is_absolute():
        path = BENCHMARKS / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""The benchmarks/ scripts (not installed) as modules, for their tests."""

import importlib.util
from pathlib import Path

from support import REPO

#: Where the scripts live.
BENCHMARKS = REPO / "benchmarks"


def load_script(path):
    """The script at ``path`` (relative: in benchmarks/) as a fresh module."""
    path = Path(path)
    if not path.is_absolute():
        path = BENCHMARKS / path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

"""The tiers' tables (tests/support/tiers.py) name files that exist, and conftest.py
turns them into the markers the Makefile selects on."""

from pathlib import Path

import pytest

from support.tiers import COMPAT, NOT_QUICK

TESTS = Path(__file__).resolve().parent


@pytest.mark.parametrize("table", [COMPAT, NOT_QUICK], ids=["COMPAT", "NOT_QUICK"])
def test_every_named_file_exists_and_has_a_reason(table):
    missing = [name for name in table if not (TESTS.parent / name).is_file()]
    assert missing == [], f"tests/support/tiers.py names files that are not there: {missing}"
    assert all(reason.strip() for reason in table.values())


def test_this_file_is_quick_and_not_compat(request):
    assert request.node.get_closest_marker("quick") is not None
    assert request.node.get_closest_marker("compat") is None


def test_markers_follow_the_tables(request):
    """Every collected test of a NOT_QUICK file lacks ``quick``; every test of
    a COMPAT file, and every ``kernels`` test, has ``compat``."""
    for item in request.session.items:
        name = item.nodeid.split("::", 1)[0]
        quick = item.get_closest_marker("quick") is not None
        compat = item.get_closest_marker("compat") is not None
        if name in NOT_QUICK or item.get_closest_marker("slow"):
            assert not quick, item.nodeid
        if name in COMPAT or item.get_closest_marker("kernels"):
            assert compat, item.nodeid


def _report_module():
    import importlib.util

    path = TESTS.parent / ".ci" / "report.py"
    spec = importlib.util.spec_from_file_location("ci_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_ci_report_adds_up_the_phases_and_ranks_the_files(tmp_path):
    """.ci/run's closing report: each phase, the total, then the ten slowest
    files over both suites, each with its suite."""
    import json

    (tmp_path / "phases").write_text("60 install .venv\n1200 make test\n30 make test-compat\n")
    (tmp_path / "test.json").write_text(json.dumps({f"tests/t{i}.py": float(i) for i in range(12)}))
    (tmp_path / "compat.json").write_text(json.dumps({"tests/t5.py": 100.0}))
    lines = _report_module().report(tmp_path).splitlines()
    assert lines[2] == "  install .venv         60 s    1.0 min"
    assert lines[4] == "  make test-compat      30 s    0.5 min"
    assert lines[5] == "  total               1290 s   21.5 min"
    slowest = lines[7:17]
    assert slowest[0] == "    100.0 s  compat    tests/t5.py"
    assert slowest[1] == "     11.0 s  test      tests/t11.py"
    assert slowest[-1] == "      3.0 s  test      tests/t3.py"
    assert lines[17:] == ["  compat: 100 s of test time in 1 files", "  test: 66 s of test time in 12 files"]


def test_ci_backend_files_are_backends_files():
    """.ci/run's share of the JAX and PyTorch runs (the Makefile's
    BACKEND_CI_FILES) names files that exist and are in BACKENDS."""
    import re

    from support.tiers import BACKENDS

    text = (TESTS.parent / "Makefile").read_text().replace("\\\n", " ")
    files = re.search(r"^BACKEND_CI_FILES = (.*)$", text, re.MULTILINE).group(1).split()
    assert len(files) >= 10
    assert [f for f in files if f not in BACKENDS or not (TESTS.parent / f).is_file()] == []

"""Where .ci/run's time went: each phase's seconds and the total, then the
ten slowest test files over both suites (from the per-file seconds that
conftest.py writes when KERAS_CAFFE_DURATIONS_OUT is set).

    python3 .ci/report.py FOLDER

FOLDER holds ``phases`` (lines ``SECONDS NAME``, in order) and one
``*.json`` of ``{test file: seconds}`` per suite, named after it. Standard
library only: it runs with whatever python3 the machine has, before and
after the venvs exist.
"""

import json
import sys
from pathlib import Path


def _minutes(seconds):
    return f"{seconds / 60:5.1f} min"


def report(folder):
    folder = Path(folder)
    lines = ["", "== where .ci/run's time went"]
    phases = []
    if (folder / "phases").is_file():
        for line in (folder / "phases").read_text().splitlines():
            seconds, name = line.split(" ", 1)
            phases.append((name, int(seconds)))
    width = max((len(name) for name, _ in phases), default=5)
    for name, seconds in phases:
        lines.append(f"  {name:<{width}}  {seconds:6d} s  {_minutes(seconds)}")
    total = sum(seconds for _, seconds in phases)
    lines.append(f"  {'total':<{width}}  {total:6d} s  {_minutes(total)}")
    files = []
    for path in sorted(folder.glob("*.json")):
        files += [(seconds, path.stem, name) for name, seconds in json.loads(path.read_text()).items()]
    if files:
        lines.append("== the ten slowest test files (seconds of test time, summed over "
                     "the file's tests; two pytest-xdist workers run at once)")
        for seconds, suite, name in sorted(files, reverse=True)[:10]:
            lines.append(f"  {seconds:7.1f} s  {suite:<8}  {name}")
        for suite in sorted({suite for _, suite, _ in files}):
            summed = sum(seconds for seconds, s, _ in files if s == suite)
            lines.append(f"  {suite}: {summed:.0f} s of test time in "
                         f"{sum(1 for _, s, _ in files if s == suite)} files")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(sys.argv[1]))

"""The examples run and print what they claim (they are the README's demo),
run in this process as ``python examples/demo.py`` runs them
(``cli_runner.run_script``), without a process's TensorFlow import."""

import re

from support.cli_runner import run_script
from support import GOLDEN, REPO


def test_demo(golden):
    proc = run_script(REPO / "examples" / "demo.py", "--golden", str(GOLDEN))
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = " ".join(proc.stdout.split())
    assert "trained 300 Caffe iterations (600 batches)" in out
    weights = float(re.search(r"weight difference ([0-9.e+-]+)", out).group(1))
    outputs = float(re.search(r"output difference ([0-9.e+-]+)", out).group(1))
    assert weights < 1e-5 and outputs < 1e-5

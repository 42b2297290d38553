"""Seeded mutational fuzzing of every file keras-caffe reads (issue 18).

Each target (``tests/support/fuzz_worker.py``) mutates real files: the golden Caffe
prototxts and caffemodels (binary and HDF5), the golden solver file,
solverstates in all three formats written by keras-caffe, records of the
golden LMDB, and command lines over mutated files. Its cases run in one
child process with a 4 GiB ``RLIMIT_DATA`` and a timeout, and this test
asserts per target: the child ends normally (no crash, no hang, never over
the memory limit), every case was accepted or refused with a
``KerasCaffeError`` (none escaped as another exception or a CLI traceback),
and the CLI left no partial or temporary file.
"""

import json
import os
import resource
import subprocess
import sys
import tempfile

import pytest

from support import GOLDEN, REPO

WORKER = REPO / "tests" / "support" / "fuzz_worker.py"
MEMORY_LIMIT = 4 * 2 ** 30
CASES = {"prototxt": 60, "caffemodel": 50, "caffemodel_h5": 40, "solver": 30,
         "solverstate_caffe": 30, "solverstate_hdf5": 30, "solverstate_keras": 30, "lmdb": 25,
         "cli": 30}


def _limit_memory():
    resource.setrlimit(resource.RLIMIT_DATA, (MEMORY_LIMIT, MEMORY_LIMIT))


@pytest.mark.parametrize("target", sorted(CASES))
def test_fuzz_target(target, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="",
               KERAS_CAFFE_GOLDEN=str(GOLDEN), PYTHONWARNINGS="ignore")
    count = CASES[target]
    try:
        run = subprocess.run([sys.executable, str(WORKER), target, "0", str(count),
                              str(tmp_path)], capture_output=True, text=True, timeout=600,
                             env=env, cwd=tempfile.gettempdir(), preexec_fn=_limit_memory)
    except subprocess.TimeoutExpired:
        seed = (tmp_path / f"{target}.progress").read_text()
        pytest.fail(f"{target}: hung at seed {seed}")
    progress = tmp_path / f"{target}.progress"
    where = f" at seed {progress.read_text()}" if progress.exists() else ""
    assert run.returncode == 0, (f"{target}: the worker died{where} (exit {run.returncode}):\n"
                                 f"{run.stderr[-3000:]}")
    cases = [json.loads(line) for line in (tmp_path / f"{target}.jsonl").read_text().splitlines()]
    assert [c["seed"] for c in cases] == list(range(count))
    escaped = [f"seed {c['seed']}: {c['detail']}" for c in cases if c["outcome"] == "escaped"]
    assert not escaped, f"{target}: {len(escaped)} of {count} escaped:\n" + "\n".join(escaped)
    outcomes = {c["outcome"] for c in cases}
    assert outcomes <= {"ok", "refused"}
    assert "refused" in outcomes  # the mutations do reach the checks
    peak_kib = json.loads((tmp_path / f"{target}.done").read_text())["peak_kib"]
    assert peak_kib * 1024 < MEMORY_LIMIT
    counts = {o: sum(c["outcome"] == o for c in cases) for o in ("ok", "refused")}
    print(f"fuzz {target}: {count} cases, {counts['ok']} ok, {counts['refused']} refused, "
          f"0 escaped, peak {peak_kib / 1024:.0f} MiB")

"""benchmarks/backend_optimizers.py on the backend this run uses (TensorFlow,
JAX or PyTorch): a whole run at tiny sizes prints a row per solver and writes
positive finite times and ratios; --only, its argument checks, a failing
solver's row, and its arithmetic and machine line."""

import json
import math
from pathlib import Path

import keras
import pytest

from support.scripts import load_script

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "backend_optimizers.py"

#: keras-caffe's optimizer -> Keras's, as each row names them.
ROWS = {"SGD": "SGD momentum 0.9", "Nesterov": "SGD momentum 0.9 nesterov",
        "AdaGrad": "Adagrad", "RMSProp": "RMSprop", "AdaDelta": "Adadelta", "Adam": "Adam",
        "YellowFin": "SGD momentum 0.9"}

#: The smallest run: 2 steps a window, 2 windows each, a 12-8-3 MLP.
TINY = ["--steps", "2", "--repeats", "2", "--batch", "4", "--widths", "12,8,3"]


@pytest.fixture(scope="module")
def bench():
    """The script as a module (benchmarks/ is not installed)."""
    return load_script(SCRIPT)


def table_rows(out):
    """The table's body rows as lists of cells (rich's box characters)."""
    return [[cell.strip() for cell in line.strip("│").split("│")]
            for line in out.splitlines() if line.startswith("│")]


def test_tiny_run_measures_every_solver(bench, capsys, tmp_path):
    """Every keras-caffe solver trains against its Keras counterpart through
    model.fit on this backend: each row holds positive times and ratios, the
    JSON file the same numbers and every window."""
    path = tmp_path / "out.json"
    assert bench.main(TINY + ["--json", str(path)]) == 0
    out = capsys.readouterr().out
    backend = keras.backend.backend()
    rows = table_rows(out)
    assert [(r[0], r[1]) for r in rows] == list(ROWS.items())
    for cells in rows:
        assert all(float(x) > 0 for x in cells[2:]), cells
    assert f"; backend {backend}" in out and "load average at start" in out
    assert "load average at end" in out
    assert "MLP 12-8-3 (0.00M parameters), batch 4, 2 steps a window x 2 windows each" in out

    written = json.loads(path.read_text())
    assert written["settings"] == {"steps": 2, "repeats": 2, "batch": 4, "widths": [12, 8, 3],
                                   "parameters": 12 * 8 + 8 + 8 * 3 + 3}
    assert written["machine"]["backend"] == backend
    assert (written["machine"]["kernels"] in ("oneDNN", "Eigen")) == (backend == "tensorflow")
    assert written["machine"]["versions"]["keras"] == keras.__version__
    assert [(r["optimizer"], r["keras"]) for r in written["rows"]] == list(ROWS.items())
    for r in written["rows"]:
        for key in ("keras_caffe_ms", "keras_ms", "ratio", "paired_ratio"):
            assert math.isfinite(r[key]) and r[key] > 0, (r["optimizer"], key, r[key])
        assert r["ratio"] == pytest.approx(r["keras_caffe_ms"] / r["keras_ms"])
        assert len(r["windows_ms"]["keras_caffe"]) == len(r["windows_ms"]["keras"]) == 2


def test_only_picks_rows_by_name(bench, capsys):
    """--only matches the keras-caffe optimizer's name, in any case."""
    assert bench.main(TINY + ["--only", "adam"]) == 0
    assert [r[:2] for r in table_rows(capsys.readouterr().out)] == [["Adam", "Adam"]]


def test_a_failing_solver_is_a_failed_row(bench, capsys, monkeypatch):
    """A solver that raises leaves its row 'failed' with the error, the run
    goes on, and the exit status is 1."""
    import keras_caffe

    monkeypatch.setattr(bench, "PAIRS", [
        ("bad SGD", "SGD", lambda: keras_caffe.SGD(0.01, momentum=2.0),
         lambda: keras.optimizers.SGD(0.01))] + bench.PAIRS[:1])
    assert bench.main(TINY) == 1
    out = capsys.readouterr().out
    rows = table_rows(out)
    assert rows[0] == ["bad SGD", "SGD", "failed", "-", "-", "-"]
    assert rows[1][0] == "SGD" and float(rows[1][4]) > 0
    assert "bad SGD failed: ArgumentError: SGD: `momentum` must be in [0, 1], got 2" in out


@pytest.mark.parametrize("argv, message", [
    (["--widths", "784"], "--widths: expected at least two positive integers separated by "
                          "commas (input, hidden..., classes), got '784'"),
    (["--widths", "784,0,10"], "got '784,0,10'"),
    (["--steps", "0"], "--steps: expected a positive integer, got '0'"),
    (["--repeats", "x"], "--repeats: expected a positive integer, got 'x'"),
])
def test_bad_arguments_are_usage_errors(bench, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_paired_median_pairs_adjacent_windows(bench):
    """Window i of one with window i of the other: ratios 2, 2, 3 -> 2."""
    assert bench.paired_median([2.0, 4.0, 6.0], [1.0, 2.0, 2.0]) == 2.0


def test_cpu_flags_and_machine_line(bench, tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 9R14\n"
                       "flags\t\t: fpu sse2 avx avx2 fma avx512f avx512bw sha_ni\n")
    assert bench.cpu_flags(cpuinfo) == ["avx", "avx2", "avx512bw", "avx512f", "fma"]
    assert bench.cpu_flags(tmp_path / "missing") == []
    info = {"cpu": "AMD EPYC 9R14", "logical_cpus": 2, "flags": ["avx2"], "backend": "jax",
            "kernels": None, "versions": {"keras": "3.15.1", "jax": "0.10.2"},
            "load_start": [0.5, 0.25, 1.0]}
    assert bench.machine_line(info) == (
        "AMD EPYC 9R14, 2 logical CPUs, flags avx2; backend jax; keras 3.15.1, jax 0.10.2; "
        "load average at start 0.50 0.25 1.00")
    info.update(backend="tensorflow", kernels="Eigen", flags=[])
    assert "flags none listed; backend tensorflow (Eigen CPU kernels);" in bench.machine_line(info)

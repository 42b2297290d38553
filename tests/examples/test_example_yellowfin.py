"""examples/yellowfin_cifar.py: a short run (ResNet-8 of width 4, 6 steps of 4
synthetic images, no XLA) writes the PNG with the per-step loss, lr and mu
(or, without matplotlib or with --csv, the CSV) and prints a summary that
matches them. The default run runs the example from the repository checkout
as a script, as test_examples.py runs the demo; the --csv run and the run
without matplotlib call its main() in the test's process (the same code after
the imports, without a second and third Python starting TensorFlow)."""

import csv
import importlib.util
import json
import math
import re
import struct
import subprocess
import sys
import zlib

import pytest

from support import REPO

SCRIPT = REPO / "examples" / "yellowfin_cifar.py"
STEPS = 6
SMALL = ["--steps", str(STEPS), "--batch", "4", "--depth", "8", "--width", "4",
         "--samples", "16", "--no-xla"]


def has_matplotlib():
    return importlib.util.find_spec("matplotlib") is not None


def run_example(tmp_path, *flags):
    proc = subprocess.run([sys.executable, str(SCRIPT), *SMALL, "--out", str(tmp_path / "yf.png"),
                           *flags], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return " ".join(proc.stdout.split())


def png_chunks(path):
    """(width, height) and the text chunks (tEXt, zTXt, iTXt) of a PNG file."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, size, texts = 8, None, {}
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length:][:4])[0]
        pos += 12 + length
        if kind == b"IHDR":
            size = struct.unpack(">II", body[:8])
        elif kind == b"tEXt":
            key, text = body.split(b"\0", 1)
            texts[key.decode("latin-1")] = text.decode("latin-1")
        elif kind == b"zTXt":
            key, text = body.split(b"\0", 1)
            texts[key.decode("latin-1")] = zlib.decompress(text[1:]).decode("latin-1")
        elif kind == b"iTXt":
            key, rest = body.split(b"\0", 1)
            compressed, rest = rest[0], rest[2:]
            _, _, text = rest.split(b"\0", 2)
            texts[key.decode("latin-1")] = (zlib.decompress(text) if compressed else text).decode()
        if kind == b"IEND":
            break
    return size, texts


def read_csv(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["step", "loss", "yf_lr", "yf_mu"]
    return {key: [float(row[key]) for row in rows] for key in rows[0]}


def check_series(series, out):
    """The per-step series are YellowFin's, and the summary printed them."""
    assert series["step"] == list(range(1, STEPS + 1))
    assert all(math.isfinite(v) and 0.0 < v < 10.0 for v in series["loss"])
    # The first update uses learning_rate=1e-4 and momentum=0; the tuner takes over after.
    assert series["yf_lr"][0] == pytest.approx(1e-4) and series["yf_mu"][0] == 0.0
    assert all(math.isfinite(v) and v > 0 for v in series["yf_lr"])
    assert all(0.0 < v < 1.0 for v in series["yf_mu"][1:])
    assert len(set(series["yf_lr"])) == STEPS  # tuned at every step
    match = re.search(r"YellowFin at the end: lr (\S+), mu (\S+) ", out)
    assert float(match.group(1)) == pytest.approx(series["yf_lr"][-1], rel=1e-3)
    assert float(match.group(2)) == pytest.approx(series["yf_mu"][-1], rel=1e-3, abs=1e-4)
    first = float(re.search(r"loss ([0-9.]+) \(first 1 steps\)", out).group(1))
    last = float(re.search(r"-> ([0-9.]+) \(last 1\)", out).group(1))
    assert first == pytest.approx(series["loss"][0], abs=1e-4)
    assert last == pytest.approx(series["loss"][-1], abs=1e-4)
    assert "synthetic CIFAR-shaped data (16 seeded images" in out
    assert "ResNet-8 (width 4" in out and f"trained {STEPS} steps" in out


def test_default_run_writes_the_plot(tmp_path):
    """The PNG (three panels, the series in its text chunk) where matplotlib
    is installed; the CSV and the pip hint where it is not."""
    out = run_example(tmp_path)
    if has_matplotlib():
        (size, texts) = png_chunks(tmp_path / "yf.png")
        assert size == (700, 800)
        assert f"wrote {tmp_path / 'yf.png'} (loss, lr, mu over steps)" in out
        check_series(json.loads(texts["yellowfin"]), out)
        assert not (tmp_path / "yf.csv").exists()
    else:
        check_series(read_csv(tmp_path / "yf.csv"), out)
        assert "`pip install 'keras-caffe[plots]'` gives the PNG" in out


def run_in_process(tmp_path, capsys, *flags):
    """The example's main() here, as run_example runs it as a script."""
    capsys.readouterr()
    assert load_example().main([*SMALL, "--out", str(tmp_path / "yf.png"), *flags]) == 0
    return " ".join(capsys.readouterr().out.split())


def test_csv_flag_writes_the_csv(tmp_path, capsys):
    out = run_in_process(tmp_path, capsys, "--csv")
    assert f"wrote {tmp_path / 'yf.csv'} (step, loss, yf_lr, yf_mu)" in out
    assert "pip install" not in out and not (tmp_path / "yf.png").exists()
    check_series(read_csv(tmp_path / "yf.csv"), out)


def test_without_matplotlib_falls_back_to_csv(tmp_path, capsys, monkeypatch):
    """A matplotlib that fails to import (None in sys.modules: ``import
    matplotlib`` raises ImportError) -> CSV + hint."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError):
        import matplotlib  # noqa: F401
    out = run_in_process(tmp_path, capsys)
    assert "matplotlib is not installed: `pip install 'keras-caffe[plots]'` gives the PNG" in out
    assert not (tmp_path / "yf.png").exists()
    check_series(read_csv(tmp_path / "yf.csv"), out)


def load_example():
    spec = importlib.util.spec_from_file_location("yellowfin_cifar_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_step_losses_from_running_means():
    """fit logs the running mean m_k; StepRecorder recovers each batch's loss."""
    example = load_example()
    losses = [2.5, 1.0, 3.25, 0.5, 2.0]
    recorder = example.StepRecorder()
    recorder.on_epoch_begin(0)
    for k, loss in enumerate(losses):
        mean = sum(losses[:k + 1]) / (k + 1)
        recorder.on_train_batch_end(k, {"loss": mean, "yf_lr": 0.1 * (k + 1), "yf_mu": 0.5})
    assert recorder.series["loss"] == pytest.approx(losses, abs=1e-12)
    assert recorder.series["step"] == [1, 2, 3, 4, 5]
    text = example.csv_bytes(recorder.series).decode()
    assert text.splitlines()[:2] == ["step,loss,yf_lr,yf_mu", "1,2.5,0.1,0.5"]


@pytest.mark.parametrize("flags, message", [
    (["--depth", "10"], "--depth must be 6n+2 with n >= 1 (8, 14, 20, ...), got 10"),
    (["--steps", "0"], "--steps must be at least 1, got 0"),
    (["--samples", "8", "--batch", "16"], "--samples (8) must be at least --batch (16)"),
    (["--out", "/nonexistent/dir/yf.png"], "--out /nonexistent/dir/yf.png: the folder "
                                            "/nonexistent/dir does not exist"),
])
def test_bad_flags(flags, message, capsys):
    example = load_example()
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(flags)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_cifar_folder(tmp_path):
    """--data must hold CIFAR-10's python batches; a pickle of anything else
    is refused before any of its code runs."""
    import pickle

    example = load_example()
    with pytest.raises(example.KerasCaffeError,
                       match=rf"{re.escape(str(tmp_path / 'data_batch_1'))}: not a CIFAR-10 "
                             r"python batch \(FileNotFoundError"):
        example.load_cifar(tmp_path, 100)
    (tmp_path / "data_batch_1").write_bytes(pickle.dumps(print))
    with pytest.raises(example.KerasCaffeError, match=r"refused class builtins\.print"):
        example.load_cifar(tmp_path, 100)


def test_cifar_batches_are_read(tmp_path):
    """A python-version batch (bytes keys, uint8 rows in CHW order) is read
    into standardised NHWC images."""
    import pickle

    import numpy as np

    example = load_example()
    rng = np.random.RandomState(0)
    rows = rng.randint(0, 256, (5, 3072)).astype(np.uint8)
    for i in range(1, 6):
        (tmp_path / f"data_batch_{i}").write_bytes(pickle.dumps(
            {b"data": rows, b"labels": [0, 1, 2, 3, 9], b"batch_label": b"x"}))
    x, y = example.load_cifar(tmp_path, 7)
    assert x.shape == (7, 32, 32, 3) and list(y) == [0, 1, 2, 3, 9, 0, 1]
    raw = rows.reshape(5, 3, 32, 32).transpose(0, 2, 3, 1).astype(np.float64)
    raw = np.concatenate([raw, raw[:2]])
    expected = (raw - raw.mean(axis=(0, 1, 2))) / raw.std(axis=(0, 1, 2))
    np.testing.assert_allclose(x, expected, rtol=1e-4, atol=1e-4)

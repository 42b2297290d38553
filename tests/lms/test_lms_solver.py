"""LMS through the Solver and ``keras-caffe train --lms N --lms-frac F``."""

import shutil

import numpy as np
import pytest

import keras_caffe
from keras_caffe import cli
from support import GOLDEN
from training.test_solver import blobs_of, final_losses, run_case

pytestmark = pytest.mark.kernels  # also run with the other CPU kernels (make test)


def test_solver_with_lms_prints_caffes_numbers(golden, tmp_path, monkeypatch):
    """The golden SGD case, every activation recomputed: the log and the final
    weights are those without LMS (which are Caffe's)."""
    plain, plain_log, _ = run_case("sgd", tmp_path / "plain", monkeypatch)
    lms, lms_log, _ = run_case("sgd", tmp_path / "lms", monkeypatch,
                               lms=keras_caffe.LMS(threshold_kb=0))
    a, b = final_losses(plain_log), final_losses(lms_log)
    assert sorted(a) == sorted(b) == list(range(31))
    np.testing.assert_allclose([b[i] for i in a], [a[i] for i in a], rtol=1e-6)
    for name, blob in blobs_of(plain).items():
        np.testing.assert_allclose(blobs_of(lms)[name], blob, rtol=1e-6, atol=1e-9)
    assert getattr(lms.net, "caffe_lms", None) is not None or lms_log


def test_solver_picks_up_an_enclosing_lms_block(golden, tmp_path, monkeypatch, caplog):
    caplog.set_level("INFO", logger="keras_caffe.lms")
    with keras_caffe.LMS(threshold_kb=0):
        run_case("sgd", tmp_path, monkeypatch)
    assert any("LMS" in r.getMessage() for r in caplog.records)


def test_solver_refuses_a_non_lms(golden, tmp_path, monkeypatch):
    with pytest.raises(keras_caffe.KerasCaffeError,
                       match=r"^Solver: lms must be a keras_caffe.LMS or None, got 1000$"):
        run_case("sgd", tmp_path, monkeypatch, lms=1000)


@pytest.mark.parametrize("parts", [[], ["--lms-parts"]])
def test_cli_train_with_lms(golden, tmp_path, monkeypatch, capsys, parts):
    work = tmp_path / "sgd"
    shutil.copytree(GOLDEN / "solvers" / "sgd", work, ignore=shutil.ignore_patterns("bin_run"))
    monkeypatch.chdir(work)
    planned = []
    plan = keras_caffe.lms.policy.plan
    monkeypatch.setattr("keras_caffe.lms.policy.plan",
                        lambda *args, parts: planned.append(parts) or plan(*args, parts=parts))
    assert cli.main(["train", "--solver", "solver.prototxt", "--weights", "init.caffemodel",
                     "--log", "caffe", "--lms", "0", "--lms-frac", "0", *parts]) == 0
    err = capsys.readouterr().err
    assert "keras_caffe.lms: LMS" in err
    # --lms-parts reaches the plan (this net has no convolution to run in parts)
    assert planned and set(planned) == {bool(parts)}
    caffe_log = (golden / "solvers" / "sgd" / "caffe_binary.log").read_text()
    ours, theirs = final_losses(err), final_losses(caffe_log)
    np.testing.assert_allclose([ours[i] for i in range(31)], [theirs[i] for i in range(31)],
                               rtol=3e-5, atol=1e-6)


@pytest.mark.parametrize("argv, message", [
    (["--lms", "-1"], "keras-caffe: error: --lms must be in [0, inf), got -1\n"),
    (["--lms", "inf"], "keras-caffe: error: --lms must be in [0, inf), got inf\n"),
    (["--lms", "10", "--lms-frac", "1.5"], "keras-caffe: error: --lms-frac must be in [0, 1], "
                                            "got 1.5\n"),
    (["--lms-frac", "0.5"], "keras-caffe: error: --lms-frac needs --lms N (the threshold in KB)\n"),
    (["--lms-parts"], "keras-caffe: error: --lms-parts needs --lms N (the threshold in KB)\n"),
])
def test_cli_refuses_bad_lms_flags(tmp_path, capsys, argv, message):
    """Usage errors, found before the solver file is looked for (and before TensorFlow)."""
    assert cli.main(["train", "--solver", str(tmp_path / "none.prototxt"), *argv]) == 2
    assert capsys.readouterr().err == message

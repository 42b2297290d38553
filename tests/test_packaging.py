"""The wheel: importers/ installs as keras_caffe.importers, never top-level,
and the suite itself runs against the installed package."""

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import keras_caffe
from support import REPO

IGNORE = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
    ".hypothesis",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """A wheel built from a copy of the source tree (offline: no isolation)."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO, src, ignore=IGNORE)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(tmp / "dist"), str(src)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    (path,) = (tmp / "dist").glob("keras_caffe-*.whl")
    return path


def test_wheel_layout(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    packages = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert packages == {"keras_caffe"}
    for required in ("keras_caffe/importers/__init__.py",
                     "keras_caffe/importers/formats/solver_file.py",
                     "keras_caffe/importers/net/importing.py",
                     "keras_caffe/importers/data/pipelines.py",
                     "keras_caffe/importers/snapshots/files.py",
                     "keras_caffe/training/solver.py", "keras_caffe/lms/__init__.py",
                     "keras_caffe/proto/caffe.proto", "keras_caffe/proto/caffe_pb2.py",
                     "keras_caffe/optimizers/sgd.py", "keras_caffe/schedules.py",
                     "keras_caffe/callbacks/__init__.py", "keras_caffe/callbacks/yellowfin.py",
                     "keras_caffe/importers/layer_types/convolution.py",
                     "keras_caffe/analysis/__init__.py"):
        assert required in names


def test_fresh_venv_imports_keras_caffe_importers(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
         "--no-deps", "--no-index", str(wheel)],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    # The dependencies (TensorFlow, Keras, protobuf) come from this
    # environment, appended after the fresh venv's own site-packages.
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    code = (
        "import keras_caffe, keras_caffe.importers, keras_caffe.callbacks, keras_caffe.proto.caffe_pb2 as pb\n"
        "print(keras_caffe.__file__)\n"
        "print(keras_caffe.importers.__file__)\n"
        "opt = keras_caffe.optimizer_from_solver('base_lr: 0.1 lr_policy: \"fixed\" type: \"Adam\"')\n"
        "print(type(opt).__name__)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    proc = subprocess.run([str(python), "-c", code], cwd=outside, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    package, importers, solver = proc.stdout.split()
    assert package == f"{site}/keras_caffe/__init__.py"
    assert importers == f"{site}/keras_caffe/importers/__init__.py"
    assert solver == "Adam"

    for top_level in ("importers", "callbacks"):
        proc = subprocess.run([str(python), "-c", f"import {top_level}"], cwd=outside, env=env,
                              capture_output=True, text=True)
        assert proc.returncode == 1
        assert f"ModuleNotFoundError: No module named '{top_level}'" in proc.stderr


def test_suite_imports_the_installed_package():
    """`make test` installs the package and sets KERAS_CAFFE_EXPECT_INSTALLED:
    then every test must have exercised site-packages, not the source tree."""
    if os.environ.get("KERAS_CAFFE_EXPECT_INSTALLED") != "1":
        pytest.skip("run through `make test` to check the installed package")
    location = Path(keras_caffe.__file__).resolve()
    assert location != REPO / "keras_caffe" / "__init__.py"
    assert "site-packages" in location.parts, location


@pytest.mark.parametrize("code, printed", [
    # the README's snippets: `import keras_caffe` is enough
    ("import keras_caffe; print(keras_caffe.callbacks.CaffeSnapshot.__name__)", "CaffeSnapshot"),
    ("import keras_caffe; print(keras_caffe.importers.caffe_layers.__name__)", "caffe_layers"),
    ("import keras_caffe; print(callable(keras_caffe.distributed.DistributedOptimizer))", "True"),
    ("import keras_caffe; print('callbacks' in dir(keras_caffe))", "True"),
])
def test_submodules_are_reachable_from_the_package(code, printed, tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == printed


def test_a_missing_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'keras_caffe' has no attribute 'nope'$"):
        keras_caffe.nope  # noqa: B018

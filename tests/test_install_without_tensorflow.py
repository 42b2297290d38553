"""Installing keras-caffe for JAX or PyTorch, with no TensorFlow anywhere (issue 35).

A real venv and real pip, offline (``--no-index``), as tests/test_install.py
builds them: the wheel is test_packaging's; the venv starts bare
(``--without-pip``, no system site packages) and sees, through a ``.pth``
file, exactly the distributions that ``keras-caffe[BACKEND]`` requires,
transitively, as installed in this environment (``.venv-jax`` or
``.venv-torch``, whose backend this run uses): Keras, the backend, protobuf,
NumPy, h5py, rich and their own requirements, each linked by the files its
RECORD lists, and nothing else (not this environment's pytest, scipy when
not required, ...). Then:

1. ``pip install 'keras-caffe[BACKEND]'`` resolves offline and installs
   keras-caffe alone, and ``pip check`` finds every requirement met: no
   TensorFlow distribution is needed, and none is there (``keras-caffe[tensorflow]``
   finds none);
2. ``keras-caffe --version`` names the backend;
3. ``KERAS_BACKEND=BACKEND python examples/any_backend.py`` (the README's
   solver and import examples) runs there and reports TensorFlow not imported
   after ``import keras_caffe``, after ``import_model`` and at the end, and
   ``import keras_caffe`` comes from the venv without putting ``tensorflow``
   in ``sys.modules``.

On TensorFlow's backend there is nothing to install without TensorFlow:
tests/test_install.py covers that install, and this file is skipped (``make
test-backends`` runs it in .venv-jax and .venv-torch).
"""

import email.parser
import importlib.metadata
import json
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import keras
import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import keras_caffe
from keras_caffe._require import DISTRIBUTIONS
from support import GOLDEN, REPO
from support.venvs import clean_env, make_venv, pip
from test_packaging import wheel  # noqa: F401  (the fixture: the wheel, built once per module)

BACKEND = keras.backend.backend()
#: The distribution of each backend's module (setup.cfg's extras of the same names).
BACKEND_DISTRIBUTION = {"jax": "jax", "torch": "torch"}
pytestmark = pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="installs keras-caffe beside JAX or PyTorch without TensorFlow (make test-backends); "
           "on TensorFlow tests/test_install.py checks the install")

#: Python that reports ``import keras_caffe``'s file and whether TensorFlow is imported.
WHERE_FROM = ("import sys, keras_caffe, keras\n"
              "print(keras_caffe.__file__, keras.backend.backend(), 'tensorflow' in sys.modules)\n")

def _requires(wheel_path, extra):
    """The wheel's requirements with ``extra`` asked for."""
    with zipfile.ZipFile(wheel_path) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        text = archive.read(name).decode()
    requirements = [Requirement(r) for r in
                    email.parser.Parser().parsestr(text).get_all("Requires-Dist")]
    return [r for r in requirements if r.marker is None or r.marker.evaluate({"extra": extra})]


def requirement_closure(requirements, path):
    """{canonical name: Distribution} of the distributions installed in
    ``path`` (a site-packages) that ``requirements`` need, transitively, with
    the extras asked for; a requirement not installed there, or in another
    version, fails the test (it cannot be installed offline)."""
    installed = {canonicalize_name(d.metadata["Name"]): d
                 for d in importlib.metadata.distributions(path=[str(path)])}
    found, seen, todo = {}, set(), list(requirements)
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        key = (name, frozenset(requirement.extras))
        if key in seen:
            continue
        seen.add(key)
        dist = installed.get(name)
        if dist is None or not requirement.specifier.contains(dist.version, prereleases=True):
            pytest.fail(f"{requirement} is needed and {path} has "
                        f"{dist.version if dist else 'none'}: it cannot be installed offline")
        found[name] = dist
        for text in dist.requires or []:
            needed = Requirement(text)
            if needed.marker is None or any(needed.marker.evaluate({"extra": extra})
                                            for extra in ("", *requirement.extras)):
                todo.append(needed)
    return found


def link_distributions(dists, path, folder):
    """``folder`` holding a symbolic link to each top-level file or folder
    that ``dists`` (installed in ``path``) list in their RECORD, their
    dist-info folders among them: those distributions, and only they."""
    folder.mkdir()
    tops = set()
    for dist in dists.values():
        for file in dist.files:
            top = file.parts[0]
            if top not in ("..", "__pycache__") and not top.endswith(".pth"):
                tops.add(top)
    for top in sorted(tops):
        (folder / top).symlink_to(Path(path) / top)
    return sorted(tops)
@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):  # noqa: F811
    """A bare venv, the closure of ``keras-caffe[BACKEND]``'s requirements
    linked in, and keras-caffe pip-installed offline: its python, its
    site-packages, pip's report of what it installed, the linked
    distributions' names, and an empty folder to run in."""
    tmp = tmp_path_factory.mktemp("without_tensorflow")
    purelib = Path(sysconfig.get_paths()["purelib"])
    dists = requirement_closure(_requires(wheel, BACKEND), purelib)
    link_distributions(dists, purelib, tmp / "deps")
    python, site = make_venv(tmp / "venv")
    (site / "deps.pth").write_text(f"{tmp / 'deps'}\n")
    report = tmp / "report.json"
    pip(python, "install", "--quiet", "--no-index", "--find-links", str(wheel.parent),
        "--report", str(report), f"keras-caffe[{BACKEND}]")
    outside = tmp / "elsewhere"
    outside.mkdir()
    return python, site, json.loads(report.read_text()), set(dists), outside


def test_pip_installs_keras_caffe_alone_and_no_tensorflow_is_needed(installed, wheel):  # noqa: F811
    """Offline, the extra resolves against Keras, the backend and keras-caffe's
    own requirements: pip installs keras-caffe alone, every requirement is
    met (``pip check``), and no TensorFlow distribution is there."""
    python, _, report, linked, _ = installed
    assert [(item["metadata"]["name"], item["metadata"]["version"])
            for item in report["install"]] == [("keras-caffe", wheel.name.split("-")[1])]
    assert {"keras", BACKEND_DISTRIBUTION[BACKEND], "protobuf", "numpy", "h5py", "rich"} <= linked
    assert not linked & set(DISTRIBUTIONS)
    # and pip finds no TensorFlow for this venv: the extra that asks for one fails, offline
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                           "--dry-run", "--no-index", "--find-links", str(wheel.parent),
                           "keras-caffe[tensorflow]"], capture_output=True, text=True, env=clean_env())
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1] == ("ERROR: No matching distribution found for "
                                            "tensorflow>=2.16 (from keras-caffe[tensorflow])")
    check = pip(python, "check")
    assert check.stdout.strip() == "No broken requirements found."
    listed = json.loads(pip(python, "list", "--format", "json").stdout)
    names = {canonicalize_name(item["name"]) for item in listed}
    assert names == linked | {"keras-caffe"}


def test_import_and_version_without_tensorflow(installed):
    """``import keras_caffe`` is the venv's and imports no TensorFlow;
    ``keras-caffe --version`` names the backend and its version."""
    python, site, _, _, outside = installed
    env = clean_env(KERAS_BACKEND=BACKEND)
    proc = subprocess.run([str(python), "-c", WHERE_FROM], cwd=outside, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [f"{site}/keras_caffe/__init__.py", BACKEND, "False"]
    proc = subprocess.run([str(python), "-c", "import tensorflow"], cwd=outside, env=env,
                          capture_output=True, text=True)
    assert proc.stderr.splitlines()[-1] == "ModuleNotFoundError: No module named 'tensorflow'"
    proc = subprocess.run([str(python.parent / "keras-caffe"), "--version"], cwd=outside,
                          env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    version = importlib.metadata.version(BACKEND_DISTRIBUTION[BACKEND])
    assert proc.stdout.strip() == (f"keras-caffe {keras_caffe.__version__} "
                                   f"(Keras {keras.__version__}, backend {BACKEND} {version})")


def test_the_any_backend_example_runs_without_tensorflow(installed):
    """examples/any_backend.py, the README's solver and import examples, runs
    in the venv on the backend and never imports TensorFlow."""
    python, _, _, _, outside = installed
    proc = subprocess.run([str(python), str(REPO / "examples" / "any_backend.py"),
                           "--golden", str(GOLDEN), "--out", str(outside)],
                          cwd=outside, env=clean_env(KERAS_BACKEND=BACKEND), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert lines[0] == (f"keras-caffe {keras_caffe.__version__} on Keras {keras.__version__}, "
                        f"backend {BACKEND}")
    assert re.fullmatch(r"LeNet imported: output \(2, 10\), largest \|Keras - BVLC Caffe\| "
                        r"difference [\d.e+-]+", lines[4]), lines[4]
    assert lines[-1] == ("TensorFlow imported: after import keras_caffe no, "
                         "after import_model no, at the end no")

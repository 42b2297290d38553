"""Installing keras-caffe never installs a second TensorFlow (issue 13).

Real venvs and real pip, offline (``--no-index``): the wheel is
test_packaging's, the dependencies come from this environment through a
``.pth`` file.

1. TensorFlow already installed (``tensorflow``, or ``tensorflow-cpu``):
   ``pip install keras-caffe`` installs keras-caffe and nothing else.
2. A bare venv: the README's one install line and the Makefile's ``.deps``
   recipe use the same extra, which requires TensorFlow >= 2.16 (``make
   test`` on a fresh machine installs through it).
3. No TensorFlow, or one older than 2.16: ``import keras_caffe`` and the
   ``keras-caffe`` command end with one line naming what to install.
"""

import email.parser
import importlib.metadata
import json
import re
import subprocess
import sysconfig
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from keras_caffe._require import DISTRIBUTIONS
from support import REPO
from support.venvs import clean_env, make_venv, pip
from test_packaging import wheel  # noqa: F401  (the fixture: the wheel, built once per module)

#: Distributions that install the ``tensorflow`` module (canonical names): the
#: package's own list, which its import check reads.
TF_DISTS = set(DISTRIBUTIONS)
INSTALL_LINE = "pip install 'keras-caffe[tensorflow]'"
ERROR = "keras_caffe.errors.TensorFlowRequirementError"
MISSING = f"keras-caffe needs TensorFlow >= 2.16 and none is installed: {INSTALL_LINE}"
TOO_OLD = ("keras-caffe needs TensorFlow >= 2.16 but tensorflow 2.15.0 is installed: "
           "pip install --upgrade 'tensorflow>=2.16'")

LIST_DISTS = (
    "import importlib.metadata as m, json\n"
    "print(json.dumps(sorted({d.metadata['Name'].lower(): d.version"
    " for d in m.distributions()}.items())))\n"
)


def _run(python, *args, cwd):
    return subprocess.run([str(python), *args], cwd=cwd, env=clean_env(),
                          capture_output=True, text=True)


def _dists(python, cwd):
    proc = _run(python, "-c", LIST_DISTS, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return {name: version for name, version in json.loads(proc.stdout)}


def _tensorflows(dists):
    return {canonicalize_name(name): v for name, v in dists.items()
            if canonicalize_name(name) in TF_DISTS}


def _requirements(wheel_path):
    (name,) = [n for n in zipfile.ZipFile(wheel_path).namelist()
               if n.endswith(".dist-info/METADATA")]
    text = zipfile.ZipFile(wheel_path).read(name).decode()
    return [Requirement(r) for r in email.parser.Parser().parsestr(text).get_all("Requires-Dist")]


def _dist_info(directory, name, version):
    """A minimal installed distribution: a dist-info folder with METADATA."""
    info = directory / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "INSTALLER").write_text("pip\n")


def _shadow(directory, flavor):
    """This environment's site-packages as symlinks, without keras-caffe (pip
    must install it) and with its TensorFlow's metadata renamed to ``flavor``
    (the same ``tensorflow`` module, as that distribution would install it)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    found = {canonicalize_name(d.metadata["Name"]): d.version
             for d in importlib.metadata.distributions(path=[str(purelib)])
             if canonicalize_name(d.metadata["Name"]) in TF_DISTS}
    assert len(found) == 1, f"{purelib}: expected one TensorFlow distribution, found {found}"
    ((name, version),) = found.items()
    own = re.compile(r"(__editable__\.)?keras_caffe([-.].*)?$", re.IGNORECASE)
    tf_info = re.compile(rf"{name.replace('-', '[-_]')}-{re.escape(version)}\.dist-info$",
                         re.IGNORECASE)
    directory.mkdir()
    for entry in purelib.iterdir():
        if own.match(entry.name) or (flavor != name and tf_info.match(entry.name)):
            continue
        (directory / entry.name).symlink_to(entry)
    if flavor != name:
        _dist_info(directory, flavor, version)
    return version


@pytest.mark.parametrize("flavor", ["tensorflow", "tensorflow-cpu"])
def test_installed_tensorflow_is_kept(wheel, tmp_path, flavor):  # noqa: F811
    """Case 1: with ``flavor`` installed (the real ``tensorflow`` module, its
    metadata renamed where this environment has the other distribution),
    ``pip install keras-caffe`` installs keras-caffe alone."""
    version = _shadow(tmp_path / "deps", flavor)
    python, site = make_venv(tmp_path / "venv")
    (site / "deps.pth").write_text(f"{tmp_path / 'deps'}\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    before = _dists(python, outside)
    assert _tensorflows(before) == {flavor: version}
    assert "keras-caffe" not in before
    report = tmp_path / "report.json"
    pip(python, "install", "--quiet", "--no-index", "--find-links", str(wheel.parent),
        "--report", str(report), "keras-caffe")
    installed = [item["metadata"]["name"] for item in json.loads(report.read_text())["install"]]
    assert installed == ["keras-caffe"]
    after = _dists(python, outside)
    assert after.pop("keras-caffe") == wheel.name.split("-")[1]
    assert after == before

    proc = _run(python, "-c", "import keras_caffe, tensorflow as tf\n"
                "print(keras_caffe.__file__)\nprint(tf.__version__)", cwd=outside)
    assert proc.returncode == 0, proc.stderr
    package, tf_version = proc.stdout.split()
    assert package == f"{site}/keras_caffe/__init__.py"
    assert tf_version == version


def test_wheel_requires_tensorflow_only_through_extras(wheel):  # noqa: F811
    """Case 1, in the metadata: no unconditional ``Requires-Dist: tensorflow``."""
    tensorflow = [r for r in _requirements(wheel) if canonicalize_name(r.name) in TF_DISTS]
    assert tensorflow
    for requirement in tensorflow:
        assert requirement.marker is not None, requirement
        assert not requirement.marker.evaluate({"extra": ""}), requirement


def _readme_install_line():
    readme = (REPO / "README.md").read_text()
    section = readme.split("\n## Install\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)[1]
    (line,) = block.splitlines()
    return line


def _makefile_deps_extras():
    """The extras of the ``.deps`` recipe's install when TF_SPEC is empty,
    and TF_SPEC's default."""
    makefile = (REPO / "Makefile").read_text()
    default = re.search(r"^TF_SPEC \?=(.*)$", makefile, re.MULTILINE)[1].strip()
    recipe = makefile.split("$(VENV)/.deps:", 1)[1].split("touch $@", 1)[0]
    bare = recipe.split("ifeq ($(TF_SPEC),)", 1)[1].split("\nelse\n", 1)[0]
    (extras,) = re.findall(r'pip install --quiet "\.\[([^\]]+)\]"', bare)
    return default, extras.split(",")


def test_readme_and_makefile_install_tensorflow_through_one_extra(wheel):  # noqa: F811
    """Case 2: the README's line, the Makefile's main venv and the error
    message name the same extra, and it requires TensorFlow >= 2.16."""
    line = _readme_install_line()
    assert line == INSTALL_LINE
    assert MISSING.endswith(line)
    (extra,) = re.fullmatch(r"pip install 'keras-caffe\[([a-z-]+)\]'", line).groups()

    default, extras = _makefile_deps_extras()
    assert default == ""
    assert extra in extras

    required = [r for r in _requirements(wheel)
                if r.marker is not None and r.marker.evaluate({"extra": extra})
                and not r.marker.evaluate({"extra": ""})]
    assert [r.name for r in required] == ["tensorflow"]
    assert str(required[0].specifier) == ">=2.16"


@pytest.fixture(scope="module")
def bare_venv(wheel, tmp_path_factory):  # noqa: F811
    """A venv with keras-caffe and nothing else (no system site packages)."""
    tmp = tmp_path_factory.mktemp("bare")
    python, site = make_venv(tmp / "venv")
    pip(python, "install", "--quiet", "--no-deps", "--no-index", str(wheel))
    return python, site


def _last_lines(python, site, tmp_path, fake=None):
    """The last stderr line of ``import keras_caffe`` and of ``keras-caffe
    --help`` in ``bare_venv``, with ``fake`` (a folder) on a .pth path."""
    pth = site / "fake_tensorflow.pth"
    if fake is not None:
        pth.write_text(f"{fake}\n")
    try:
        lines = []
        for args in ([str(python), "-c", "import keras_caffe"],
                     [str(python.parent / "keras-caffe"), "--help"]):
            proc = subprocess.run(args, cwd=tmp_path, env=clean_env(), capture_output=True, text=True)
            assert proc.returncode == 1, proc.stdout + proc.stderr
            lines.append(proc.stderr.splitlines()[-1])
        return lines
    finally:
        pth.unlink(missing_ok=True)


def test_no_tensorflow_is_one_line(bare_venv, tmp_path):
    """Case 3: no TensorFlow at all."""
    assert _last_lines(*bare_venv, tmp_path) == [f"{ERROR}: {MISSING}"] * 2


def test_tensorflow_2_15_is_one_line(bare_venv, tmp_path):
    """Case 3: TensorFlow 2.15.0, read from its metadata, never imported."""
    fake = tmp_path / "fake"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text(
        'raise ImportError("keras-caffe imported the fake TensorFlow 2.15.0")\n')
    _dist_info(fake, "tensorflow", "2.15.0")
    assert _last_lines(*bare_venv, tmp_path, fake) == [f"{ERROR}: {TOO_OLD}"] * 2


def test_tensorflow_folder_left_without_init_is_none(bare_venv, tmp_path):
    """Case 3: what uninstalling one of two clashing TensorFlows leaves behind
    (a ``tensorflow/`` folder without ``__init__.py``) counts as none."""
    fake = tmp_path / "fake"
    (fake / "tensorflow" / "python").mkdir(parents=True)
    assert _last_lines(*bare_venv, tmp_path, fake) == [f"{ERROR}: {MISSING}"] * 2

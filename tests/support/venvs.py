"""Bare virtual environments for the install tests (test_install.py,
test_install_without_tensorflow.py): made without pip, filled by this
interpreter's pip with ``--python``, run with a clean environment."""

import os
import subprocess
import sys
from pathlib import Path


def clean_env(**extra):
    """This environment without PYTHONPATH, pip configuration or TF's chatter, and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
               TF_CPP_MIN_LOG_LEVEL="3", **extra)
    return env


def make_venv(path):
    """A fresh venv without pip at ``path``: its python and its site-packages."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True).stdout.strip()
    return python, Path(site)


def pip(python, *args):
    """``pip ARGS`` into the venv of ``python``; fails the test on an error."""
    proc = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), *args],
                          capture_output=True, text=True, env=clean_env())
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc

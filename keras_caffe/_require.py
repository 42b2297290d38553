"""keras-caffe's TensorFlow requirement, checked before anything imports it.

keras-caffe names no TensorFlow distribution in its unconditional
requirements: ``tensorflow``, ``tensorflow-cpu`` and ``tensorflow[and-cuda]``
all install the same ``tensorflow`` module, and pip installing one on top of
another breaks it (issue 13). A bare environment gets TensorFlow through the
``tensorflow`` extra; ``import keras_caffe`` without a TensorFlow >= 2.16
raises a one-line ``TensorFlowRequirementError`` saying what to install:
``keras_caffe.backends.require_backend`` runs the check, first thing in
keras_caffe/__init__.py, when Keras's backend is TensorFlow.
"""

import importlib.metadata
import importlib.util
import re

from keras_caffe.errors import TensorFlowRequirementError

MINIMUM = (2, 16)
#: The README's install line for an environment without TensorFlow.
INSTALL = "pip install 'keras-caffe[tensorflow]'"
#: The distributions that install the ``tensorflow`` module.
DISTRIBUTIONS = (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
    "tensorflow-aarch64", "tensorflow-cpu-aws", "tensorflow-rocm", "intel-tensorflow",
    "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu", "tf-nightly-intel", "tf-nightly-macos",
)


def tensorflow_distributions():
    """``[(name, version)]`` of the installed distributions in ``DISTRIBUTIONS``,
    read from their metadata without importing TensorFlow."""
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _release(version):
    """``"2.19.0.dev20241001"`` -> ``(2, 19)``; ``None`` if unreadable."""
    match = re.match(r"(\d+)\.(\d+)", version)
    return (int(match[1]), int(match[2])) if match else None


def require_tensorflow():
    """Raise ``TensorFlowRequirementError`` unless TensorFlow >= 2.16 is installed.

    A ``tensorflow`` module without an ``__init__.py`` (what uninstalling one
    of two clashing distributions leaves behind) counts as none. The version
    is the newest of the ``DISTRIBUTIONS`` installed (Windows has both
    ``tensorflow`` and ``tensorflow-intel``, of one version); a module from
    none of them (a source build) is not version checked.
    """
    floor = ".".join(map(str, MINIMUM))
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or spec.origin is None:
        raise TensorFlowRequirementError(
            f"keras-caffe needs TensorFlow >= {floor} and none is installed: {INSTALL}"
        )
    releases = [(_release(version), name, version)
                for name, version in tensorflow_distributions() if _release(version)]
    if releases:
        release, name, version = max(releases)
        if release < MINIMUM:
            raise TensorFlowRequirementError(
                f"keras-caffe needs TensorFlow >= {floor} but {name} {version} is installed: "
                f"pip install --upgrade '{name}>={floor}'",
                found=(name, version),
            )


"""Horovod 0.28.1's source distribution: download, sha256 check, unpack.

The sdist is PyPI's ``horovod-0.28.1.tar.gz``; its sha256 is pinned here, so
a different file (another version, a truncated download, a tampered
mirror) is refused before anything is unpacked or compiled.
"""

import hashlib
import subprocess
import sys
import tarfile
from pathlib import Path

from keras_caffe.errors import HorovodBuildError

VERSION = "0.28.1"
FILENAME = f"horovod-{VERSION}.tar.gz"
#: sha256 of PyPI's horovod-0.28.1.tar.gz (the value PyPI's index publishes).
SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"


def sha256_of(path):
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify(path, expected=SHA256):
    """``path`` if its sha256 is ``expected``, else ``HorovodBuildError``."""
    path = Path(path)
    if not path.is_file():
        raise HorovodBuildError(f"{path}: no such file (--sdist)")
    found = sha256_of(path)
    if found != expected:
        raise HorovodBuildError(
            f"{path}: sha256 {found} is not Horovod {VERSION}'s sdist ({expected})")
    return path


def download_command(directory):
    """The pip command that downloads the sdist (never a wheel) into ``directory``."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
            "--dest", str(directory), f"horovod=={VERSION}"]


def download(directory):
    """Download the sdist into ``directory`` with pip; its path, verified."""
    result = subprocess.run(download_command(directory), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    path = Path(directory) / FILENAME
    if result.returncode != 0 or not path.is_file():
        tail = result.stdout.strip().splitlines()[-1:] or ["no output"]
        raise HorovodBuildError(
            f"pip download horovod=={VERSION} failed ({tail[0]}); "
            "download it elsewhere and pass --sdist PATH")
    return verify(path)


def unpack(path, directory):
    """Extract the verified sdist into ``directory``; the source root."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            if hasattr(tarfile, "data_filter"):
                archive.extractall(directory, filter="data")
            else:  # Python without PEP 706 filters: refuse paths leaving the directory
                _refuse_escapes(archive, Path(directory))
                archive.extractall(directory)
    except tarfile.TarError as err:
        raise HorovodBuildError(f"{path}: cannot unpack ({err})") from None
    root = Path(directory) / f"horovod-{VERSION}"
    if not (root / "setup.py").is_file():
        raise HorovodBuildError(f"{path}: no horovod-{VERSION}/setup.py inside")
    return root


def _refuse_escapes(archive, directory):
    base = directory.resolve()
    for member in archive.getmembers():
        target = (base / member.name).resolve()
        if base != target and base not in target.parents or member.issym() or member.islnk():
            raise HorovodBuildError(f"{archive.name}: unsafe member {member.name!r}")

"""File plumbing shared by the snapshot formats: durable atomic writes,
content sniffing, checksums, the stored ``state`` JSON and ``SnapshotError``.

A snapshot file is never visible half-written: it goes through
``keras_caffe.importers.formats.atomic.atomic_output`` (a temporary file in the
destination's directory, fsynced, renamed over the destination, the
directory fsynced).
"""

import hashlib
import json
import os

from keras_caffe.errors import ArgumentError, KerasCaffeError
from keras_caffe.importers.formats.atomic import (  # noqa: F401 (re-exported)
    TEMP_PREFIX, atomic_output, fsync_directory, fsync_file, write_bytes_durably)

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


class SnapshotError(KerasCaffeError):
    """A snapshot cannot be written or restored; names the file and the cause.

    ``path`` is the file at fault (the solverstate, or the weights file it
    names).
    """

    def __init__(self, path, message):
        self.path = os.fspath(path) if path is not None else None
        super().__init__(f"{self.path}: {message}" if self.path else message)


def is_hdf5(path):
    """True if the file starts with HDF5's signature (tells the formats apart
    by content, never by name)."""
    with open(path, "rb") as f:
        return f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE


def sha256_file(path, chunk=1 << 22):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def encode_state(owner, state):
    """The user's ``state`` dict as JSON text; ``ArgumentError`` if it is not
    a JSON-serializable dict."""
    if state is None:
        state = {}
    if not isinstance(state, dict):
        raise ArgumentError(owner, "state", f"must be a dict, got {type(state).__name__}")
    try:
        return json.dumps(state, sort_keys=True)
    except (TypeError, ValueError) as err:
        raise ArgumentError(owner, "state", f"must be JSON-serializable ({err})") from None


def decode_json(path, text, what):
    try:
        return json.loads(text)
    except ValueError as err:
        raise SnapshotError(path, f"corrupt {what} ({err})") from None


def resolve_weights(solverstate, name, caffe_style):
    """The weights file a solverstate names, or ``SnapshotError``.

    Caffe's ``learned_net`` (``caffe_style``) is the path the solver wrote,
    usually relative to the directory Caffe ran in: it is tried as given
    (relative to the current directory, as Caffe does), then relative to the
    solverstate's directory, then as its file name next to the solverstate.
    Our Keras format stores the file name next to the solverstate.
    """
    here = os.path.dirname(os.path.abspath(solverstate))
    tried = [name, os.path.join(here, name)] if caffe_style else [os.path.join(here, name)]
    tried.append(os.path.join(here, os.path.basename(name)))
    for candidate in dict.fromkeys(tried):
        if os.path.isfile(candidate):
            return candidate
    raise SnapshotError(solverstate, f"its weights file {name!r} is missing (looked for "
                        f"{', '.join(repr(t) for t in dict.fromkeys(tried))})")


def check_checksum(solverstate, weights, expected):
    """Refuse a weights file that is not the one the solverstate was written
    with (a pair overwritten halfway, or files swapped by hand)."""
    if expected and sha256_file(weights) != expected:
        raise SnapshotError(weights, f"is not the weights file {solverstate!r} was written "
                            "with (its SHA-256 differs: changed, truncated or replaced since)")

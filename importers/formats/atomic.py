"""Output files written atomically: never visible half-written.

Every file keras-caffe writes for the user (``.keras`` models, snapshots,
``.caffemodel`` exports) goes through :func:`atomic_output`: it is written to
a temporary file in the destination's directory, flushed to disk
(``fsync``), given the mode a plain ``open(path, "w")`` would give it
(``0o666 & ~umask``; ``mkstemp`` makes 0600), renamed over the destination
(``os.replace``, atomic on POSIX), and the directory is fsynced so the rename
itself survives a crash.

An ``OSError`` on the way (a missing or read-only directory, a full disk)
names the user's path, never the temporary file's.
"""

import contextlib
import os
import tempfile

#: Temporary files start with this, so no snapshot listing ever matches them.
TEMP_PREFIX = ".tmp-"


def fsync_directory(directory):
    """Flush a directory entry (a rename into it) to disk."""
    fd = os.open(directory or ".", os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def file_mode():
    """The mode ``open()`` gives a new file: ``0o666`` less the umask (read
    from /proc where it can be, as setting it to read it is not
    thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_output(path, suffix=""):
    """``with atomic_output(path) as tmp:`` write the file at ``tmp``; on a
    clean exit it is fsynced, given ``file_mode()`` and renamed to ``path``
    (then the directory is fsynced); on an error the temporary file is
    removed and ``path`` keeps its previous content. ``suffix`` ends the
    temporary name (Keras insists on ``.keras`` / ``.weights.h5``). An
    ``OSError`` is re-raised naming ``path`` (``user_error``)."""
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX + os.path.basename(path) + ".",
                                   suffix=suffix, dir=directory)
        os.close(fd)
        yield tmp
        fsync_file(tmp)
        os.chmod(tmp, file_mode())
        os.replace(tmp, path)
        fsync_directory(directory)
    except OSError as err:
        _remove(tmp)
        raise user_error(err, tmp, path) from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp):
    if tmp is not None:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def user_error(err, tmp, path):
    """``err`` (an ``OSError`` about the temporary file ``tmp``, or about
    no file) as the same kind of error about ``path``: ``errno`` and
    ``strerror`` kept, the temporary name replaced by ``path``."""
    text = err.strerror or str(err)
    if tmp:
        text = text.replace(tmp, path)
    try:
        return type(err)(err.errno or 0, text, path)
    except TypeError:  # a subclass with another signature
        return OSError(err.errno or 0, text, path)


def write_bytes_durably(path, data):
    """``data`` to ``path`` through ``atomic_output``."""
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)

"""Reading HDF5 files that may be broken or hostile: Caffe's HDF5 weights and
solverstates and our own snapshots.

HDF5 lets a file point anywhere: a soft or external link, a dataset whose
values live in another file (external storage) or in other datasets
(virtual), a hard link back to a parent (a cycle), a dataset that declares
2^40 elements and stores none, a compound or opaque type. h5py follows all
of it. Everything here refuses such a file before reading a value, with the
caller's own error naming the file, the object and what is wrong:

- members are listed without following links; a soft or external link is
  refused, and so is an object reached twice (a cycle or an alias);
- groups are walked with an explicit stack, at most ``MAX_DEPTH`` deep
  (Caffe's layer names with ``/`` nest a few levels), never by recursion;
- a dataset must be stored in this file (no external or virtual storage),
  have a numeric type (``numeric``) or be a string (``text``), and its
  declared size must be stored (an unwritten dataset is a truncated file)
  and fit in the reading budget (``Budget``) before it is read;
- h5py's own failures on a corrupt file (``OSError``, ``RuntimeError``,
  ``KeyError``, ``ValueError``, ``TypeError``) become the caller's error.
"""

import contextlib

import numpy as np

from keras_caffe.devices import fmt_bytes as _fmt, host_memory
from keras_caffe.errors import KerasCaffeError

#: The deepest group nesting walked (a layer name with 63 slashes).
MAX_DEPTH = 64
#: The longest text dataset read (a net's JSON state, a file name).
MAX_TEXT_BYTES = 64 * 2 ** 20
_H5PY_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, AttributeError)


class Budget:
    """Bytes a file may make us read: ``limit`` (default: a quarter of the
    host memory, ``keras_caffe.devices.host_memory``) counted over every
    dataset read through it."""

    def __init__(self, limit=None, where="host memory"):
        if limit is None:
            total, where = host_memory()
            limit = None if total is None else total // 4
            where = f"a quarter of {where}"
        self.limit, self.where, self.used = limit, where, 0

    def take(self, nbytes, what, fail):
        if self.limit is not None and self.used + nbytes > self.limit:
            raise fail(f"{what} declares {_fmt(nbytes)}, more than the {_fmt(self.limit)} "
                       f"({self.where}) a file may make keras-caffe read")
        self.used += nbytes


@contextlib.contextmanager
def open_file(path, fail):
    """``h5py.File(path, "r")``; h5py's errors inside the block become
    ``fail(message)`` (a callable returning the caller's exception)."""
    import h5py

    try:
        with h5py.File(path, "r") as f:
            yield f
    except KerasCaffeError:
        raise
    except _H5PY_ERRORS as err:
        raise fail(f"truncated or corrupt HDF5 file ({_first_line(err)})") from None


def members(group, fail, seen=None):
    """``[(name, object)]`` of ``group``, in name order, refusing soft and
    external links and (with ``seen``, a set shared over a walk) an object
    reached twice."""
    import h5py

    out = []
    for key in sorted(group.keys()):
        link = group.get(key, getlink=True)
        where = f"{group.name.rstrip('/')}/{key}"
        if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
            target = getattr(link, "path", "")
            kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a soft link"
            raise fail(f"{where} is {kind} (to {target!r}): keras-caffe reads no links")
        obj = group[key]
        if seen is not None:
            ident = hash(obj.id)
            if ident in seen:
                raise fail(f"{where} is linked a second time (a cycle or alias in the file)")
            seen.add(ident)
        out.append((key, obj))
    return out


def walk(root, fail):
    """``(relative name, group)`` for ``root`` and every group below it,
    depth first, without recursion and at most ``MAX_DEPTH`` deep."""
    import h5py

    seen = {hash(root.id)}
    stack = [("", root, 0)]
    while stack:
        name, group, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise fail(f"{group.name} is nested {depth} groups deep (at most {MAX_DEPTH})")
        yield name, group
        children = [(key, obj) for key, obj in members(group, fail, seen)
                    if isinstance(obj, h5py.Group)]
        for key, obj in reversed(children):
            stack.append((f"{name}/{key}" if name else key, obj, depth + 1))


def dataset(group, key, fail):
    """``group[key]`` as an ``h5py.Dataset`` (not followed through a link),
    else ``fail``."""
    import h5py

    where = f"{group.name.rstrip('/')}/{key}"
    if key not in group:
        raise fail(f"{where} is missing")
    link = group.get(key, getlink=True)
    if isinstance(link, (h5py.SoftLink, h5py.ExternalLink)):
        raise fail(f"{where} is a link: keras-caffe reads no links")
    obj = group[key]
    if not isinstance(obj, h5py.Dataset):
        raise fail(f"{where} is a group, not a dataset")
    return obj


def numeric(ds, fail, budget, dtype=np.float32, shape=None):
    """The values of numeric dataset ``ds`` as ``dtype``: ``check_numeric``
    then ``read``."""
    check_numeric(ds, fail, budget, shape)
    return read(ds, fail, dtype)


def check_numeric(ds, fail, budget, shape=None):
    """Refuse ``ds`` unless stored in this file, numeric, of ``shape`` (when
    given), within ``budget`` (its declared bytes are taken from it) and
    actually stored. Reads no value."""
    _check_storage(ds, fail)
    if ds.dtype.kind not in "biuf":
        raise fail(f"{ds.name} has type {_type_name(ds)}, not numbers")
    if shape is not None and tuple(ds.shape) != tuple(shape):
        raise fail(f"{ds.name} has shape {tuple(ds.shape)}, expected {tuple(shape)}")
    _check_declared(ds, fail, budget, ds.dtype.itemsize)


def read(ds, fail, dtype=np.float32):
    """The values of a dataset ``check_numeric`` accepted, as ``dtype``."""
    try:
        return np.asarray(ds[()], dtype)
    except _H5PY_ERRORS as err:
        raise fail(f"cannot read {ds.name} ({_first_line(err)})") from None


def indexed(group, fail):
    """The datasets ``0, 1, ..., n-1`` of ``group`` (Caffe's blob lists), in
    order; refusing a gap (``0, 2``) and links. Groups named by digits are
    layers whose names continue (``inception/0``), not blobs."""
    import h5py

    found = {key: obj for key, obj in members(group, fail)
             if key.isdigit() and isinstance(obj, h5py.Dataset)}
    datasets = []
    while str(len(datasets)) in found:
        datasets.append(found[str(len(datasets))])
    if len(datasets) < len(found):
        extra = sorted(set(found) - {str(i) for i in range(len(datasets))}, key=int)
        raise fail(f"{group.name} holds blobs {', '.join(extra)} without the ones before them "
                   f"(expected 0..n-1)")
    return datasets


def text(ds, fail):
    """The string in scalar or one-element dataset ``ds`` (fixed-length
    bytes up to the first NUL, or a variable-length string)."""
    import h5py

    _check_storage(ds, fail)
    if ds.dtype.kind != "S" and h5py.check_string_dtype(ds.dtype) is None:
        raise fail(f"{ds.name} has type {_type_name(ds)}, not text")
    if ds.size > 1:
        raise fail(f"{ds.name} holds {ds.size} values, expected one string")
    _check_declared(ds, fail, Budget(MAX_TEXT_BYTES, "the text limit"), ds.dtype.itemsize)
    try:
        value = ds[()]
    except _H5PY_ERRORS as err:
        raise fail(f"cannot read {ds.name} ({_first_line(err)})") from None
    if isinstance(value, np.ndarray):
        value = value.reshape(-1)[0] if value.size else b""
    if isinstance(value, bytes):
        value = value.split(b"\0", 1)[0]
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(f"{ds.name} is not UTF-8 text") from None
    if len(str(value)) > MAX_TEXT_BYTES:
        raise fail(f"{ds.name} holds more than {_fmt(MAX_TEXT_BYTES)} of text")
    return str(value)


def check_data_rows(ds, fail):
    """Refuse data-file dataset ``ds`` (HDF5Data's rows) unless it is stored
    in this file, numeric with a row axis, and written in full: a contiguous
    dataset must store its declared bytes, a chunked one all its chunks (a
    file cut short, or one that declares 2^40 rows and stores a few, would
    otherwise read as rows of zeros). No budget: a data set larger than
    memory is streamed by rows. Reads no value."""
    _check_storage(ds, fail)
    if ds.dtype.kind not in "fiu" or ds.ndim < 1:
        raise fail(f"dataset {ds.name.lstrip('/')!r} is {_type_name(ds)} of shape "
                   f"{tuple(ds.shape)}; Caffe reads numeric datasets with a row axis")
    missing = _unwritten(ds)
    if missing:
        raise fail(f"dataset {ds.name.lstrip('/')!r} declares {tuple(ds.shape)} values but "
                   f"stores {missing} (a file written in part, or made up)")


def _unwritten(ds):
    """What part of ``ds`` is not in the file: "" when all of it is."""
    import math

    nbytes = int(np.prod(ds.shape, dtype=np.float64)) * ds.dtype.itemsize
    try:
        stored = ds.id.get_storage_size()
        if ds.chunks is None:
            return "" if stored >= nbytes or ds.compression else f"{_fmt(stored)} of {_fmt(nbytes)}"
        expected = math.prod(-(-n // c) for n, c in zip(ds.shape, ds.chunks))
        written = ds.id.get_num_chunks()
    except _H5PY_ERRORS:
        return ""
    return "" if written >= expected else f"{written} of its {expected} chunks"


def _check_storage(ds, fail):
    try:
        external, virtual, shape, _ = ds.external, ds.is_virtual, ds.shape, ds.dtype
    except _H5PY_ERRORS as err:
        raise fail(f"cannot read {ds.name} ({_first_line(err)})") from None
    if shape is None:
        raise fail(f"{ds.name} is empty (a null dataspace)")
    if external:
        files = ", ".join(repr(entry[0]) for entry in external)
        raise fail(f"{ds.name} keeps its values in another file ({files}): keras-caffe "
                   "reads only the file it was given")
    if virtual:
        raise fail(f"{ds.name} is a virtual dataset (values from other datasets or files): "
                   "keras-caffe reads only the file it was given")


def _check_declared(ds, fail, budget, itemsize):
    nbytes = int(np.prod(ds.shape, dtype=np.float64)) * itemsize if ds.shape else itemsize
    budget.take(nbytes, f"{ds.name} {tuple(ds.shape)}", fail)
    if nbytes and ds.id.get_storage_size() == 0:
        raise fail(f"{ds.name} declares {tuple(ds.shape)} values but stores none (a file "
                   "written in part, or made up)")


_CLASS_NAMES = ("integer", "float", "time", "string", "bitfield", "opaque", "compound",
                "reference", "enum", "variable-length", "array")


def _type_name(ds):
    """``ds``'s type as numpy and HDF5 name it: ``V8 (opaque)``."""
    try:
        kind = ds.id.get_type().get_class()
    except _H5PY_ERRORS:
        return str(ds.dtype)
    name = _CLASS_NAMES[kind] if 0 <= kind < len(_CLASS_NAMES) else f"class {kind}"
    return f"{ds.dtype} (HDF5 {name})"


def _first_line(err):
    lines = str(err).strip().splitlines()
    return lines[0] if lines else type(err).__name__

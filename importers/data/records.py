"""Reading the records of Caffe's data sources: LMDB and LevelDB Datums, HDF5
rows, image lists.

Everything here is plain Python and numpy; ``pipelines`` wraps it in tf.data.
Sources are checked when they are opened, so bad input fails before training
starts: a missing or unreadable file, an empty source, a record of the wrong
size. A source that fits in memory (``in_memory_limit`` bytes, 1 GiB by
default) is read once and checked completely; a bigger one is read record by
record as batches are made, and a bad record found then is reported through
``data_errors.fail`` (``LayerError`` naming the layer, the source and the key).

The two databases of Caffe's Data layer (caffe/util/db_lmdb.cpp,
db_leveldb.cpp) hold the same serialized ``Datum`` values under byte-ordered
keys; Caffe's cursor reads them in key order. ``DatumRecords`` reads both
through a store (``LmdbStore``, ``LevelDbStore``) that only knows how to open
the database, count and list its records and fetch values by key.

LevelDB (through ``plyvel``, ``pip install 'keras-caffe[leveldb]'``) lets one
process open a database at a time (its ``LOCK`` file) and writes to the
database directory when opening it (its ``LOG``, and a compaction of the
write-ahead log), as Caffe's reader does. A database read into memory is
closed right after it is read; one streamed per batch stays open (and locked)
while a pipeline reads it. Within a process every reader of one database
shares one handle (for LMDB too, which refuses two environments per process).
"""

import contextlib
import os
import re
import threading
import weakref

import numpy as np

from keras_caffe.errors import LayerError
from keras_caffe.importers.data import read_errors as data_errors
from keras_caffe.importers.formats import hdf5_files
from keras_caffe.importers.formats.paths import candidates, locate
from keras_caffe.proto import caffe_pb2

#: Sources up to this many bytes are read into memory once.
IN_MEMORY_LIMIT = 1 << 30


def find_source(layer, path, net_source, what="source"):
    """``path`` as Caffe opens it (from the current directory), else next to the
    prototxt ``net_source``; a ``LayerError`` naming both when it is in neither."""
    if not path:
        raise LayerError(layer.name, f"{layer.type} has no {what}")
    found = locate(path, net_source)
    if found is not None:
        return os.path.abspath(found)
    where = " or ".join(repr(c) for c in candidates(path, net_source))
    raise LayerError(layer.name, f"{layer.type} {what} {path!r} not found (looked for {where})")


def key_text(key):
    """A record key for messages: its text if it is UTF-8, else its bytes."""
    try:
        return repr(key.decode("utf-8"))
    except UnicodeDecodeError:
        return repr(key)


_open_envs = weakref.WeakValueDictionary()
_open_leveldbs = weakref.WeakValueDictionary()
_open_lock = threading.Lock()


def _open_lmdb(lmdb, path):
    """A read-only environment; one per database and process (LMDB refuses two),
    shared while any pipeline still reads it."""
    real = os.path.realpath(path)
    with _open_lock:
        env = _open_envs.get(real)
        if env is None:
            env = lmdb.open(real, readonly=True, lock=False, subdir=os.path.isdir(real))
            _open_envs[real] = env
        return env


class _LevelDbHandle:
    """A ``plyvel.DB`` shared by the readers of one database in this process
    (LevelDB's lock refuses a second handle, even in the same process). It is
    closed when the last reader lets go of it (plyvel closes on deallocation)."""

    def __init__(self, db):
        self.db = db


def _open_leveldb(plyvel, path):
    real = os.path.realpath(path)
    with _open_lock:
        handle = _open_leveldbs.get(real)
        if handle is None:
            handle = _LevelDbHandle(plyvel.DB(real, create_if_missing=False))
            _open_leveldbs[real] = handle
        return handle


class LmdbStore:
    """The records of an LMDB (``lmdb`` package), for ``DatumRecords``."""

    kind = "LMDB"

    def __init__(self, layer, path):
        try:
            import lmdb
        except ImportError:
            raise LayerError(layer.name, "reading LMDB needs the lmdb package "
                                         "(pip install 'keras-caffe[lmdb]')") from None
        try:
            self._env = _open_lmdb(lmdb, path)
            stat = self._env.stat()
        except lmdb.Error as err:
            raise LayerError(layer.name, f"cannot open LMDB {path!r}: {err}") from None
        self.count = int(stat["entries"])
        self.nbytes = stat["psize"] * (stat["branch_pages"] + stat["leaf_pages"]
                                       + stat["overflow_pages"])

    def items(self):
        """(key, value) pairs in key order."""
        with self._env.begin() as txn:
            yield from txn.cursor()

    def keys(self):
        with self._env.begin() as txn:
            return list(txn.cursor().iternext(keys=True, values=False))

    def get(self, keys):
        """The values of ``keys`` (``None`` for a missing key)."""
        with self._env.begin() as txn:
            return [txn.get(key) for key in keys]


class LevelDbStore:
    """The records of a LevelDB (``plyvel``), for ``DatumRecords``.

    LevelDB keeps no record count: ``count`` lists the keys (once), which reads
    the whole database, as LevelDB stores keys among the values. ``nbytes`` is
    the size of the database's files (tables are snappy-compressed as Caffe
    writes them, so the values may take more memory than that).
    """

    kind = "LevelDB"

    def __init__(self, layer, path):
        try:
            import plyvel
        except ImportError:
            raise LayerError(layer.name, "reading LevelDB needs the plyvel package "
                                         "(pip install 'keras-caffe[leveldb]', or pip install "
                                         "plyvel)") from None
        self.layer, self.path, self._plyvel = layer.name, path, plyvel
        if not os.path.isfile(os.path.join(path, "CURRENT")):
            # Checked first: LevelDB would write its LOCK and LOG into any directory.
            what = "a file, not a LevelDB directory" if os.path.isfile(path) else \
                "not a LevelDB (it has no CURRENT file)"
            if os.path.isfile(os.path.join(path, "data.mdb")) or os.path.isfile(path):
                what += ("; if it is an LMDB, set backend: LMDB in data_param (Caffe's default "
                         "backend is LEVELDB)")
            raise LayerError(layer.name, f"Data source {path!r} is {what}")
        try:
            self._handle = _open_leveldb(plyvel, path)
        except plyvel.Error as err:
            detail = _plyvel_text(err)
            # LevelDB's LockFile: "lock <dir>/LOCK: already held by process" (this process)
            # or "lock <dir>/LOCK: <strerror of fcntl>" (another process holds it).
            if detail.startswith("IO error: lock "):
                raise LayerError(layer.name, f"LevelDB {path!r} is locked ({detail}): another "
                                             "process, or another handle in this one, has it "
                                             "open, and LevelDB allows one at a time; close "
                                             "that one, read a copy of the database, or "
                                             "convert it to LMDB (convert_imageset -backend "
                                             "lmdb), which many processes can read at "
                                             "once") from None
            hint = ""
            if detail.endswith(("Permission denied", "Read-only file system")):
                hint = ("; LevelDB writes its LOCK and LOG files into the database directory "
                        "when it opens it (as Caffe's reader does): copy the database to a "
                        "writable place")
            raise LayerError(layer.name, f"cannot open LevelDB {path!r}: {detail}{hint}") from None
        self._keys = None
        self.nbytes = sum(entry.stat().st_size for entry in os.scandir(path)
                          if entry.is_file())

    @property
    def count(self):
        return len(self._key_list())

    def _key_list(self):
        # LevelDB stores keys among the values: listing them reads the whole database.
        if self._keys is None:
            self._keys = self._guarded(lambda db: list(db.iterator(include_value=False)))
        return self._keys

    def _guarded(self, read):
        try:
            return read(self._handle.db)
        except self._plyvel.Error as err:
            raise LayerError(self.layer, f"cannot read LevelDB {self.path!r}: "
                                         f"{_plyvel_text(err)}") from None

    def items(self):
        """(key, value) pairs in key order."""
        iterator = self._handle.db.iterator()
        with iterator:
            while True:
                pair = self._guarded(lambda db: next(iterator, None))
                if pair is None:
                    return
                yield pair

    def keys(self):
        return self._key_list()

    def get(self, keys):
        """The values of ``keys`` (``None`` for a missing key)."""
        return self._guarded(lambda db: [db.get(key) for key in keys])


def _plyvel_text(err):
    """plyvel's message (it passes LevelDB's status as bytes)."""
    detail = err.args[0] if err.args else err
    return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)


#: DataParameter.backend -> the store reading it.
STORES = {caffe_pb2.DataParameter.LMDB: LmdbStore,
          caffe_pb2.DataParameter.LEVELDB: LevelDbStore}


def open_store(layer, path):
    """The store of a Data layer's database ``path`` (its ``data_param.backend``)."""
    return STORES[layer.data_param.backend](layer, path)


class DatumRecords:
    """The Datums of a Caffe database (LMDB or LevelDB), in key order (Caffe's
    cursor order), read through ``store`` (``LmdbStore`` or ``LevelDbStore``).

    Raw Datums (``data`` bytes or ``float_data``) must all have the first
    record's channels x height x width; in memory they are one (N, C, H, W)
    array. Encoded Datums keep their image bytes. A database read into memory
    lets go of its store (a LevelDB is closed, its lock released); a streamed
    one keeps it for ``read``.
    """

    def __init__(self, layer, path, store, in_memory_limit=IN_MEMORY_LIMIT):
        self.layer, self.path, self.kind = layer.name, path, store.kind
        self.num_records = int(store.count)
        if not self.num_records:
            raise LayerError(layer.name, f"{self.kind} {path!r} is empty")
        self.in_memory = store.nbytes <= in_memory_limit
        if self.in_memory:
            self.keys = []
            with contextlib.closing(store.items()) as pairs:
                for i, (key, value) in enumerate(pairs):
                    datum = self._parse(key, value)
                    if not i:
                        self._first(key, datum)
                    self._store(i, key, datum)
                    self.keys.append(key)
            self._source = None
        else:
            self.keys = store.keys()
            self._first(self.keys[0], self._parse(self.keys[0], store.get(self.keys[:1])[0]))
            self._source = store

    def _first(self, key, datum):
        """Take the layout of every record from the first one (as Caffe's DataLayerSetUp)."""
        self.encoded = bool(datum.encoded)
        if self.encoded:
            self.first_image = datum.data
        else:
            self.channels, self.height, self.width = datum.channels, datum.height, datum.width
            self.is_float = not len(datum.data)
            self._check_raw(key, datum)
        if self.in_memory:
            self.labels = np.empty(self.num_records, np.float32)
            if self.encoded:
                self.images = np.empty(self.num_records, object)
            else:
                dtype = np.float32 if self.is_float else np.uint8
                self.data = np.empty((self.num_records, self.channels, self.height, self.width),
                                     dtype)

    def _parse(self, key, value):
        try:
            return caffe_pb2.Datum.FromString(value)
        except Exception as err:  # noqa: BLE001 - protobuf's DecodeError or RuntimeError
            raise LayerError(self.layer, f"{self._where(key)} is not a Caffe Datum "
                                         f"({err})") from None

    def _where(self, key):
        return f"{self.kind} {self.path!r} record {key_text(key)}"

    def _check_raw(self, key, datum):
        """The record's values as a flat array, checked against the first record."""
        if datum.encoded:
            raise LayerError(self.layer, f"{self._where(key)} is encoded but the first record "
                                         "is raw")
        dims = (datum.channels, datum.height, datum.width)
        expected = (self.channels, self.height, self.width)
        if dims != expected:
            raise LayerError(self.layer, f"{self._where(key)} is {_dims(dims)} but the first "
                                         f"record is {_dims(expected)}")
        if len(datum.data):
            values = np.frombuffer(datum.data, np.uint8)
            kind = "bytes of data"
        else:
            values = np.asarray(datum.float_data, np.float32)
            kind = "float_data values"
        count = int(np.prod(expected))
        if values.size != count or not count:
            raise LayerError(self.layer, f"{self._where(key)} holds {values.size} {kind} but "
                                         f"channels x height x width is {_dims(dims)} = {count}")
        if (not len(datum.data)) != self.is_float:
            raise LayerError(self.layer, f"{self._where(key)} mixes float_data and byte data "
                                         "with the first record")
        return values

    def _record(self, key, datum):
        """A record's image bytes (encoded) or (C, H, W) values (raw), checked."""
        if not self.encoded:
            return self._check_raw(key, datum).reshape(self.channels, self.height, self.width)
        if not datum.encoded:
            raise LayerError(self.layer, f"{self._where(key)} is raw but the first record "
                                         "is encoded")
        return datum.data

    def _store(self, i, key, datum):
        self.labels[i] = datum.label
        (self.images if self.encoded else self.data)[i] = self._record(key, datum)

    def read(self, indices):
        """Records by index, read from the database (for sources too big for memory).

        Returns (values, labels): (B, C, H, W) raw values, or (B,) image bytes.
        Runs inside ``tf.numpy_function``: errors go through ``data_errors.fail``.
        """
        labels = np.empty(len(indices), np.float32)
        if self.encoded:
            values = np.empty(len(indices), object)
        else:
            dtype = np.float32 if self.is_float else np.uint8
            values = np.empty((len(indices), self.channels, self.height, self.width), dtype)
        keys = [self.keys[int(index)] for index in indices]
        try:
            for i, (key, value) in enumerate(zip(keys, self._source.get(keys))):
                datum = self._parse(key, value)
                labels[i], values[i] = datum.label, self._record(key, datum)
        except LayerError as err:
            data_errors.fail(err)
        return values, labels


class LmdbRecords(DatumRecords):
    """The Datums of a Caffe LMDB (``DatumRecords`` through an ``LmdbStore``)."""

    def __init__(self, layer, path, in_memory_limit=IN_MEMORY_LIMIT):
        super().__init__(layer, path, LmdbStore(layer, path), in_memory_limit)


class LevelDbRecords(DatumRecords):
    """The Datums of a Caffe LevelDB (``DatumRecords`` through a ``LevelDbStore``)."""

    def __init__(self, layer, path, in_memory_limit=IN_MEMORY_LIMIT):
        super().__init__(layer, path, LevelDbStore(layer, path), in_memory_limit)


def database_records(layer, path, in_memory_limit=IN_MEMORY_LIMIT):
    """The ``DatumRecords`` of a Data layer's database, by its ``data_param.backend``."""
    return DatumRecords(layer, path, open_store(layer, path), in_memory_limit)


def list_lines(layer, path):
    """``[(line number, line)]`` of a data layer's list file, blank lines
    left out; a file that cannot be read is the layer's error."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            lines = f.read().splitlines()
    except OSError as err:
        raise LayerError(layer.name, f"cannot read {layer.type} source {path!r}: "
                                     f"{err.strerror or err}") from None
    return [(number, line) for number, line in enumerate(lines, 1) if line.strip()]


def read_image_list(layer, path):
    """ImageData's list file: lines ``path label``, the label after the last space.

    Returns (names, labels as float32). Blank lines are skipped. A path may
    contain spaces, as in Caffe (``line.find_last_of(' ')``).
    """
    names, labels = [], []
    for number, line in list_lines(layer, path):
        name, space, label = line.rpartition(" ")
        match = re.match(r"\s*([+-]?\d+)", label)
        if not space or not name or not match:
            raise LayerError(layer.name, f"{path}:{number}: expected 'image_path label' "
                                         f"(an integer label after the last space), got {line!r}")
        names.append(name)
        labels.append(int(match.group(1)))
    if not names:
        raise LayerError(layer.name, f"ImageData source {path!r} lists no images")
    return names, np.asarray(labels, np.float32)


class Hdf5Rows:
    """HDF5Data's rows: the listed files' datasets named as the layer's tops.

    The list file names one .h5 file per whitespace-separated token (Caffe reads
    it with ``>>``); a relative name is opened from the current directory, else
    next to the list file. Rows follow the files' order; all datasets of a file
    have the same number of rows, and every file the first file's row shapes.
    Values are cast to float32, as Caffe loads them.
    """

    def __init__(self, layer, listing, in_memory_limit=IN_MEMORY_LIMIT):
        self.layer, self.tops = layer.name, list(layer.top)
        try:
            with open(listing, encoding="utf-8") as f:
                names = f.read().split()
        except OSError as err:
            raise LayerError(layer.name,
                             f"cannot read HDF5Data source {listing!r}: {err}") from None
        if not names:
            raise LayerError(layer.name, f"HDF5Data source {listing!r} lists no files")
        self.files, self.counts, self.row_shapes = [], [], None
        size = 0
        for name in names:
            path = name if os.path.isabs(name) or os.path.exists(name) else \
                os.path.join(os.path.dirname(listing), name)
            if not os.path.isfile(path):
                raise LayerError(layer.name, f"HDF5 file {name!r} listed in {listing!r} not found "
                                             f"(looked for {name!r} and {path!r})")
            path = os.path.abspath(path)
            count, shapes, nbytes = self._inspect(path)
            if self.row_shapes is None:
                self.row_shapes = shapes
            elif shapes != self.row_shapes:
                top = next(t for t in self.tops if shapes[t] != self.row_shapes[t])
                raise LayerError(layer.name, f"HDF5 file {path!r}: dataset {top!r} has rows of "
                                             f"shape {shapes[top]} but the first file's are "
                                             f"{self.row_shapes[top]}")
            self.files.append(path)
            self.counts.append(count)
            size += nbytes
        self.offsets = np.concatenate([[0], np.cumsum(self.counts)]).astype(np.int64)
        self.num_records = int(self.offsets[-1])
        self.in_memory = size <= in_memory_limit
        if self.in_memory:
            self.arrays = {top: np.concatenate([self._load(path, top) for path in self.files])
                           for top in self.tops}

    def _fail(self, path):
        return lambda message: LayerError(self.layer, f"HDF5 file {path!r}: {message}")

    def _datasets(self, h5, path):
        """The layer's tops in ``h5``, each checked by ``hdf5_files``: in this
        file (no link, external or virtual storage), numeric, fully written."""
        missing = [top for top in self.tops if top not in h5]
        if missing:
            raise LayerError(self.layer, f"HDF5 file {path!r} has no dataset "
                                         f"{', '.join(repr(t) for t in missing)} for the "
                                         "layer's top(s)")
        fail = self._fail(path)
        sets = {top: hdf5_files.dataset(h5, top, fail) for top in self.tops}
        for data in sets.values():
            hdf5_files.check_data_rows(data, fail)
        return sets

    def _opened(self, path):
        return hdf5_files.open_file(
            path, lambda message: LayerError(self.layer, f"cannot read HDF5 file {path!r}: "
                                                         f"{message}"))

    def _inspect(self, path):
        with self._opened(path) as h5:
            sets = self._datasets(h5, path)
            counts = {top: data.shape[0] for top, data in sets.items()}
            if len(set(counts.values())) > 1:
                listed = ", ".join(f"{t!r} has {n}" for t, n in counts.items())
                raise LayerError(self.layer, f"HDF5 file {path!r}: datasets differ in their "
                                             f"number of rows ({listed})")
            count = counts[self.tops[0]]
            if not count:
                raise LayerError(self.layer, f"HDF5 file {path!r} has no rows")
            shapes = {top: tuple(data.shape[1:]) for top, data in sets.items()}
            nbytes = sum(data.size * 4 for data in sets.values())
        return count, shapes, nbytes

    def _load(self, path, top):
        with self._opened(path) as h5:
            return hdf5_files.read(self._datasets(h5, path)[top], self._fail(path))

    def read(self, indices):
        """Rows by global index, read from the files; one float32 array per top."""
        indices = np.asarray(indices, np.int64)
        out = [np.empty((len(indices), *self.row_shapes[t]), np.float32) for t in self.tops]
        files = np.searchsorted(self.offsets, indices, side="right") - 1
        for f in np.unique(files):
            where = np.nonzero(files == f)[0]
            rows = indices[where] - self.offsets[f]
            unique, inverse = np.unique(rows, return_inverse=True)
            path = self.files[f]
            with self._opened(path) as h5:
                for j, top in enumerate(self.tops):  # checked in full by __init__
                    data = hdf5_files.dataset(h5, top, self._fail(path))
                    out[j][where] = self._rows(data, unique, path)[inverse]
        return out

    def _rows(self, data, rows, path):
        try:
            return np.asarray(data[rows], np.float32)
        except (OSError, RuntimeError, ValueError, TypeError) as err:
            raise LayerError(self.layer, f"HDF5 file {path!r}: cannot read rows of "
                                         f"{data.name.lstrip('/')!r} "
                                         f"({str(err).splitlines()[0] if str(err) else err})"
                             ) from None


def _dims(shape):
    return "x".join(str(d) for d in shape)

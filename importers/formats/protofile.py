"""Reading Caffe's protocol buffer files with keras-caffe's schema.

Text files go through ``google.protobuf.text_format``; its errors are turned
into ``ProtoParseError`` naming ``file:line:column``. Binary files are parsed
only when they hold no more messages than their size allows
(``keras_caffe.importers.formats.message_count``).
"""

import os
import re

from google.protobuf import message as _message
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf import text_format

from keras_caffe.errors import ProtoParseError
from keras_caffe.importers.formats.message_count import excess_messages, varint_at as _varint_at

_PACKAGE_PREFIX = "keras_caffe.caffe."
_LOCATION = re.compile(r"^(\d+):(\d+) : ")


def parse_text(text, message, source="<text>"):
    """Parse prototxt ``text`` into a new instance of ``message`` (a class)."""
    proto = message()
    try:
        text_format.Parse(text, proto)
    except text_format.ParseError as err:
        raise parse_error(err, source) from None
    return proto


def parse_error_detail(err):
    """A ``text_format.ParseError``'s message without its location and our
    schema's package name (Caffe users know ``LayerParameter``)."""
    return _LOCATION.sub("", str(err)).replace(_PACKAGE_PREFIX, "")


def parse_error(err, source):
    """The ``ProtoParseError`` for a ``text_format.ParseError`` in ``source``."""
    return ProtoParseError(source, parse_error_detail(err), line=err.GetLine(),
                           column=err.GetColumn())


def read_text(path, message):
    """Parse the prototxt file at ``path`` into a new ``message`` instance."""
    text, source = text_of(os.fspath(path), message, None)
    return parse_text(text, message, source=source)


def read_binary(path, message):
    """Parse the binary protocol buffer file at ``path`` into ``message()``."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return parse_binary(data, message, path)


def parse_binary(data, message, source):
    """Parse binary ``data`` (read from ``source``) into ``message()``; a
    file holding more messages than its size allows is refused before the
    parse (``message_count.excess_messages``)."""
    refusal = excess_messages(data, message)
    if refusal:
        raise ProtoParseError(source, refusal)
    proto = message()
    try:
        proto.ParseFromString(data)
    except (_message.DecodeError, RuntimeError) as err:
        detail = truncation(data, message)
        raise ProtoParseError(
            source, detail or f"not a binary {message.DESCRIPTOR.name} file ({err})"
        ) from None
    return proto


def top_level_fields(data, message, extra=None):
    """The names of binary ``data``'s top-level fields, in order, when every
    one is a field of ``message`` (or of ``extra``, ``{number: name}`` of
    length-delimited fields beside it) of the right wire type and ends within
    the data; None otherwise. A cheap walk (no parse) to tell file kinds
    apart."""
    pos, size, names = 0, len(data), []
    while pos < size:
        tag, pos = _varint_at(data, pos)
        if tag is None or tag < 0:
            return None
        name = _field_name(message, extra or {}, tag >> 3, tag & 7)
        end = _field_end(data, pos, tag & 7)
        if name is None or end is None or end == _VARINT_CUT or end > size:
            return None
        names.append(name.strip("`"))
        pos = end
    return names


#: Wire types of fixed size: 64-bit and 32-bit.
_FIXED_SIZES = {1: 8, 5: 4}
_VARINT_CUT = float("inf")
#: Field types written length-delimited (besides packed repeated numbers).
_DELIMITED = {FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_STRING,
              FieldDescriptor.TYPE_BYTES}


def truncation(data, message, extra=None):
    """Where binary protobuf ``data`` (a ``message``) is cut short, walking
    its top-level fields (tag, then a varint, 4 or 8 bytes, or a length and
    that many bytes): ``"truncated at byte N of at least M (...)"`` naming
    the field that runs past the end, or None when every field ends within
    the data (a cut exactly between two fields cannot be seen) or the data
    is corrupt rather than short (a field ``message`` lacks, or of another
    wire type, runs past the end). ``extra``: ``{field number: name}`` of
    length-delimited fields beside ``message``'s (our solverstate JSON)."""
    pos, size = 0, len(data)
    while pos < size:
        start = pos
        tag, pos = _varint_at(data, pos)
        if tag is None:
            return _cut(size, size + 1, f"in the tag of a field at byte {start}")
        if tag < 0:
            return None
        field, wire = tag >> 3, tag & 7
        if _field_name(message, extra or {}, field, wire) is None:
            return None  # a field the message lacks: garbage, not a short file
        end = _field_end(data, pos, wire)
        if end is None:
            return None
        if end == _VARINT_CUT or end > size:
            return _overrun(message, extra or {}, field, wire, start, end, size)
        pos = end
    return None


def _field_end(data, pos, wire):
    """Where a field's value starting at ``pos`` ends (``_VARINT_CUT``
    when the data ends inside its varint), or None for a wire type that is
    not plain data."""
    if wire in _FIXED_SIZES:
        return pos + _FIXED_SIZES[wire]
    if wire not in (0, 2):
        return None
    value, after = _varint_at(data, pos)
    if value is None:
        return _VARINT_CUT
    if value < 0:
        return None
    return after + value if wire == 2 else after


def _overrun(message, extra, number, wire, start, end, size):
    name = _field_name(message, extra, number, wire)
    if name is None:
        return None
    if end == _VARINT_CUT:
        return _cut(size, size + 1, f"its field {name} at byte {start} is cut")
    return _cut(size, end, f"its field {name} at byte {start} runs to byte {end}")


def _field_name(message, extra, number, wire):
    """How to name top-level field ``number`` read with ``wire``, or None
    when ``message`` has no such field of that wire type (``extra``: the
    length-delimited fields beside it)."""
    field = message.DESCRIPTOR.fields_by_number.get(number)
    if field is not None:
        delimited = field.type in _DELIMITED
        if wire == 2 if delimited else (wire != 2 or _is_packed(field)):
            return f"`{field.name}`"
        return None
    if number in extra and wire == 2:
        return extra[number]
    return None


def _is_packed(field):
    """A repeated number (written packed, or either way read). protobuf 5+
    has ``is_repeated``; 4.x only ``label``."""
    repeated = field.is_repeated if hasattr(field, "is_repeated") else \
        field.label == FieldDescriptor.LABEL_REPEATED
    return repeated and field.type not in _DELIMITED


def _cut(size, needed, detail):
    return f"truncated at byte {size} of at least {needed} ({detail})"


def read_message(obj, message, text_source):
    """``(message instance, source name)`` for a path, prototxt text or a parsed
    ``message``. A string names a file if one exists there, and is prototxt
    text if it holds a newline, ``{`` or ``:``; otherwise it is reported as a
    missing file."""
    if isinstance(obj, message):
        return obj, f"<{message.DESCRIPTOR.name}>"
    text, source = text_of(obj, message, text_source)
    return parse_text(text, message, source=source), source


def text_of(obj, message, text_source):
    """``(prototxt text, source name)`` for a path or prototxt text (as
    ``read_message`` tells them apart)."""
    if isinstance(obj, os.PathLike) or (isinstance(obj, str) and (
            os.path.isfile(obj) or not any(c in obj for c in "\n{:"))):
        path = os.fspath(obj)
        with open(path, encoding="utf-8") as f:
            try:
                return f.read(), path
            except UnicodeDecodeError as err:
                raise ProtoParseError(
                    path, f"not a text file (byte {err.start} is not UTF-8); "
                    "binary files need read_binary") from None
    if isinstance(obj, str):
        return obj, text_source
    raise TypeError(f"expected a path, prototxt text or a {message.DESCRIPTOR.name}, "
                    f"got {type(obj).__name__}")

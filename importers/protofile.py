"""Reading Caffe's protocol buffer files with keras-caffe's schema.

Text files go through ``google.protobuf.text_format``; its errors are turned
into ``ProtoParseError`` naming ``file:line:column``.
"""

import os
import re

from google.protobuf import message as _message
from google.protobuf import text_format

from keras_caffe.errors import ProtoParseError

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
    proto = message()
    try:
        proto.ParseFromString(data)
    except (_message.DecodeError, RuntimeError) as err:
        raise ProtoParseError(
            path, f"not a binary {message.DESCRIPTOR.name} file ({err})"
        ) from None
    return proto


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

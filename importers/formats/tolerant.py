"""Reading prototxts written for Caffe's forks.

A text prototxt is parsed strictly first. Where that fails on a field the
schema lacks (a fork's parameter keras-caffe does not know), it is parsed
again skipping unknown fields, and each skipped field is located: the
top-level ``layer { }`` / ``layers { }`` blocks are found by brace matching
(outside strings and ``#`` comments) and parsed one by one, strictly. The
caller then decides, once the net is filtered for a phase, what a skipped
field means: nothing for a layer type nobody converts (it is listed with
the other unknown types), an error naming the layer and field for one that
is converted (its semantics would be lost).
"""

import dataclasses
import re

from google.protobuf import text_format

from keras_caffe.importers.formats.protofile import parse_error, parse_error_detail as _detail
from keras_caffe.proto import caffe_pb2

_UNKNOWN = re.compile(r'has no field named "([^"]+)"')


@dataclasses.dataclass(frozen=True)
class SkippedField:
    """A field of layer ``name`` (its ``occurrence``-th layer of that name,
    from 0) that the schema lacks, at ``line``:``column`` of the file;
    ``text`` is the field as written (name and value), for a user's layer type
    to parse with the fork's own schema."""

    name: str
    occurrence: int
    field: str
    line: int
    column: int
    detail: str
    text: str = ""


def unknown_field(err):
    """The field name of a ``ParseError`` about an unknown field, or None."""
    match = _UNKNOWN.search(str(err))
    return match.group(1) if match else None


def parse_net_tolerant(text, source):
    """``(NetParameter, [SkippedField])`` of ``text``, skipping unknown fields."""
    net = caffe_pb2.NetParameter()
    try:
        text_format.Parse(text, net, allow_unknown_field=True)
    except text_format.ParseError as err:
        raise parse_error(err, source) from None
    skipped, seen = [], {}
    for start_line, start_column, block in _layer_blocks(text):
        one = caffe_pb2.NetParameter()
        text_format.Parse(block, one, allow_unknown_field=True)
        layers = list(one.layer) or list(one.layers)
        name = layers[0].name if layers else ""
        occurrence = seen.get(name, 0)
        seen[name] = occurrence + 1
        _locate(block, start_line, start_column, name, occurrence, skipped)
    return net, skipped


def _locate(block, start_line, start_column, name, occurrence, skipped):
    """Every unknown field of one layer block, located in the whole file: each
    is blanked out (name and value, newlines kept) and the block parsed again."""
    remaining = block
    while True:
        try:
            text_format.Parse(remaining, caffe_pb2.NetParameter())
            return
        except text_format.ParseError as err:
            field = unknown_field(err)
            if field is None or err.GetLine() is None:
                return  # another error: the whole-file parse reports it
            line = start_line + err.GetLine() - 1
            column = err.GetColumn() + (start_column - 1 if err.GetLine() == 1 else 0)
            blanked, raw = _blank_field(remaining, err.GetLine(), err.GetColumn())
            skipped.append(SkippedField(name, occurrence, field, line, column, _detail(err), raw))
            if blanked == remaining:
                return
            remaining = blanked


def _blank_field(text, line, column):
    """``(text with the field at line:column (1-based) and its value (a
    scalar, a ``[...]`` list or a ``{...}`` message) replaced by spaces, the
    field as written)``."""
    lines = text.split("\n")
    start = sum(len(row) + 1 for row in lines[:line - 1]) + column - 1
    i = start
    while i < len(text) and (text[i].isalnum() or text[i] in "_."):
        i += 1  # the name
    while i < len(text) and text[i] in " \t\r\n:":
        i += 1
    if i < len(text) and text[i] in "{<[":
        close = {"{": "}", "<": ">", "[": "]"}[text[i]]
        depth, j = 0, i
        while j < len(text):
            if text[j] in "\"'":
                j = _string_end(text, j)
            elif text[j] == text[i]:
                depth += 1
            elif text[j] == close:
                depth -= 1
                if depth == 0:
                    break
            j += 1
        end = j + 1
    elif i < len(text) and text[i] in "\"'":
        end = _string_end(text, i) + 1
        while end < len(text) and text[end] in " \t" and end + 1 < len(text) \
                and text[end + 1] in "\"'":  # adjacent string literals
            end = _string_end(text, end + 1) + 1
    else:
        end = i
        while end < len(text) and not text[end].isspace() and text[end] not in "}#":
            end += 1
    blanked = "".join(c if c == "\n" else " " for c in text[start:end])
    return text[:start] + blanked + text[end:], text[start:end]


def _string_end(text, i):
    """The index of the quote closing the string opened at ``i``."""
    quote, j = text[i], i + 1
    while j < len(text) and text[j] != quote:
        j += 2 if text[j] == "\\" else 1
    return j


def _layer_blocks(text):
    """``(line, column, text)`` of each top-level ``layer``/``layers`` block
    (1-based line and column of its first character), in one pass."""
    blocks = []
    depth, i, n = 0, 0, len(text)
    line = 1
    start = None
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c == "#":
            while i < n and text[i] != "\n":
                i += 1
            continue
        elif c in "\"'":
            end = _string_end(text, i)
            line += text.count("\n", i, end)
            i = end
        elif c == "{":
            if depth == 0:
                start = _block_name(text, i, line)
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0 and start is not None:
                offset, start_line, start_column = start
                blocks.append((start_line, start_column, text[offset:i + 1]))
                start = None
        i += 1
    return blocks


def _block_name(text, brace, line):
    """``(offset, line, column)`` of the ``layer``/``layers`` name before the
    ``{`` at ``brace`` (on line ``line``), or None for another field."""
    i = brace
    while i > 0 and text[i - 1] in " \t\r\n:":
        i -= 1
    end = i
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_"):
        i -= 1
    if text[i:end] not in ("layer", "layers"):
        return None
    start_line = line - text.count("\n", i, brace)
    return i, start_line, i - text.rfind("\n", 0, i)

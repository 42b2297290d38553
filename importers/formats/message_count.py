"""How many messages a binary protobuf file holds, counted on its wire bytes
before the parser builds them.

A message costs a few bytes on disk and far more once parsed: an empty
``layer { }`` entry of a ``.caffemodel`` is 3 bytes, and through
``load_weights`` it took 1.35 KB of memory (measured: 1,000,000 of them,
a 3 MB file, raised the peak RSS by 1,346 MB, protobuf 7.36 upb, Python
3.11; an upb LayerParameter alone is about 720 bytes). A few megabytes of
empty entries thus exhaust any memory limit. So before a binary file is
parsed its messages are counted, at every depth, by walking the wire format
(tags, varints, lengths; a length-delimited field is entered only when the
schema makes it a message, packed numbers and strings are stepped over in
one move), and a file holding more than ``message_limit(size)`` is refused.

The limit is ``MESSAGE_ALLOWANCE`` plus one message per KiB of the file:
what the messages of a file can cost stays under about 140 MB plus 1.4
times its size. Real files are far below it: BVLC GoogLeNet's caffemodel
(28 MB) holds 693 messages, MobileNet v1's 772, SqueezeNet's 212, about 5
to 7 per layer, so a net stays under 100,000 up to some 14,000 layers
(ResNet-1001 in Caffe, a BatchNorm, Scale and ReLU after each of its 1,000
convolutions, has about 4,400); a solverstate holds 2 per history blob.

The walk stops where the data stops being a well-formed message (a length
running past its end, a varint of more than 10 bytes, a wire type that does
not exist): the parser fails there too, having built no more messages than
were counted, and reports it.
"""

import dataclasses

from google.protobuf.descriptor import FieldDescriptor

#: Messages any file may hold, whatever its size.
MESSAGE_ALLOWANCE = 100_000
#: Bytes of file for each message beyond the allowance.
BYTES_PER_MESSAGE = 1024
#: Memory one parsed message may take (the measured peak per empty layer).
MESSAGE_MEMORY = 1.4e3

_FIXED_SIZES = {1: 8, 5: 4}


def message_limit(size):
    """The most messages a file of ``size`` bytes may hold."""
    return MESSAGE_ALLOWANCE + size // BYTES_PER_MESSAGE


@dataclasses.dataclass(frozen=True)
class Count:
    """``messages`` counted within the first ``position`` bytes; ``by_field``:
    ``{dotted field path: messages}`` (``"layer"``, ``"layer.blobs"``)."""

    messages: int
    position: int
    by_field: dict


def count_messages(data, message, limit):
    """The messages (every depth, the top-level one not included) in binary
    ``data`` of ``message`` (a generated class), counted until more than
    ``limit`` or the end of the well-formed data."""
    size = len(data)
    # frames: (descriptor, end, dotted path, group number); a group (wire
    # types 3/4, unknown to caffe.proto) is opaque: descriptor None, no end
    stack = [(message.DESCRIPTOR, size, "", None)]
    pos = count = 0
    by_field, names = {}, {}
    while stack:
        descriptor, end, path, group = stack[-1]
        if pos >= end:
            if group is not None or pos > end:
                break  # a group without its end, or a field past its message's end
            stack.pop()
            continue
        if data[pos] < 0x80:  # one-byte varints: most tags and lengths
            tag, pos = data[pos], pos + 1
        else:
            tag, pos = varint_at(data, pos)
            if tag is None or tag < 0:
                break
        number, wire = tag >> 3, tag & 7
        if wire == 2:
            if pos < size and data[pos] < 0x80:
                length, pos = data[pos], pos + 1
            else:
                length, pos = varint_at(data, pos)
                if length is None or length < 0:
                    break
            if pos + length > end:
                break
            key = (path, number, descriptor)
            if key not in names:
                field = descriptor.fields_by_number.get(number) if descriptor else None
                is_message = field is not None and field.type == FieldDescriptor.TYPE_MESSAGE
                names[key] = (f"{path}.{field.name}" if path else field.name,
                              field.message_type) if is_message else None
            if names[key] is None:
                pos += length
                continue
            name, child = names[key]
            count += 1
            by_field[name] = by_field.get(name, 0) + 1
            if count > limit:
                break
            stack.append((child, pos + length, name, None))
        elif wire == 0:
            value, pos = varint_at(data, pos)
            if value is None or value < 0:
                break
        elif wire in _FIXED_SIZES:
            pos += _FIXED_SIZES[wire]
        elif wire == 3:
            stack.append((None, end, path, number))
        elif wire == 4 and group == number:
            stack.pop()
        else:
            break
    return Count(count, min(pos, size), by_field)


def excess_messages(data, message):
    """Why binary ``data`` of ``message`` is refused before parsing (it holds
    more messages than ``message_limit`` allows for its size), or None."""
    limit = message_limit(len(data))
    found = count_messages(data, message, limit)
    if found.messages <= limit:
        return None
    field, most = max(found.by_field.items(), key=lambda item: item[1])
    return (f"holds more than {limit:,} protobuf messages ({found.messages:,} in its first "
            f"{found.position:,} bytes, {most:,} of them `{field}` entries), the most a "
            f"{len(data):,}-byte file may hold ({MESSAGE_ALLOWANCE:,} and one per "
            f"{BYTES_PER_MESSAGE} bytes): refused before parsing, as each parsed message "
            f"takes up to {MESSAGE_MEMORY / 1e3:.1f} KB of memory")


def varint_at(data, pos):
    """``(value, next position)``; ``(None, pos)`` when ``data`` ends inside
    the varint, ``(-1, pos)`` when it is longer than 10 bytes (corrupt)."""
    value = shift = 0
    for i in range(pos, min(pos + 10, len(data))):
        value |= (data[i] & 0x7F) << shift
        shift += 7
        if not data[i] & 0x80:
            return value, i + 1
    return (None, pos) if len(data) - pos < 10 else (-1, pos)

"""Kafka wire primitives: fixed-width ints, varints, strings, bytes, arrays, UUIDs, tagged fields.

Shared by the generated codecs (`codec.py`) and the hand-written hot-path codecs.

Conventions (chosen for speed and zero-copy):
- ``read_*(buf, pos) -> (value, new_pos)``; ``buf`` is any bytes-like object, ideally a
  ``memoryview`` (the ``*_view`` readers then return slices without copying).
- ``write_*(value) -> bytes``; callers collect the pieces in a list for ``b"".join`` or
  ``writelines``.
- Every reader raises `ProtocolError` (never ``IndexError``/``struct.error``) on truncated or
  malformed input, and checks lengths against the bytes that remain *before* allocating, so
  hostile lengths cannot make us allocate or loop absurdly.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

from .errors import ProtocolError

Buf: TypeAlias = bytes | bytearray | memoryview
"""What the readers accept: a flat bytes-like object they can index, slice and measure."""

Reader: TypeAlias = Callable[[Buf, int], tuple[Any, int]]
"""``read_*(buf, pos) -> (value, new_pos)``."""

# ---------------------------------------------------------------------------------------------
# Fixed-width integers. The Struct objects are public so hot paths can unpack several fields
# with one call; the read_/write_ functions are the convenient, checked form.
# ---------------------------------------------------------------------------------------------

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT8 = struct.Struct(">B")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
UINT64 = struct.Struct(">Q")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

pack_int8 = INT8.pack
pack_int16 = INT16.pack
pack_int32 = INT32.pack
pack_int64 = INT64.pack
pack_uint16 = UINT16.pack
pack_uint32 = UINT32.pack
pack_float64 = FLOAT64.pack
pack_bool = BOOL.pack

_unpack_int16 = INT16.unpack_from
_unpack_int32 = INT32.unpack_from

ZERO_UUID = uuid.UUID(int=0)
_ZERO_UUID_BYTES = bytes(16)

EMPTY_TAGGED_FIELDS = b"\x00"
NULL_COMPACT = b"\x00"  # null compact string / bytes / array
NULL_STRING = b"\xff\xff"  # null legacy string (int16 -1)
NULL_BYTES = b"\xff\xff\xff\xff"  # null legacy bytes / array (int32 -1)
EMPTY_COMPACT = b"\x01"  # empty compact string / bytes / array


def truncated(what: str = "data") -> ProtocolError:
    """The error for input that ends too early (returned so callers can ``raise`` it)."""
    return ProtocolError(f"truncated {what}")


def _reader(s: struct.Struct, what: str) -> Reader:
    unpack_from = s.unpack_from
    size = s.size

    def read(buf: Buf, pos: int) -> tuple[Any, int]:
        try:
            return unpack_from(buf, pos)[0], pos + size
        except struct.error:
            raise truncated(what) from None

    read.__name__ = f"read_{what}"
    read.__doc__ = f"Read a big-endian {what}; returns (value, new_pos)."
    return read


read_int8: Callable[[Buf, int], tuple[int, int]] = _reader(INT8, "int8")
read_int16: Callable[[Buf, int], tuple[int, int]] = _reader(INT16, "int16")
read_int32: Callable[[Buf, int], tuple[int, int]] = _reader(INT32, "int32")
read_int64: Callable[[Buf, int], tuple[int, int]] = _reader(INT64, "int64")
read_uint16: Callable[[Buf, int], tuple[int, int]] = _reader(UINT16, "uint16")
read_uint32: Callable[[Buf, int], tuple[int, int]] = _reader(UINT32, "uint32")
read_float64: Callable[[Buf, int], tuple[float, int]] = _reader(FLOAT64, "float64")
read_bool: Callable[[Buf, int], tuple[bool, int]] = _reader(BOOL, "bool")

write_int8 = pack_int8
write_int16 = pack_int16
write_int32 = pack_int32
write_int64 = pack_int64
write_uint16 = pack_uint16
write_uint32 = pack_uint32
write_float64 = pack_float64
write_bool = pack_bool


# ---------------------------------------------------------------------------------------------
# Unsigned varints (protobuf style, as Kafka's ByteUtils). The zig-zag signed ones of record
# fields are strom.record.varint's.
# ---------------------------------------------------------------------------------------------

SMALL_UVARINTS = tuple(bytes((i,)) for i in range(128))


def _read_varbits(buf: Buf, pos: int, max_shift: int) -> tuple[int, int]:
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
            if shift > max_shift:
                raise ProtocolError("varint is too long")
    except IndexError:
        raise truncated("varint") from None


def read_uvarint(buf: Buf, pos: int) -> tuple[int, int]:
    """Unsigned varint of at most 5 bytes (Kafka rejects longer ones)."""
    try:
        b = buf[pos]
    except IndexError:
        raise truncated("varint") from None
    if b < 0x80:
        return b, pos + 1
    return _read_varbits(buf, pos, 28)


def read_uvarlong(buf: Buf, pos: int) -> tuple[int, int]:
    """Unsigned varlong of at most 10 bytes."""
    return _read_varbits(buf, pos, 63)


def write_uvarint(value: int) -> bytes:
    """Unsigned varint (also used for unsigned varlongs)."""
    if 0 <= value < 0x80:
        return SMALL_UVARINTS[value]
    if value < 0:
        raise ProtocolError(f"negative value {value} for an unsigned varint")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


write_uvarlong = write_uvarint


# ---------------------------------------------------------------------------------------------
# Strings. Legacy: int16 length, -1 = null. Compact: uvarint length+1, 0 = null.
# Invalid UTF-8 is replaced (U+FFFD), as Kafka's String decoding does, rather than rejected.
# ---------------------------------------------------------------------------------------------


def _legacy_len(
    buf: Buf,
    pos: int,
    unpack: Callable[[Buf, int], tuple[Any, ...]],
    size: int,
    nullable: bool,
    what: str,
) -> tuple[int, int]:
    try:
        n = unpack(buf, pos)[0]
    except struct.error:
        raise truncated(what) from None
    pos += size
    if n < 0:
        if n == -1 and nullable:
            return -1, pos
        raise ProtocolError(f"invalid {what} length {n}")
    if pos + n > len(buf):
        raise truncated(what)
    return n, pos


def _compact_len(buf: Buf, pos: int, nullable: bool, what: str) -> tuple[int, int]:
    try:
        n = buf[pos]
    except IndexError:
        raise truncated(what) from None
    if n < 0x80:
        pos += 1
    else:
        n, pos = _read_varbits(buf, pos, 28)
    n -= 1
    if n < 0:
        if nullable:
            return -1, pos
        raise ProtocolError(f"null {what} where a non-nullable one is required")
    if pos + n > len(buf):
        raise truncated(what)
    return n, pos


def read_string(buf: Buf, pos: int) -> tuple[str, int]:
    n, pos = _legacy_len(buf, pos, _unpack_int16, 2, False, "string")
    end = pos + n
    return str(buf[pos:end], "utf-8", "replace"), end


def read_nullable_string(buf: Buf, pos: int) -> tuple[str | None, int]:
    n, pos = _legacy_len(buf, pos, _unpack_int16, 2, True, "string")
    if n < 0:
        return None, pos
    end = pos + n
    return str(buf[pos:end], "utf-8", "replace"), end


def read_compact_string(buf: Buf, pos: int) -> tuple[str, int]:
    n, pos = _compact_len(buf, pos, False, "string")
    end = pos + n
    return str(buf[pos:end], "utf-8", "replace"), end


def read_compact_nullable_string(buf: Buf, pos: int) -> tuple[str | None, int]:
    n, pos = _compact_len(buf, pos, True, "string")
    if n < 0:
        return None, pos
    end = pos + n
    return str(buf[pos:end], "utf-8", "replace"), end


def encode_utf8(value: object, what: str = "string") -> bytes:
    if type(value) is str:
        return value.encode()
    if isinstance(value, str):
        return str.encode(value)
    if value is None:
        raise ProtocolError(f"null {what} where a non-nullable one is required")
    raise ProtocolError(f"expected str for {what}, got {type(value).__name__}")


def write_string(value: str) -> bytes:
    b = encode_utf8(value)
    n = len(b)
    if n > 0x7FFF:
        raise ProtocolError(f"string of {n} bytes is too long for an int16 length")
    return pack_int16(n) + b


def write_nullable_string(value: str | None) -> bytes:
    return NULL_STRING if value is None else write_string(value)


def write_compact_string(value: str) -> bytes:
    b = encode_utf8(value)
    n = len(b) + 1
    return (SMALL_UVARINTS[n] if n < 0x80 else write_uvarint(n)) + b


def write_compact_nullable_string(value: str | None) -> bytes:
    return NULL_COMPACT if value is None else write_compact_string(value)


# ---------------------------------------------------------------------------------------------
# Bytes. Legacy: int32 length, -1 = null. Compact: uvarint length+1, 0 = null.
# read_*bytes copy into `bytes`; read_*bytes_view return zero-copy memoryview slices (records).
# ---------------------------------------------------------------------------------------------


def _view(buf: Buf, pos: int, end: int) -> memoryview:
    if isinstance(buf, memoryview):
        return buf[pos:end]
    return memoryview(buf)[pos:end]


def read_bytes(buf: Buf, pos: int) -> tuple[bytes, int]:
    n, pos = _legacy_len(buf, pos, _unpack_int32, 4, False, "bytes")
    end = pos + n
    return bytes(buf[pos:end]), end


def read_nullable_bytes(buf: Buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = _legacy_len(buf, pos, _unpack_int32, 4, True, "bytes")
    if n < 0:
        return None, pos
    end = pos + n
    return bytes(buf[pos:end]), end


def read_compact_bytes(buf: Buf, pos: int) -> tuple[bytes, int]:
    n, pos = _compact_len(buf, pos, False, "bytes")
    end = pos + n
    return bytes(buf[pos:end]), end


def read_compact_nullable_bytes(buf: Buf, pos: int) -> tuple[bytes | None, int]:
    n, pos = _compact_len(buf, pos, True, "bytes")
    if n < 0:
        return None, pos
    end = pos + n
    return bytes(buf[pos:end]), end


def read_bytes_view(buf: Buf, pos: int) -> tuple[memoryview, int]:
    n, pos = _legacy_len(buf, pos, _unpack_int32, 4, False, "bytes")
    end = pos + n
    return _view(buf, pos, end), end


def read_nullable_bytes_view(buf: Buf, pos: int) -> tuple[memoryview | None, int]:
    n, pos = _legacy_len(buf, pos, _unpack_int32, 4, True, "bytes")
    if n < 0:
        return None, pos
    end = pos + n
    return _view(buf, pos, end), end


def read_compact_bytes_view(buf: Buf, pos: int) -> tuple[memoryview, int]:
    n, pos = _compact_len(buf, pos, False, "bytes")
    end = pos + n
    return _view(buf, pos, end), end


def read_compact_nullable_bytes_view(buf: Buf, pos: int) -> tuple[memoryview | None, int]:
    n, pos = _compact_len(buf, pos, True, "bytes")
    if n < 0:
        return None, pos
    end = pos + n
    return _view(buf, pos, end), end


def nbytes(value: Buf) -> int:
    """Length in bytes of a bytes-like object (a memoryview's len() counts items)."""
    return value.nbytes if isinstance(value, memoryview) else len(value)


def write_bytes_length(n: int | None) -> bytes:
    """int32 length prefix for legacy (nullable) bytes; ``None`` means null."""
    return NULL_BYTES if n is None else pack_int32(n)


def write_compact_bytes_length(n: int | None) -> bytes:
    """uvarint length+1 prefix for compact (nullable) bytes; ``None`` means null."""
    if n is None:
        return NULL_COMPACT
    n += 1
    return SMALL_UVARINTS[n] if n < 0x80 else write_uvarint(n)


def _bytes_value(value: object, what: str) -> Buf:
    if isinstance(value, bytes | bytearray | memoryview):
        return value
    if value is None:
        raise ProtocolError(f"null {what} where a non-nullable one is required")
    raise ProtocolError(f"expected a bytes-like value for {what}, got {type(value).__name__}")


def write_bytes(value: Buf) -> bytes:
    b = _bytes_value(value, "bytes")
    return pack_int32(nbytes(b)) + b


def write_nullable_bytes(value: Buf | None) -> bytes:
    return NULL_BYTES if value is None else write_bytes(value)


def write_compact_bytes(value: Buf) -> bytes:
    b = _bytes_value(value, "bytes")
    return write_compact_bytes_length(nbytes(b)) + b


def write_compact_nullable_bytes(value: Buf | None) -> bytes:
    return NULL_COMPACT if value is None else write_compact_bytes(value)


# ---------------------------------------------------------------------------------------------
# Arrays: only the length prefix lives here; -1 from a reader means a null array.
# As in Kafka, a length larger than the bytes that remain is rejected at once (every element
# takes at least one byte), which bounds both allocation and loop count by the input size.
# Strom also refuses any array of more than MAX_ARRAY_ELEMENTS elements before allocating it:
# a Python list costs 8 bytes a slot and more per element, so "no more elements than bytes"
# alone would let a 100 MB request (socket.request.max.bytes) allocate gigabytes. No Kafka
# message comes near the cap.
# ---------------------------------------------------------------------------------------------

MAX_ARRAY_ELEMENTS = 1_000_000


def check_array_count(n: int, left: int) -> None:
    """Refuse an array of `n` elements with `left` bytes remaining, before allocating it."""
    if n > MAX_ARRAY_ELEMENTS:
        raise ProtocolError(f"array of {n} elements exceeds the limit of {MAX_ARRAY_ELEMENTS}")
    if n > left:
        raise ProtocolError(f"array of {n} elements exceeds the {left} bytes left")


def read_array_length(buf: Buf, pos: int) -> tuple[int, int]:
    """int32 array length; returns -1 for null (the caller decides if null is allowed)."""
    try:
        n = _unpack_int32(buf, pos)[0]
    except struct.error:
        raise truncated("array length") from None
    pos += 4
    if n < 0:
        if n == -1:
            return -1, pos
        raise ProtocolError(f"invalid array length {n}")
    check_array_count(n, len(buf) - pos)
    return n, pos


def read_compact_array_length(buf: Buf, pos: int) -> tuple[int, int]:
    """uvarint length+1 array length; returns -1 for null."""
    try:
        n = buf[pos]
    except IndexError:
        raise truncated("array length") from None
    if n < 0x80:
        pos += 1
    else:
        n, pos = _read_varbits(buf, pos, 28)
    n -= 1
    check_array_count(n, len(buf) - pos)
    return n, pos


def write_array_length(n: int | None) -> bytes:
    return NULL_BYTES if n is None else pack_int32(n)


def write_compact_array_length(n: int | None) -> bytes:
    if n is None:
        return NULL_COMPACT
    n += 1
    return SMALL_UVARINTS[n] if n < 0x80 else write_uvarint(n)


SMALL_ARRAY = 64
_ARRAY_TABLES: dict[tuple[str, str], tuple[struct.Struct, ...]] = {}


def fixed_array_structs(code: str, prefix: str = "") -> tuple[struct.Struct, ...]:
    """``Struct(f">{prefix}{n}{code}")`` for n = 0..SMALL_ARRAY, built once per (code, prefix).

    Lets hot paths (un)pack a short array of fixed-width items, optionally together with its
    length prefix (``"B"``: compact length+1 below 128, ``"i"``: legacy int32), in one call.
    """
    table = _ARRAY_TABLES.get((code, prefix))
    if table is None:
        table = tuple(struct.Struct(f">{prefix}{n}{code}") for n in range(SMALL_ARRAY + 1))
        _ARRAY_TABLES[(code, prefix)] = table
    return table


def read_fixed_array(buf: Buf, pos: int, n: int, code: str, size: int) -> tuple[list[Any], int]:
    """``n`` fixed-width items of struct `code` (e.g. ``"i"``); the length was read already."""
    if n <= 0:
        return [], pos
    check_array_count(n, len(buf) - pos)
    if n > (len(buf) - pos) // size:
        raise truncated("array")
    s = fixed_array_structs(code)[n] if n <= SMALL_ARRAY else struct.Struct(f">{n}{code}")
    return list(s.unpack_from(buf, pos)), pos + n * size


def write_fixed_array(values: Sequence[Any], code: str) -> bytes:
    """Items of struct `code`, without the length prefix."""
    n = len(values)
    s = fixed_array_structs(code)[n] if n <= SMALL_ARRAY else struct.Struct(f">{n}{code}")
    return s.pack(*values)


def write_compact_fixed_array(values: Sequence[Any], code: str) -> bytes:
    """Compact length prefix plus items (non-null)."""
    n = len(values)
    if n <= SMALL_ARRAY:
        return fixed_array_structs(code, "B")[n].pack(n + 1, *values)
    return write_compact_array_length(n) + write_fixed_array(values, code)


def write_legacy_fixed_array(values: Sequence[Any], code: str) -> bytes:
    """int32 length prefix plus items (non-null)."""
    n = len(values)
    if n <= SMALL_ARRAY:
        return fixed_array_structs(code, "i")[n].pack(n, *values)
    return pack_int32(n) + write_fixed_array(values, code)


# ---------------------------------------------------------------------------------------------
# UUID: 16 raw bytes; null is written as the zero UUID (as Kafka does).
# ---------------------------------------------------------------------------------------------


def uuid_from_bytes(raw: Buf) -> uuid.UUID:
    return ZERO_UUID if raw == _ZERO_UUID_BYTES else uuid.UUID(bytes=bytes(raw))


def read_uuid(buf: Buf, pos: int) -> tuple[uuid.UUID, int]:
    end = pos + 16
    if end > len(buf):
        raise truncated("uuid")
    return uuid_from_bytes(bytes(buf[pos:end])), end


def uuid_bytes(value: uuid.UUID | None) -> bytes:
    if value is None:
        return _ZERO_UUID_BYTES
    try:
        return value.bytes
    except AttributeError:
        if isinstance(value, bytes | bytearray) and len(value) == 16:
            return bytes(value)
        raise ProtocolError(f"expected a UUID, got {type(value).__name__}") from None


write_uuid = uuid_bytes


# ---------------------------------------------------------------------------------------------
# Tagged fields (KIP-482): uvarint count, then (uvarint tag, uvarint size, bytes) each.
# A section of more than MAX_TAGGED_FIELDS fields is refused before it is read: no message
# defines more than a handful, and each one read costs a loop turn and a dict entry.
# ---------------------------------------------------------------------------------------------

MAX_TAGGED_FIELDS = 10_000


def read_tag_count(buf: Buf, pos: int) -> tuple[int, int]:
    n, pos = read_uvarint(buf, pos)
    if n > MAX_TAGGED_FIELDS:
        raise ProtocolError(f"{n} tagged fields exceed the limit of {MAX_TAGGED_FIELDS}")
    if n > (len(buf) - pos) // 2:  # a tag and a size take at least one byte each
        raise ProtocolError(f"{n} tagged fields cannot fit in {len(buf) - pos} bytes")
    return n, pos


def skip_tagged_fields(buf: Buf, pos: int) -> int:
    """Skip a tagged-field section (all tags unknown to the caller); returns the new pos."""
    try:
        if buf[pos] == 0:
            return pos + 1
    except IndexError:
        raise truncated("tagged fields") from None
    n, pos = read_tag_count(buf, pos)
    size_limit = len(buf)
    for _ in range(n):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > size_limit:
            raise truncated("tagged field")
    return pos


def read_tagged_fields(buf: Buf, pos: int) -> tuple[dict[int, memoryview], int]:
    """Tagged-field section as {tag: raw value bytes (a view)}."""
    try:
        if buf[pos] == 0:
            return {}, pos + 1
    except IndexError:
        raise truncated("tagged fields") from None
    n, pos = read_tag_count(buf, pos)
    out: dict[int, memoryview] = {}
    for _ in range(n):
        tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        end = pos + size
        if end > len(buf):
            raise truncated("tagged field")
        out[tag] = _view(buf, pos, end)
        pos = end
    return out, pos


def write_tagged_fields(fields: Mapping[int, bytes] | Iterable[tuple[int, bytes]] | None) -> bytes:
    """Tagged-field section from {tag: encoded value}, written in ascending tag order."""
    if not fields:
        return EMPTY_TAGGED_FIELDS
    items = sorted(fields.items() if isinstance(fields, Mapping) else fields)
    parts = [write_uvarint(len(items))]
    for tag, value in items:
        parts.append(write_uvarint(tag))
        parts.append(write_uvarint(nbytes(value)))
        parts.append(bytes(value))
    return b"".join(parts)


def byte_view(body: memoryview | bytes | bytearray) -> memoryview:
    """A flat unsigned-byte memoryview of body, without copying."""
    view = body if isinstance(body, memoryview) else memoryview(body)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def check_version(version: int, lowest: int, highest: int, what: str) -> None:
    """Hand-written codecs refuse versions they were not written for."""
    if not lowest <= version <= highest:
        raise ProtocolError(f"unsupported {what} version {version}")

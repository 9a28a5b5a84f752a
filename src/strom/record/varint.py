"""Zig-zag varints, the integer encoding of every record field (Kafka's ``ByteUtils``).

Records use only signed (zig-zag) varints, up to 64 bits for timestamp deltas; the unsigned
varints of the request framing (compact lengths, tagged fields) are ``strom.protocol.primitives``'.
A truncated varint raises ``IndexError``, which the callers' loops turn into
`CorruptRecordError` once per batch rather than per field.
"""

from __future__ import annotations

from strom.record.buffers import Buf
from strom.record.errors import CorruptRecordError


def read_varint(buf: Buf, pos: int) -> tuple[int, int]:
    """Zigzag varint (up to 64 bits) at ``pos``; returns (value, next position)."""
    b = buf[pos]
    pos += 1
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos
    result = b & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("varint too long")


def write_varint(out: bytearray, value: int) -> None:
    """Append ``value`` as a zigzag varint (64-bit range) to ``out``."""
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)

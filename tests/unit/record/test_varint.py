"""Zig-zag varints of record fields: Kafka's encodings, the full 64-bit range, malformed input."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.record.errors import CorruptRecordError
from strom.record.varint import read_varint, write_varint


def _encode(value: int) -> bytes:
    out = bytearray()
    write_varint(out, value)
    return bytes(out)


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        (0, b"\x00"),
        (-1, b"\x01"),
        (1, b"\x02"),
        (-64, b"\x7f"),
        (64, b"\x80\x01"),
        (2**31 - 1, b"\xfe\xff\xff\xff\x0f"),
        (-(2**31), b"\xff\xff\xff\xff\x0f"),
        (-(2**63), b"\xff" * 9 + b"\x01"),
    ],
)
def test_known_encodings(value, raw):
    assert _encode(value) == raw
    assert read_varint(raw + b"tail", 0) == (value, len(raw))
    assert read_varint(memoryview(b"\x00" + raw), 1) == (value, len(raw) + 1)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_round_trip_over_the_64_bit_range(value):
    raw = _encode(value)
    assert len(raw) <= 10
    assert read_varint(raw, 0) == (value, len(raw))


def test_write_appends():
    out = bytearray(b"x")
    write_varint(out, 300)
    assert out == b"x\xd8\x04"


def test_malformed():
    with pytest.raises(CorruptRecordError, match="too long"):
        read_varint(b"\x80" * 10 + b"\x01", 0)  # 11 bytes
    with pytest.raises(IndexError):  # callers turn a truncation into CorruptRecordError
        read_varint(b"\x80\x80", 0)
    with pytest.raises(IndexError):
        read_varint(b"", 0)

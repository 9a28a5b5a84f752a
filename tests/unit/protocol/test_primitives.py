"""Wire primitives: known encodings, round trips, and clean errors on bad input."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.protocol import primitives as p
from strom.protocol.errors import ProtocolError

# ---------------------------------------------------------------------------------------------
# Varints
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "raw"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**31 - 1, b"\xff\xff\xff\xff\x07"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_uvarint_known_encodings(value, raw):
    assert p.write_uvarint(value) == raw
    assert p.read_uvarint(raw + b"tail", 0) == (value, len(raw))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**64 - 1))
def test_uvarlong_round_trip(value):
    raw = p.write_uvarlong(value)
    assert p.read_uvarlong(raw, 0) == (value, len(raw))


def test_varint_errors():
    with pytest.raises(ProtocolError):
        p.read_uvarint(b"", 0)
    with pytest.raises(ProtocolError):
        p.read_uvarint(b"\x80\x80", 0)  # truncated
    with pytest.raises(ProtocolError, match="too long"):
        p.read_uvarint(b"\x80\x80\x80\x80\x80\x01", 0)  # 6 bytes
    with pytest.raises(ProtocolError, match="too long"):
        p.read_uvarlong(b"\x80" * 10 + b"\x01", 0)
    with pytest.raises(ProtocolError):
        p.write_uvarint(-1)


# ---------------------------------------------------------------------------------------------
# Fixed-width ints
# ---------------------------------------------------------------------------------------------


def test_fixed_width_readers():
    raw = struct.pack(">bhiqHId?", -1, -2, -3, -4, 65535, 2**32 - 1, 1.5, True)
    pos = 0
    got = []
    for reader in (
        p.read_int8,
        p.read_int16,
        p.read_int32,
        p.read_int64,
        p.read_uint16,
        p.read_uint32,
        p.read_float64,
        p.read_bool,
    ):
        value, pos = reader(raw, pos)
        got.append(value)
    assert got == [-1, -2, -3, -4, 65535, 2**32 - 1, 1.5, True]
    assert pos == len(raw)
    with pytest.raises(ProtocolError):
        p.read_int64(raw, len(raw) - 7)
    assert p.write_int32(-2) == b"\xff\xff\xff\xfe"


# ---------------------------------------------------------------------------------------------
# Strings and bytes
# ---------------------------------------------------------------------------------------------

_TEXT = st.text(max_size=50)


@settings(max_examples=100, deadline=None)
@given(_TEXT)
def test_strings_round_trip(text):
    for write, read in (
        (p.write_string, p.read_string),
        (p.write_nullable_string, p.read_nullable_string),
        (p.write_compact_string, p.read_compact_string),
        (p.write_compact_nullable_string, p.read_compact_nullable_string),
    ):
        raw = write(text)
        assert read(memoryview(raw + b"!"), 0) == (text, len(raw))


def test_string_encodings():
    assert p.write_string("ab") == b"\x00\x02ab"
    assert p.write_nullable_string(None) == b"\xff\xff"
    assert p.write_compact_string("ab") == b"\x03ab"
    assert p.write_compact_nullable_string(None) == b"\x00"
    assert p.read_nullable_string(b"\xff\xff", 0) == (None, 2)
    assert p.read_compact_nullable_string(b"\x00", 0) == (None, 1)
    long = "é" * 100  # 200 bytes: a two-byte compact length
    assert p.write_compact_string(long)[:2] == b"\xc9\x01"


def test_invalid_utf8_is_replaced_like_kafka():
    assert p.read_compact_string(b"\x03\xff\xfe", 0) == ("\ufffd\ufffd", 3)


@pytest.mark.parametrize(
    ("reader", "raw"),
    [
        (p.read_string, b"\xff\xff"),  # null for non-nullable
        (p.read_string, b"\xff\xfe"),  # -2
        (p.read_nullable_string, b"\xff\xfe"),
        (p.read_string, b"\x00\x05abc"),  # truncated
        (p.read_string, b"\x00"),
        (p.read_compact_string, b"\x00"),  # null for non-nullable
        (p.read_compact_string, b"\x05abc"),
        (p.read_compact_nullable_string, b""),
        (p.read_compact_nullable_string, b"\xff\xff\xff\xff\x0f"),  # 4 GiB claimed
        (p.read_bytes, b"\xff\xff\xff\xff"),
        (p.read_bytes, b"\x7f\xff\xff\xff"),
        (p.read_nullable_bytes, b"\xff\xff\xff\xfe"),
        (p.read_compact_bytes, b"\x00"),
        (p.read_compact_nullable_bytes_view, b"\x03a"),
        (p.read_nullable_bytes_view, b"\x00\x00\x00\x02a"),
    ],
)
def test_bad_strings_and_bytes_raise_protocol_error(reader, raw):
    with pytest.raises(ProtocolError):
        reader(raw, 0)


def test_bytes_copy_or_view():
    raw = bytearray(b"\x00\x00\x00\x03abc" + b"\x04xyz" + b"\xff\xff\xff\xff" + b"\x00")
    value, pos = p.read_bytes(raw, 0)
    assert (value, type(value), pos) == (b"abc", bytes, 7)
    view, pos = p.read_compact_bytes_view(raw, pos)
    assert isinstance(view, memoryview) and view.obj is raw and bytes(view) == b"xyz"
    assert p.read_nullable_bytes_view(raw, pos) == (None, pos + 4)
    assert p.read_compact_nullable_bytes(raw, pos + 4) == (None, pos + 5)
    assert p.write_bytes(b"ab") == b"\x00\x00\x00\x02ab"
    assert p.write_nullable_bytes(None) == b"\xff\xff\xff\xff"
    assert p.write_compact_bytes(memoryview(b"ab")) == b"\x03ab"
    assert p.write_compact_nullable_bytes(None) == b"\x00"
    assert p.write_bytes_length(None) == p.NULL_BYTES
    assert p.write_compact_bytes_length(300) == p.write_uvarint(301)
    with pytest.raises(ProtocolError):
        p.write_bytes(None)
    with pytest.raises(ProtocolError):
        p.write_compact_bytes("text")
    with pytest.raises(ProtocolError):
        p.write_string(None)
    with pytest.raises(ProtocolError):
        p.write_string("x" * 40000)


# ---------------------------------------------------------------------------------------------
# Arrays
# ---------------------------------------------------------------------------------------------


def test_array_lengths():
    assert p.read_array_length(b"\x00\x00\x00\x02ab", 0) == (2, 4)
    assert p.read_array_length(b"\xff\xff\xff\xff", 0) == (-1, 4)
    assert p.read_compact_array_length(b"\x03abc", 0) == (2, 1)
    assert p.read_compact_array_length(b"\x00", 0) == (-1, 1)
    assert p.write_array_length(None) == b"\xff\xff\xff\xff"
    assert p.write_compact_array_length(None) == b"\x00"
    assert p.write_compact_array_length(2) == b"\x03"
    for reader, raw in (
        (p.read_array_length, b"\x00\x00\x00\x05ab"),  # more elements than bytes left
        (p.read_array_length, b"\xff\xff\xff\xfe"),  # -2
        (p.read_array_length, b"\x00\x00"),
        (p.read_compact_array_length, b"\xff\xff\xff\xff\x07"),
        (p.read_compact_array_length, b""),
    ):
        with pytest.raises(ProtocolError):
            reader(raw, 0)


@pytest.mark.parametrize("n", [0, 1, 3, 64, 65, 200])
def test_fixed_arrays(n):
    values = list(range(-n, n, 2))[:n]
    raw = p.write_fixed_array(values, "i")
    assert p.read_fixed_array(raw, 0, n, "i", 4) == (values, 4 * n)
    assert p.write_compact_fixed_array(values, "i") == p.write_compact_array_length(n) + raw
    assert p.write_legacy_fixed_array(values, "i") == p.write_array_length(n) + raw
    if n:
        with pytest.raises(ProtocolError):
            p.read_fixed_array(raw[:-1], 0, n, "i", 4)


# ---------------------------------------------------------------------------------------------
# UUID and tagged fields
# ---------------------------------------------------------------------------------------------


def test_uuid():
    u = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert p.read_uuid(u.bytes + b"x", 0) == (u, 16)
    assert p.read_uuid(bytes(16), 0)[0] is p.ZERO_UUID
    assert p.write_uuid(None) == bytes(16)
    assert p.write_uuid(u) == u.bytes
    with pytest.raises(ProtocolError):
        p.read_uuid(bytes(15), 0)
    with pytest.raises(ProtocolError):
        p.write_uuid("not-a-uuid")


def test_tagged_fields_round_trip_and_skip():
    raw = p.write_tagged_fields({10: b"", 2: b"ab", 300: b"x" * 200})
    assert raw[:1] == b"\x03"
    fields, pos = p.read_tagged_fields(memoryview(raw + b"after"), 0)
    assert pos == len(raw)
    assert {k: bytes(v) for k, v in fields.items()} == {2: b"ab", 10: b"", 300: b"x" * 200}
    assert list(fields) == [2, 10, 300]  # written in ascending tag order
    assert p.skip_tagged_fields(raw + b"after", 0) == len(raw)
    assert p.write_tagged_fields(None) == p.EMPTY_TAGGED_FIELDS == b"\x00"
    assert p.skip_tagged_fields(b"\x00", 0) == 1
    assert p.read_tagged_fields(b"\x00", 0) == ({}, 1)


@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\x01",  # count without fields
        b"\x01\x00\x05ab",  # size beyond the buffer
        b"\xff\xff\xff\xff\x07",  # absurd count
        b"\x02\x00\x00",  # second field missing
    ],
)
def test_bad_tagged_fields_raise_protocol_error(raw):
    with pytest.raises(ProtocolError):
        p.skip_tagged_fields(raw, 0)
    with pytest.raises(ProtocolError):
        p.read_tagged_fields(raw, 0)

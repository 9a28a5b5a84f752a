"""strom.record.columns (the C decoder) against the Python reference decoder, on batches built
by Strom's encoder: every codec, nulls, headers, offset windows, control batches, aborted
transactions, partial and corrupt input."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strom.record.batch import iter_batches
from strom.record.columns import BinaryBuffers, Columns, decode_columns
from strom.record.compression import (
    COMPRESSION_GZIP,
    COMPRESSION_LZ4,
    COMPRESSION_NONE,
    COMPRESSION_SNAPPY,
    COMPRESSION_ZSTD,
)
from strom.record.errors import CorruptRecordError
from strom.record.records import Record, build_batch, control_batch, decode_records


def _binary(col: BinaryBuffers, n: int) -> list[bytes | None]:
    offsets = struct.unpack(f"={n + 1}i", col.offsets)
    out: list[bytes | None] = []
    for i in range(n):
        valid = col.validity is None or col.validity[i >> 3] >> (i & 7) & 1
        out.append(col.data[offsets[i]:offsets[i + 1]] if valid else None)
    if col.validity is None:
        assert col.nulls == 0
    else:
        assert col.nulls == out.count(None) > 0
    return out


def _rows(c: Columns) -> list[tuple]:
    n = c.rows
    offsets = struct.unpack(f"={n}q", c.offsets)
    stamps = struct.unpack(f"={n}q", c.timestamps)
    types = struct.unpack(f"={n}i", c.timestamp_types)
    keys, values = _binary(c.keys, n), _binary(c.values, n)
    headers: list[list[tuple[str, bytes | None]]] = [[] for _ in range(n)]
    if c.headers is not None:
        h = c.headers
        bounds = struct.unpack(f"={n + 1}i", h.offsets)
        total = bounds[-1]
        hk, hv = _binary(h.keys, total), _binary(h.values, total)
        for i in range(n):
            present = h.validity is None or h.validity[i >> 3] >> (i & 7) & 1
            entries = [(hk[j].decode(), hv[j]) for j in range(bounds[i], bounds[i + 1])]
            assert bool(present) == bool(entries)
            headers[i] = entries
    return [(offsets[i], stamps[i], types[i], keys[i], values[i], headers[i]) for i in range(n)]


def _expected(buf: bytes, lo: int, hi: int) -> list[tuple]:
    out = []
    for pos, h in iter_batches(buf):
        if h.is_control:
            continue
        for r in decode_records(buf[pos:pos + h.size]):
            if lo <= r.offset < hi:
                out.append((r.offset, r.timestamp * 1000, h.timestamp_type, r.key, r.value,
                            list(r.headers)))
    return out


records_st = st.lists(st.tuples(
    st.integers(0, 3),  # offset gap
    st.integers(-(2**40), 2**40),
    st.none() | st.binary(max_size=20),
    st.none() | st.binary(max_size=40),
    st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
), min_size=1, max_size=12)


def _batch(spec: list, base: int, codec: int, log_append: bool) -> tuple[bytes, int]:
    recs, off = [], base
    for gap, ts, k, v, hs in spec:
        recs.append(Record(off, ts, k, v, hs))
        off += gap + 1
    return build_batch(recs, base_offset=base, compression=codec,
                       timestamp_type=1 if log_append else 0,
                       max_timestamp=123456789 if log_append else None), off


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(records_st, st.sampled_from(
    [COMPRESSION_NONE, COMPRESSION_NONE, COMPRESSION_GZIP, COMPRESSION_SNAPPY, COMPRESSION_LZ4,
     COMPRESSION_ZSTD]), st.booleans()), min_size=1, max_size=4),
       st.integers(0, 30), st.integers(0, 60), st.booleans())
def test_matches_the_reference_decoder(batches: list, lo: int, width: int, headers: bool) -> None:
    buf, off = b"", 0
    for spec, codec, log_append in batches:
        b, off = _batch(spec, off, codec, log_append)
        buf += b
    got = decode_columns(buf, lo, lo + width, headers=headers)
    want = _expected(buf, lo, lo + width)
    if not headers:
        want = [(*w[:5], []) for w in want]
    assert _rows(got) == want
    assert got.next_offset == _last(buf) + 1


def _last(buf: bytes) -> int:
    last = -1
    for _, h in iter_batches(buf):
        last = h.last_offset
    return last


def test_partial_trailing_batch_is_left_for_the_next_fetch() -> None:
    a = build_batch([Record(0, 1, b"k", b"v")], base_offset=0)
    b = build_batch([Record(1, 2, None, b"w")], base_offset=1)
    for cut in range(1, len(b)):
        got = decode_columns(a + b[:cut], 0, 10)
        assert (got.rows, got.next_offset) == (1, 1)
    assert decode_columns(b"", 0, 10).next_offset == -1


def test_control_batches_and_aborted_transactions() -> None:
    pid_a, pid_b = 7, 9
    txn = dict(transactional=True, producer_epoch=0)
    buf = (build_batch([Record(0, 1, None, b"a0")], base_offset=0, producer_id=pid_a, **txn)
           + build_batch([Record(1, 1, None, b"b1")], base_offset=1, producer_id=pid_b, **txn)
           + control_batch(commit=False, producer_id=pid_a, producer_epoch=0,
                           coordinator_epoch=0, timestamp=1, base_offset=2)
           + build_batch([Record(3, 1, None, b"a3")], base_offset=3, producer_id=pid_a, **txn)
           + control_batch(commit=True, producer_id=pid_b, producer_epoch=0,
                           coordinator_epoch=0, timestamp=1, base_offset=4)
           + build_batch([Record(5, 1, None, b"plain")], base_offset=5))
    uncommitted = decode_columns(buf, 0, 100)
    assert [r[4] for r in _rows(uncommitted)] == [b"a0", b"b1", b"a3", b"plain"]
    assert uncommitted.next_offset == 6
    committed = decode_columns(buf, 0, 100, aborted=[(pid_a, 0)])
    assert [r[4] for r in _rows(committed)] == [b"b1", b"a3", b"plain"]


def test_check_crcs() -> None:
    buf = bytearray(build_batch([Record(0, 1, b"k", b"value")]))
    decode_columns(bytes(buf), 0, 1, check_crcs=True)
    buf[-2] ^= 1  # a byte of the value
    with pytest.raises(CorruptRecordError, match="CRC"):
        decode_columns(bytes(buf), 0, 1, check_crcs=True)
    assert decode_columns(bytes(buf), 0, 1).rows == 1  # librdkafka's default: not checked


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_damaged_bytes_raise_a_clear_error_or_decode(data: st.DataObject) -> None:
    """Flipped, cut or inserted bytes never crash or read out of bounds: either a decode or
    CorruptRecordError."""
    buf = bytearray(build_batch([Record(i, i, b"k" * i, b"v" * i, [("h", b"x")]) for i in range(5)]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(12, len(buf) - 1))
        buf[i] = data.draw(st.integers(0, 255))
    with contextlib.suppress(CorruptRecordError):
        decode_columns(bytes(buf), 0, 100, headers=True)


@given(st.binary(max_size=300))
@settings(max_examples=300, deadline=None)
def test_random_bytes(buf: bytes) -> None:
    with contextlib.suppress(CorruptRecordError):
        decode_columns(b"\0" * 8 + struct.pack(">i", len(buf) + 49) + buf, 0, 2**62,
                       headers=True, aborted=[(1, 0)])


def test_offsets_at_the_end_of_the_int64_range_do_not_overflow() -> None:
    """Hostile base offsets near 2^63 (a signed overflow in C is undefined behaviour): a batch
    whose offsets run past the int64 range is skipped, the one before it is decoded."""
    top = 2**63 - 2
    buf = (build_batch([Record(top, 1, None, b"v")], base_offset=top)
           + build_batch([Record(top + 1 + i, 1, None, b"w") for i in range(3)],
                         base_offset=top + 1))
    got = decode_columns(buf, 0, 2**63 - 1)
    assert struct.unpack(f"={got.rows}q", got.offsets) == (top,)

"""Fetched record batches as column buffers, for consumers that hand records to a columnar
engine (the Spark source) and must not pay for a Python object per record.

The decoding itself is the C extension ``strom.record._columns``: one call walks every batch of
a partition's fetched bytes. This module adds what needs a library: compressed batches are
inflated first (cramjam, as everywhere in Strom), and CRCs are checked on request (crc32c).
Buffers come out in Arrow's layout (int32 offsets, LSB validity bitmaps) but as plain ``bytes``:
the record package does not depend on pyarrow.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from strom.record import _columns
from strom.record.batch import (
    COMPRESSION_MASK,
    LOG_OVERHEAD,
    RECORDS_OFFSET,
    crc_ok,
    iter_batches,
)
from strom.record.buffers import Buf
from strom.record.compression import decompress
from strom.record.errors import CorruptRecordError

_LENGTH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_LENGTH_AT, _ATTRIBUTES_AT = 8, 21


class BinaryBuffers(NamedTuple):
    """One binary or string column: ``rows + 1`` int32 offsets, the bytes, validity (None when
    nothing is null) and the null count."""

    offsets: bytes
    data: bytes
    validity: bytes | None
    nulls: int


class HeaderBuffers(NamedTuple):
    """Records' headers as a list of (key, value) entries: list offsets, list validity (null for
    a record without headers), its null count, and the entries' keys and values."""

    offsets: bytes
    validity: bytes | None
    nulls: int
    keys: BinaryBuffers
    values: BinaryBuffers


class Columns(NamedTuple):
    """The data records of a fetch, one entry per record, in offset order.

    ``timestamps`` are microseconds (int64), ``timestamp_types`` Kafka's ids (int32: 0
    CreateTime, 1 LogAppendTime). ``next_offset`` is the offset after the last complete batch
    (control and skipped batches included; -1 when the bytes held no complete batch): where the
    next fetch starts.
    """

    rows: int
    offsets: bytes
    timestamps: bytes
    timestamp_types: bytes
    keys: BinaryBuffers
    values: BinaryBuffers
    headers: HeaderBuffers | None
    next_offset: int


def _inflated(buf: Buf, complete: int) -> bytearray:
    """The complete batches of ``buf`` with every compressed records section inflated in
    place of the compressed one (length and attributes patched; the CRC is not recomputed)."""
    out = bytearray()
    mv = memoryview(buf)[:complete]
    for pos, h in iter_batches(mv):
        end = pos + h.size
        if not h.compression:
            out += mv[pos:end]
            continue
        records = decompress(h.compression, mv[pos + RECORDS_OFFSET:end])
        start = len(out)
        out += mv[pos:pos + RECORDS_OFFSET]
        out += records
        _LENGTH.pack_into(out, start + _LENGTH_AT, RECORDS_OFFSET - LOG_OVERHEAD + len(records))
        _ATTRIBUTES.pack_into(out, start + _ATTRIBUTES_AT, h.attributes & ~COMPRESSION_MASK)
    return out


def _check_crcs(buf: Buf, complete: int) -> None:
    mv = memoryview(buf)[:complete]
    for pos, h in iter_batches(mv):
        if not crc_ok(mv, pos, h):
            raise CorruptRecordError(
                f"record batch at offset {h.base_offset} is corrupt (CRC mismatch)")


def decode_columns(buf: Buf, lo: int, hi: int, *, headers: bool = False,
                   aborted: list[tuple[int, int]] | None = None,
                   check_crcs: bool = False) -> Columns:
    """Decode the complete v2 batches at the front of ``buf`` (a partition's records from a
    fetch response; a trailing partial batch is left for the next fetch), keeping data records
    with offsets in ``[lo, hi)``.

    Control batches are skipped. ``aborted`` (read_committed: the fetch response's aborted
    transactions as (producer id, first offset)) also skips the batches of those transactions,
    by the Java consumer's rule. Raises ``CorruptRecordError`` on bytes that do not frame or
    decode as v2 batches.
    """
    try:
        complete, compressed = _columns.scan(buf)
        if check_crcs:
            _check_crcs(buf, complete)
        data: Buf = _inflated(buf, complete) if compressed else memoryview(buf)[:complete]
        packed = None
        if aborted:
            pairs = sorted(aborted, key=lambda a: a[1])
            packed = struct.pack(f"={2 * len(pairs)}q", *(v for p in pairs for v in p))
        rows, offsets, ts, types, keys, values, hdrs, next_offset, _ = _columns.decode(
            data, lo, hi, headers, packed)
    except ValueError as e:
        raise CorruptRecordError(str(e)) from e
    return Columns(rows, offsets, ts, types, BinaryBuffers(*keys), BinaryBuffers(*values),
                   None if hdrs is None else HeaderBuffers(
                       hdrs[0], hdrs[1], hdrs[2], BinaryBuffers(*hdrs[3]),
                       BinaryBuffers(*hdrs[4])),
                   next_offset)

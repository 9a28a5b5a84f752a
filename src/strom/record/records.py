"""Records inside a v2 batch: decoding, encoding into new batches, and control records.

The slow paths: recompression, compacted topics' key checks, timestamp lookups, transaction
markers, the coordinators' and metadata logs, tools and tests. Produce and Fetch never get here.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import NamedTuple

from strom.record.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    CRC_OFFSET,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_V2,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    NO_TIMESTAMP,
    RECORD_BATCH_OVERHEAD,
    RECORDS_OFFSET,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    U32,
    compute_crc,
    read_header,
)
from strom.record.buffers import Buf
from strom.record.compression import COMPRESSION_NONE, compress, decompress
from strom.record.errors import CorruptRecordError
from strom.record.varint import read_varint, write_varint

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

_CONTROL_KEY = struct.Struct(">hh")  # version, type
_CONTROL_VALUE = struct.Struct(">hi")  # version, coordinator epoch


class Record(NamedTuple):
    """One record with absolute offset and timestamp (as a consumer sees it)."""

    offset: int = 0
    timestamp: int = NO_TIMESTAMP
    key: bytes | None = None
    value: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] = ()


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    end = pos + n
    if end > len(buf):
        raise CorruptRecordError("record field runs past the end of the batch")
    return buf[pos:end], end


def records_section(batch: Buf) -> bytes:
    """The decompressed records bytes of one batch (the part after the 61-byte header)."""
    mv = memoryview(batch)
    h = read_header(mv, 0)
    body = mv[RECORDS_OFFSET : LOG_OVERHEAD + h.length]
    return decompress(h.compression, body) if h.compression else bytes(body)


def decode_records(batch_bytes: Buf) -> list[Record]:
    """Decode every record of one v2 batch (slow path: tools, recompression, key checks)."""
    mv = memoryview(batch_bytes)
    if len(mv) < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError("batch shorter than its header")
    h = read_header(mv, 0)
    if h.magic != MAGIC_V2:
        raise CorruptRecordError(f"unsupported magic {h.magic}")
    if LOG_OVERHEAD + h.length > len(mv):
        raise CorruptRecordError("batch is truncated")
    buf = records_section(mv)
    log_append = h.attributes & TIMESTAMP_TYPE_MASK
    base_offset, base_ts, max_ts = h.base_offset, h.base_timestamp, h.max_timestamp
    out: list[Record] = []
    pos = 0
    try:
        for _ in range(h.records_count):
            length, pos = read_varint(buf, pos)
            start = pos
            pos += 1  # record attributes (unused)
            ts_delta, pos = read_varint(buf, pos)
            off_delta, pos = read_varint(buf, pos)
            key, pos = _read_bytes(buf, pos)
            value, pos = _read_bytes(buf, pos)
            n_headers, pos = read_varint(buf, pos)
            if n_headers < 0:
                raise CorruptRecordError(f"negative header count {n_headers}")
            headers = []
            for _ in range(n_headers):
                hk, pos = _read_bytes(buf, pos)
                if hk is None:
                    raise CorruptRecordError("null header key")
                hv, pos = _read_bytes(buf, pos)
                headers.append((hk.decode("utf-8"), hv))
            if pos - start != length:
                raise CorruptRecordError("record length does not match its contents")
            ts = max_ts if log_append else base_ts + ts_delta
            out.append(Record(base_offset + off_delta, ts, key, value, headers))
    except IndexError as e:
        raise CorruptRecordError("record runs past the end of the batch") from e
    except UnicodeDecodeError as e:
        raise CorruptRecordError("header key is not UTF-8") from e
    if pos != len(buf):
        raise CorruptRecordError(f"{len(buf) - pos} unconsumed bytes after the last record")
    return out


def records_have_keys(batch_bytes: Buf) -> bool:
    """True when every record of the batch has a non-null key (compacted topics need one)."""
    mv = memoryview(batch_bytes)
    h = read_header(mv, 0)
    buf = records_section(mv)
    pos = 0
    try:
        for _ in range(h.records_count):
            length, pos = read_varint(buf, pos)
            end = pos + length
            if length < 0 or end > len(buf):  # a negative length would walk back forever
                raise CorruptRecordError(f"record length {length} does not fit the batch")
            pos += 1
            _, pos = read_varint(buf, pos)
            _, pos = read_varint(buf, pos)
            klen, pos = read_varint(buf, pos)
            if klen < 0:
                return False
            pos = end
    except IndexError as e:
        raise CorruptRecordError("record runs past the end of the batch") from e
    return True


def _encode_records(records: Sequence[Record], base_offset: int, base_ts: int) -> bytearray:
    out = bytearray()
    body = bytearray()
    for r in records:
        body.clear()
        body.append(0)  # record attributes
        write_varint(body, r.timestamp - base_ts)
        delta = r.offset - base_offset
        if delta < 0:
            raise ValueError(f"record offset {r.offset} is below the base offset {base_offset}")
        write_varint(body, delta)
        for field in (r.key, r.value):
            if field is None:
                body.append(1)  # zigzag(-1)
            else:
                write_varint(body, len(field))
                body += field
        write_varint(body, len(r.headers))
        for hk, hv in r.headers:
            kb = hk.encode("utf-8")
            write_varint(body, len(kb))
            body += kb
            if hv is None:
                body.append(1)
            else:
                write_varint(body, len(hv))
                body += hv
        write_varint(out, len(body))
        out += body
    return out


def build_batch(
    records: Iterable[Record],
    *,
    base_offset: int = 0,
    compression: int = COMPRESSION_NONE,
    timestamp_type: int = TIMESTAMP_CREATE_TIME,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression_level: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Encode one v2 batch. Offset deltas are ``record.offset - base_offset``.

    The base timestamp is the first record's, the max timestamp the largest record timestamp
    (or ``max_timestamp`` when given, e.g. the log-append time).
    """
    recs = list(records)
    if recs:
        base_ts = recs[0].timestamp
        max_ts = max(r.timestamp for r in recs)
        last_delta = recs[-1].offset - base_offset
    else:
        base_ts = max_ts = NO_TIMESTAMP
        last_delta = 0
    if max_timestamp is not None:
        max_ts = max_timestamp
    body: bytes | bytearray = _encode_records(recs, base_offset, base_ts)
    if compression:
        body = compress(compression, body, compression_level)
    attrs = (compression & COMPRESSION_MASK) | (TIMESTAMP_TYPE_MASK if timestamp_type else 0)
    if transactional:
        attrs |= TRANSACTIONAL_MASK
    if control:
        attrs |= CONTROL_MASK
    buf = bytearray(RECORD_BATCH_OVERHEAD + len(body))
    HEADER_STRUCT.pack_into(
        buf, 0, base_offset, len(buf) - LOG_OVERHEAD, partition_leader_epoch, MAGIC_V2, 0,
        attrs, last_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence, len(recs),
    )  # fmt: skip
    buf[RECORDS_OFFSET:] = body
    U32.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
    return bytes(buf)


def control_batch(
    *,
    commit: bool,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp: int,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch (one control record: COMMIT or ABORT)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _CONTROL_VALUE.pack(0, coordinator_epoch)
    return build_batch(
        [Record(base_offset, timestamp, key, value)],
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def parse_control_record(key: bytes | None, value: bytes | None) -> tuple[int, int]:
    """Return (marker type, coordinator epoch) of a control record (-1 epoch if no value)."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key too short")
    _version, kind = _CONTROL_KEY.unpack_from(key, 0)
    epoch = _CONTROL_VALUE.unpack_from(value, 0)[1] if value and len(value) >= 6 else -1
    return kind, epoch

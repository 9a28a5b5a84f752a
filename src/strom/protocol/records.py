"""Kafka v2 record batches (magic 2): header access, in-place patching, decoding and building.

The broker's hot paths only touch the fixed 61-byte batch header (and CRC32C over the batch), so
everything there works on offsets into a buffer with ``struct``. Record-level decoding and
building (``decode_records``/``build_batch``) is for slow paths: recompression, compacted-topic
key checks, timestamp lookups, tools and tests. No I/O happens in this module.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple

import cramjam
from crc32c import crc32c

# --- header layout (byte offsets from the start of a batch) -------------------------------------
BASE_OFFSET_OFFSET = 0  # i64
LENGTH_OFFSET = 8  # i32: bytes after this field
PARTITION_LEADER_EPOCH_OFFSET = 12  # i32, not covered by the CRC
MAGIC_OFFSET = 16  # i8
CRC_OFFSET = 17  # u32, CRC32C over attributes..end
ATTRIBUTES_OFFSET = 21  # i16
LAST_OFFSET_DELTA_OFFSET = 23  # i32
BASE_TIMESTAMP_OFFSET = 27  # i64
MAX_TIMESTAMP_OFFSET = 35  # i64
PRODUCER_ID_OFFSET = 43  # i64
PRODUCER_EPOCH_OFFSET = 51  # i16
BASE_SEQUENCE_OFFSET = 53  # i32
RECORDS_COUNT_OFFSET = 57  # i32
RECORDS_OFFSET = 61

LOG_OVERHEAD = 12  # base offset + length: the part not counted by the length field
RECORD_BATCH_OVERHEAD = 61
MIN_BATCH_LENGTH = RECORD_BATCH_OVERHEAD - LOG_OVERHEAD  # smallest legal value of the length field
MAGIC_V2 = 2

# --- attributes ----------------------------------------------------------------------------------
COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08  # set: LogAppendTime
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40  # KIP-534, set by the log cleaner

COMPRESSION_NONE = 0
COMPRESSION_GZIP = 1
COMPRESSION_SNAPPY = 2
COMPRESSION_LZ4 = 3
COMPRESSION_ZSTD = 4
COMPRESSION_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
COMPRESSION_CODES = {"none": 0, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
_HEAD_STRUCT = struct.Struct(">qi")  # base offset + length
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
_CONTROL_KEY = struct.Struct(">hh")
_CONTROL_VALUE = struct.Struct(">hi")
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class CorruptRecordError(ValueError):
    """Bytes that cannot be a valid v2 batch or record (maps to Kafka CORRUPT_MESSAGE)."""


class BatchHeader(NamedTuple):
    """The fixed 61-byte header of a v2 batch, as unpacked by ``read_header``."""

    base_offset: int
    length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Total bytes of the batch including base offset and length fields."""
        return self.length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id > NO_PRODUCER_ID


_new_header = tuple.__new__
_unpack_header = HEADER_STRUCT.unpack_from


def read_header(buf, pos: int = 0) -> BatchHeader:
    """Unpack the batch header at ``pos``; the caller guarantees 61 bytes are there."""
    return _new_header(BatchHeader, _unpack_header(buf, pos))


def iter_batches(buf) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete batch in concatenated batches.

    Stops silently at a trailing partial batch (as a fetch response may end with one). A length
    field too small for a v2 header raises ``CorruptRecordError``: nothing after it can be framed.
    """
    end = len(buf)
    pos = 0
    while pos + RECORD_BATCH_OVERHEAD <= end:
        h = _new_header(BatchHeader, _unpack_header(buf, pos))
        if h.length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {h.length} at position {pos} is too small")
        nxt = pos + LOG_OVERHEAD + h.length
        if nxt > end:
            return
        yield pos, h
        pos = nxt


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC32C of a batch's attributes..end, as stored in the CRC field."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def crc_ok(buf, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC matches the batch bytes."""
    end = pos + LOG_OVERHEAD + header.length
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) == header.crc


def patch_base_offset(buf, pos: int, base_offset: int) -> None:
    """Overwrite the base offset (not covered by the CRC, so no recomputation)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def patch_leader_epoch(buf, pos: int, epoch: int) -> None:
    """Overwrite the partition leader epoch (not covered by the CRC)."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf, pos: int, ts: int) -> None:
    """Mark the batch LogAppendTime with max timestamp ``ts`` and recompute its CRC."""
    attrs = _I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    _I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    length = _I32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
    _U32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, length + LOG_OVERHEAD))


# --- compression -------------------------------------------------------------------------------


def _snappy_decompress(data) -> bytes:
    """Raw snappy (librdkafka) or xerial-framed snappy (Java clients)."""
    mv = memoryview(data)
    if len(mv) > 16 and bytes(mv[:8]) == _XERIAL_MAGIC:
        out = []
        pos, end = 16, len(mv)
        while pos < end:
            if pos + 4 > end:
                raise CorruptRecordError("truncated xerial snappy block header")
            n = _I32.unpack_from(mv, pos)[0]
            pos += 4
            if n < 0 or pos + n > end:
                raise CorruptRecordError("truncated xerial snappy block")
            out.append(bytes(cramjam.snappy.decompress_raw(mv[pos : pos + n])))
            pos += n
        return b"".join(out)
    return bytes(cramjam.snappy.decompress_raw(mv))


def decompress(codec: int, data) -> bytes:
    """Decompress a batch's records section."""
    try:
        if codec == COMPRESSION_GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec == COMPRESSION_SNAPPY:
            return _snappy_decompress(data)
        if codec == COMPRESSION_LZ4:
            return bytes(cramjam.lz4.decompress(data))
        if codec == COMPRESSION_ZSTD:
            return bytes(cramjam.zstd.decompress(data))
    except CorruptRecordError:
        raise
    except Exception as e:  # cramjam raises its own DecompressionError
        raise CorruptRecordError(f"cannot decompress {COMPRESSION_NAMES[codec]}: {e}") from e
    if codec == COMPRESSION_NONE:
        return bytes(data)
    raise CorruptRecordError(f"unknown compression codec {codec}")


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a records section; ``level`` None (or -1) means the codec's default."""
    if level is not None and level < 0:
        level = None
    if codec == COMPRESSION_NONE:
        return bytes(data)
    if codec == COMPRESSION_GZIP:
        return bytes(cramjam.gzip.compress(data, level=level))
    if codec == COMPRESSION_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == COMPRESSION_LZ4:
        return bytes(cramjam.lz4.compress(data, level=level))
    if codec == COMPRESSION_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=level))
    raise ValueError(f"unknown compression codec {codec}")


# --- varints -----------------------------------------------------------------------------------


def read_varint(buf: bytes, pos: int) -> tuple[int, int]:
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
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


# --- records -----------------------------------------------------------------------------------


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


def records_section(batch) -> bytes:
    """The decompressed records bytes of one batch (the part after the 61-byte header)."""
    mv = memoryview(batch)
    h = read_header(mv, 0)
    body = mv[RECORDS_OFFSET : LOG_OVERHEAD + h.length]
    return decompress(h.compression, body) if h.compression else bytes(body)


def decode_records(batch_bytes) -> list[Record]:
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


def records_have_keys(batch_bytes) -> bool:
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
    body = _encode_records(recs, base_offset, base_ts)
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
    _U32.pack_into(buf, CRC_OFFSET, compute_crc(buf, 0, len(buf)))
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


def parse_control_record(key: bytes, value: bytes | None) -> tuple[int, int]:
    """Return (marker type, coordinator epoch) of a control record (-1 epoch if no value)."""
    if key is None or len(key) < 4:
        raise CorruptRecordError("control record key too short")
    _version, kind = _CONTROL_KEY.unpack_from(key, 0)
    epoch = _CONTROL_VALUE.unpack_from(value, 0)[1] if value and len(value) >= 6 else -1
    return kind, epoch

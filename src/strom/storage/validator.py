"""Validate an append and assign offsets, touching only batch headers on the fast path.

Mirrors Kafka's LogValidator/analyzeAndValidateRecords at batch level: sizes, magic, CRC32C,
offset-delta/count sanity, control and sequence rules for client writes, timestamp bounds,
then offset assignment by patching base offset and partition leader epoch in place. Slow paths
(broker-side recompression, the compacted-topic key check) decode records and are only taken
when the topic config asks for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

from crc32c import crc32c

from strom import record as R
from strom.record.buffers import Buf
from strom.storage.config import LogConfig
from strom.storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    MessageTooLargeError,
    RecordListTooLargeError,
    UnsupportedCompressionTypeError,
)

ORIGIN_CLIENT = "client"  # producers: offsets assigned, strict checks
ORIGIN_COORDINATOR = "coordinator"  # broker-internal writes (offsets, txn markers): control allowed
ORIGIN_REPLICATION = "replication"  # follower fetch: offsets and epochs kept as sent

_LONG_MAX = 9223372036854775807
_unpack_header = R.HEADER_STRUCT.unpack_from
_pack_i64 = R.I64.pack_into
_pack_i32 = R.I32.pack_into


HeaderTuple: TypeAlias = tuple[int, ...]
"""A batch header as ``HEADER_STRUCT.unpack_from`` returns it."""
BatchAt: TypeAlias = tuple[int, int, HeaderTuple]
"""(position, size, header) of one batch of an append."""
ProducerBatch: TypeAlias = tuple[int, int, int, int, int, int, int, int, int]
"""(pid, epoch, base seq, last offset delta, attributes, first offset, max timestamp,
position in data, size) of a batch with a producer id."""


@dataclass(slots=True)
class ValidatedAppend:
    """Bytes ready to write and what the segment/log need to know about them."""

    data: bytearray | memoryview
    metas: list[tuple[int, int, int, int]]  # (position in data, size, last offset, max ts)
    first_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    log_append_time: int
    epochs: list[tuple[int, int]]  # (epoch, base offset) of batches with a new epoch
    # batches with a producer id: (pid, epoch, base seq, last offset delta, attributes,
    # first offset, max timestamp, position in data, size); empty for plain producers
    producers: list[ProducerBatch]


def _check_batches(mv: memoryview, config: LogConfig, origin: str, now_ms: int) -> list[BatchAt]:
    """Validate every batch; return their raw header tuples with positions. Mutates nothing."""
    n = len(mv)
    if n == 0:
        raise InvalidRecordError("append contains no record batch")
    client = origin == ORIGIN_CLIENT
    max_bytes = config.max_message_bytes
    check_ts = not config.log_append_time and (
        config.message_timestamp_before_max_ms != _LONG_MAX
        or config.message_timestamp_after_max_ms != _LONG_MAX
    )
    out: list[BatchAt] = []
    pos = 0
    while pos < n:
        if n - pos < R.RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(f"{n - pos} trailing bytes do not hold a batch header")
        h = _unpack_header(mv, pos)
        length = h[1]
        size = length + 12
        if length < R.MIN_BATCH_LENGTH:
            raise CorruptRecordError(f"batch length {length} is below the minimum")
        if pos + size > n:
            raise CorruptRecordError("the last batch is truncated")
        magic = h[3]
        if magic != R.MAGIC_V2:
            if magic in (0, 1):
                raise InvalidRecordError(f"record batches must use magic 2, not {magic}")
            raise CorruptRecordError(f"invalid magic {magic}")
        if size > max_bytes:
            raise MessageTooLargeError(
                f"batch of {size} bytes exceeds max.message.bytes {max_bytes}")  # fmt: skip
        if crc32c(mv[pos + 21 : pos + size]) != h[4]:
            raise CorruptRecordError(f"CRC mismatch in batch at position {pos}")
        attrs = h[5]
        if attrs & R.COMPRESSION_MASK > R.COMPRESSION_ZSTD:
            raise UnsupportedCompressionTypeError(
                f"unknown compression codec {attrs & R.COMPRESSION_MASK}")  # fmt: skip
        last_delta, count = h[6], h[12]
        if last_delta < 0:
            raise InvalidRecordError(f"negative last offset delta {last_delta}")
        if client:
            if count <= 0:
                raise InvalidRecordError(f"invalid record count {count}")
            if last_delta + 1 != count:
                raise InvalidRecordError(
                    f"last offset delta {last_delta} does not match record count {count}")  # fmt: skip
            if attrs & R.CONTROL_MASK:
                raise InvalidRecordError("clients may not write control batches")
            if h[9] >= 0 and h[11] < 0:
                raise InvalidRecordError("idempotent batch without a base sequence")
        if check_ts:
            try:
                _check_timestamps(h, config, now_ms)
            except InvalidTimestampError:  # slow path: which records (KIP-467)
                raise _timestamp_errors(mv[pos : pos + size], config, now_ms) from None
        out.append((pos, size, h))
        pos += size
    return out


def _check_timestamps(h: HeaderTuple, config: LogConfig, now_ms: int) -> None:
    """Batch-level CreateTime bounds: first timestamp vs before-max, max timestamp vs after-max."""
    base_ts, max_ts = h[7], h[8]
    if base_ts != R.NO_TIMESTAMP and now_ms - base_ts > config.message_timestamp_before_max_ms:
        raise InvalidTimestampError(
            f"timestamp {base_ts} is more than message.timestamp.before.max.ms before {now_ms}"
        )
    if max_ts != R.NO_TIMESTAMP and max_ts - now_ms > config.message_timestamp_after_max_ms:
        raise InvalidTimestampError(
            f"timestamp {max_ts} is more than message.timestamp.after.max.ms after {now_ms}"
        )


def _wrap64(v: int) -> int:
    """A Java long's overflow, for bounds quoted as Kafka computes them."""
    return (v + 2**63) % 2**64 - 2**63


def _timestamp_errors(batch: memoryview, config: LogConfig, now_ms: int) -> InvalidTimestampError:
    """The records of a batch whose CreateTime is out of bounds, as Kafka's LogValidator names
    them (record offsets as the producer sent them)."""
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    low, high = _wrap64(now_ms - before), _wrap64(now_ms + after)
    try:
        records = R.decode_records(batch)
    except R.CorruptRecordError as e:
        raise CorruptRecordError(str(e)) from e
    errors = tuple(
        (i, f"Timestamp {r.timestamp} of message with offset {r.offset} is out of range. "
            f"The timestamp should be within [{low}, {high}]")
        for i, r in enumerate(records)
        if r.timestamp != R.NO_TIMESTAMP and (now_ms - r.timestamp > before
                                              or r.timestamp - now_ms > after))
    return InvalidTimestampError("One or more records have been rejected due to invalid timestamp",
                                 record_errors=errors)


def _keyless_errors(batch: memoryview, partition: str) -> InvalidRecordError:
    """A compacted topic's refusal of a batch, naming each record without a key (Kafka's
    LogValidator texts, the message showing at most three)."""
    try:
        records = R.decode_records(batch)
    except R.CorruptRecordError as e:
        raise CorruptRecordError(str(e)) from e
    text = f"Compacted topic cannot accept message without key in topic partition {partition}"
    errors = tuple((i, text) for i, r in enumerate(records) if r.key is None)
    shown = ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
    return InvalidRecordError(
        f"One or more records have been rejected due to {len(errors)} record errors in total, "
        f"and only showing the first three errors at most: [{shown}]", record_errors=errors)


def _recompress(mv: memoryview, batches: list[BatchAt], codec: int, config: LogConfig) -> bytearray:
    """Rebuild batches whose codec differs from ``codec`` (slow path: decodes records)."""
    out = bytearray()
    level = config.compression_level(codec)
    for pos, size, h in batches:
        attrs = h[5]
        raw = mv[pos : pos + size]
        if (attrs & R.COMPRESSION_MASK) == codec or attrs & R.CONTROL_MASK:
            out += raw
            continue
        try:
            recs = R.decode_records(raw)
        except R.CorruptRecordError as e:
            raise CorruptRecordError(str(e)) from e
        out += R.build_batch(
            recs, base_offset=h[0], compression=codec,
            timestamp_type=1 if attrs & R.TIMESTAMP_TYPE_MASK else 0,
            producer_id=h[9], producer_epoch=h[10], base_sequence=h[11],
            transactional=bool(attrs & R.TRANSACTIONAL_MASK),
            partition_leader_epoch=h[2], compression_level=level, max_timestamp=h[8],
        )  # fmt: skip
    return out


def _reframe(mv: memoryview) -> list[BatchAt]:
    out: list[BatchAt] = []
    for pos, h in R.iter_batches(mv):
        out.append((pos, h.size, tuple(h)))
    return out


def validate_append(
    records: Buf,
    *,
    next_offset: int,
    leader_epoch: int,
    now_ms: int,
    config: LogConfig,
    origin: str = ORIGIN_CLIENT,
    partition: str = "",
) -> ValidatedAppend:
    """Validate ``records`` (concatenated v2 batches) and assign offsets from ``next_offset``.

    A writable buffer is patched in place (no copy); a read-only one is copied once. Raises
    ``StorageError`` before modifying anything when any batch is invalid; ``partition``
    (``topic-index``) is quoted in errors naming records.
    """
    mv = memoryview(records)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    batches = _check_batches(mv, config, origin, now_ms)

    if config.compact:
        for pos, size, h in batches:
            if h[5] & R.CONTROL_MASK:
                continue
            try:
                ok = R.records_have_keys(mv[pos : pos + size])
            except R.CorruptRecordError as e:
                raise CorruptRecordError(str(e)) from e
            if not ok:
                raise _keyless_errors(mv[pos : pos + size], partition)

    data: bytearray | memoryview
    target = config.target_compression
    if (
        target is not None
        and origin != ORIGIN_REPLICATION
        and any(
            (h[5] & R.COMPRESSION_MASK) != target and not h[5] & R.CONTROL_MASK
            for _, _, h in batches
        )
    ):
        data = _recompress(mv, batches, target, config)
        mv = memoryview(data)
        batches = _reframe(mv)
        for _pos, size, _h in batches:
            if size > config.max_message_bytes:
                raise MessageTooLargeError(
                    f"recompressed batch of {size} bytes exceeds max.message.bytes")  # fmt: skip
    elif mv.readonly:
        data = bytearray(mv)
        mv = memoryview(data)
    else:
        data = mv

    total = len(mv)
    if total > config.segment_bytes:
        raise RecordListTooLargeError(
            f"append of {total} bytes exceeds segment.bytes {config.segment_bytes}")  # fmt: skip

    metas: list[tuple[int, int, int, int]] = []
    epochs: list[tuple[int, int]] = []
    producers: list[ProducerBatch] = []
    record_count = 0
    max_ts = R.NO_TIMESTAMP
    log_append_time = -1
    if origin == ORIGIN_REPLICATION:
        expected = next_offset
        for pos, size, h in batches:
            base, last = h[0], h[0] + h[6]
            if base < expected:
                raise InvalidRecordError(
                    f"replicated batch at offset {base} is below the expected {expected}"
                )
            ep = h[2]
            if ep >= 0 and (not epochs or ep > epochs[-1][0]):
                epochs.append((ep, base))
            metas.append((pos, size, last, h[8]))
            if h[9] >= 0:
                producers.append((h[9], h[10], h[11], h[6], h[5], base, h[8], pos, size))
            record_count += h[12]
            if h[8] > max_ts:
                max_ts = h[8]
            expected = last + 1
        first = batches[0][2][0]
    else:
        lat = config.log_append_time
        if lat:
            log_append_time = now_ms
        offset = first = next_offset
        for pos, size, h in batches:
            _pack_i64(mv, pos, offset)
            _pack_i32(mv, pos + 12, leader_epoch)
            last = offset + h[6]
            if lat:
                R.set_log_append_time(mv, pos, now_ms)
                ts = now_ms
            else:
                ts = h[8]
            if ts > max_ts:
                max_ts = ts
            metas.append((pos, size, last, ts))
            if h[9] >= 0:
                producers.append((h[9], h[10], h[11], h[6], h[5], offset, ts, pos, size))
            record_count += h[12]
            offset = last + 1
        if leader_epoch >= 0:
            epochs.append((leader_epoch, first))
    return ValidatedAppend(
        data=data, metas=metas, first_offset=first, last_offset=metas[-1][2],
        max_timestamp=max_ts, record_count=record_count, log_append_time=log_append_time,
        epochs=epochs, producers=producers,
    )  # fmt: skip

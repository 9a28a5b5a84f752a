"""Record-level work for the cleaner: walking records of a batch and rebuilding a filtered batch.

Retained records are copied as raw bytes (their offset deltas stay valid because a rebuilt
batch keeps its base offset); only when the base timestamp changes (KIP-534: a batch holding a
tombstone gets its delete horizon stored there) are the timestamp deltas re-encoded. A rebuilt
batch keeps producer id, epoch, base sequence, flags and last offset delta, so producer state
and sequence numbers survive compaction, and gets a fresh CRC.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TypeAlias

from crc32c import crc32c

from strom import record as R
from strom.record import CorruptRecordError, read_varint, write_varint
from strom.record.buffers import Buf

HEADER = R.HEADER_STRUCT
_unpack_header = HEADER.unpack_from

HeaderTuple: TypeAlias = tuple[int, ...]
"""A batch header as ``HEADER.unpack_from`` returns it; index it with the H_* constants."""
RecordSlot: TypeAlias = tuple[int, int, int, int, int, bytes | None, bool, int]
"""One record of a batch, as `records_of` describes it."""

# Indexes into a header tuple (``HEADER.unpack_from``).
H_BASE, H_LENGTH, H_PLE, H_MAGIC, H_CRC, H_ATTRS, H_LAST_DELTA = 0, 1, 2, 3, 4, 5, 6
H_BASE_TS, H_MAX_TS, H_PID, H_EPOCH, H_SEQ, H_COUNT = 7, 8, 9, 10, 11, 12


class CleanerCorruptionError(Exception):
    """Segment bytes the cleaner cannot frame; the partition is left alone."""


def records_of(batch: Buf, header: HeaderTuple) -> tuple[bytes, list[RecordSlot]]:
    """The decompressed records section and, per record, a tuple
    (start, end, offset delta, timestamp delta, position after the timestamp delta, key or None,
    has value, position of the attributes byte). ``start``/``end`` delimit the whole record
    including its length prefix."""
    body = memoryview(batch)[R.RECORDS_OFFSET : R.LOG_OVERHEAD + header[H_LENGTH]]
    codec = header[H_ATTRS] & R.COMPRESSION_MASK
    try:
        section = R.decompress(codec, body) if codec else bytes(body)
    except R.CorruptRecordError as e:
        raise CleanerCorruptionError(str(e)) from e
    out: list[RecordSlot] = []
    pos = 0
    n = len(section)
    try:
        for _ in range(header[H_COUNT]):
            start = pos
            length, pos = read_varint(section, pos)
            end = pos + length
            apos = pos
            pos += 1  # attributes
            ts_delta, pos = read_varint(section, pos)
            rest = pos
            off_delta, pos = read_varint(section, pos)
            klen, pos = read_varint(section, pos)
            if klen < 0:
                key = None
            else:
                key = section[pos : pos + klen]
                pos += klen
            vlen, pos = read_varint(section, pos)
            if end > n:
                raise CleanerCorruptionError("record runs past the end of its batch")
            out.append((start, end, off_delta, ts_delta, rest, key, vlen >= 0, apos))
            pos = end
    except (IndexError, CorruptRecordError) as e:
        raise CleanerCorruptionError(f"unreadable record in batch: {e}") from e
    return section, out


def build_filtered(
    header: HeaderTuple,
    section: bytes,
    kept: list[RecordSlot],
    *,
    delete_horizon: int | None,
) -> bytes:
    """A batch with the ``kept`` records of the original (same base offset, last offset delta,
    producer fields, codec and flags); ``delete_horizon`` (or None) becomes its base timestamp."""
    attrs = header[H_ATTRS]
    old_base_ts = header[H_BASE_TS]
    log_append = attrs & R.TIMESTAMP_TYPE_MASK
    if delete_horizon is not None:
        base_ts = delete_horizon
        attrs |= R.DELETE_HORIZON_MASK
    else:
        base_ts = old_base_ts + kept[0][3] if kept else old_base_ts
        attrs &= ~R.DELETE_HORIZON_MASK
    shift = old_base_ts - base_ts
    body = bytearray()
    max_ts = R.NO_TIMESTAMP
    for start, end, _off, ts_delta, rest, _key, _hv, apos in kept:
        ts = old_base_ts + ts_delta
        if ts > max_ts:
            max_ts = ts
        if shift == 0:
            body += section[start:end]
        else:
            rec = bytearray((section[apos],))
            write_varint(rec, ts_delta + shift)
            rec += section[rest:end]
            write_varint(body, len(rec))
            body += rec
    if log_append:
        max_ts = header[H_MAX_TS]
    codec = attrs & R.COMPRESSION_MASK
    if codec:
        body = bytearray(R.compress(codec, body))
    size = R.RECORD_BATCH_OVERHEAD + len(body)
    buf = bytearray(size)
    HEADER.pack_into(
        buf, 0, header[H_BASE], size - R.LOG_OVERHEAD, header[H_PLE], R.MAGIC_V2, 0, attrs,
        header[H_LAST_DELTA], base_ts, max_ts, header[H_PID], header[H_EPOCH], header[H_SEQ],
        len(kept),
    )  # fmt: skip
    buf[R.RECORDS_OFFSET :] = body
    R.U32.pack_into(buf, R.CRC_OFFSET, crc32c(memoryview(buf)[R.ATTRIBUTES_OFFSET :]))
    return bytes(buf)


def empty_batch(header: HeaderTuple) -> bytes:
    """The header alone (no records) of a batch kept only for its producer's sequence state:
    base offset, last offset delta, producer id, epoch and base sequence survive."""
    attrs = header[H_ATTRS] & (R.TIMESTAMP_TYPE_MASK | R.TRANSACTIONAL_MASK | R.CONTROL_MASK)
    buf = bytearray(R.RECORD_BATCH_OVERHEAD)
    ts = header[H_MAX_TS]
    HEADER.pack_into(
        buf, 0, header[H_BASE], R.RECORD_BATCH_OVERHEAD - R.LOG_OVERHEAD, header[H_PLE],
        R.MAGIC_V2, 0, attrs, header[H_LAST_DELTA], ts, ts, header[H_PID], header[H_EPOCH],
        header[H_SEQ], 0,
    )  # fmt: skip
    R.U32.pack_into(buf, R.CRC_OFFSET, crc32c(memoryview(buf)[R.ATTRIBUTES_OFFSET :]))
    return bytes(buf)


def control_type(batch: Buf, header: HeaderTuple) -> int | None:
    """COMMIT/ABORT of a control batch, or None when it holds no record."""
    if header[H_COUNT] <= 0:
        return None
    _section, recs = records_of(batch, header)
    key = recs[0][5]
    if key is None or len(key) < 4:
        raise CleanerCorruptionError("control record without a valid key")
    return int.from_bytes(key[2:4], "big", signed=True)


# --- reading segment files -----------------------------------------------------------------


class FileBatches:
    """Batches of a segment file read through our own descriptor (never the log's, which belong
    to the event loop), in large chunks, up to ``size`` captured when the job was planned."""

    def __init__(self, path: str, size: int, chunk: int = 1 << 20) -> None:
        self.path = path
        self.size = size
        self.chunk = chunk
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> FileBatches:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self, start: int = 0) -> Iterator[tuple[int, HeaderTuple, memoryview]]:
        """(position, header tuple, batch bytes) from file position ``start``."""
        fd, size, chunk = self.fd, self.size, self.chunk
        pos = start
        buf = memoryview(b"")
        buf_start = pos
        while pos < size:
            off = pos - buf_start
            if off + R.RECORD_BATCH_OVERHEAD > len(buf):
                buf = memoryview(os.pread(fd, min(chunk, size - pos), pos))
                buf_start, off = pos, 0
                if len(buf) < R.RECORD_BATCH_OVERHEAD:
                    raise CleanerCorruptionError(f"truncated batch header at {pos} in {self.path}")
            h = _unpack_header(buf, off)
            bsize = h[H_LENGTH] + R.LOG_OVERHEAD
            if h[H_LENGTH] < R.MIN_BATCH_LENGTH or pos + bsize > size or h[H_MAGIC] != R.MAGIC_V2:
                raise CleanerCorruptionError(f"invalid batch at {pos} in {self.path}")
            if off + bsize > len(buf):
                buf = memoryview(os.pread(fd, max(bsize, min(chunk, size - pos)), pos))
                buf_start, off = pos, 0
                if len(buf) < bsize:
                    raise CleanerCorruptionError(f"short read at {pos} in {self.path}")
            yield pos, h, buf[off : off + bsize]
            pos += bsize

    def headers(self, start: int = 0) -> Iterator[tuple[int, HeaderTuple]]:
        """(position, header tuple) only: small reads, for passes that skip the records."""
        fd, size = self.fd, self.size
        pos = start
        buf = b""
        buf_start = pos
        while pos + R.RECORD_BATCH_OVERHEAD <= size:
            off = pos - buf_start
            if off + R.RECORD_BATCH_OVERHEAD > len(buf):
                buf = os.pread(fd, min(16384, size - pos), pos)
                buf_start, off = pos, 0
                if len(buf) < R.RECORD_BATCH_OVERHEAD:
                    return
            h = _unpack_header(buf, off)
            if h[H_LENGTH] < R.MIN_BATCH_LENGTH:
                raise CleanerCorruptionError(f"invalid batch at {pos} in {self.path}")
            yield pos, h
            pos += h[H_LENGTH] + R.LOG_OVERHEAD

    def read(self, pos: int, size: int) -> bytes:
        return os.pread(self.fd, size, pos)

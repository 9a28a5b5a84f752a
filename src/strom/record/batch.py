"""The v2 batch (magic 2) header: layout, attribute flags, CRC, in-place patches, iteration.

This is everything the hot paths touch: Produce validates and Fetch serves batches through the
fixed 61-byte header alone (plus CRC32C over the batch), never decoding a record, so it all works
on offsets into a buffer with ``struct``. Keep these functions free of extra calls: several run
once per batch on every produce.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from strom.record.buffers import Buf, WritableBuf
from strom.record.errors import CorruptRecordError

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

TIMESTAMP_CREATE_TIME = 0
TIMESTAMP_LOG_APPEND_TIME = 1
NO_TIMESTAMP = -1
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
# Field codecs, public for the modules that patch or rebuild batches in place.
I64 = struct.Struct(">q")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")
I16 = struct.Struct(">h")


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


def read_header(buf: Buf, pos: int = 0) -> BatchHeader:
    """Unpack the batch header at ``pos``; the caller guarantees 61 bytes are there."""
    return _new_header(BatchHeader, _unpack_header(buf, pos))


def iter_batches(buf: Buf) -> Iterator[tuple[int, BatchHeader]]:
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


def compute_crc(buf: Buf, pos: int, size: int) -> int:
    """CRC32C of a batch's attributes..end, as stored in the CRC field."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def crc_ok(buf: Buf, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC matches the batch bytes."""
    end = pos + LOG_OVERHEAD + header.length
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : end]) == header.crc


def patch_base_offset(buf: WritableBuf, pos: int, base_offset: int) -> None:
    """Overwrite the base offset (not covered by the CRC, so no recomputation)."""
    I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def patch_leader_epoch(buf: WritableBuf, pos: int, epoch: int) -> None:
    """Overwrite the partition leader epoch (not covered by the CRC)."""
    I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def set_log_append_time(buf: WritableBuf, pos: int, ts: int) -> None:
    """Mark the batch LogAppendTime with max timestamp ``ts`` and recompute its CRC."""
    attrs = I16.unpack_from(buf, pos + ATTRIBUTES_OFFSET)[0]
    I16.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    I64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    length = I32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
    U32.pack_into(buf, pos + CRC_OFFSET, compute_crc(buf, pos, length + LOG_OVERHEAD))

"""The v2 batch header: layout, flags, iteration over concatenated batches, in-place patches."""

import struct

import pytest
from kafka.record.default_records import DefaultRecordBatch

from strom import record as R


def _records(items, base_offset=0, base_ts=1_700_000_000_000):
    return [
        R.Record(base_offset + i, base_ts + dt, k, v, hs) for i, (k, v, dt, hs) in enumerate(items)
    ]


def test_header_fields_and_constants():
    recs = _records([(b"k", b"v", 5, []), (None, None, -3, [])], base_offset=40)
    data = R.build_batch(
        recs, base_offset=40, producer_id=9, producer_epoch=2, base_sequence=100,
        transactional=True, partition_leader_epoch=7,
    )  # fmt: skip
    h = R.read_header(data, 0)
    assert (h.base_offset, h.last_offset, h.next_offset, h.size) == (40, 41, 42, len(data))
    assert (h.partition_leader_epoch, h.magic, h.records_count) == (7, 2, 2)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9, 2, 100)
    assert h.is_transactional and not h.is_control and h.has_producer_id
    assert h.base_timestamp == recs[0].timestamp and h.max_timestamp == recs[0].timestamp
    assert R.RECORD_BATCH_OVERHEAD == R.HEADER_STRUCT.size == 61
    assert data[R.MAGIC_OFFSET] == 2
    assert struct.unpack_from(">i", data, R.RECORDS_COUNT_OFFSET)[0] == 2


def test_iter_batches_stops_at_partial_tail_and_rejects_bad_length():
    a = R.build_batch(_records([(b"a", b"1", 0, [])]))
    b = R.build_batch(_records([(b"b", b"2", 0, [])] * 3, base_offset=1), base_offset=1)
    buf = a + b
    got = [(pos, h.base_offset) for pos, h in R.iter_batches(memoryview(buf))]
    assert got == [(0, 0), (len(a), 1)]
    for cut in (1, 20, 61, len(b) - 1):
        got = [pos for pos, _ in R.iter_batches(memoryview(buf + b[:cut]))]
        assert got == [0, len(a)]
    bad = bytearray(a)
    struct.pack_into(">i", bad, R.LENGTH_OFFSET, 10)
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(memoryview(bytes(bad))))


def test_patching_keeps_crc_valid_and_log_append_time_recomputes_it():
    recs = _records([(b"k", b"v", i, []) for i in range(4)])
    buf = bytearray(R.build_batch(recs))
    R.patch_base_offset(buf, 0, 1_000_000)
    R.patch_leader_epoch(buf, 0, 42)
    h = R.read_header(buf)
    assert (h.base_offset, h.partition_leader_epoch) == (1_000_000, 42)
    assert R.crc_ok(buf, 0, h)  # neither field is covered by the CRC
    R.set_log_append_time(memoryview(buf), 0, 1234)
    h = R.read_header(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 1234 and R.crc_ok(buf, 0, h)
    assert DefaultRecordBatch(bytes(buf)).validate_crc()
    assert [r.timestamp for r in R.decode_records(buf)] == [1234] * 4
    assert [r.offset for r in R.decode_records(buf)] == [1_000_000 + i for i in range(4)]
    buf[-1] ^= 0xFF
    assert not R.crc_ok(buf, 0, R.read_header(buf))

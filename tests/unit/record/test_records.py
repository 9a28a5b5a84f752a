"""Records in v2 batches: byte-for-byte against kafka-python's `kafka.record`, plus round trips."""

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from strom import record as R

keys = st.none() | st.binary(max_size=20)
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
)
record_lists = st.lists(
    st.tuples(keys, keys, st.integers(-(2**40), 2**40), header_lists), min_size=1, max_size=20
)


def _records(items, base_offset=0, base_ts=1_700_000_000_000):
    return [
        R.Record(base_offset + i, base_ts + dt, k, v, hs) for i, (k, v, dt, hs) in enumerate(items)
    ]


def _kafka_python_build(recs, *, codec=0, transactional=False, pid=-1, pepoch=-1, seq=-1):
    b = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=transactional, producer_id=pid,
        producer_epoch=pepoch, base_sequence=seq, batch_size=1 << 30,
    )  # fmt: skip
    for r in recs:
        b.append(r.offset, r.timestamp, r.key, r.value, list(r.headers))
    return bytes(b.build())


def _as_tuples(recs):
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in recs]


@settings(max_examples=60, deadline=None)
@given(record_lists, st.booleans())
def test_build_matches_kafka_python_byte_for_byte(items, idempotent):
    recs = _records(items)
    ids = dict(pid=12345, pepoch=3, seq=77) if idempotent else {}
    theirs = _kafka_python_build(recs, transactional=idempotent, **ids)
    ours = R.build_batch(
        recs, partition_leader_epoch=0, transactional=idempotent,
        producer_id=ids.get("pid", -1), producer_epoch=ids.get("pepoch", -1),
        base_sequence=ids.get("seq", -1),
    )  # fmt: skip
    assert ours == theirs
    assert R.decode_records(theirs) == recs


@settings(max_examples=40, deadline=None)
@given(record_lists)
def test_kafka_python_reads_our_batches(items):
    recs = _records(items, base_offset=1000)
    batch = DefaultRecordBatch(R.build_batch(recs, base_offset=1000))
    assert batch.validate_crc()
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in batch] == _as_tuples(recs)


def test_gzip_interoperates_with_kafka_python():
    recs = _records([(b"k", b"v" * 200, i, []) for i in range(10)])
    theirs = _kafka_python_build(recs, codec=R.COMPRESSION_GZIP)
    assert R.read_header(theirs).compression == R.COMPRESSION_GZIP
    assert R.decode_records(theirs) == recs
    ours = R.build_batch(recs, compression=R.COMPRESSION_GZIP)
    assert [
        (r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(ours)
    ] == (_as_tuples(recs))


@settings(max_examples=40, deadline=None)
@given(record_lists, st.sampled_from([1, 2, 3, 4]), st.sampled_from([0, 1]))
def test_compressed_round_trip(items, codec, ts_type):
    recs = _records(items, base_offset=5)
    data = R.build_batch(recs, base_offset=5, compression=codec, timestamp_type=ts_type)
    h = R.read_header(data)
    assert h.compression == codec and h.timestamp_type == ts_type
    assert R.crc_ok(data, 0, h)
    out = R.decode_records(data)
    if ts_type == R.TIMESTAMP_LOG_APPEND_TIME:  # records take the batch max timestamp
        recs = [r._replace(timestamp=h.max_timestamp) for r in recs]
    assert out == recs


def test_xerial_framed_snappy_is_accepted():
    recs = _records([(None, b"x" * 5000, i, [("a", b"b")]) for i in range(30)])
    plain = R.build_batch(recs)
    body = plain[R.RECORDS_OFFSET :]
    framed = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for i in range(0, len(body), 32 * 1024):
        block = bytes(cramjam.snappy.compress_raw(body[i : i + 32 * 1024]))
        framed += struct.pack(">i", len(block)) + block
    batch = bytearray(plain[: R.RECORDS_OFFSET] + framed)
    struct.pack_into(">i", batch, R.LENGTH_OFFSET, len(batch) - R.LOG_OVERHEAD)
    struct.pack_into(">h", batch, R.ATTRIBUTES_OFFSET, R.COMPRESSION_SNAPPY)
    struct.pack_into(">I", batch, R.CRC_OFFSET, R.compute_crc(batch, 0, len(batch)))
    assert R.decode_records(batch) == recs


@pytest.mark.parametrize("commit", [True, False])
def test_control_batch(commit):
    data = R.control_batch(
        commit=commit, producer_id=5, producer_epoch=1, coordinator_epoch=3, timestamp=99,
        base_offset=10,
    )  # fmt: skip
    h = R.read_header(data)
    assert h.is_control and h.is_transactional and h.records_count == 1
    (rec,) = R.decode_records(data)
    assert R.parse_control_record(rec.key, rec.value) == (int(commit), 3)
    (theirs,) = list(DefaultRecordBatch(data))
    assert theirs.commit is commit and theirs.offset == 10


def test_decode_rejects_corruption():
    data = bytearray(R.build_batch(_records([(b"key", b"value", 0, [("h", b"x")])] * 2)))
    with pytest.raises(R.CorruptRecordError):
        R.decode_records(data[:-3])  # truncated batch
    struct.pack_into(">i", data, R.RECORDS_COUNT_OFFSET, 3)  # claims one record too many
    with pytest.raises(R.CorruptRecordError):
        R.decode_records(data)
    struct.pack_into(">i", data, R.RECORDS_COUNT_OFFSET, 1)  # leaves bytes unconsumed
    with pytest.raises(R.CorruptRecordError):
        R.decode_records(data)
    gz = bytearray(R.build_batch(_records([(b"k", b"v" * 50, 0, [])]), compression=1))
    gz[R.RECORDS_OFFSET + 12] ^= 0xFF
    with pytest.raises(R.CorruptRecordError):
        R.decode_records(gz)


def test_varint_extremes_round_trip():
    recs = [
        R.Record(0, 0, b"", b"", []),
        R.Record(1, 2**62, None, b"x" * 300, []),
        R.Record(2**31 - 1, -(2**62), b"k", None, []),
    ]
    assert R.decode_records(R.build_batch(recs)) == recs


def test_records_have_keys():
    assert R.records_have_keys(R.build_batch(_records([(b"k", b"v", 0, [])] * 3)))
    assert not R.records_have_keys(
        R.build_batch(_records([(b"k", b"v", 0, []), (None, b"v", 0, [])]))
    )
    assert not R.records_have_keys(
        R.build_batch(_records([(None, b"v", 0, [])]), compression=R.COMPRESSION_ZSTD)
    )


def test_empty_batch_builds():
    data = R.build_batch([])
    h = R.read_header(data)
    assert h.records_count == 0 and h.size == R.RECORD_BATCH_OVERHEAD
    assert R.decode_records(data) == []

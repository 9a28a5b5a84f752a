"""PartitionLog append/read: offsets, whole-batch slices, index lookups, rolls, epochs."""

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import record as R
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError

SMALL = dict(segment_bytes=4000, index_interval_bytes=200, segment_index_bytes=80)

# one append: a list of (records, value size) per batch
appends = st.lists(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 300)), min_size=1, max_size=3),
    min_size=1,
    max_size=25,
)


def _fill(h, log, plan, epochs=None):
    expected = h.Appended()
    ts = 10_000
    for i, batches in enumerate(plan):
        data = b"".join(h.make_batch(n, size, ts + j) for j, (n, size) in enumerate(batches))
        epoch = epochs[i] if epochs else 0
        res = log.append(bytearray(data), leader_epoch=epoch, now_ms=ts)
        expected.add(data, res.first_offset, epoch)
        ts += 7
    return expected


def _check_reads(h, log, expected, max_bytes):
    for first, last, data in expected.batches:
        for offset in (first, last):
            res = log.read(offset, max_bytes)
            got = res.slice.read_bytes()
            assert got.startswith(data)  # the batch holding the offset comes first
            parsed = h.batches_in(got)
            assert sum(len(b[2]) for b in parsed) == len(got)  # whole batches only
            if len(parsed) > 1:
                assert len(got) <= max_bytes
            for b_first, b_last, b_data in parsed:
                assert expected.batch_for(b_first) == (b_first, b_last, b_data)


@settings(max_examples=30, deadline=None)
@given(appends, st.integers(0, 2500))
def test_every_offset_reads_back_its_batch(h, plan, max_bytes):
    with tempfile.TemporaryDirectory() as d:
        log = h.open_log(Path(d) / "t-0", LogConfig(**SMALL))
        expected = _fill(h, log, plan)
        assert log.log_end_offset == expected.batches[-1][1] + 1 == log.high_watermark
        _check_reads(h, log, expected, max_bytes)
        assert log.read(log.log_end_offset, 100).slice is None
        with pytest.raises(StorageError) as e:
            log.read(log.log_end_offset + 1, 100)
        assert e.value.error_code == 1
        # segments: contiguous, each starts with its first batch, sizes add up
        segs = log.segments
        total = 0
        for seg in segs:
            scanned = h.scan_segment(seg)
            total += seg.size
            if scanned:
                assert scanned[0][1].base_offset == seg.base_offset
            assert sum(hd.size for _, hd in scanned) == seg.size
        assert total == sum(len(b[2]) for b in expected.batches) == log.size_bytes()
        log.close()


@settings(max_examples=25, deadline=None)
@given(appends, st.data())
def test_index_lookup_equals_linear_scan(h, plan, data):
    with tempfile.TemporaryDirectory() as d:
        log = h.open_log(Path(d) / "t-0", LogConfig(**SMALL))
        _fill(h, log, plan)
        for seg in log.segments:
            scanned = h.scan_segment(seg)
            oi = seg.offset_index  # every entry: (last offset of a batch, its start)
            starts = {pos: hd for pos, hd in scanned}
            for rel, pos in zip(oi.offsets, oi.positions, strict=True):
                assert starts[pos].last_offset == seg.base_offset + rel
            if not scanned:
                continue
            lo, hi = seg.base_offset, scanned[-1][1].last_offset + 1
            for offset in data.draw(st.lists(st.integers(lo, hi), max_size=10)):
                linear = next(((p, x) for p, x in scanned if x.last_offset >= offset), None)
                assert seg.translate(offset) == linear
        log.close()


def test_roll_on_time_and_full_index(h, tmp_path):
    # time-based: the message timestamp moves past segment.ms from the segment's first batch
    log2 = h.open_log(tmp_path / "u-0", LogConfig(segment_ms=60_000))
    log2.append(bytearray(h.make_batch(1, 10, ts=1_000)), leader_epoch=0, now_ms=1_000)
    log2.append(bytearray(h.make_batch(1, 10, ts=50_000)), leader_epoch=0, now_ms=50_000)
    assert len(log2.segments) == 1
    log2.append(bytearray(h.make_batch(1, 10, ts=61_001)), leader_epoch=0, now_ms=61_001)
    assert [s.base_offset for s in log2.segments] == [0, 2]
    # a full offset index forces a roll
    log3 = h.open_log(tmp_path / "v-0", LogConfig(index_interval_bytes=1, segment_index_bytes=16))
    for _ in range(6):
        log3.append(bytearray(h.make_batch(1, 10)), leader_epoch=0, now_ms=0)
    assert len(log3.segments) >= 2
    assert all(len(s.offset_index) <= 2 for s in log3.segments)
    for log_ in (log2, log3):
        log_.close()


def test_roll_boundaries_exact(h, tmp_path):
    b = h.make_batch(1, 300)
    size = len(b)
    log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=3 * size))
    for _ in range(7):
        log.append(bytearray(b), leader_epoch=0, now_ms=0)
    assert [s.base_offset for s in log.segments] == [0, 3, 6]
    assert [s.size for s in log.segments] == [3 * size, 3 * size, size]
    assert log.roll().base_offset == 7
    assert log.roll().base_offset == 7  # rolling an empty active segment is a no-op
    assert (tmp_path / "t-0" / "00000000000000000007.log").exists()
    log.close()


def test_min_one_batch_and_max_offset(h, tmp_path):
    log = h.open_log(tmp_path / "t-0")
    sizes = []
    for _ in range(5):
        b = h.make_batch(2, 100)
        sizes.append(len(b))
        log.append(bytearray(b), leader_epoch=0, now_ms=0)
    r = log.read(0, 0)
    assert r.slice.length == sizes[0]
    assert log.read(0, 0, min_one_batch=False).slice is None
    assert log.read(0, sizes[0] + sizes[1] - 1).slice.length == sizes[0]
    assert log.read(3, 10_000, max_offset=6).slice.length == sizes[1] + sizes[2]
    assert log.read(6, 10_000, max_offset=6).slice is None
    log.hw_follows_leo = False
    log.high_watermark = 4
    assert log.read(0, 10_000).slice.length == sizes[0] + sizes[1]
    assert log.read(4, 10_000).slice is None and log.read(4, 10).log_end_offset == 10
    log.close()


def _err(fn):
    with pytest.raises(StorageError) as e:
        fn()
    return e.value.error_code


def test_invalid_batches_are_rejected_and_nothing_is_written(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(max_message_bytes=2000))
    log.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    size = log.size_bytes()
    good = h.make_batch(2)

    def append(data, **kw):
        return lambda: log.append(bytearray(data), leader_epoch=0, now_ms=0, **kw)

    corrupt = bytearray(good)
    corrupt[-1] ^= 1
    assert _err(append(good + bytes(corrupt))) == 2  # CRC, second batch
    assert _err(append(good + good[:30])) == 2  # trailing partial batch
    assert _err(append(b"")) == 87
    assert _err(append(h.make_batch(1, 3000))) == 10  # max.message.bytes
    v1 = bytearray(good)
    v1[R.MAGIC_OFFSET] = 1
    assert _err(append(v1)) == 87
    bad_count = bytearray(good)
    bad_count[R.RECORDS_COUNT_OFFSET + 3] = 5
    R.U32.pack_into(bad_count, R.CRC_OFFSET, R.compute_crc(bad_count, 0, len(bad_count)))
    assert _err(append(bad_count)) == 87
    ctrl = R.control_batch(commit=True, producer_id=1, producer_epoch=0, coordinator_epoch=0,
                           timestamp=0)  # fmt: skip
    assert _err(append(ctrl)) == 87
    assert _err(append(h.make_batch(1, producer_id=5, producer_epoch=0))) == 87  # no sequence
    unknown_codec = bytearray(good)
    unknown_codec[R.ATTRIBUTES_OFFSET + 1] = 6
    R.U32.pack_into(unknown_codec, R.CRC_OFFSET, R.compute_crc(unknown_codec, 0, len(good)))
    assert _err(append(unknown_codec)) == 76
    assert log.size_bytes() == size and log.log_end_offset == 2
    # control batches are fine for internal writers
    log.append(bytearray(ctrl), leader_epoch=0, now_ms=0, origin="coordinator")
    assert log.log_end_offset == 3
    log.close()


def test_record_list_too_large_and_timestamps(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, max_message_bytes=10_000))
    assert _err(lambda: log.append(bytearray(h.make_batch(1, 600)), leader_epoch=0, now_ms=0)) == 18
    cfg = LogConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=500)
    log2 = h.open_log(tmp_path / "u-0", cfg)
    now = 100_000
    assert _err(lambda: log2.append(bytearray(h.make_batch(1, ts=now - 1001)), leader_epoch=0,
                                    now_ms=now)) == 32  # fmt: skip
    assert _err(lambda: log2.append(bytearray(h.make_batch(1, ts=now + 501)), leader_epoch=0,
                                    now_ms=now)) == 32  # fmt: skip
    log2.append(bytearray(h.make_batch(2, ts=now - 1000, ts_step=1500)), leader_epoch=0, now_ms=now)
    assert log2.log_end_offset == 2
    for log_ in (log, log2):
        log_.close()


def test_compacted_topic_requires_keys(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(cleanup_policy="compact,delete"))
    assert _err(lambda: log.append(bytearray(h.make_batch(2, key=None)), leader_epoch=0,
                                   now_ms=0)) == 87  # fmt: skip
    log.append(bytearray(h.make_batch(2)), leader_epoch=0, now_ms=0)
    assert log.log_end_offset == 2
    log.close()


def test_log_append_time(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"))
    res = log.append(bytearray(h.make_batch(3, ts=5)), leader_epoch=2, now_ms=777)
    assert (res.log_append_time, res.max_timestamp, res.record_count) == (777, 777, 3)
    data = log.read(0, 1000).slice.read_bytes()
    hd = R.read_header(data)
    assert hd.timestamp_type == 1 and hd.max_timestamp == 777 and R.crc_ok(data, 0, hd)
    assert [r.timestamp for r in R.decode_records(data)] == [777] * 3
    log.close()


@pytest.mark.parametrize("target", ["uncompressed", "zstd", "lz4", "snappy", "gzip"])
def test_broker_side_recompression(h, tmp_path, target):
    log = h.open_log(tmp_path / "t-0", LogConfig(compression_type=target))
    sent = [h.make_batch(3, 50, compression=c) for c in (0, 1, 4)]
    for b in sent:
        log.append(bytearray(b), leader_epoch=0, now_ms=0)
    data = log.read(0, 100_000).slice.read_bytes()
    codec = R.COMPRESSION_CODES[target]
    got = []
    for pos, hd in R.iter_batches(memoryview(data)):
        assert hd.compression == codec and R.crc_ok(data, pos, hd)
        got += [(r.key, r.value, r.timestamp) for r in R.decode_records(data[pos : pos + hd.size])]
    want = [(r.key, r.value, r.timestamp) for b in sent for r in R.decode_records(b)]
    assert got == want
    assert [r.offset for r in R.decode_records(data[: R.read_header(data).size])] == [0, 1, 2]
    log.close()


def test_readonly_input_is_copied_writable_is_patched(h, tmp_path):
    log = h.open_log(tmp_path / "t-0")
    log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
    ro = h.make_batch(1)
    log.append(ro, leader_epoch=3, now_ms=0)
    assert R.read_header(ro).base_offset == 0  # untouched
    rw = bytearray(h.make_batch(1))
    log.append(memoryview(rw), leader_epoch=3, now_ms=0)
    assert R.read_header(rw).base_offset == 2 and R.read_header(rw).partition_leader_epoch == 3
    log.close()


def test_leader_epochs(h, tmp_path):
    log = h.open_log(tmp_path / "t-0")
    for epoch in (1, 1, 2, 2, 5):
        log.append(bytearray(h.make_batch(2)), leader_epoch=epoch, now_ms=0)
    assert log.latest_epoch == 5
    assert log.epochs.entries() == [(1, 0), (2, 4), (5, 8)]
    assert log.end_offset_for_epoch(5) == (5, 10)
    assert log.end_offset_for_epoch(1) == (1, 4)
    assert log.end_offset_for_epoch(3) == (2, 8)
    assert log.end_offset_for_epoch(0) == (0, 0)
    assert log.end_offset_for_epoch(6) == (-1, -1)
    assert log.end_offset_for_epoch(-1) == (-1, -1)
    assert log.epoch_for_offset(5) == 2
    log.flush()  # epochs that appends bring are written with the flush that covers them
    text = (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text()
    assert text == "0\n3\n1 0\n2 4\n5 8\n"
    log.close()


def _brute_timestamps(log):
    data = b"".join((s.log_path.read_bytes()) for s in log.segments)
    out = []
    for pos, hd in R.iter_batches(memoryview(data)):
        out += [(r.offset, r.timestamp) for r in R.decode_records(data[pos : pos + hd.size])]
    return out


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(0, 5000), st.integers(-50, 50)),
                min_size=1, max_size=30), st.integers(-10, 6000))  # fmt: skip
def test_timestamp_lookups_match_brute_force(h, batches, target):
    with tempfile.TemporaryDirectory() as d:
        log = h.open_log(Path(d) / "t-0", LogConfig(**SMALL))
        for n, ts, step in batches:
            log.append(bytearray(h.make_batch(n, 20, ts, ts_step=step)), leader_epoch=0, now_ms=0)
        recs = _brute_timestamps(log)
        want = next(((o, t) for o, t in recs if t >= target), None)
        assert log.offset_for_timestamp(target) == want
        top = max(t for _, t in recs)
        if top >= 0:
            assert log.max_timestamp_offset() == next((o, t) for o, t in recs if t == top)
        log.close()


def test_delete_records_before(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=1000, file_delete_delay_ms=0))
    for _ in range(10):
        log.append(bytearray(h.make_batch(2, 200)), leader_epoch=1, now_ms=0)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert log.delete_records_before(bases[2] + 1) == bases[2] + 1
    assert log.log_start_offset == bases[2] + 1
    assert log.segments[0].base_offset == bases[2]
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert _err(lambda: log.read(bases[2], 100)) == 1
    assert log.read(bases[2] + 1, 100).slice is not None
    assert _err(lambda: log.delete_records_before(log.high_watermark + 1)) == 1
    assert log.delete_records_before(3) == bases[2] + 1  # never moves backwards
    assert log.epochs.entries() == [(1, bases[2] + 1)]
    assert log.delete_records_before(-1) == log.log_end_offset
    assert log.read(log.log_end_offset, 10).slice is None
    log.close()


@settings(max_examples=25, deadline=None)
@given(appends, st.data())
def test_truncate_to(h, plan, data):
    with tempfile.TemporaryDirectory() as d:
        log = h.open_log(Path(d) / "t-0", LogConfig(**SMALL, file_delete_delay_ms=0))
        expected = _fill(h, log, plan, epochs=[i // 4 for i in range(len(plan))])
        boundaries = [b[0] for b in expected.batches]
        target = data.draw(st.sampled_from(boundaries))
        log.truncate_to(target)
        expected.truncate(target)
        assert log.log_end_offset == target == log.high_watermark
        assert all(e[1] < target for e in log.epochs.entries())
        assert log.latest_epoch == (log.epochs.entries()[-1][0] if target else -1)
        for seg in log.segments:
            scanned = h.scan_segment(seg)
            starts = {pos: hd for pos, hd in scanned}
            for rel, pos in zip(seg.offset_index.offsets, seg.offset_index.positions, strict=True):
                assert starts[pos].last_offset == seg.base_offset + rel
            assert seg.time_index.last_entry()[1] < max(target, seg.base_offset + 1)
        if expected.batches:
            _check_reads(h, log, expected, 500)
        res = log.append(bytearray(h.make_batch(2)), leader_epoch=99, now_ms=0)
        assert res.first_offset == target
        assert log.read(target, 10).slice.read_bytes()[:8] == target.to_bytes(8, "big")
        log.close()


def test_replication_keeps_offsets_and_epochs(h, tmp_path):
    leader = h.open_log(tmp_path / "l-0")
    for epoch in (1, 1, 3):
        leader.append(bytearray(h.make_batch(2)), leader_epoch=epoch, now_ms=0)
    data = leader.read(0, 100_000).slice.read_bytes()
    follower = h.open_log(tmp_path / "f-0")
    res = follower.append(data, leader_epoch=-1, now_ms=0, origin="replication")
    assert (res.first_offset, res.last_offset) == (0, 5)
    assert follower.read(0, 100_000).slice.read_bytes() == data
    assert follower.epochs.entries() == [(1, 0), (3, 4)]
    assert _err(lambda: follower.append(data, leader_epoch=-1, now_ms=0,
                                        origin="replication")) == 87  # fmt: skip
    # a follower that starts mid-log (after the leader's log start moved)
    late = h.open_log(tmp_path / "g-0")
    tail = data[R.read_header(data).size :]
    late.append(tail, leader_epoch=-1, now_ms=0, origin="replication")
    assert late.segments[0].base_offset == late.log_start_offset == 2
    assert late.log_end_offset == 6
    for log_ in (leader, follower, late):
        log_.close()


def test_log_config_from_kafka_names():
    cfg = LogConfig.from_kafka({"segment.bytes": "2048", "cleanup.policy": "compact",
                                "message.timestamp.type": "LogAppendTime", "unknown": "x"})  # fmt: skip
    assert cfg.segment_bytes == 2048 and cfg.compact and not cfg.delete and cfg.log_append_time
    assert cfg.to_kafka()["retention.ms"] == "604800000"
    with pytest.raises(ValueError):
        LogConfig(compression_type="brotli")


def test_recovery_defers_the_epoch_checkpoint_and_survives_a_second_crash(h, tmp_path):
    """Crash recovery re-derives epochs from batch headers without an fsync per partition; the
    checkpoint is written by the next flush or close, and a crash before that recovers again."""
    path = tmp_path / "t-0"
    log = h.open_log(path)
    for epoch in (1, 3, 3, 7):
        log.append(bytearray(h.make_batch(2)), leader_epoch=epoch, now_ms=0)
    checkpoint = path / "leader-epoch-checkpoint"
    assert not checkpoint.exists()  # appends defer it; now crash (no flush, no close)
    for _crash in range(2):
        log = h.open_log(path, clean_shutdown=False)
        assert log.epochs.entries() == [(1, 0), (3, 2), (7, 6)]
        assert log.end_offset_for_epoch(3) == (3, 6)
        assert not checkpoint.exists(), "recovery wrote the checkpoint itself"
    log.close()
    assert checkpoint.read_text() == "0\n3\n1 0\n3 2\n7 6\n"
    log = h.open_log(path, clean_shutdown=True)
    assert log.epochs.entries() == [(1, 0), (3, 2), (7, 6)]
    log.close()

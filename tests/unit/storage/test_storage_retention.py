"""Retention by time and size: deletes oldest whole segments, never at or past the HW."""

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.storage.config import LogConfig

batch_specs = st.lists(st.tuples(st.integers(1, 3), st.integers(0, 100_000)), min_size=1,
                       max_size=30)  # fmt: skip


def _build(h, d, specs, **cfg):
    config = LogConfig(
        **{"segment_bytes": 1200, "file_delete_delay_ms": 0, "retention_ms": -1, **cfg}
    )
    log = h.open_log(Path(d) / "t-0", config)
    for n, ts in specs:
        log.append(bytearray(h.make_batch(n, 150, ts)), leader_epoch=0, now_ms=ts)
    return log


def _segment_info(log):
    segs = log.segments
    out = []
    for i, s in enumerate(segs):
        upper = segs[i + 1].base_offset if i + 1 < len(segs) else log.log_end_offset
        out.append((s.base_offset, upper, s.size, s.largest_timestamp()))
    return out


@settings(max_examples=30, deadline=None)
@given(batch_specs, st.integers(0, 100_000), st.integers(0, 200_000), st.data())
def test_time_retention(h, specs, retention_ms, now, data):
    with tempfile.TemporaryDirectory() as d:
        log = _build(h, d, specs, retention_ms=retention_ms)
        log.hw_follows_leo = False
        log.high_watermark = data.draw(st.integers(0, log.log_end_offset))
        before = _segment_info(log)
        leo, hw = log.log_end_offset, log.high_watermark
        freed = log.apply_retention(now)
        # expected: the longest prefix of expired segments wholly below the HW
        n = 0
        for _base, upper, size, ts in before:
            last = n == len(before) - 1
            if hw < upper or (last and size == 0) or not now - ts > retention_ms:
                break
            n += 1
        assert freed == sum(s for _, _, s, _ in before[:n])
        after = _segment_info(log)
        if n == len(before):  # everything expired: an empty active segment at the LEO
            assert [(a[0], a[2]) for a in after] == [(leo, 0)]
            assert log.log_start_offset == leo
        else:
            assert after[0][0] == before[n][0] == log.log_start_offset or n == 0
            assert [a[0] for a in after] == [b[0] for b in before[n:]]
        assert log.log_end_offset == leo and log.log_start_offset <= hw
        log.close()


@settings(max_examples=30, deadline=None)
@given(batch_specs, st.integers(0, 6000), st.data())
def test_size_retention(h, specs, retention_bytes, data):
    with tempfile.TemporaryDirectory() as d:
        log = _build(h, d, specs, retention_bytes=retention_bytes)
        log.hw_follows_leo = False
        log.high_watermark = data.draw(st.integers(0, log.log_end_offset))
        before = _segment_info(log)
        leo, hw = log.log_end_offset, log.high_watermark
        freed = log.apply_retention(0)
        diff = sum(b[2] for b in before) - retention_bytes
        n = 0
        for i, (_base, upper, size, _ts) in enumerate(before):
            last = i == len(before) - 1
            if diff <= 0 or hw < upper or (last and size == 0) or diff - size < 0:
                break
            diff -= size
            n += 1
        assert freed == sum(b[2] for b in before[:n])
        assert all(upper <= hw for _, upper, _, _ in before[:n])
        after = _segment_info(log)
        if n == len(before):
            assert [(a[0], a[2]) for a in after] == [(leo, 0)]
        else:
            assert [a[0] for a in after] == [b[0] for b in before[n:]]
            assert (
                sum(a[2] for a in after) <= retention_bytes
                or diff < before[n][2]
                or (hw < before[n][1])
            )
        log.close()


def test_active_segment_kept_unless_expired(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(retention_ms=1000, file_delete_delay_ms=0))
    log.append(bytearray(h.make_batch(2, ts=10_000)), leader_epoch=0, now_ms=10_000)
    assert log.apply_retention(10_500) == 0 and len(log.segments) == 1
    freed = log.apply_retention(11_002)  # max timestamp is 10_001
    assert freed > 0
    assert [(s.base_offset, s.size) for s in log.segments] == [(2, 0)]
    assert log.log_start_offset == log.log_end_offset == 2
    assert log.read(2, 100).slice is None
    assert log.apply_retention(50_000) == 0  # an empty active segment stays
    log.close()


def test_deleted_files_wait_for_file_delete_delay(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, file_delete_delay_ms=1000))
    for i in range(6):
        log.append(bytearray(h.make_batch(1, 200, ts=i)), leader_epoch=0, now_ms=0)
    first = log.segments[0]
    slice_ = log.read(0, 10).slice  # a fetch in flight keeps working after deletion
    log.delete_records_before(log.segments[1].base_offset)
    part = tmp_path / "t-0"
    assert (part / "00000000000000000000.log.deleted").exists()
    assert not first.log_path.exists()
    assert slice_.read_bytes()[:8] == (0).to_bytes(8, "big")
    log.purge_deleted(now_ms=log._now_ms() + 1001)
    assert not list(part.glob("*.deleted"))
    log.close()


def test_log_start_offset_retention_and_default_policy(h, tmp_path):
    cfg = LogConfig(segment_bytes=500, cleanup_policy="compact", retention_ms=0,
                    file_delete_delay_ms=0)  # fmt: skip
    log = h.open_log(tmp_path / "t-0", cfg)
    for i in range(6):
        log.append(bytearray(h.make_batch(1, 200, ts=i)), leader_epoch=0, now_ms=0)
    n = len(log.segments)
    assert log.apply_retention(10**12) == 0 and len(log.segments) == n  # compact: no time rule
    log.log_start_offset = log.segments[2].base_offset  # as a restart with a checkpoint would
    assert log.apply_retention(0) > 0
    assert log.segments[0].base_offset == log.log_start_offset
    log.close()

"""Loading logs: crash recovery keeps the valid prefix; a clean restart reads nothing."""

import os
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom import record as R
from strom.storage.config import LogConfig
from strom.storage.manager import CLEAN_SHUTDOWN_MARKER, LogManager
from strom.storage.segment import LogSegment

CFG = LogConfig(segment_bytes=2500, index_interval_bytes=150)


def _write(h, root: Path, n_appends: int, seed_sizes: list[int]):
    m = LogManager([root], config_for=lambda _t: CFG)
    m.load()
    log = m.create("t", 0, h.TOPIC_ID, CFG)
    expected = h.Appended()
    for i in range(n_appends):
        data = h.make_batch(1 + i % 3, seed_sizes[i % len(seed_sizes)], ts=1000 + i)
        res = log.append(bytearray(data), leader_epoch=1 + i // 10, now_ms=0)
        expected.add(data, res.first_offset, 1 + i // 10)
    return m, log, expected


def _check_consistent(h, log, expected):
    assert log.log_end_offset == (expected.batches[-1][1] + 1 if expected.batches else 0)
    for first, last, data in expected.batches:
        got = log.read(first, 1).slice.read_bytes()
        assert got == data
        assert log.read(last, 1).slice.read_bytes() == data
    for seg in log.segments:
        scanned = h.scan_segment(seg)
        starts = {pos: hd for pos, hd in scanned}
        oi = seg.offset_index
        for rel, pos in zip(oi.offsets, oi.positions, strict=True):
            assert starts[pos].last_offset == seg.base_offset + rel
        if scanned:
            assert seg.max_timestamp == max(hd.max_timestamp for _, hd in scanned)
    assert all(o < log.log_end_offset for _, o in log.epochs.entries())


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 40), st.lists(st.integers(0, 400), min_size=1, max_size=5), st.data())
def test_crash_truncate_or_flip_tail_keeps_valid_prefix(h, n, sizes, data):
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        m, log, expected = _write(h, root, n, sizes)
        if data.draw(st.booleans()):
            log.flush()  # recovery point moves: earlier segments are trusted
        m.checkpoint()
        segs = log.segments
        # crash: no close, no clean marker; damage the last non-empty segment's tail
        victim = next(s for s in reversed(segs) if s.size > 0)
        raw = victim.log_path.read_bytes()
        batches = list(R.iter_batches(memoryview(raw)))
        if data.draw(st.booleans()):
            cut = data.draw(st.integers(0, len(raw) - 1))
            with open(victim.log_path, "r+b") as f:
                f.truncate(cut)
            bad_from = next(hd.base_offset for p, hd in batches if p + hd.size > cut)
        else:
            pos, hd = data.draw(st.sampled_from(batches))
            flip = data.draw(st.integers(pos + R.ATTRIBUTES_OFFSET, pos + hd.size - 1))
            with open(victim.log_path, "r+b") as f:
                f.seek(flip)
                b = f.read(1)
                f.seek(flip)
                f.write(bytes([b[0] ^ 0x5A]))
            bad_from = hd.base_offset
        del log, m
        m2 = LogManager([root], config_for=lambda _t: CFG)
        m2.load()
        log2 = m2.get("t", 0)
        expected.truncate(bad_from)
        _check_consistent(h, log2, expected)
        assert not (root / CLEAN_SHUTDOWN_MARKER).exists()
        res = log2.append(bytearray(h.make_batch(2)), leader_epoch=50, now_ms=0)
        assert res.first_offset == bad_from
        m2.shutdown()


def test_recovery_starts_at_recovery_point(h, tmp_path):
    m, log, expected = _write(h, tmp_path, 40, [300])
    log.flush()
    rp_segment = log.active_segment.base_offset
    for i in range(6):
        log.append(bytearray(h.make_batch(1, 300, ts=9000 + i)), leader_epoch=9, now_ms=0)
    m.checkpoint()
    n_after = sum(1 for s in log.segments if s.base_offset >= rp_segment)
    del log, m
    m2 = LogManager([tmp_path], config_for=lambda _t: CFG)
    m2.load()
    log2 = m2.get("t", 0)
    assert log2.recovered_segments == n_after
    assert log2.log_end_offset == expected.batches[-1][1] + 1 + 6
    assert log2.latest_epoch == 9
    m2.shutdown()


def test_clean_restart_does_not_scan(h, tmp_path, monkeypatch):
    m, _log, expected = _write(h, tmp_path, 60, [100, 250])
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()

    def boom(*_a, **_k):
        raise AssertionError("recover() must not run after a clean shutdown")

    monkeypatch.setattr(LogSegment, "recover", boom)
    m2 = LogManager([tmp_path], config_for=lambda _t: CFG)
    m2.load()
    assert not (tmp_path / CLEAN_SHUTDOWN_MARKER).exists()  # removed while running
    log2 = m2.get("t", 0)
    assert log2.recovered_segments == 0
    assert log2.log_end_offset == expected.batches[-1][1] + 1
    assert all(s._oi is None for s in log2.segments[:-1])  # closed segments untouched
    monkeypatch.undo()
    _check_consistent(h, log2, expected)
    res = log2.append(bytearray(h.make_batch(1)), leader_epoch=7, now_ms=0)
    assert res.first_offset == expected.batches[-1][1] + 1
    m2.shutdown()


def test_many_partitions_clean_start_is_fast(h, tmp_path):
    cfg = LogConfig()
    m = LogManager([tmp_path / "a", tmp_path / "b"], config_for=lambda _t: cfg)
    m.load()
    batch = h.make_batch(3, 50)
    for p in range(200):
        log = m.create("many", p, h.TOPIC_ID, cfg)
        log.append(bytearray(batch), leader_epoch=0, now_ms=0)
    m.shutdown()
    m2 = LogManager([tmp_path / "a", tmp_path / "b"], config_for=lambda _t: cfg, max_open_files=100)
    t0 = time.perf_counter()
    m2.load()
    elapsed = time.perf_counter() - t0
    logs = list(m2.logs())
    assert len(logs) == 200 and all(log.log_end_offset == 3 for log in logs)
    assert all(log.recovered_segments == 0 for log in logs)
    assert m2.budget.open_count <= 100
    assert elapsed < 2.0, f"loading 200 partitions took {elapsed:.2f}s"
    m2.shutdown()


def test_corrupt_or_missing_index_of_closed_segment_is_rebuilt(h, tmp_path):
    m, log, expected = _write(h, tmp_path, 40, [300])
    first = log.segments[0]
    assert len(first.offset_index) > 0
    m.shutdown()
    with open(first.index_path, "ab") as f:
        f.write(b"\x00\x00\x00")  # not a multiple of 8
    second = sorted((tmp_path / "t-0").glob("*.index"))[1]
    second.unlink()
    m2 = LogManager([tmp_path], config_for=lambda _t: CFG)
    m2.load()
    log2 = m2.get("t", 0)
    _check_consistent(h, log2, expected)
    assert first.index_path.stat().st_size % 8 == 0 and second.exists()
    m2.shutdown()


def test_stray_files_are_removed_on_load(h, tmp_path):
    m, _log, expected = _write(h, tmp_path, 5, [10])
    m.shutdown()
    part = tmp_path / "t-0"
    for name in ("00000000000000000099.index", "00000000000000000000.log.deleted",
                 "leader-epoch-checkpoint.tmp", "00000000000000000042.timeindex"):  # fmt: skip
        (part / name).write_bytes(b"x")
    (tmp_path / "t-1.0123abcd-delete").mkdir()
    m2 = LogManager([tmp_path])
    m2.load()
    left = sorted(os.listdir(part))
    leo = expected.batches[-1][1] + 1  # a clean shutdown snapshots producer state at the log end
    assert left == ["00000000000000000000.index", "00000000000000000000.log",
                    "00000000000000000000.timeindex", f"{leo:020d}.snapshot",
                    "leader-epoch-checkpoint", "partition.metadata"]  # fmt: skip
    assert not (tmp_path / "t-1.0123abcd-delete").exists()
    assert m2.get("t", 0).log_end_offset == expected.batches[-1][1] + 1
    m2.shutdown()


@pytest.mark.parametrize("garbage", [b"", b"\x00" * 30, b"\xff" * 200])
def test_torn_tail_after_clean_marker_is_recovered(h, tmp_path, garbage):
    m, _log, expected = _write(h, tmp_path, 8, [50])
    m.shutdown()
    active = sorted((tmp_path / "t-0").glob("*.log"))[-1]
    with open(active, "ab") as f:
        f.write(garbage)
    m2 = LogManager([tmp_path])
    m2.load()
    log2 = m2.get("t", 0)
    assert log2.log_end_offset == expected.batches[-1][1] + 1
    res = log2.append(bytearray(h.make_batch(1)), leader_epoch=3, now_ms=0)
    assert log2.read(res.first_offset, 10).slice.read_bytes()[:8] == res.first_offset.to_bytes(
        8, "big"
    )
    m2.shutdown()


def test_recovered_active_segment_writes_its_indexes_at_close(h, tmp_path):
    """After a crash the active segment's rebuilt indexes stay in memory (no two file creates per
    partition at start-up); a second crash recovers again, and the clean shutdown writes them."""
    m, log, expected = _write(h, tmp_path, 40, [300])
    m.checkpoint()
    del log, m  # crash
    for _crash in range(2):
        m2 = LogManager([tmp_path], config_for=lambda _t: CFG)
        m2.load()
        log2 = m2.get("t", 0)
        active = log2.active_segment
        assert not active.index_path.exists() and not active.timeindex_path.exists()
        assert all(s.index_path.exists() for s in log2.segments[:-1])  # sealed: written
        _check_consistent(h, log2, expected)
    m2.shutdown()
    assert active.index_path.exists() and active.timeindex_path.exists()
    m3 = LogManager([tmp_path], config_for=lambda _t: CFG)
    m3.load()
    log3 = m3.get("t", 0)
    assert log3.recovered_segments == 0
    _check_consistent(h, log3, expected)
    m3.shutdown()

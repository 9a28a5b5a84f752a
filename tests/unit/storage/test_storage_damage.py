"""Damaged segment files: bytes are only removed where Kafka would remove them, never silently.

Every removal logs an ERROR naming the file, the offsets and the byte count, and the removed
bytes move to ``<segment>.log.corrupt-<epoch ms>`` beside the segment. A corrupt batch that is
kept (an old segment with its index) makes reads of it fail with CORRUPT_MESSAGE.
"""

import logging
import struct
from pathlib import Path

import pytest

from strom import record as R
from strom.protocol.errors import ErrorCode
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError

CFG = LogConfig(segment_bytes=4000, index_interval_bytes=200)
BATCH_RECORDS = 2


def _fill(h, path: Path, batches: int = 60):
    """A log of three segments (0, 50, 100) of 2-record batches; closed cleanly."""
    log = h.open_log(path, CFG)
    for i in range(batches):
        log.append(bytearray(h.make_batch(BATCH_RECORDS, 40, ts=1000 + i)), leader_epoch=3,
                   now_ms=0)  # fmt: skip
    bases = [s.base_offset for s in log.segments]
    leo = log.log_end_offset
    log.close()
    assert len(bases) >= 3
    return bases, leo


def _batch_positions_of(data: bytes) -> list[tuple[int, R.BatchHeader]]:
    return list(R.iter_batches(memoryview(data)))


def _batch_positions(seg_path: Path) -> list[tuple[int, R.BatchHeader]]:
    return _batch_positions_of(seg_path.read_bytes())


def _damage(seg_path: Path, nth: int, how: str) -> tuple[int, int, bytes]:
    """Corrupt the ``nth`` batch; returns (its position, its base offset, the file's bytes
    from there to the end, damage included)."""
    raw = bytearray(seg_path.read_bytes())
    pos, hd = _batch_positions(seg_path)[nth]
    if how == "huge-length":
        struct.pack_into(">i", raw, pos + 8, 0x7FFF0000)
    elif how == "tiny-length":
        struct.pack_into(">i", raw, pos + 8, 3)
    elif how == "crc":
        raw[pos + R.RECORD_BATCH_OVERHEAD + 2] ^= 0x55
    else:
        raise ValueError(how)
    seg_path.write_bytes(raw)
    return pos, hd.base_offset, bytes(raw[pos:])


def _side_files(seg_path: Path) -> list[Path]:
    return sorted(seg_path.parent.glob(seg_path.name + ".corrupt-*"))


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("how", ["huge-length", "tiny-length", "crc"])
def test_index_rebuild_of_old_segment_moves_the_damaged_tail_aside(h, tmp_path, caplog, how):
    part = tmp_path / "t-0"
    bases, leo = _fill(h, part)
    victim = part / f"{bases[1]:020d}.log"
    pos, bad_offset, tail = _damage(victim, 3, how)
    victim.with_suffix(".index").unlink()  # forces a rebuild that scans the segment
    caplog.set_level(logging.WARNING)
    log = h.open_log(part, CFG, clean_shutdown=True, recovery_point=leo)
    for off in range(0, bad_offset, BATCH_RECORDS):  # everything before the damage is kept
        assert log.read(off, 1).slice.read_bytes()[:8] == off.to_bytes(8, "big")
    seg = log.segments[1]
    _ = seg.offset_index  # the rebuild
    assert seg.size == pos
    side = _side_files(victim)
    assert len(side) == 1 and side[0].read_bytes() == tail
    assert victim.stat().st_size == pos
    msgs = [m for m in _errors(caplog) if str(victim) in m]
    assert msgs, _errors(caplog)
    assert str(bad_offset) in msgs[0] and str(len(tail)) in msgs[0] and str(side[0]) in msgs[0]
    # later segments are untouched (Kafka keeps them too)
    assert log.log_end_offset == leo
    assert log.read(bases[2], 1).slice.read_bytes()[:8] == bases[2].to_bytes(8, "big")
    log.close()


@pytest.mark.parametrize("how", ["huge-length", "tiny-length", "crc"])
def test_crash_recovery_moves_the_damaged_tail_and_later_segments_aside(h, tmp_path, caplog, how):
    part = tmp_path / "t-0"
    bases, _leo = _fill(h, part)
    victim = part / f"{bases[1]:020d}.log"
    later = [part / f"{b:020d}.log" for b in bases[2:]]
    later_bytes = [p.read_bytes() for p in later]
    _pos, bad_offset, tail = _damage(victim, 3, how)
    caplog.set_level(logging.WARNING)
    # unclean shutdown with the recovery point in the first segment: everything is re-checked
    log = h.open_log(part, CFG, clean_shutdown=False, recovery_point=bases[0] + 1)
    assert log.log_end_offset == bad_offset
    assert [s.base_offset for s in log.segments] == bases[:2]
    for off in range(0, bad_offset, BATCH_RECORDS):
        assert log.read(off, 1).slice.read_bytes()[:8] == off.to_bytes(8, "big")
    side = _side_files(victim)
    assert len(side) == 1 and side[0].read_bytes() == tail
    for p, data in zip(later, later_bytes, strict=True):
        moved = _side_files(p)
        assert not p.exists() and len(moved) == 1 and moved[0].read_bytes() == data
    errors = _errors(caplog)
    assert any(str(victim) in m and str(bad_offset) in m and str(len(tail)) in m for m in errors)
    for p in later:
        assert any(str(p) in m for m in errors), errors
    # appends continue at the first removed offset
    res = log.append(bytearray(h.make_batch(1)), leader_epoch=4, now_ms=0)
    assert res.first_offset == bad_offset
    log.close()


@pytest.mark.parametrize("how", ["huge-length", "tiny-length"])
def test_reading_a_corrupt_batch_of_an_old_segment_fails_with_corrupt_message(h, tmp_path, how):
    """No rebuild (the index is intact): the bytes stay, and a read of the damaged range answers
    CORRUPT_MESSAGE instead of nothing (a consumer would wait forever) or a later segment's
    batches (it would skip records silently)."""
    part = tmp_path / "t-0"
    bases, leo = _fill(h, part)
    victim = part / f"{bases[1]:020d}.log"
    pos, bad_offset, _tail = _damage(victim, 3, how)
    log = h.open_log(part, CFG, clean_shutdown=True, recovery_point=leo)
    assert log.read(bad_offset - 1, 1).slice.read_bytes()[:8] == (bad_offset - 2).to_bytes(8, "big")
    for off in (bad_offset, bad_offset + 1, bad_offset + 2):
        with pytest.raises(StorageError) as exc:
            log.read(off, 1)
        assert exc.value.error_code == ErrorCode.CORRUPT_MESSAGE
    # a read from before the damage serves the batches before it (where it ends depends on the
    # index: it may run over the damage, as Kafka's reads do; the next read reports it)
    raw = victim.read_bytes()
    start = _batch_positions_of(raw[:pos])[-2][0]
    got = log.read(bad_offset - 2 * BATCH_RECORDS, 1 << 20).slice.read_bytes()
    assert got[: pos - start] == raw[start:pos]
    assert victim.stat().st_size == 3925 and not _side_files(victim)  # nothing was removed
    log.close()


def test_load_replays_producer_state_around_a_corrupt_old_batch(h, tmp_path, caplog):
    """Without producer snapshots the load replays every batch header; a corrupt one is skipped
    with an ERROR instead of failing the whole load."""
    part = tmp_path / "t-0"
    bases, leo = _fill(h, part)
    _damage(part / f"{bases[1]:020d}.log", 3, "huge-length")
    for snap in part.glob("*.snapshot"):
        snap.unlink()
    caplog.set_level(logging.WARNING)
    log = h.open_log(part, CFG, clean_shutdown=True, recovery_point=leo)
    assert log.log_end_offset == leo
    assert any("producer state" in m for m in _errors(caplog)), _errors(caplog)
    log.close()

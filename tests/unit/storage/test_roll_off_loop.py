"""A roll does no file work on the event loop (issue 15, point 7): the rolled segment's index
tails and the producer snapshot are written by the background flush, the next segment's file
is created ahead in a worker thread, and deleted segments are unlinked in one. Whatever the
loop does to those files meanwhile (truncation, deletion, close) wins over a late write."""

import asyncio
import os
import shutil
import struct
import threading
import time
import uuid

import pytest

from strom.storage import files
from strom.storage import index as index_mod
from strom.storage import producer_state as ps_mod
from strom.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from strom.storage.config import LogConfig
from strom.storage.log import NEXT_SEGMENT_FILE
from strom.storage.manager import LogManager
from strom.storage.segment import DELETED_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, segment_name

DEADLINE_S = 10.0
SLOW_S = 0.5  # a slowed file call; one on the loop stalls it at least this long
# 271-byte batches, an index entry per batch after the first: the second append passes half
# the segment (the next segment's file is prepared), the fourth rolls
CFG = LogConfig(segment_bytes=1000, index_interval_bytes=1)
SMALL = LogConfig(segment_bytes=500)  # every append but the first rolls


def _append(h, log, n=1, size=200):
    for _ in range(n):
        log.append(bytearray(h.make_batch(1, size)), leader_epoch=0, now_ms=0)


async def _until(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class Gate:
    """Holds calls from worker threads until ``release`` (the loop thread passes)."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.only = ""  # hold only calls about paths containing this

    def wait(self, about: object = "") -> None:
        if threading.current_thread() is not threading.main_thread() and \
                self.only in str(about):  # fmt: skip
            self.entered.set()
            if not self.gate.wait(DEADLINE_S):
                raise AssertionError("gate never opened")

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def tail_gate(monkeypatch):
    """Background index-tail writes wait at the gate (before taking the index's lock)."""
    g = Gate()
    real = index_mod.TailWrite.write

    def write(self):
        g.wait()
        real(self)

    monkeypatch.setattr(index_mod.TailWrite, "write", write)
    yield g
    g.release()


@pytest.fixture
def snapshot_gate(monkeypatch):
    """Background producer-snapshot writes wait at the gate."""
    g = Gate()
    real = ps_mod.write_snapshot_data

    def write(path, body, *, fsync=True, direct=False):
        g.wait(path)
        real(path, body, fsync=fsync, direct=direct)

    monkeypatch.setattr(ps_mod, "write_snapshot_data", write)
    yield g
    g.release()


def _slow_creates(monkeypatch, suffixes: tuple[str, ...]) -> list[str]:
    """Every ``os.open`` that creates a file ending in ``suffixes`` takes SLOW_S (as creating
    an index file once took 47 ms on the loop, behind a journal commit); returns the names
    created on the loop thread."""
    real = os.open
    on_loop: list[str] = []

    def slow_open(path, flags, *args, **kw):
        if flags & os.O_CREAT and str(path).endswith(suffixes):
            if threading.current_thread() is threading.main_thread():
                on_loop.append(os.path.basename(path))
            time.sleep(SLOW_S)
        return real(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", slow_open)
    return on_loop


def test_a_roll_does_not_wait_for_slow_index_snapshot_or_segment_file_creation(
    h, tmp_path, monkeypatch
):
    async def main():
        log = h.open_log(tmp_path / "t-0", CFG)
        _append(h, log)  # creates the first segment's file (on the loop: a new directory)
        on_loop = _slow_creates(monkeypatch, (INDEX_SUFFIX, TIME_INDEX_SUFFIX, ".tmp"))
        _append(h, log, 2)
        await _until(lambda: log._next_file, "the next segment's file")

        async def roll():
            _append(h, log)  # rolls
            assert len(log.segments) == 2
            await log.flush_in_background()

        lag = await h.max_lag_during(roll)
        assert on_loop == []
        assert lag < SLOW_S, f"event loop stalled {lag:.3f} s at a roll"
        rolled, active = log.segments
        assert log.recovery_point == active.base_offset == 3
        assert rolled.index_path.stat().st_size == 8 * len(rolled.offset_index) == 16
        assert rolled.timeindex_path.stat().st_size == 12 * len(rolled.time_index) > 0
        assert (log.dir / "00000000000000000003.snapshot").exists()
        assert not (log.dir / NEXT_SEGMENT_FILE).exists()  # renamed to be the new segment
        assert active.log_path.exists()
        log.close()

    asyncio.run(main())


def test_the_same_slow_creates_stall_the_loop_without_a_loop_to_hand_them_to(
    h, tmp_path, monkeypatch
):
    """The check above can fail: a roll with no worker to hand the files to (no running
    event loop) creates them on the calling thread and pays for every slow create."""
    log = h.open_log(tmp_path / "t-0", CFG)
    _append(h, log, 3)
    on_loop = _slow_creates(monkeypatch, (INDEX_SUFFIX, TIME_INDEX_SUFFIX, ".tmp"))
    t0 = time.monotonic()
    _append(h, log)  # rolls
    assert time.monotonic() - t0 >= 3 * SLOW_S
    assert INDEX_SUFFIX in "".join(on_loop) and TIME_INDEX_SUFFIX in "".join(on_loop)
    log.close()


def test_a_crash_with_a_prepared_next_segment_loads_without_it(h, tmp_path):
    async def main():
        d = tmp_path / "t-0"
        log = h.open_log(d, CFG)
        _append(h, log, 3)
        await _until(lambda: log._next_file, "the next segment's file")
        assert (d / NEXT_SEGMENT_FILE).exists()
        crashed = tmp_path / "crashed"
        shutil.copytree(d, crashed / "t-0")  # the files as a kill -9 now would leave them
        log.close()
        again = h.open_log(crashed / "t-0", CFG, recovery_point=0)
        assert not (crashed / "t-0" / NEXT_SEGMENT_FILE).exists()
        assert [s.base_offset for s in again.segments] == [0] and again.log_end_offset == 3
        _append(h, again)  # rolls without a prepared file (no loop: created here)
        assert again.log_end_offset == 4 and len(again.segments) == 2
        assert again.read(0, 1 << 20, min_one_batch=True).slice is not None
        again.close()

    asyncio.run(main())


def test_a_crash_after_a_roll_before_its_background_writes_loads_and_recovers(
    h, tmp_path, tail_gate, snapshot_gate
):
    """The roll renamed the prepared file and left the rolled segment's index tails and the
    snapshot to the worker: a crash before it wrote them leaves files a load recovers."""

    async def main():
        d = tmp_path / "t-0"
        log = h.open_log(d, CFG)
        _append(h, log, 3)
        await _until(lambda: log._next_file, "the next segment's file")
        _append(h, log)  # rolls: the new segment is the prepared file
        _append(h, log, size=10)  # data in the new segment
        await _until(tail_gate.entered.is_set, "the background index write")
        assert not (d / (segment_name(0) + INDEX_SUFFIX)).exists()
        crashed = tmp_path / "crashed" / "t-0"
        shutil.copytree(d, crashed)
        tail_gate.release()
        snapshot_gate.release()
        await _until(lambda: not log.flushing, "the flush to end")
        assert log.recovery_point == 3
        expected = [log.read(o, 1, min_one_batch=True).slice.read_bytes() for o in range(5)]
        log.close()

        again = h.open_log(crashed, CFG, recovery_point=0)
        assert [s.base_offset for s in again.segments] == [0, 3]
        assert again.log_end_offset == 5
        got = [again.read(o, 1, min_one_batch=True).slice.read_bytes() for o in range(5)]
        assert got == expected
        again.close()
        clean = h.open_log(crashed, CFG, clean_shutdown=True)  # indexes written at close
        assert clean.log_end_offset == 5
        assert len(clean.segments[0].offset_index) == 2
        clean.close()

    asyncio.run(main())


def test_retention_unlinks_deleted_files_off_the_loop(h, tmp_path, monkeypatch):
    real = os.unlink
    on_loop: list[str] = []

    def slow_unlink(path, *args, **kw):
        if str(path).endswith(DELETED_SUFFIX):
            if threading.current_thread() is threading.main_thread():
                on_loop.append(os.path.basename(path))
            time.sleep(SLOW_S)
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "unlink", slow_unlink)

    async def main():
        log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, retention_bytes=0,
                                                     file_delete_delay_ms=0))  # fmt: skip
        _append(h, log, 4)
        await _until(lambda: not log.flushing, "the roll flushes")
        doomed = log.segments
        assert len(doomed) == 4

        async def retention():
            assert log.apply_retention(now_ms=0) > 0

        lag = await h.max_lag_during(retention)
        assert on_loop == []
        assert lag < SLOW_S, f"event loop stalled {lag:.3f} s deleting segments"
        assert [s.base_offset for s in log.segments] == [4]  # the active one rolled first
        await _until(lambda: not list(log.dir.glob("*" + DELETED_SUFFIX)), "the unlinks")
        assert all(not s.file.is_open for s in doomed)
        log.close()

    asyncio.run(main())


def test_a_failed_background_unlink_is_reported(h, tmp_path, monkeypatch):
    real = os.unlink
    reported = []

    def failing_unlink(path, *args, **kw):
        if str(path).endswith(DELETED_SUFFIX):
            raise OSError(5, "Input/output error")
        return real(path, *args, **kw)

    monkeypatch.setattr(os, "unlink", failing_unlink)

    async def main():
        log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=500, retention_bytes=0,
                                                     file_delete_delay_ms=0))  # fmt: skip
        log.on_io_error = lambda plog, what, cause: reported.append((what, cause.errno))
        _append(h, log, 2)
        log.apply_retention(now_ms=0)
        await _until(lambda: reported, "the failure report")
        assert "Error while deleting" in reported[0][0] and reported[0][1] == 5
        log.close()

    asyncio.run(main())


def test_a_taken_index_tail_never_lands_on_a_deleted_segment(h, tmp_path, tail_gate):
    """Retention deletes the rolled segment while its index tail waits to be written: the
    late write must not create ``<base>.index`` again beside the ``.deleted`` files."""

    async def main():
        cfg = LogConfig(segment_bytes=1000, index_interval_bytes=1, retention_bytes=0,
                        file_delete_delay_ms=60_000)  # fmt: skip
        log = h.open_log(tmp_path / "t-0", cfg)
        _append(h, log, 4)  # rolls: the tail of segment 0 is taken
        await _until(tail_gate.entered.is_set, "the background index write")
        assert log.apply_retention(now_ms=0) > 0
        tail_gate.release()
        await _until(lambda: not log.flushing, "the flush to end")
        names = sorted(p.name for p in log.dir.iterdir() if p.name.startswith(segment_name(0)))
        assert names == [segment_name(0) + ".log.deleted"]
        log.close()

    asyncio.run(main())


def test_truncation_wins_over_a_late_index_tail_write(h, tmp_path, tail_gate):
    async def main():
        log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=2000, index_interval_bytes=1))
        _append(h, log, 4)  # one segment, an index entry per batch after the first
        done = log.flush_in_background(full=True)  # takes the tail (3 entries)
        await _until(tail_gate.entered.is_set, "the background index write")
        log.truncate_to(2)  # the loop writes the truncated index itself
        tail_gate.release()
        await done
        seg = log.active_segment
        assert len(seg.offset_index) == 1
        assert seg.index_path.stat().st_size == 8  # not the 3 entries taken before
        assert seg.timeindex_path.stat().st_size == 12 * len(seg.time_index)
        log.close()

    asyncio.run(main())


def test_close_writes_what_an_inflight_flush_has_taken(h, tmp_path, tail_gate, snapshot_gate):
    async def main():
        d = tmp_path / "t-0"
        log = h.open_log(d, CFG)
        _append(h, log, 4)  # rolls
        await _until(tail_gate.entered.is_set, "the background index write")
        log.close()  # writes the taken tails and the snapshot itself
        tail_gate.release()
        snapshot_gate.release()
        await asyncio.sleep(0)
        reopened = h.open_log(d, CFG, clean_shutdown=True)
        first = reopened.segments[0]
        assert first.index_path.stat().st_size == 8 * len(first.offset_index) == 16
        assert (d / "00000000000000000003.snapshot").exists()
        assert reopened.log_end_offset == 4
        reopened.close()

    asyncio.run(main())


def test_a_snapshot_deleted_by_truncation_is_not_written_late(h, tmp_path, snapshot_gate):
    """The snapshot at 2 is being written in the worker when a truncation to 1 deletes it:
    the write must not bring it back."""
    snapshot_gate.only = "00000000000000000002.snapshot"

    async def main():
        log = h.open_log(tmp_path / "t-0", SMALL)
        _append(h, log, 3)  # rolls at 1 and 2: snapshots taken at both
        await _until(snapshot_gate.entered.is_set, "the background snapshot write")
        log.truncate_to(1)
        snapshot_gate.release()
        await _until(lambda: not log.flushing, "the flush to end")
        snaps = sorted(p.name for p in log.dir.glob("*.snapshot"))
        assert snaps == ["00000000000000000001.snapshot"]
        assert not list(log.dir.glob("*.snapshot*.tmp"))
        log.close()

    asyncio.run(main())


def test_retention_leaves_the_epoch_checkpoint_to_the_next_flush(h, tmp_path, monkeypatch):
    """Moving the log start used to rewrite and fsync leader-epoch-checkpoint on the loop at
    every retention pass; now the next flush (or close) writes it, and a crash before that
    leaves older entries the load drops again."""
    synced_on_loop: list[int] = []
    real = files.fsync

    def fsync(fd):
        if threading.current_thread() is threading.main_thread():
            synced_on_loop.append(fd)
        real(fd)

    monkeypatch.setattr(files, "fsync", fsync)

    async def main():
        d = tmp_path / "t-0"
        log = h.open_log(d, LogConfig(segment_bytes=500, retention_bytes=300))
        for epoch in range(4):  # one segment per epoch
            log.append(bytearray(h.make_batch(1, 200)), leader_epoch=epoch, now_ms=0)
        await _until(lambda: not log.flushing, "the roll flushes")
        log.flush()  # the checkpoint on disk holds all four epochs
        before = read_leader_epoch_checkpoint(d / LEADER_EPOCH_CHECKPOINT)
        assert before == [(0, 0), (1, 1), (2, 2), (3, 3)]
        synced_on_loop.clear()
        assert log.apply_retention(now_ms=0) > 0
        assert log.log_start_offset == 2
        assert synced_on_loop == []
        assert read_leader_epoch_checkpoint(d / LEADER_EPOCH_CHECKPOINT) == before
        assert log.epochs.entries() == [(2, 2), (3, 3)]
        crashed = tmp_path / "crashed" / "t-0"
        shutil.copytree(d, crashed)
        log.close()
        assert read_leader_epoch_checkpoint(d / LEADER_EPOCH_CHECKPOINT) == [(2, 2), (3, 3)]
        again = h.open_log(crashed, LogConfig(segment_bytes=500), recovery_point=0,
                           log_start_offset=2)  # fmt: skip
        assert again.epochs.entries() == [(2, 2), (3, 3)]
        again.close()

    asyncio.run(main())


def test_the_retention_pass_gives_the_loop_back_between_logs(h, tmp_path):
    async def main():
        m = LogManager([tmp_path])
        m.load()
        cfg = LogConfig(retention_ms=100, segment_bytes=400, file_delete_delay_ms=0)
        logs = [m.create("t", p, uuid.uuid4(), cfg) for p in range(3)]
        for log in logs:
            for ts in (0, 10, 1000):
                log.append(bytearray(h.make_batch(1, 200, ts=ts)), leader_epoch=0, now_ms=ts)
        await _until(lambda: not any(log.flushing for log in logs), "the roll flushes")
        seen: list[int] = []  # logs already trimmed, each time another task got to run

        async def watch():
            while True:
                seen.append(sum(log.log_start_offset == 2 for log in logs))
                await asyncio.sleep(0)

        watcher = asyncio.create_task(watch())
        await asyncio.sleep(0)
        assert await m.run_retention_in_slices(now_ms=1050) > 0
        watcher.cancel()
        assert all(log.log_start_offset == 2 for log in logs)
        assert {1, 2} <= set(seen)  # it ran between the logs, not only before and after
        m.shutdown()

    asyncio.run(main())


def test_time_index_tails_encode_as_kafka_lays_them_out(tmp_path):
    ti = index_mod.TimeIndex(tmp_path / "0.timeindex", 100, 1000)
    for i, ts in enumerate((-5, 7, 1 << 40, (1 << 62) + 3)):
        ti.maybe_append(ts, 100 + i * 70_000)
    expected = b"".join(struct.pack(">qi", t, o) for t, o in zip(ti.timestamps, ti.offsets,
                                                                  strict=True))  # fmt: skip
    assert len(ti) == 3  # (-5 is no timestamp)
    assert ti.take_tail().data == expected
    ti.maybe_append((1 << 63) - 1, 500_000)
    assert ti.take_tail().data == struct.pack(">qi", (1 << 63) - 1, 499_900)

"""Flushes off the event loop: fsyncs of rolled segments, full flushes and checkpoints run in
worker threads; the recovery point moves only once they are done (issue 15, point 7)."""

import asyncio
import logging
import threading
import time
import uuid

import pytest

from strom.storage import files
from strom.storage.checkpoints import RECOVERY_POINT_CHECKPOINT, read_offset_checkpoint
from strom.storage.config import LogConfig
from strom.storage.epochs import DeferredEpochCache
from strom.storage.errors import KafkaStorageError
from strom.storage.manager import LogManager

ROLL = LogConfig(segment_bytes=400)  # a 200-byte record per batch: every second append rolls
DEADLINE_S = 10.0
SLOW_S = 0.5  # a slow fsync


class GatedFsync:
    """Stands in for ``files.fsync``: calls from worker threads wait until ``release``."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.synced: list[int] = []

    def __call__(self, fd: int) -> None:
        if threading.current_thread() is not threading.main_thread():
            self.entered.set()
            if not self.gate.wait(DEADLINE_S):
                raise AssertionError("fsync gate never opened")
        self.synced.append(fd)

    def release(self) -> None:
        self.gate.set()


@pytest.fixture
def gated(monkeypatch):
    g = GatedFsync()
    monkeypatch.setattr(files, "fsync", g)
    yield g
    g.release()  # never leave a worker thread waiting


async def _until(cond, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def _append(h, log, n=1):
    for _ in range(n):
        log.append(bytearray(h.make_batch(1, 200)), leader_epoch=0, now_ms=0)


def test_roll_flushes_in_background_and_moves_recovery_point_after_the_sync(h, tmp_path, gated):
    async def main():
        log = h.open_log(tmp_path / "t-0", ROLL)
        _append(h, log, 2)  # the second append rolls: a background flush starts
        assert log.flushing and len(log.segments) == 2
        await _until(gated.entered.is_set, "the worker's fsync")
        await asyncio.sleep(0.02)  # the loop runs on while the fsync is stuck
        assert log.recovery_point == 0
        done = log.flush_in_background()  # asked again meanwhile: the running one
        gated.release()
        await done
        assert not log.flushing
        assert log.recovery_point == log.segments[1].base_offset == 1
        assert not log.segments[0].file.is_open or log.segments[0].file._pins == 0
        log.close()

    asyncio.run(main())


def test_cancelling_a_waiter_does_not_cancel_the_flush(h, tmp_path, gated):
    async def main():
        log = h.open_log(tmp_path / "t-0", LogConfig(flush_messages=2, segment_bytes=400))
        _append(h, log, 2)  # rolls, and reaches flush.messages while the roll's flush runs
        waiter = log.flush_in_background()
        waiter.cancel()
        res = log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
        gated.release()
        await res.flushed
        assert log.recovery_point == log.log_end_offset == 3
        log.close()

    asyncio.run(main())


def test_the_event_loop_keeps_ticking_during_a_slow_fsync(h, tmp_path, monkeypatch):
    """A slow fsync in the background flush must not stall the loop (the blocking flush it
    replaces does: checked too, so the lag measurement itself is known to work). Each fsync
    takes SLOW_S, so one on the loop stalls it at least that long: the bound is that, not a
    fraction of it, so a loaded machine's late timers do not read as a stall."""
    on_loop: list[int] = []

    def slow_fsync(fd: int) -> None:
        if threading.current_thread() is threading.main_thread():
            on_loop.append(fd)
        time.sleep(SLOW_S)

    monkeypatch.setattr(files, "fsync", slow_fsync)

    async def main():
        log = h.open_log(tmp_path / "t-0", ROLL)

        async def background():
            _append(h, log, 2)
            await log.flush_in_background()

        async def blocking():
            _append(h, log, 2)
            assert log.flushing
            log.flush_rolled()

        lag = await h.max_lag_during(background)
        assert log.recovery_point == 1
        assert on_loop == []
        assert lag < SLOW_S, f"event loop stalled {lag:.3f} s during a background flush"
        blocked = await h.max_lag_during(blocking)
        assert on_loop and blocked >= SLOW_S  # a blocking flush does stall it
        log.close()

    asyncio.run(main())


def test_truncation_during_an_inflight_flush(h, tmp_path, gated):
    """A follower truncation while the fsyncs run: the flush must not move the recovery point
    past data it did not sync, and the deleted segment's pinned file closes when it ends."""

    log = h.open_log(tmp_path / "t-0", LogConfig(segment_bytes=400, file_delete_delay_ms=0))
    _append(h, log, 4)  # no loop yet, so no flush: every append but the first rolls

    async def main():
        done = log.flush_in_background(full=True)  # syncs segments 0-3
        assert done is not None
        await _until(gated.entered.is_set, "the worker's fsync")
        doomed = log.segments[-1]
        log.truncate_to(1)  # drops the segments at 2 and 3 (their files are pinned)
        assert doomed not in log.segments and doomed.file.is_open
        log.update_config(LogConfig(file_delete_delay_ms=0))  # no more rolls (and flushes)
        _append(h, log, 5)  # new data above the truncation point, never synced
        gated.release()
        await done
        assert log.recovery_point <= 1
        assert not doomed.file.is_open
        log.flush()  # a blocking flush still syncs everything
        assert log.recovery_point == log.log_end_offset
        log.close()

    asyncio.run(main())


def test_retention_during_an_inflight_flush(h, tmp_path, gated):
    async def main():
        cfg = LogConfig(segment_bytes=400, file_delete_delay_ms=0, retention_bytes=0)
        log = h.open_log(tmp_path / "t-0", cfg)
        _append(h, log, 2)
        await _until(gated.entered.is_set, "the worker's fsync")
        rolled = log.segments[0]
        assert log.apply_retention(now_ms=0) > 0  # deletes the segment being synced
        assert rolled not in log.segments and rolled.file.is_open
        assert not rolled.log_path.exists()
        gated.release()
        await _until(lambda: not log.flushing, "the flush to end")
        assert not rolled.file.is_open
        assert log.recovery_point == 1
        log.close()

    asyncio.run(main())


def test_failed_background_fsync_keeps_the_recovery_point_and_retries(h, tmp_path, monkeypatch,
                                                                      caplog):
    failing = [True]

    def fsync(fd):
        if failing[0]:
            raise OSError(5, "Input/output error")

    monkeypatch.setattr(files, "fsync", fsync)

    async def main():
        log = h.open_log(tmp_path / "t-0", ROLL)
        caplog.set_level(logging.ERROR)
        _append(h, log, 2)
        await _until(lambda: not log.flushing, "the flush to end")
        assert log.recovery_point == 0
        assert any("flush of t-0 failed" in r.getMessage() for r in caplog.records)
        failing[0] = False
        await log.flush_if_due_in_background(now_ms=0)  # the periodic flush retries it
        assert log.recovery_point == 1
        log.close()

    asyncio.run(main())


def test_blocking_flush_covers_an_inflight_background_flush(h, tmp_path, gated):
    """``flush()`` claims everything durable, so it also syncs the files a background flush
    has taken over but not synced yet."""

    async def main():
        log = h.open_log(tmp_path / "t-0", ROLL)
        _append(h, log, 2)
        await _until(gated.entered.is_set, "the worker's fsync")
        rolled_fd = log.segments[0].file.fileno()
        log.flush()  # on the loop thread: the gate does not hold it
        assert rolled_fd in gated.synced
        assert log.recovery_point == log.log_end_offset
        gated.release()
        await _until(lambda: not log.flushing, "the flush to end")
        assert log.recovery_point == log.log_end_offset
        log.close()

    asyncio.run(main())


def test_flush_messages_answers_once_the_data_is_durable(h, tmp_path, gated):
    async def main():
        log = h.open_log(tmp_path / "t-0", LogConfig(flush_messages=2))
        r1 = log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
        assert r1.flushed is None
        r2 = log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
        assert r2.flushed is not None
        await _until(gated.entered.is_set, "the worker's fsync")
        # appended while that flush runs: its future waits for the next flush
        log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
        r4 = log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
        assert r4.flushed is not None
        await asyncio.sleep(0.02)
        assert not r2.flushed.done() and log.recovery_point == 0
        gated.release()
        await r2.flushed
        assert log.recovery_point >= 2
        await r4.flushed
        assert log.recovery_point == 4
        log.close()

    asyncio.run(main())


def test_flush_messages_without_a_loop_flushes_at_once(h, tmp_path):
    log = h.open_log(tmp_path / "t-0", LogConfig(flush_messages=2))
    for _ in range(2):
        res = log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
    assert res.flushed is None and log.recovery_point == 2
    log.close()


def test_manager_flushes_and_checkpoints_in_the_background(h, tmp_path, gated):
    async def main():
        m = LogManager([tmp_path])
        m.load()
        logs = [m.create("t", p, uuid.uuid4(), ROLL) for p in range(3)]
        for log in logs:
            _append(h, log)
        await m.flush_in_background(now_ms=0)  # nothing rolled yet
        assert not any(log.flushing for log in logs)
        for log in logs:
            _append(h, log)  # rolls: each log starts its own flush
        await _until(gated.entered.is_set, "the worker's fsync")
        gated.release()
        await m.flush_in_background(now_ms=0)
        await _until(lambda: not any(log.flushing for log in logs), "the flushes to end")
        assert [log.recovery_point for log in logs] == [1, 1, 1]
        await m.checkpoint_in_background()
        rps = read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT)
        assert rps == {("t", 0): 1, ("t", 1): 1, ("t", 2): 1}
        m.shutdown()

    asyncio.run(main())


def test_an_older_checkpoint_never_lands_over_a_newer_one(tmp_path):
    m = LogManager([tmp_path])
    m.load()
    m.create("t", 0, uuid.uuid4(), LogConfig())
    old = m._checkpoint_contents()  # taken by a background checkpoint, written late
    m.get("t", 0).recovery_point = 7
    m.checkpoint()
    m._write_checkpoints(old)
    assert read_offset_checkpoint(tmp_path / RECOVERY_POINT_CHECKPOINT) == {("t", 0): 7}
    m.shutdown()


def test_an_older_epoch_write_never_lands_over_a_newer_one(tmp_path):
    cache = DeferredEpochCache(tmp_path / "leader-epoch-checkpoint", [])
    cache.note(1, 0)
    taken = cache.take_dirty()  # a background flush's copy
    # until a write lands, every flush takes the entries again (one may pass the recovery
    # point while another's write is still under way)
    assert taken is not None and cache.take_dirty() == taken
    cache.assign(2, 5)  # written at once, newer
    cache.write_version(*taken)  # the background write arrives late: skipped
    assert DeferredEpochCache(cache.path).entries() == [(1, 0), (2, 5)]


def test_truncation_error_in_flush_future_surfaces(h, tmp_path, gated):
    """A flush.messages append whose flush was overtaken by a truncation fails its future
    (the produce would answer KAFKA_STORAGE_ERROR) rather than claiming durability."""

    async def main():
        log = h.open_log(tmp_path / "t-0", LogConfig(flush_messages=1))
        res = log.append(bytearray(h.make_batch(1)), leader_epoch=0, now_ms=0)
        await _until(gated.entered.is_set, "the worker's fsync")
        log.truncate_to(0)
        gated.release()
        with pytest.raises(KafkaStorageError):
            await res.flushed
        log.close()

    asyncio.run(main())

"""log.cleaner.threads: that many cleaner workers, never two on one log, changed while running."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import threading
import time

from tests.unit.storage.test_cleaner import Clock, compact_config, put

from strom.storage.cleaner import CleanerConfig, LogCleaner
from strom.storage.cleaner import service as service_module
from strom.storage.log import PartitionLog

DEADLINE_S = 20.0


def _dirty_log(path, clock):
    """Partition ``path``'s suffix of topic t, with 60 records of 3 keys to clean away."""
    plog = PartitionLog(path, "t", int(path.name.rsplit("-", 1)[1]), None, compact_config(),
                        clock=clock)
    for i in range(60):
        put(plog, [(b"k%d" % (i % 3), b"v%d" % i)])
    plog.roll()
    return plog


def _cleaner(logs, clock, settings: CleanerConfig) -> LogCleaner:
    return LogCleaner(lambda: [p for p in logs if not p.closed], dataclasses.replace(settings),
                      dir_of=lambda p: p.dir.parent, clock=clock,
                      settings=lambda: dataclasses.replace(settings))


async def _until(predicate, what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not predicate():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.005)


def test_two_workers_clean_two_logs_at_the_same_time(tmp_path, monkeypatch):
    clock = Clock()
    logs = [_dirty_log(tmp_path / f"t-{i}", clock) for i in range(2)]
    meet = threading.Barrier(2, timeout=DEADLINE_S)  # passes only if both cleanings overlap
    prepare = service_module.CleanJob.prepare

    def prepare_together(job):
        meet.wait()
        return prepare(job)

    monkeypatch.setattr(service_module.CleanJob, "prepare", prepare_together)

    async def main():
        cleaner = _cleaner(logs, clock, CleanerConfig(threads=2, backoff_ms=10))
        cleaner.start()
        try:
            assert cleaner.workers == 2
            await _until(lambda: cleaner.passes >= 2, "both logs cleaned")
        finally:
            await cleaner.stop()
        assert cleaner.workers == 0

    asyncio.run(main())
    assert not meet.broken


def test_two_workers_never_clean_the_same_log(tmp_path, monkeypatch):
    clock = Clock()
    plog = _dirty_log(tmp_path / "t-0", clock)
    busy, overlaps = [0], []
    prepare = service_module.CleanJob.prepare

    def prepare_alone(job):
        busy[0] += 1
        overlaps.append(busy[0])
        time.sleep(0.05)  # long enough for the other worker to look for work meanwhile
        busy[0] -= 1
        return prepare(job)

    monkeypatch.setattr(service_module.CleanJob, "prepare", prepare_alone)

    async def main():
        cleaner = _cleaner([plog], clock, CleanerConfig(threads=2, backoff_ms=10))
        cleaner.start()
        try:
            await _until(lambda: cleaner.passes >= 1, "the log cleaned")
            for i in range(30):  # dirty it again while both workers poll
                put(plog, [(b"k%d" % (i % 3), b"w%d" % i)])
            plog.roll()
            await _until(lambda: cleaner.passes >= 2, "the log cleaned again")
        finally:
            await cleaner.stop()

    asyncio.run(main())
    assert overlaps and max(overlaps) == 1


def test_the_worker_count_follows_the_setting_within_kafkas_bounds(tmp_path):
    clock = Clock()
    settings = CleanerConfig(threads=1, backoff_ms=10)

    async def main():
        cleaner = _cleaner([], clock, settings)
        cleaner.start()
        try:
            assert cleaner.workers == 1
            settings.threads = 2
            await _until(lambda: cleaner.workers == 2, "a second worker")
            assert cleaner.config.map_memory == settings.dedupe_buffer_size // 2
            settings.threads = 1
            await _until(lambda: cleaner.workers == 1, "back to one worker")
            settings.threads = 3  # more than double: Kafka refuses, the count stays
            await asyncio.sleep(0.1)
            assert (cleaner.workers, cleaner.config.threads) == (1, 1)
        finally:
            await cleaner.stop()

    asyncio.run(main())


def test_zero_threads_clean_nothing_as_in_kafka(tmp_path):
    clock = Clock()
    plog = _dirty_log(tmp_path / "t-0", clock)

    async def main():
        cleaner = _cleaner([plog], clock, CleanerConfig(threads=0, backoff_ms=10))
        assert cleaner.start() is None
        assert cleaner.workers == 0
        await cleaner.stop()

    asyncio.run(main())


def test_threads_change_error_matches_kafkas_rules():
    error = service_module.threads_change_error
    assert error(1, 2) is None and error(4, 2) is None and error(4, 8) is None
    assert error(1, 0) == "Log cleaner threads should be at least 1"
    assert "reduced to less than half the current value 4" in error(4, 1)
    assert "increased to more than double the current value 1" in error(1, 3)


def test_a_pass_does_no_fsync_on_the_event_loop(tmp_path, monkeypatch):
    """The swap's directory fsync and the checkpoint's write go to worker threads (issue 28):
    an fsync on the loop stalls every client for its duration."""
    from strom.storage import checkpoints
    from strom.storage import log as log_module

    clock = Clock()
    plog = _dirty_log(tmp_path / "t-0", clock)
    on_loop: list[str] = []
    loop_thread: list[threading.Thread] = []

    def about_this_test(arg) -> bool:  # not a finalizer of an earlier test's log
        if isinstance(arg, int):
            try:
                arg = os.readlink(f"/proc/self/fd/{arg}")
            except OSError:
                return False
        return str(arg).startswith(str(tmp_path))

    def watched(name, fn):
        def call(*args, **kwargs):
            if threading.current_thread() in loop_thread and about_this_test(args[0]):
                on_loop.append(name)
            return fn(*args, **kwargs)
        return call

    monkeypatch.setattr(log_module, "fsync", watched("directory fsync", log_module.fsync))
    monkeypatch.setattr(service_module, "write_offset_checkpoint",
                        watched("checkpoint write", checkpoints.write_offset_checkpoint))

    async def main():
        loop_thread.append(threading.current_thread())
        cleaner = _cleaner([plog], clock, CleanerConfig(threads=1, backoff_ms=10))
        cleaner.start()
        try:
            await _until(lambda: cleaner.passes >= 1, "the log cleaned")
        finally:
            await cleaner.stop()

    asyncio.run(main())
    assert (tmp_path / service_module.CLEANER_CHECKPOINT).exists()
    assert on_loop == []

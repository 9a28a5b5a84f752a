"""Leader-epoch checkpoints written off the event loop (issue 28): a new leader's epoch and a
truncation change the entries at once and reach the file from worker threads, batched; writes
of one partition never land out of order; a crash before a write lands is recovered from the
log."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import pytest

from strom.storage import epochs as epochs_module
from strom.storage.checkpoints import LEADER_EPOCH_CHECKPOINT, read_leader_epoch_checkpoint
from strom.storage.epochs import DeferredEpochCache, EpochCheckpointWriter
from strom.storage.log import PartitionLog

from .conftest import TOPIC_ID, make_batch


def _cache(tmp_path: Path, name: str) -> DeferredEpochCache:
    d = tmp_path / name
    d.mkdir()
    return DeferredEpochCache(d / LEADER_EPOCH_CHECKPOINT, [])


def _in_file(cache: DeferredEpochCache) -> list[tuple[int, int]] | None:
    assert cache.path is not None
    return read_leader_epoch_checkpoint(cache.path)


def test_many_new_leaders_write_in_worker_threads_in_few_batches(tmp_path, monkeypatch):
    writers: list[int] = []
    real = epochs_module.write_leader_epoch_checkpoint

    def spy(*args, **kwargs):
        writers.append(threading.get_ident())
        real(*args, **kwargs)

    monkeypatch.setattr(epochs_module, "write_leader_epoch_checkpoint", spy)
    caches = [_cache(tmp_path, f"p{i}") for i in range(200)]

    async def become_leaders() -> EpochCheckpointWriter:
        for i, c in enumerate(caches):  # one loop turn, as a metadata update does
            c.assign(7, i)
        assert writers == []  # nothing written on the loop
        assert all(not c.current for c in caches)  # but every change is in memory
        waits = {c.persisted() for c in caches}
        assert len(waits) == 1  # one batch for the whole turn
        await asyncio.gather(*(w for w in waits if w is not None))
        writer = EpochCheckpointWriter.for_running_loop()
        assert writer is not None
        return writer

    loop_thread = threading.get_ident()
    writer = asyncio.run(become_leaders())
    assert len(writers) == 200 and loop_thread not in writers
    assert writer.batches == 1
    assert all(_in_file(c) == [(7, i)] for i, c in enumerate(caches))
    assert all(c.current for c in caches)


def test_writes_of_one_partition_never_land_out_of_order(tmp_path, monkeypatch):
    """The first write is held in its thread while the entries change twice more: the file
    ends with the newest entries, and the held (older) write never lands over them."""
    cache = _cache(tmp_path, "p")
    gate, entered = threading.Event(), threading.Event()
    real = epochs_module.write_leader_epoch_checkpoint
    landed: list[list[tuple[int, int]]] = []

    def slow(path, entries, **kwargs):
        if not entered.is_set():
            entered.set()
            assert gate.wait(10)
        real(path, entries, **kwargs)
        landed.append(list(entries))

    monkeypatch.setattr(epochs_module, "write_leader_epoch_checkpoint", slow)

    async def run() -> None:
        cache.assign(3, 0)
        first = cache.persisted()
        assert first is not None
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, entered.wait, 10)  # the first write is under way
        cache.assign(4, 10)
        cache.truncate_from_end(10)  # a follower cut it again: (3, 0) only, newer version
        cache.assign(5, 12)
        second = cache.persisted()
        assert second is not None and second is not first
        gate.set()
        await asyncio.gather(first, second)

    asyncio.run(run())
    assert _in_file(cache) == [(3, 0), (5, 12)] and cache.current
    assert landed == [[(3, 0)], [(3, 0), (5, 12)]]


def test_without_a_loop_a_change_is_written_at_once(tmp_path):
    cache = _cache(tmp_path, "p")
    cache.assign(2, 0)
    cache.assign(4, 9)
    cache.truncate_from_end(9)
    assert _in_file(cache) == [(2, 0)] and cache.current and cache.persisted() is None


def test_a_flush_writes_a_change_whose_background_write_has_not_landed(tmp_path):
    """The recovery point must never pass records whose epoch the file lacks: a flush takes
    the entries whenever the file lags, even while a background write of them is queued."""
    plog = PartitionLog(tmp_path / "t-0", "t", 0, TOPIC_ID)

    async def run() -> None:
        plog.append(make_batch(3), leader_epoch=1, now_ms=1_000)
        plog.epochs.assign(2, plog.log_end_offset)  # queued for a worker thread
        assert not plog.epochs.current
        plog.flush()  # on the loop, before the queued write ran
        assert plog.epochs.current
        assert _in_file(plog.epochs) == [(1, 0), (2, 3)]
        assert plog.recovery_point == plog.log_end_offset

    asyncio.run(run())
    plog.close()


def _crash_copy(plog: PartitionLog, dest: Path, stale: str | None) -> Path:
    """The partition directory as kill -9 leaves it (page cache kept, nothing closed), with
    the leader-epoch checkpoint a write had not replaced yet (``stale``; None: no file)."""
    shutil.copytree(plog.dir, dest)
    target = dest / LEADER_EPOCH_CHECKPOINT
    if stale is None:
        target.unlink(missing_ok=True)
    else:
        target.write_text(stale)
    return dest


def test_a_crash_before_a_truncation_lands_leaves_no_epoch_past_the_log_end(tmp_path):
    """A follower truncated (the file still has the cut epochs) and fetched nothing more,
    which the replica fetcher guarantees until the write lands: loading drops the stale
    entries at and past the log end."""
    plog = PartitionLog(tmp_path / "t-0", "t", 0, TOPIC_ID, hw_follows_leo=False)
    for epoch, batches in ((3, 5), (5, 3)):
        plog.epochs.assign(epoch, plog.log_end_offset)
        for _ in range(batches):
            plog.append(make_batch(10), leader_epoch=epoch, now_ms=1_000)
    plog.flush()
    stale = (plog.dir / LEADER_EPOCH_CHECKPOINT).read_text()
    assert read_leader_epoch_checkpoint(plog.dir / LEADER_EPOCH_CHECKPOINT) == [(3, 0),
                                                                                  (5, 50)]
    plog.truncate_to(40)  # diverged from the new leader
    copy = _crash_copy(plog, tmp_path / "crashed" / "t-0", stale)
    plog.close()
    back = PartitionLog(copy, "t", 0, TOPIC_ID, recovery_point=plog.recovery_point)
    try:
        assert back.log_end_offset == 40
        assert back.epochs.entries() == [(3, 0)]
        assert back.end_offset_for_epoch(3) == (3, 40)
    finally:
        back.close()


@pytest.mark.parametrize("stale_file", [True, False], ids=["older-file", "no-file"])
def test_a_crash_before_a_new_leaders_epoch_lands_is_recovered_from_the_log(tmp_path,
                                                                            stale_file):
    """The new leader wrote in its epoch, but neither the checkpoint nor a flush landed: the
    records are above the recovery point, so recovery reads them and notes the epoch again,
    at the offset the leader had assigned it."""
    plog = PartitionLog(tmp_path / "t-0", "t", 0, TOPIC_ID)
    plog.append(make_batch(20), leader_epoch=3, now_ms=1_000)
    plog.flush()
    stale = (plog.dir / LEADER_EPOCH_CHECKPOINT).read_text() if stale_file else None
    recovery_point = plog.recovery_point
    plog.epochs.assign(6, plog.log_end_offset)
    for _ in range(3):
        plog.append(make_batch(5), leader_epoch=6, now_ms=1_000)
    copy = _crash_copy(plog, tmp_path / "crashed" / "t-0", stale)
    plog.close()
    back = PartitionLog(copy, "t", 0, TOPIC_ID, recovery_point=recovery_point)
    try:
        assert back.log_end_offset == 35
        assert back.epochs.entries() == [(3, 0), (6, 20)]
    finally:
        back.close()

"""The log cleaner service: ``log.cleaner.threads`` workers each clean the filthiest compacted
log nobody else is cleaning.

Each worker is an asyncio task. Choosing, planning and swapping run on the event loop (cheap:
sizes, headers, renames); reading the key map, rewriting segments, the fsync that makes a
swap's renames durable and the checkpoint's write run in a worker thread
(``asyncio.to_thread``) so the loop keeps serving while the GIL allows (so several workers mostly
overlap their disk I/O). Each worker's key map gets ``log.cleaner.dedupe.buffer.size`` divided by
the number of workers, as Kafka's cleaner threads do. With nothing to clean a worker sleeps
``log.cleaner.backoff.ms``. The settings are read again before every pass, so dynamic broker
configs apply without a restart; a change of the thread count is checked as Kafka checks it
(`threads_change_error`). The first dirty offset of every log is kept in
``cleaner-offset-checkpoint`` in its log dir, as Kafka does, so a restart does not re-clean.

Beyond Kafka: a log whose cleaned part still holds tombstones or markers is also cleaned once
their delete horizon has passed, even without new writes, so deleted keys really disappear.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from strom.common.tasks import cancel_all
from strom.storage.checkpoints import read_offset_checkpoint, write_offset_checkpoint
from strom.storage.cleaner.batches import CleanerCorruptionError
from strom.storage.cleaner.cleaner import (
    CleanedGroup,
    CleaningAborted,
    CleanJob,
    LogToClean,
    MapTooSmallError,
    discard_cleaned,
    log_to_clean,
    make_plan,
    swap_in,
)
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog, sync_directory

log = logging.getLogger(__name__)

CLEANER_CHECKPOINT = "cleaner-offset-checkpoint"
MAX_MAP_MEMORY = 2**31 - 1  # Kafka caps one cleaner's map below 2 GiB


@dataclass
class CleanerConfig:
    """Kafka's log.cleaner.* broker configs."""

    enabled: bool = True
    threads: int = 1  # workers, each cleaning one log at a time (0: none, as Kafka)
    dedupe_buffer_size: int = 134217728
    io_buffer_load_factor: float = 0.9
    backoff_ms: int = 15000

    @property
    def map_memory(self) -> int:
        return min(self.dedupe_buffer_size // max(self.threads, 1), MAX_MAP_MEMORY)


def threads_change_error(current: int, new: int) -> str | None:
    """Kafka's limits on changing log.cleaner.threads while running (LogCleaner
    .validateReconfiguration): at least 1, at least half and at most double the current count."""
    if new < 1:
        return "Log cleaner threads should be at least 1"
    if new < current // 2:
        return f"Log cleaner threads cannot be reduced to less than half the current value {current}"
    if new > current * 2:
        return f"Log cleaner threads cannot be increased to more than double the current value {current}"
    return None


@dataclass
class CleanStats:
    log: str
    first_dirty: int
    end_offset: int
    bytes_in: int = 0
    bytes_out: int = 0
    groups: int = 0


LogKey: TypeAlias = tuple[str, int, uuid.UUID]
"""(topic, partition, topic id): one incarnation of a partition."""


class LogCleaner:
    """Cleans the compacted logs ``logs()`` returns; ``dir_of(log)`` is the log dir of one."""

    def __init__(
        self,
        logs: Callable[[], Iterable[PartitionLog]],
        config: CleanerConfig | None = None,
        *,
        dir_of: Callable[[PartitionLog], Path] | None = None,
        clock: Callable[[], float] = time.time,
        settings: Callable[[], CleanerConfig] | None = None,
    ) -> None:
        """``settings()`` gives the current settings (dynamic broker configs), read before each
        pass; without it ``config`` stays as given."""
        self._logs = logs
        self.config = config or CleanerConfig()
        self._settings = settings
        self._dir_of = dir_of or (lambda plog: plog.dir.parent)
        self._clock = clock
        self._checkpoints: dict[Path, dict[tuple[str, int], int]] = {}
        self._checkpoint_lock = threading.Lock()
        self._writes: set[asyncio.Future[None]] = set()  # checkpoint writes under way
        self._horizons: dict[LogKey, int] = {}  # log key -> next delete horizon
        self._uncleanable: set[LogKey] = set()  # keys of logs that failed (until restart)
        self._cancel = threading.Event()
        self._workers: dict[int, asyncio.Task[None]] = {}
        self._in_progress: set[LogKey] = set()  # keys of the logs being cleaned right now
        self.passes = 0  # completed cleanings (tests and logs)
        self.last_stats: CleanStats | None = None

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    @staticmethod
    def _key(plog: PartitionLog) -> LogKey:
        """One incarnation of a partition (a re-created topic gets a new topic id)."""
        return plog.topic, plog.partition, plog.topic_id

    # --- checkpoints -----------------------------------------------------------------------

    def _dir_checkpoints(self, d: Path) -> dict[tuple[str, int], int]:
        cp = self._checkpoints.get(d)
        if cp is None:
            try:
                cp = read_offset_checkpoint(d / CLEANER_CHECKPOINT)
            except StorageError as e:
                log.warning("ignoring %s: %s", d / CLEANER_CHECKPOINT, e)
                cp = {}
            self._checkpoints[d] = cp
        return cp

    def checkpoint_of(self, plog: PartitionLog) -> int | None:
        return self._dir_checkpoints(self._dir_of(plog)).get((plog.topic, plog.partition))

    def _set_checkpoint(self, plog: PartitionLog, offset: int) -> tuple[Path, dict[tuple[str, int], int]]:
        """Record the log's first dirty offset; the file and contents to write (the write and
        its fsync are the caller's: in a worker thread when a loop runs)."""
        d = self._dir_of(plog)
        cp = self._dir_checkpoints(d)
        cp[(plog.topic, plog.partition)] = offset
        live = {(lg.topic, lg.partition) for lg in self._logs() if self._dir_of(lg) == d}
        for tp in [tp for tp in cp if tp not in live]:
            del cp[tp]
        return d / CLEANER_CHECKPOINT, dict(cp)

    def _write_checkpoint(self, path: Path, cp: dict[tuple[str, int], int]) -> None:
        """Write a checkpoint file (any thread; one writer at a time: workers share files. An
        older copy landing last only makes the next start clean a little more again)."""
        try:
            with self._checkpoint_lock:
                write_offset_checkpoint(path, cp)
        except StorageError as e:
            log.warning("cannot write %s: %s", path, e)

    # --- choosing --------------------------------------------------------------------------

    def grab_filthiest(self, now_ms: int | None = None) -> LogToClean | None:
        """The compacted log most worth cleaning now (highest dirty ratio), or None."""
        now = self._now_ms() if now_ms is None else now_ms
        best = None
        logs = list(self._logs())
        if self._horizons:
            live = {self._key(plog) for plog in logs}
            for key in [k for k in self._horizons if k not in live]:
                del self._horizons[key]
        for plog in logs:
            key = self._key(plog)
            if (plog.closed or not plog.config.compact or key in self._uncleanable
                    or key in self._in_progress):
                continue
            try:
                ltc = log_to_clean(plog, self.checkpoint_of(plog), now, self._horizons.get(key))
            except StorageError as e:
                log.warning("cannot size %s for cleaning: %s", plog, e)
                continue
            if ltc.reset_checkpoint:  # in memory; the file follows with the next pass's
                self._set_checkpoint(plog, ltc.first_dirty)
            if ltc.should_clean and (best is None or ltc.cleanable_ratio > best.cleanable_ratio):
                best = ltc
        return best

    # --- cleaning --------------------------------------------------------------------------

    def _job(self, ltc: LogToClean, now_ms: int) -> CleanJob:
        plan = make_plan(ltc, now_ms)
        return CleanJob(plan, memory=self.config.map_memory,
                        load_factor=self.config.io_buffer_load_factor, cancel=self._cancel)  # fmt: skip

    def _finish(self, ltc: LogToClean, job: CleanJob, stats: CleanStats) -> tuple[Path, dict[tuple[str, int], int]]:
        """The pass is done: its bookkeeping; the checkpoint to write."""
        plog = ltc.log
        checkpoint = self._set_checkpoint(plog, job.end_offset)
        if job.next_horizon is None:
            self._horizons.pop(self._key(plog), None)
        else:
            self._horizons[self._key(plog)] = job.next_horizon
        self.passes += 1
        self.last_stats = stats
        log.info("cleaned %s: offsets %d..%d, %d segment group(s), %d -> %d bytes", stats.log,
                 stats.first_dirty, stats.end_offset, stats.groups, stats.bytes_in,
                 stats.bytes_out)  # fmt: skip
        return checkpoint

    def _failed(self, ltc: LogToClean, exc: BaseException) -> None:
        if isinstance(exc, CleaningAborted) or ltc.log.closed:
            log.info("cleaning of %s stopped: %s", ltc.log, exc)
        elif isinstance(exc, (MapTooSmallError, CleanerCorruptionError, StorageError, OSError)):
            log.error("cannot clean %s, leaving it alone until restart: %s", ltc.log, exc)
            self._uncleanable.add(self._key(ltc.log))
        else:
            log.exception("cleaning of %s failed; leaving it alone until restart", ltc.log)
            self._uncleanable.add(self._key(ltc.log))

    def clean_once(self, now_ms: int | None = None) -> bool:
        """Clean the filthiest log synchronously (tests, tools); False when none needs it."""
        now = self._now_ms() if now_ms is None else now_ms
        ltc = self.grab_filthiest(now)
        if ltc is None:
            return False
        job = self._job(ltc, now)
        stats = CleanStats(str(ltc.log), ltc.first_dirty, ltc.first_dirty)
        cleaned: CleanedGroup | None = None
        try:
            stats.end_offset = job.prepare()
            for group in job.groups():
                cleaned = job.clean_group(group)
                swap_in(ltc.log, cleaned)
                self._account(stats, cleaned)
                cleaned = None
        except Exception as e:
            if cleaned is not None:
                discard_cleaned(cleaned)
            self._failed(ltc, e)
            return True
        self._write_checkpoint(*self._finish(ltc, job, stats))
        return True

    @staticmethod
    def _account(stats: CleanStats, cleaned: CleanedGroup) -> None:
        stats.groups += 1
        stats.bytes_in += cleaned.bytes_in
        stats.bytes_out += cleaned.bytes_out

    async def clean_once_async(self) -> bool:
        """As ``clean_once``, with the reading and writing in a worker thread."""
        now = self._now_ms()
        ltc = self.grab_filthiest(now)
        if ltc is None:
            return False
        key = self._key(ltc.log)
        self._in_progress.add(key)  # on the loop, before the first await: no other worker takes it
        try:
            return await self._clean_async(ltc, now)
        finally:
            self._in_progress.discard(key)

    async def _clean_async(self, ltc: LogToClean, now: int) -> bool:
        job = self._job(ltc, now)
        stats = CleanStats(str(ltc.log), ltc.first_dirty, ltc.first_dirty)
        cleaned: CleanedGroup | None = None
        try:
            stats.end_offset = await asyncio.to_thread(job.prepare)
            for group in job.groups():
                cleaned = await asyncio.to_thread(job.clean_group, group)
                swap_in(ltc.log, cleaned, sync_dir=False)  # on the loop, between appends
                self._account(stats, cleaned)
                cleaned = None
                await asyncio.to_thread(sync_directory, ltc.log.dir)  # the renames, durable
        except asyncio.CancelledError:
            if cleaned is not None:
                discard_cleaned(cleaned)
            raise
        except Exception as e:
            if cleaned is not None:
                discard_cleaned(cleaned)
            self._failed(ltc, e)
            return True
        # a plain executor future, shielded and awaited by `stop`: a stop right after the pass
        # must not cancel the write while it still waits for a worker thread
        write = asyncio.get_running_loop().run_in_executor(
            None, self._write_checkpoint, *self._finish(ltc, job, stats))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)
        await asyncio.shield(write)
        return True

    # --- the background task ----------------------------------------------------------------

    def refresh(self) -> None:
        """Take the current settings; a new thread count Kafka would refuse (a cluster-wide
        default is not checked when it is set) is logged and the current one kept, as Kafka
        keeps its cleaner threads when a reconfiguration fails."""
        if self._settings is None:
            return
        new, threads = self._settings(), self.config.threads
        if new.threads != threads:
            error = threads_change_error(threads, new.threads)
            if error is not None:
                log.error("not changing log.cleaner.threads from %d to %d: %s", threads,
                          new.threads, error)
                new.threads = threads
            else:
                log.info("log.cleaner.threads changed from %d to %d", threads, new.threads)
        self.config = new

    @property
    def workers(self) -> int:
        """Workers running now (tests, logs)."""
        return sum(1 for task in self._workers.values() if not task.done())

    def _scale(self) -> None:
        """Start the workers up to ``threads``; those beyond it stop after their pass."""
        loop = asyncio.get_running_loop()
        for i in range(self.config.threads):
            task = self._workers.get(i)
            if task is None or task.done():
                self._workers[i] = loop.create_task(self._work(i), name=f"log-cleaner-{i}")

    async def _work(self, index: int) -> None:
        while not self._cancel.is_set():
            self.refresh()
            if index >= self.config.threads:
                return
            self._scale()
            try:
                worked = await self.clean_once_async()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("log cleaner pass failed")
                worked = False
            if not worked:
                await asyncio.sleep(max(self.config.backoff_ms, 1) / 1000)
            else:
                await asyncio.sleep(0)  # let requests run between passes

    def start(self) -> asyncio.Task[None] | None:
        """Start the workers; the first one's task (None when the cleaner is off)."""
        if not self.config.enabled:
            return None
        self.refresh()
        if self.config.threads < 1:
            log.warning("log.cleaner.threads=%d: compacted topics are not cleaned",
                        self.config.threads)
        self._cancel.clear()
        self._scale()
        return self._workers.get(0)

    async def stop(self) -> None:
        """Stop the workers; a running one notices at its next batch and discards its output."""
        self._cancel.set()
        workers, self._workers = list(self._workers.values()), {}
        await cancel_all(workers)
        if self._writes:  # the checkpoints of passes that finished
            await asyncio.wait(list(self._writes))

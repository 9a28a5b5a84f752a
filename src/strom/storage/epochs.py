"""Leader-epoch cache: which offset each leader epoch started at (``leader-epoch-checkpoint``).

Followers and consumers use it through OffsetForLeaderEpoch to find where their log diverges
from the leader's. Semantics follow Kafka's LeaderEpochFileCache.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from bisect import bisect_left, bisect_right
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from strom.common.background import background_executor
from strom.storage.checkpoints import read_leader_epoch_checkpoint, write_leader_epoch_checkpoint
from strom.storage.errors import KafkaStorageError

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """Entries (epoch, start offset), both strictly increasing; persisted on every change."""

    __slots__ = ("_epochs", "_offsets", "loaded", "path")

    def __init__(self, path: Path | None, entries: list[tuple[int, int]] | None = None) -> None:
        """``entries`` None: read them from ``path``; ``loaded`` tells whether that worked (a
        missing or unreadable file leaves the cache empty, for the log to rebuild)."""
        self.path = path
        self._epochs: list[int] = []
        self._offsets: list[int] = []
        if entries is None and path is not None:
            entries = read_leader_epoch_checkpoint(path)
        self.loaded = entries is not None
        for e, o in entries or ():
            self._assign(e, o)

    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._offsets, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def _assign(self, epoch: int, start_offset: int) -> bool:
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._epochs and epoch == self._epochs[-1] and start_offset >= self._offsets[-1]:
            return False
        # drop entries that would break monotonicity (a new leader rewrote the tail)
        while self._epochs and (self._epochs[-1] >= epoch or self._offsets[-1] >= start_offset):
            self._epochs.pop()
            self._offsets.pop()
        self._epochs.append(epoch)
        self._offsets.append(start_offset)
        return True

    def assign(self, epoch: int, start_offset: int) -> None:
        if self._assign(epoch, start_offset):
            self._persist()

    def _persist(self) -> None:
        """A change that must reach the file (a new leader's epoch, a truncation)."""
        self.write()

    def write(self, *, fsync: bool = True) -> None:
        if self.path is not None:
            write_leader_epoch_checkpoint(self.path, self.entries(), fsync=fsync)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) answering OffsetForLeaderEpoch for ``requested_epoch``."""
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._epochs and self._epochs[-1] == requested_epoch:
            return requested_epoch, log_end_offset
        hi = bisect_right(self._epochs, requested_epoch)  # first entry with epoch > requested
        if hi >= len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if hi == 0:
            return requested_epoch, self._offsets[0]
        return self._epochs[hi - 1], self._offsets[hi]

    def epoch_for_offset(self, offset: int) -> int:
        """Epoch of the leader that wrote ``offset`` (-1 when unknown)."""
        i = bisect_right(self._offsets, offset) - 1
        return self._epochs[i] if i >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Remove entries starting at or after ``end_offset``."""
        n = bisect_left(self._offsets, end_offset)
        if n < len(self._offsets):
            del self._epochs[n:]
            del self._offsets[n:]
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """Drop entries wholly below ``start_offset``; the one covering it starts there now."""
        n = bisect_right(self._offsets, start_offset)
        if n == 0:
            return
        last_epoch = self._epochs[n - 1]
        if n == 1 and self._offsets[0] == start_offset:
            return
        del self._epochs[:n]
        del self._offsets[:n]
        self._epochs.insert(0, last_epoch)
        self._offsets.insert(0, start_offset)
        self._start_moved()

    def _start_moved(self) -> None:
        self.write()

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """Start over with ``entries`` (rebuilt from the log); persisted as by ``assign``."""
        self._epochs.clear()
        self._offsets.clear()
        for e, o in entries:
            self._assign(e, o)
        self.write()

    def clear(self) -> None:
        if self._epochs:
            self._epochs.clear()
            self._offsets.clear()
            self._persist()


class DeferredEpochCache(LeaderEpochCache):
    """The log's leader-epoch cache: the file is written off the event loop.

    The entries in memory change at once; the file follows:

    - Epochs that appends bring (``note``), a rebuild (``replace``) and a moved log start are
      written at the next flush, before the recovery point passes them, or on close. Kafka
      fsyncs leader-epoch-checkpoint whenever an appended batch starts a new epoch; here a
      crash in between loses nothing: recovery re-reads every segment from the recovery point
      on and notes again the epochs it finds in the batch headers.
    - A new leader's epoch (``assign``) and a truncation (``truncate_from_end``, ``clear``) are
      written soon by the loop's `EpochCheckpointWriter`, in a worker thread, batched with the
      other partitions that changed in the same loop turn (a broker taking over 1,000
      partitions writes them in one job instead of 1,000 fsyncs on the loop). Without a
      running loop they are written at once.

    Why a crash before such a write lands is safe:

    - a new leader's epoch: the file lacks it, but every batch written in that epoch is above
      the recovery point until a flush has made it durable, and a flush writes every change
      not yet in the file (``take_dirty``) before the recovery point moves; so recovery re-reads
      those batches and notes the epoch again (at the offset of its first batch: where the
      leader had assigned it). An epoch in which nothing was written is not needed.
    - a truncation: the file still holds the cut epochs. The follower fetches nothing more for
      the partition until ``persisted()`` says the file has the truncation (see the replica
      fetcher), so a crash before that leaves a log that ends at the truncation point, and
      loading drops every epoch at or past the log end.

    Every content has a version (bumped by each change); a write holds a lock and skips any
    version not newer than the file's, so writes of one partition never land out of order and
    the file always ends with the newest content handed to a writer.
    """

    __slots__ = ("_lock", "_version", "_written", "writer")

    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self._lock = threading.Lock()
        self._version = 0  # the entries' version, bumped by every change
        self._written = 0  # the version the file has
        self.writer: EpochCheckpointWriter | None = None  # None: the running loop's
        super().__init__(path, entries)

    def note(self, epoch: int, start_offset: int) -> None:
        if self._assign(epoch, start_offset):
            self._version += 1

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """As the base class, but written at the next flush or close (a crash rebuilds again)."""
        self._epochs.clear()
        self._offsets.clear()
        for e, o in entries:
            self._assign(e, o)
        self._version += 1

    def _start_moved(self) -> None:
        """Written at the next flush or close, not on the event loop at every retention pass
        (Kafka's truncateFromStartAsync): entries below the log start that a crash leaves in
        the file are dropped again when the log loads."""
        self._version += 1

    def _persist(self) -> None:
        self._version += 1
        writer = self.writer or EpochCheckpointWriter.for_running_loop()
        if writer is None or writer.schedule(self) is None:
            self.write()  # no loop (tools, tests, start-up without one): now

    @property
    def current(self) -> bool:
        """Whether the file has the entries as they are in memory."""
        return self._written >= self._version

    def persisted(self) -> asyncio.Future[None] | None:
        """A future done once the file has the entries as they are now (None: it has them, or
        no loop runs and they were written now). Its result is None even when the write
        failed (logged): check ``current`` to know."""
        if self.current:
            return None
        writer = self.writer or EpochCheckpointWriter.for_running_loop()
        if writer is None:
            self.write()
            return None
        return writer.schedule(self)

    def write(self, *, fsync: bool = True) -> None:
        self.write_version(self._version, self.entries(), fsync=fsync)

    def sync(self, *, fsync: bool = True) -> None:
        if not self.current:
            self.write(fsync=fsync)

    def take_dirty(self) -> tuple[int, list[tuple[int, int]]] | None:
        """What a flush must write before it moves the recovery point: the entries and their
        version when the file lacks them (also when a background write of them is under way:
        it may not have landed yet), else None."""
        if self.current:
            return None
        return self._version, self.entries()

    def mark_dirty(self) -> None:
        """A write taken with ``take_dirty`` failed: nothing to do, the file still lags."""

    def write_version(
        self, version: int, entries: list[tuple[int, int]], *, fsync: bool = True,
        fsync_dir: bool = False,
    ) -> None:
        """Write ``entries`` unless a newer version is already in the file (any thread;
        ``fsync_dir`` from worker threads only: it makes the rename durable too)."""
        with self._lock:
            if version <= self._written or self.path is None:
                return
            write_leader_epoch_checkpoint(self.path, entries, fsync=fsync, fsync_dir=fsync_dir)
            self._written = version


class EpochCheckpointWriter:
    """Writes the leader-epoch checkpoints of one event loop in worker threads.

    Caches scheduled in one loop turn go to the threads together, at the end of the turn; one
    batch runs at a time (split over a few threads: fsyncs of one filesystem overlap well),
    and what is scheduled meanwhile forms the next batch. Each write takes its cache's content
    on the loop when its batch starts, so it carries every change made before."""

    THREADS = 4  # executor jobs per batch
    _executor: ThreadPoolExecutor | None = None  # shared by every loop's writer
    _by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EpochCheckpointWriter] = (
        weakref.WeakKeyDictionary())

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queued: dict[int, DeferredEpochCache] = {}
        self._queued_done: asyncio.Future[None] | None = None
        self._running = False
        self.batches = 0  # batches written so far (tests, metrics)

    @classmethod
    def for_running_loop(cls) -> EpochCheckpointWriter | None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        writer = cls._by_loop.get(loop)
        if writer is None:
            writer = cls._by_loop[loop] = cls(loop)
        return writer

    def schedule(self, cache: DeferredEpochCache) -> asyncio.Future[None] | None:
        """Write ``cache`` soon; the future is done once that write has run (None: the loop
        is closed, the caller writes itself)."""
        if self._loop.is_closed():
            return None
        self._queued[id(cache)] = cache
        if self._queued_done is None:
            self._queued_done = self._loop.create_future()
            if not self._running:
                self._loop.call_soon(self._start)
        return self._queued_done

    @classmethod
    def _threads(cls) -> ThreadPoolExecutor:
        """The writer threads, made on first use at a lower priority than the event loop's
        thread: on a busy machine a burst of checkpoint fsyncs (a leadership change of many
        partitions) then waits for a core rather than the requests do."""
        if cls._executor is None:
            cls._executor = background_executor(cls.THREADS, "epoch-checkpoint")
        return cls._executor

    def _start(self) -> None:
        if self._running or not self._queued:
            return
        caches, done = list(self._queued.values()), self._queued_done
        self._queued, self._queued_done = {}, None
        jobs = [(c, c._version, c.entries()) for c in caches if not c.current]
        if not jobs:
            if done is not None and not done.done():
                done.set_result(None)
            return
        self._running = True
        self.batches += 1
        size = -(-len(jobs) // self.THREADS)
        parts = [jobs[i:i + size] for i in range(0, len(jobs), size)]
        running = [self._loop.run_in_executor(self._threads(), _write_all, part)
                   for part in parts]
        gathered = asyncio.gather(*running)

        def finished(f: asyncio.Future[list[int]]) -> None:
            self._running = False
            failures = 0 if f.cancelled() else sum(f.result()) if f.exception() is None else -1
            if failures:
                log.error("%s leader-epoch checkpoint write(s) failed: those files lag until the "
                          "next flush or close writes them", "some" if failures < 0 else failures)
            if done is not None and not done.done():
                done.set_result(None)
            if self._queued:
                self._start()

        gathered.add_done_callback(finished)


def _write_all(jobs: list[tuple[DeferredEpochCache, int, list[tuple[int, int]]]]) -> int:
    """Write each cache's version (in a worker thread); returns how many writes failed (each
    logged: its file lags, and the next flush or close writes it)."""
    failed = 0
    for cache, version, entries in jobs:
        try:
            cache.write_version(version, entries, fsync_dir=True)
        except KafkaStorageError as e:
            if cache.path is not None and not cache.path.parent.exists():
                continue  # its log was deleted meanwhile: nothing left to write
            failed += 1
            log.error("%s", e)
    return failed

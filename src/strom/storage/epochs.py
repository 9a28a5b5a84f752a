"""Leader-epoch cache: which offset each leader epoch started at (``leader-epoch-checkpoint``).

Followers and consumers use it through OffsetForLeaderEpoch to find where their log diverges
from the leader's. Semantics follow Kafka's LeaderEpochFileCache.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from pathlib import Path

from strom.storage.checkpoints import read_leader_epoch_checkpoint, write_leader_epoch_checkpoint

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
            self.write()

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
            self.write()


class DeferredEpochCache(LeaderEpochCache):
    """The log's leader-epoch cache: epochs that appends bring are persisted lazily.

    Kafka fsyncs leader-epoch-checkpoint whenever an appended batch starts a new epoch, which
    on a topic's first writes is one fsync per partition. Here ``note`` only marks the cache
    dirty, and ``sync`` writes (and fsyncs) it before the recovery point passes those entries
    (flush) and on close. A crash in between loses nothing: recovery re-reads every segment from
    the recovery point on and assigns again the epochs it finds in the batch headers. Recovery
    itself notes the epochs it finds the same way (it leaves the recovery point where it was), so
    a broker restarted after kill -9 does not fsync one checkpoint per partition. Every other
    change (a new leader's epoch, truncation) is still written at once by the base class.

    Flushes may write the file from a worker thread (``take_dirty`` on the event loop, then
    ``write_version`` in the thread): every write carries a version and holds a lock, so a slow
    background write never lands over a newer one the loop made meanwhile.
    """

    __slots__ = ("_dirty", "_lock", "_version", "_written")

    def __init__(self, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self._dirty = False
        self._lock = threading.Lock()
        self._version = 0  # bumped for every content handed to a writer
        self._written = 0  # the newest version in the file
        super().__init__(path, entries)

    def note(self, epoch: int, start_offset: int) -> None:
        if self._assign(epoch, start_offset):
            self._dirty = True

    def replace(self, entries: list[tuple[int, int]]) -> None:
        """As the base class, but written at the next flush or close (a crash rebuilds again)."""
        self._epochs.clear()
        self._offsets.clear()
        for e, o in entries:
            self._assign(e, o)
        self._dirty = True

    def _start_moved(self) -> None:
        """Written at the next flush or close, not on the event loop at every retention pass
        (Kafka's truncateFromStartAsync): entries below the log start that a crash leaves in
        the file are dropped again when the log loads."""
        self._dirty = True

    def write(self, *, fsync: bool = True) -> None:
        self._version += 1
        self.write_version(self._version, self.entries(), fsync=fsync)
        self._dirty = False

    def sync(self, *, fsync: bool = True) -> None:
        if self._dirty:
            self.write(fsync=fsync)

    def take_dirty(self) -> tuple[int, list[tuple[int, int]]] | None:
        """The entries a flush must write (with their version), or None when the file is
        current; the cache counts as clean from here on (``mark_dirty`` if the write fails)."""
        if not self._dirty:
            return None
        self._dirty = False
        self._version += 1
        return self._version, self.entries()

    def mark_dirty(self) -> None:
        self._dirty = True

    def write_version(
        self, version: int, entries: list[tuple[int, int]], *, fsync: bool = True
    ) -> None:
        """Write ``entries`` unless a newer version is already in the file (any thread)."""
        with self._lock:
            if version <= self._written or self.path is None:
                return
            write_leader_epoch_checkpoint(self.path, entries, fsync=fsync)
            self._written = version

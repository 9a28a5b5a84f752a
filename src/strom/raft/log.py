"""The replicated log the Raft core drives, as a Protocol, plus an in-memory implementation.

The core never looks inside fetched records: `read` hands it an opaque value that goes into the
Fetch response's `records` field as is, and a follower gives that value back to
`append_as_follower`. A disk log uses raw v2 batch bytes there; `MemoryRaftLog` passes tuples of
`RaftBatch`. Listeners get decoded batches through `read_batches`.

Epoch bookkeeping follows Kafka's leader-epoch cache: `end_offset_for_epoch` answers with the
largest epoch not above the one asked and where it ended, which is what a leader needs to tell
a follower where their logs diverge.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Protocol

from .types import (
    ControlEntry,
    Entry,
    OffsetAndEpoch,
    RaftBatch,
    ValidKind,
    ValidOffsetAndEpoch,
)

BOOTSTRAP_SNAPSHOT_ID = OffsetAndEpoch(0, 0)


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int


@dataclass(frozen=True, slots=True)
class LogFetchInfo:
    """What a read returns: the opaque records value and its size (0 = nothing to send)."""

    records: object
    size_bytes: int


class RawSnapshot(Protocol):
    """A frozen snapshot file, read in byte slices by FetchSnapshot."""

    def size(self) -> int: ...

    def read(self, position: int, max_bytes: int) -> bytes: ...


class RaftLog(Protocol):
    """What the core needs of the metadata log. Offsets are Kafka offsets; an "end offset" is
    one past the last record."""

    def start_offset(self) -> int:
        """Log start (the end offset of the snapshot the log starts from, else 0)."""
        ...

    def end_offset(self) -> int: ...

    def last_fetched_epoch(self) -> int:
        """Epoch of the last batch (or of the latest snapshot when the log is empty); 0 if none."""
        ...

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        """(largest epoch <= `epoch`, the offset where it ended); (LEO, last epoch) if unknown."""
        ...

    def initialize_leader_epoch(self, epoch: int) -> None:
        """Record in the epoch cache that `epoch` starts at the current end offset."""
        ...

    def append_as_leader(self, records: list[Entry], epoch: int, now_ms: int) -> LogAppendInfo:
        ...

    def append_as_follower(self, records: object) -> LogAppendInfo | None:
        """Append fetched records (as `read` returned them on the leader); None if empty."""
        ...

    def read(self, offset: int, max_bytes: int) -> LogFetchInfo:
        """Uncommitted read from `offset`; at least one batch if there is any."""
        ...

    def read_batches(self, start: int, end: int) -> list[RaftBatch]:
        """Decoded batches covering [start, end) (for listeners; `end` is the HW)."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def flush(self) -> None:
        """Make everything appended durable."""
        ...

    def flushed_offset(self) -> int: ...

    def update_high_watermark(self, offset: int) -> None: ...

    def high_watermark(self) -> int: ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None: ...


def end_offset(log: RaftLog) -> OffsetAndEpoch:
    """The log's end as Vote requests and the "up to date" check use it."""
    return OffsetAndEpoch(log.end_offset(), log.last_fetched_epoch())


def validate_offset_and_epoch(log: RaftLog, offset: int, epoch: int) -> ValidOffsetAndEpoch:
    """Whether a follower at (offset, last fetched epoch) can read on from `offset`.

    A follower whose position is behind the log start, or whose epoch is older than the
    oldest snapshot, must load the latest snapshot; one whose epoch ended earlier here (or is
    unknown here) must truncate to the point where the two logs agree; else it reads on.
    """
    if log.start_offset() == 0 and offset == 0:
        return ValidOffsetAndEpoch(ValidKind.VALID, OffsetAndEpoch(0, 0))
    oldest = log.earliest_snapshot_id()
    if oldest is not None and (
        offset < log.start_offset()
        or (offset == log.start_offset() and epoch != oldest.epoch)
        or epoch < oldest.epoch
    ):
        latest = log.latest_snapshot_id()
        assert latest is not None  # an earliest snapshot implies a latest one
        return ValidOffsetAndEpoch(ValidKind.SNAPSHOT, latest)
    ended = log.end_offset_for_epoch(epoch)
    if ended.epoch != epoch or ended.offset < offset:
        return ValidOffsetAndEpoch(ValidKind.DIVERGING, ended)
    return ValidOffsetAndEpoch(ValidKind.VALID, OffsetAndEpoch(offset, epoch))


def truncation_offset(log: RaftLog, diverging: OffsetAndEpoch) -> int:
    """Where a follower truncates on a leader's DivergingEpoch(epoch, end offset)."""
    if diverging.epoch == 0:
        return min(diverging.offset, log.end_offset())
    local = log.end_offset_for_epoch(diverging.epoch)
    if local.epoch == diverging.epoch:
        return min(local.offset, diverging.offset)
    return local.offset


# ---------------------------------------------------------------------------------------------


class MemoryRaftLog:
    """A `RaftLog` in memory, for the simulation and unit tests.

    Survives a simulated crash as the disk would: `crash(lose_unflushed=True)` drops what was
    never flushed. Fetched records are tuples of `RaftBatch`.
    """

    def __init__(self) -> None:
        self.batches: list[RaftBatch] = []
        self._bases: list[int] = []  # base offset of each batch, for bisect
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset), ascending
        self._flushed = 0
        self._hw = 0

    # -- reads
    def start_offset(self) -> int:
        return 0

    def end_offset(self) -> int:
        return self.batches[-1].end_offset if self.batches else 0

    def last_fetched_epoch(self) -> int:
        return self.batches[-1].epoch if self.batches else 0

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        leo = self.end_offset()
        if not self._epochs:
            return OffsetAndEpoch(leo, self.last_fetched_epoch())
        if self._epochs[-1][0] == epoch:
            return OffsetAndEpoch(leo, epoch)
        above = [(e, start) for e, start in self._epochs if e > epoch]
        if not above:
            return OffsetAndEpoch(leo, self.last_fetched_epoch())
        floor = [e for e, _ in self._epochs if e <= epoch]
        return OffsetAndEpoch(above[0][1], floor[-1] if floor else epoch)

    def read(self, offset: int, max_bytes: int) -> LogFetchInfo:
        out: list[RaftBatch] = []
        size = 0
        i = max(0, bisect_right(self._bases, offset) - 1)
        while i < len(self.batches):
            whole = self.batches[i]
            i += 1
            if whole.end_offset <= offset:
                continue
            batch = whole.slice_from(offset)
            if out and size + batch.size() > max_bytes:
                break
            out.append(batch)
            size += batch.size()
        return LogFetchInfo(tuple(out), size)

    def read_batches(self, start: int, end: int) -> list[RaftBatch]:
        out: list[RaftBatch] = []
        i = max(0, bisect_right(self._bases, start) - 1)
        while i < len(self.batches) and self.batches[i].base_offset < end:
            whole = self.batches[i]
            i += 1
            if whole.end_offset <= start:
                continue
            piece = whole.slice_from(start).slice_to(end)
            if piece is not None:
                out.append(piece)
        return out

    def records_between(self, start: int, end: int) -> list[tuple[int, int, Entry]]:
        """(offset, epoch, record) for each offset in [start, end) (simulation checks)."""
        return [(b.base_offset + k, b.epoch, r)
                for b in self.read_batches(start, end) for k, r in enumerate(b.records)]

    # -- writes
    def initialize_leader_epoch(self, epoch: int) -> None:
        self._assign(epoch, self.end_offset())

    def _assign(self, epoch: int, start: int) -> None:
        if self._epochs and self._epochs[-1][0] >= epoch:
            if self._epochs[-1][0] == epoch:
                return
            raise ValueError(f"epoch {epoch} after epoch {self._epochs[-1][0]}")
        self._epochs.append((epoch, start))

    def _append(self, batch: RaftBatch) -> LogAppendInfo:
        if batch.base_offset != self.end_offset():
            raise ValueError(f"append at {batch.base_offset}, log end is {self.end_offset()}")
        if batch.epoch < self.last_fetched_epoch():
            raise ValueError(f"append of epoch {batch.epoch} after {self.last_fetched_epoch()}")
        self._assign(batch.epoch, batch.base_offset)
        self.batches.append(batch)
        self._bases.append(batch.base_offset)
        return LogAppendInfo(batch.base_offset, batch.last_offset)

    def append_as_leader(self, records: list[Entry], epoch: int, now_ms: int) -> LogAppendInfo:
        return self._append(RaftBatch(self.end_offset(), epoch, tuple(records), now_ms))

    def append_as_follower(self, records: object) -> LogAppendInfo | None:
        if not isinstance(records, tuple) or not records:
            return None
        first = last = -1
        for batch in records:
            if not isinstance(batch, RaftBatch):
                raise TypeError(f"not a RaftBatch: {batch!r}")
            info = self._append(batch)
            first = info.first_offset if first < 0 else first
            last = info.last_offset
        return LogAppendInfo(first, last)

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset():
            return
        if offset < self._hw:
            raise ValueError(f"truncation to {offset} below the high watermark {self._hw}")
        keep: list[RaftBatch] = []
        for batch in self.batches:
            piece = batch.slice_to(offset)
            if piece is not None:
                keep.append(piece)
        self.batches = keep
        self._bases = [b.base_offset for b in keep]
        self._epochs = [(e, s) for e, s in self._epochs if s < offset]
        self._flushed = min(self._flushed, offset)

    def flush(self) -> None:
        self._flushed = self.end_offset()

    def flushed_offset(self) -> int:
        return self._flushed

    def crash(self, *, lose_unflushed: bool = False) -> None:
        """A simulated crash: the HW is not persisted, and unflushed records may be gone."""
        self._hw = 0
        if lose_unflushed:
            self.truncate_to(self._flushed)

    def update_high_watermark(self, offset: int) -> None:
        self._hw = max(self._hw, min(offset, self.end_offset()))

    def high_watermark(self) -> int:
        return self._hw

    # -- snapshots: the memory log keeps none (TODO stage 4: FetchSnapshot in the simulation)
    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        return None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        return None

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None:
        return None

    def control_records(self) -> list[tuple[int, ControlEntry]]:
        return [(off, r) for off, _, r in self.records_between(0, self.end_offset())
                if isinstance(r, ControlEntry)]

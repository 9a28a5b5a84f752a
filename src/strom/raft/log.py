"""The replicated log the Raft core drives, as a Protocol, plus an in-memory implementation.

The core never looks inside fetched records: `read` hands it an opaque value that goes into the
Fetch response's `records` field as is, and a follower gives that value back to
`append_as_follower`. A disk log uses raw v2 batch bytes there; `MemoryRaftLog` passes tuples of
`RaftBatch`. Listeners get decoded batches through `read_batches`.

Epoch bookkeeping follows Kafka's leader-epoch cache: `end_offset_for_epoch` answers with the
largest epoch not above the one asked and where it ended, which is what a leader needs to tell
a follower where their logs diverge.

Snapshots (KIP-630) are Kafka snapshot files as bytes: a header control batch, the state
machine's values in data batches, a footer control batch (`snapshot_chunks` builds them,
`parse_snapshot` reads them back). A log stores them through `RawSnapshotWriter`s, the same for
a snapshot made here and one downloaded with FetchSnapshot; once frozen, a snapshot is visible
by id. The log may then start at a snapshot's end offset (`delete_before_snapshot`), or restart
from a downloaded one (`install_snapshot`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from strom.record import (
    RECORD_BATCH_OVERHEAD,
    CorruptRecordError,
    Record,
    build_batch,
    decode_records,
    iter_batches,
)

from .control import (
    ControlRecord,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    build_control_batch,
    check_batch,
    decoded_controls,
)
from .snapshot import MAX_BATCH_BYTES, SnapshotCorruptError
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
    # the control records appended, by offset (the voter history follows them: voter_history.py)
    controls: tuple[tuple[int, ControlEntry], ...] = ()


@dataclass(frozen=True, slots=True)
class LogFetchInfo:
    """What a read returns: the opaque records value and its size (0 = nothing to send)."""

    records: object
    size_bytes: int


class RawSnapshot(Protocol):
    """A frozen snapshot file, read in byte slices by FetchSnapshot."""

    def size(self) -> int: ...

    def read(self, position: int, max_bytes: int) -> bytes: ...


class RawSnapshotWriter(Protocol):
    """A snapshot being written, as bytes in order: one made here (`snapshot_chunks`) or one
    downloaded with FetchSnapshot. Invisible until `freeze`; `abort` drops it (a disk log
    writes ``<id>-<random>.checkpoint.part`` and renames it into place on freeze)."""

    @property
    def snapshot_id(self) -> OffsetAndEpoch: ...

    def size(self) -> int:
        """Bytes appended so far (the position the next FetchSnapshot asks for)."""
        ...

    def append(self, data: bytes) -> None: ...

    def freeze(self) -> None:
        """Complete it durably; from then on `read_snapshot` and the snapshot ids see it."""
        ...

    def abort(self) -> None: ...


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

    def control_entries(self, start: int, end: int) -> list[tuple[int, ControlEntry]]:
        """The control records in [start, end) by offset (data batches are not decoded)."""
        ...

    def truncate_to(self, offset: int) -> None: ...

    def flush(self) -> None:
        """Make everything appended durable."""
        ...

    def flushed_offset(self) -> int: ...

    def update_high_watermark(self, offset: int) -> None: ...

    def high_watermark(self) -> int: ...

    def latest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        """The frozen snapshots, oldest first."""
        ...

    def size_bytes(self) -> int:
        """The bytes of the log's records and its snapshots (metadata.max.retention.bytes)."""
        ...

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None: ...

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None: ...

    def new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        """A writer for a snapshot; None if a frozen one with that id exists already. The
        caller checked the id (a local snapshot: a batch boundary at or below the HW)."""
        ...

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        """Restart the log from a frozen snapshot (a downloaded one, past the log end): drop
        every record; log start = end = HW = its end offset, last fetched epoch = its epoch;
        older snapshots go. (On open, a log whose latest snapshot is past its end does the
        same: a crash may come between the download's freeze and this call.)"""
        ...

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        """Move the log start up to a frozen snapshot's end offset, deleting the records and
        the snapshots below it. Nothing happens (False) unless the snapshot exists and
        log start < its end offset <= min(HW, latest snapshot's end offset)."""
        ...


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


# --------------------------------------------------------------------------- snapshot bytes

_RECORD_OVERHEAD = 21  # a record's worst-case framing beside its value (as snapshot.py counts)


@dataclass(frozen=True, slots=True)
class SnapshotContent:
    """A snapshot as listeners load it: the state machine's values as of `snapshot_id`."""

    snapshot_id: OffsetAndEpoch
    last_contained_log_timestamp: int
    values: tuple[bytes, ...]
    # what its header batch says of the quorum (kraft.version 1 snapshots hold the voter set)
    kraft_version: int = 0
    voters: VotersRecord | None = None


def snapshot_chunks(snapshot_id: OffsetAndEpoch, values: Iterable[bytes], *,
                    last_contained_log_timestamp: int, timestamp: int,
                    max_batch_bytes: int = MAX_BATCH_BYTES,
                    voters: VotersRecord | None = None) -> Iterator[bytes]:
    """The bytes of a Kafka snapshot, batch by batch: what `snapshot.write_snapshot` writes to
    a file for the same arguments. With `voters` (kraft.version 1) the header batch also holds
    KRaftVersionRecord(1) and the voter set; without, it is a kraft.version 0 snapshot."""
    epoch = snapshot_id.epoch
    header: list[ControlRecord] = [SnapshotHeaderRecord(last_contained_log_timestamp)]
    if voters is not None:
        header += [KRaftVersionRecord(1), voters]
    yield build_control_batch(header, base_offset=0, leader_epoch=epoch, timestamp=timestamp)
    offset = len(header)
    pending: list[Record] = []
    pending_bytes = 0
    for value in values:
        size = len(value) + _RECORD_OVERHEAD
        if pending and RECORD_BATCH_OVERHEAD + pending_bytes + size > max_batch_bytes:
            yield build_batch(pending, base_offset=pending[0].offset,
                              partition_leader_epoch=epoch)
            pending, pending_bytes = [], 0
        pending.append(Record(offset, timestamp, None, bytes(value)))
        pending_bytes += size
        offset += 1
    if pending:
        yield build_batch(pending, base_offset=pending[0].offset, partition_leader_epoch=epoch)
    yield build_control_batch([SnapshotFooterRecord()], base_offset=offset, leader_epoch=epoch,
                              timestamp=timestamp)


def parse_snapshot(snapshot_id: OffsetAndEpoch, data: bytes) -> SnapshotContent:
    """Read a snapshot's bytes back, checked: CRCs, offsets following each other from 0, the
    header first, the footer last, nothing after it. Raises `SnapshotCorruptError`."""
    name = f"snapshot {snapshot_id.offset}-{snapshot_id.epoch}"
    header: SnapshotHeaderRecord | None = None
    kraft_version = 0
    voters: VotersRecord | None = None
    footer = False
    expected = 0
    end = 0
    values: list[bytes] = []
    try:
        for pos, h in iter_batches(data):
            batch = data[pos:pos + h.size]
            check_batch(batch)
            end = pos + h.size
            if footer or h.base_offset != expected:
                raise SnapshotCorruptError(f"{name}: batch at offset {h.base_offset}, expected "
                                           f"{'nothing after the footer' if footer else expected}")
            records = decode_records(batch)
            expected = h.next_offset
            if h.is_control:
                controls = decoded_controls(records)
                if header is None:
                    if not controls or not isinstance(controls[0], SnapshotHeaderRecord):
                        raise SnapshotCorruptError(f"{name}: the first batch is not a header")
                    header = controls[0]
                for c in controls:
                    if isinstance(c, KRaftVersionRecord):
                        kraft_version = c.kraft_version
                    elif isinstance(c, VotersRecord):
                        voters = c
                footer = any(isinstance(c, SnapshotFooterRecord) for c in controls)
                continue
            if header is None:
                raise SnapshotCorruptError(f"{name}: the first batch is not a header")
            for r in records:
                if r.value is None:
                    raise SnapshotCorruptError(f"{name}: record {r.offset} has no value")
                values.append(r.value)
    except SnapshotCorruptError:
        raise
    except CorruptRecordError as e:
        raise SnapshotCorruptError(f"{name}: {e}") from e
    if end != len(data):
        raise SnapshotCorruptError(f"{name}: {len(data) - end} stray bytes at position {end}")
    if header is None or not footer:
        raise SnapshotCorruptError(f"{name}: no {'header' if header is None else 'footer'}")
    return SnapshotContent(snapshot_id, header.last_contained_log_timestamp, tuple(values),
                           kraft_version, voters)


def load_snapshot(log: RaftLog, snapshot_id: OffsetAndEpoch) -> SnapshotContent | None:
    """A frozen snapshot of the log, decoded; None if the log has no such snapshot."""
    raw = log.read_snapshot(snapshot_id)
    if raw is None:
        return None
    return parse_snapshot(snapshot_id, raw.read(0, raw.size()))


_HEADER_READ = 1 << 16  # a snapshot's header batch is far smaller: records of a few voters


@dataclass(frozen=True, slots=True)
class SnapshotHeader:
    """What a snapshot's first (control) batch says: when its last record was written, and
    under kraft.version 1 the voter set."""

    last_contained_log_timestamp: int = -1
    kraft_version: int = 0
    voters: VotersRecord | None = None


def snapshot_header(log: RaftLog, snapshot_id: OffsetAndEpoch) -> SnapshotHeader | None:
    """A snapshot's header batch, read without decoding the rest of the snapshot (None: no
    such snapshot)."""
    raw = log.read_snapshot(snapshot_id)
    if raw is None:
        return None
    data = raw.read(0, min(raw.size(), _HEADER_READ))
    timestamp, kraft_version, voters = -1, 0, None
    for pos, h in iter_batches(data):
        batch = data[pos:pos + h.size]
        check_batch(batch)
        if not h.is_control:
            break
        for c in decoded_controls(decode_records(batch)):
            if isinstance(c, SnapshotHeaderRecord):
                timestamp = c.last_contained_log_timestamp
            elif isinstance(c, KRaftVersionRecord):
                kraft_version = c.kraft_version
            elif isinstance(c, VotersRecord):
                voters = c
        break  # only the first batch is the header
    return SnapshotHeader(timestamp, kraft_version, voters)


def snapshot_quorum(log: RaftLog, snapshot_id: OffsetAndEpoch) -> tuple[int, VotersRecord | None]:
    """The kraft.version and voter set a snapshot's header batch holds (kraft.version 0
    snapshots hold neither)."""
    header = snapshot_header(log, snapshot_id)
    return (0, None) if header is None else (header.kraft_version, header.voters)


def _snapshot_order(sid: OffsetAndEpoch) -> tuple[int, int]:
    return (sid.offset, sid.epoch)  # Kafka orders snapshot ids by offset, then epoch


class _MemorySnapshot:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def size(self) -> int:
        return len(self.data)

    def read(self, position: int, max_bytes: int) -> bytes:
        return self.data[position:position + max(0, max_bytes)]


class _MemorySnapshotWriter:
    def __init__(self, log: MemoryRaftLog, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self._log = log
        self._generation = log.generation
        self._chunks: list[bytes] = []
        self._size = 0
        self._done = False

    def size(self) -> int:
        return self._size

    def append(self, data: bytes) -> None:
        if self._done:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        self._chunks.append(bytes(data))
        self._size += len(data)

    def freeze(self) -> None:
        if self._done:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        if self._generation != self._log.generation:
            raise ValueError(f"snapshot {self.snapshot_id} was being written during a crash")
        self._done = True
        self._log.snapshots[self.snapshot_id] = _MemorySnapshot(b"".join(self._chunks))
        self._chunks = []

    def abort(self) -> None:
        self._done = True
        self._chunks = []


# ---------------------------------------------------------------------------------------------


class SnapshotIds:
    """The latest and earliest snapshot ids, for a log that lists its snapshots in order."""

    def _snapshot_ids(self) -> list[OffsetAndEpoch]:
        raise NotImplementedError

    def snapshot_ids(self) -> list[OffsetAndEpoch]:
        return self._snapshot_ids()

    def latest_snapshot_id(self) -> OffsetAndEpoch | None:
        ids = self._snapshot_ids()
        return ids[-1] if ids else None

    def earliest_snapshot_id(self) -> OffsetAndEpoch | None:
        ids = self._snapshot_ids()
        return ids[0] if ids else None


class MemoryRaftLog(SnapshotIds):
    """A `RaftLog` in memory, for the simulation and unit tests.

    Survives a simulated crash as the disk would: `crash(lose_unflushed=True)` drops what was
    never flushed; frozen snapshots stay, snapshots being written are lost. Fetched records are
    tuples of `RaftBatch`; snapshots are Kafka snapshot bytes.
    """

    def __init__(self) -> None:
        self.batches: list[RaftBatch] = []
        self._bases: list[int] = []  # base offset of each batch, for bisect
        self._epochs: list[tuple[int, int]] = []  # (epoch, start offset), ascending
        self._flushed = 0
        self._hw = 0
        self._start = 0
        self._start_epoch = 0  # epoch of the snapshot the log starts at (0 from the beginning)
        self.snapshots: dict[OffsetAndEpoch, _MemorySnapshot] = {}
        self.generation = 0  # bumped by a crash: writers from before cannot freeze

    # -- reads
    def start_offset(self) -> int:
        return self._start

    def end_offset(self) -> int:
        return self.batches[-1].end_offset if self.batches else self._start

    def last_fetched_epoch(self) -> int:
        return self.batches[-1].epoch if self.batches else self._start_epoch

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
        if floor:
            return OffsetAndEpoch(above[0][1], floor[-1])
        # Older than every epoch left in the log: the log starts where the oldest snapshot
        # ends, and that snapshot's epoch is the answer (as Kafka's metadata log says).
        oldest = self.earliest_snapshot_id()
        if oldest is not None and oldest.offset == above[0][1]:
            return oldest
        return OffsetAndEpoch(above[0][1], epoch)

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
        """(offset, epoch, record) for each offset in [start, end) still in the log
        (simulation checks)."""
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
        return LogAppendInfo(batch.base_offset, batch.last_offset, _controls(batch))

    def append_as_leader(self, records: list[Entry], epoch: int, now_ms: int) -> LogAppendInfo:
        return self._append(RaftBatch(self.end_offset(), epoch, tuple(records), now_ms))

    def append_as_follower(self, records: object) -> LogAppendInfo | None:
        if not isinstance(records, tuple) or not records:
            return None
        first = last = -1
        controls: list[tuple[int, ControlEntry]] = []
        for batch in records:
            if not isinstance(batch, RaftBatch):
                raise TypeError(f"not a RaftBatch: {batch!r}")
            info = self._append(batch)
            first = info.first_offset if first < 0 else first
            last = info.last_offset
            controls.extend(info.controls)
        return LogAppendInfo(first, last, tuple(controls))

    def truncate_to(self, offset: int) -> None:
        if offset >= self.end_offset():
            return
        if offset < self._hw:
            raise ValueError(f"truncation to {offset} below the high watermark {self._hw}")
        if offset < self._start:
            raise ValueError(f"truncation to {offset} below the log start {self._start}")
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
        """A simulated crash: the HW is not persisted, unflushed records may be gone, and
        snapshots being written are lost. Then the log opens as a disk log would: a snapshot
        past its end (the crash came between a download's freeze and its install, or an
        observer's unflushed records went) becomes its start."""
        self._hw = 0
        self.generation += 1
        if lose_unflushed:
            self.truncate_to(self._flushed)
        latest = self.latest_snapshot_id()
        if latest is not None and (latest.epoch > self.last_fetched_epoch() or (
                latest.epoch == self.last_fetched_epoch() and latest.offset > self.end_offset())):
            self.install_snapshot(latest)
            self._hw = 0

    def update_high_watermark(self, offset: int) -> None:
        self._hw = max(self._hw, min(offset, self.end_offset()))

    def high_watermark(self) -> int:
        return self._hw

    def size_bytes(self) -> int:
        return sum(b.size() for b in self.batches) + sum(
            snap.size() for snap in self.snapshots.values())

    # -- snapshots
    def _snapshot_ids(self) -> list[OffsetAndEpoch]:
        return sorted(self.snapshots, key=_snapshot_order)

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None:
        return self.snapshots.get(snapshot_id)

    def new_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshotWriter | None:
        if snapshot_id.offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"snapshot id {snapshot_id} has a negative part")
        if snapshot_id in self.snapshots:
            return None
        return _MemorySnapshotWriter(self, snapshot_id)

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> None:
        for sid in [s for s in self.snapshots
                    if _snapshot_order(s) < _snapshot_order(snapshot_id)]:
            del self.snapshots[sid]

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if snapshot_id not in self.snapshots:
            raise ValueError(f"no frozen snapshot {snapshot_id} to install")
        if self._hw > snapshot_id.offset:
            raise ValueError(f"installing snapshot {snapshot_id} would drop committed records "
                             f"(high watermark {self._hw})")
        self.batches, self._bases, self._epochs = [], [], []
        self._start, self._start_epoch = snapshot_id.offset, snapshot_id.epoch
        self._flushed = self._hw = snapshot_id.offset
        self._forget_snapshots_before(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        latest = self.latest_snapshot_id()
        end = snapshot_id.offset
        if (latest is None or snapshot_id not in self.snapshots or end <= self._start
                or end > latest.offset or end > self._hw or end > self.end_offset()):
            return False
        keep = [b.slice_from(end) for b in self.batches if b.end_offset > end]
        self.batches = keep
        self._bases = [b.base_offset for b in keep]
        # The epoch that holds the new start begins there now; older ones are gone.
        floor = [i for i, (_, s) in enumerate(self._epochs) if s <= end]
        if floor:
            first = floor[-1]
            self._epochs = [(self._epochs[first][0], end), *self._epochs[first + 1:]]
        self._start, self._start_epoch = end, snapshot_id.epoch
        self._flushed = max(self._flushed, end)  # everything below is in a durable snapshot
        self._forget_snapshots_before(snapshot_id)
        return True

    def control_records(self) -> list[tuple[int, ControlEntry]]:
        return self.control_entries(0, self.end_offset())

    def control_entries(self, start: int, end: int) -> list[tuple[int, ControlEntry]]:
        return [(off, r) for off, _, r in self.records_between(max(start, self._start), end)
                if isinstance(r, ControlEntry)]


def _controls(batch: RaftBatch) -> tuple[tuple[int, ControlEntry], ...]:
    if not batch.is_control:
        return ()
    return tuple((batch.base_offset + i, r) for i, r in enumerate(batch.records)
                 if isinstance(r, ControlEntry))

"""Kafka's snapshot files of `__cluster_metadata-0`: names, writing, reading.

A snapshot holds the state machine as of an offset, so followers and restarts need not replay
the whole log. Kafka's layout is kept byte for byte, so Kafka's tools read Strom's snapshots:

- name: ``<end offset %020d>-<epoch %010d>.checkpoint``; the id (end offset, epoch) names the
  first offset *not* in the snapshot and the epoch of the record before it. (0, 0) is the
  bootstrap snapshot written by ``storage format``: never fetched, served or deleted;
- while written: ``<id>-<random>.checkpoint.part``, fsynced and renamed into place when
  complete, so a crash never leaves a complete-looking partial snapshot; while deleted:
  ``<id>.checkpoint.deleted``;
- content: v2 batches, offsets from 0, partition leader epoch = the snapshot's epoch. First a
  control batch with SnapshotHeaderRecord (and, under kraft.version 1, KRaftVersionRecord and
  VotersRecord), then data batches of the state machine's record values (null keys), last a
  control batch with SnapshotFooterRecord.

Strom's older snapshots are named ``<offset %020d>.checkpoint`` (cluster/metadata_snapshot.py);
they are not Kafka snapshots, and the listing here ignores them.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, NamedTuple

from strom.raft.control import (
    ControlRecord,
    KRaftVersionRecord,
    SnapshotFooterRecord,
    SnapshotHeaderRecord,
    VotersRecord,
    build_control_batch,
    check_batch,
    decoded_controls,
)
from strom.record import (
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    CorruptRecordError,
    Record,
    build_batch,
    decode_records,
    read_header,
)
from strom.storage import files

__all__ = [
    "BOOTSTRAP_SNAPSHOT_ID",
    "Snapshot",
    "SnapshotBatch",
    "SnapshotCorruptError",
    "SnapshotId",
    "SnapshotPath",
    "SnapshotWriter",
    "delete_snapshot",
    "load_snapshot",
    "mark_for_delete",
    "parse_snapshot_path",
    "read_snapshot",
    "snapshot_ids",
    "snapshot_name",
    "snapshot_paths",
    "write_snapshot",
]

SUFFIX = ".checkpoint"
PARTIAL_SUFFIX = ".checkpoint.part"
DELETED_SUFFIX = ".checkpoint.deleted"
_OFFSET_WIDTH = 20
_EPOCH_WIDTH = 10
_ID_WIDTH = _OFFSET_WIDTH + 1 + _EPOCH_WIDTH
MAX_BATCH_BYTES = 8 * 1024 * 1024  # Kafka's KafkaRaftClient.MAX_BATCH_SIZE_BYTES
_RECORD_OVERHEAD = 21  # a record's worst-case framing beside its value (varints, null key)


class SnapshotId(NamedTuple):
    """(end offset, epoch): orders as Kafka's OffsetAndEpoch does."""

    end_offset: int
    epoch: int


BOOTSTRAP_SNAPSHOT_ID = SnapshotId(0, 0)


class SnapshotCorruptError(CorruptRecordError):
    """A snapshot file whose framing, CRCs or header/footer are wrong; the message names it."""


def snapshot_name(sid: SnapshotId, suffix: str = SUFFIX) -> str:
    end, epoch = sid
    if end < 0 or epoch < 0:
        raise ValueError(f"snapshot id {sid} has a negative part")
    return f"{end:0{_OFFSET_WIDTH}d}-{epoch:0{_EPOCH_WIDTH}d}{suffix}"


class SnapshotPath(NamedTuple):
    path: Path
    snapshot_id: SnapshotId
    partial: bool
    deleted: bool


def parse_snapshot_path(path: Path) -> SnapshotPath | None:
    """The snapshot a file name stands for, or None when it is no Kafka snapshot name (Strom's
    older ``<offset>.checkpoint`` names included)."""
    name = path.name
    head = name[:_ID_WIDTH]
    if (len(head) < _ID_WIDTH or head[_OFFSET_WIDTH] != "-"
            or not (head[:_OFFSET_WIDTH].isdigit() and head[_OFFSET_WIDTH + 1:].isdigit())
            or not head.isascii()):
        return None
    rest = name[_ID_WIDTH:]
    sid = SnapshotId(int(head[:_OFFSET_WIDTH]), int(head[_OFFSET_WIDTH + 1:]))
    if rest == SUFFIX:
        return SnapshotPath(path, sid, False, False)
    if rest == DELETED_SUFFIX:
        return SnapshotPath(path, sid, False, True)
    if rest.startswith("-") and rest.endswith(PARTIAL_SUFFIX):
        return SnapshotPath(path, sid, True, False)
    return None


def snapshot_paths(directory: Path) -> list[SnapshotPath]:
    """Every Kafka snapshot file of the directory (complete, partial and deleted), by id."""
    try:
        entries = list(directory.iterdir())
    except FileNotFoundError:
        return []
    found = [sp for sp in map(parse_snapshot_path, entries) if sp is not None]
    return sorted(found, key=lambda sp: (sp.snapshot_id, sp.partial, sp.deleted, sp.path.name))


def snapshot_ids(directory: Path) -> list[SnapshotId]:
    """The complete snapshots of the directory, oldest first."""
    return [sp.snapshot_id for sp in snapshot_paths(directory)
            if not sp.partial and not sp.deleted]


def mark_for_delete(directory: Path, sid: SnapshotId) -> Path:
    """Rename a snapshot to ``.deleted`` (readers stop seeing it at once; the file goes later)."""
    target = directory / snapshot_name(sid, DELETED_SUFFIX)
    os.replace(directory / snapshot_name(sid), target)
    return target


def delete_snapshot(directory: Path, sid: SnapshotId) -> bool:
    """Remove a snapshot's file and its ``.deleted`` file; True if either existed."""
    deleted = False
    for suffix in (SUFFIX, DELETED_SUFFIX):
        try:
            (directory / snapshot_name(sid, suffix)).unlink()
            deleted = True
        except FileNotFoundError:
            pass
    return deleted


def _now_ms() -> int:
    return int(time.time() * 1000)


class SnapshotWriter:
    """Writes one snapshot into ``.part``; `freeze` completes it, `abort` (or leaving the
    ``with`` block on an exception, or without freezing) removes it.

    The header batch is written at once, data batches as they fill (`max_batch_bytes`), the
    footer at `freeze`. ``kraft_version`` 0 has no voter set in the header (Kafka refuses one).
    """

    def __init__(
        self,
        directory: Path,
        snapshot_id: SnapshotId,
        *,
        last_contained_log_timestamp: int,
        kraft_version: int = 0,
        voters: VotersRecord | None = None,
        timestamp: int | None = None,
        max_batch_bytes: int = MAX_BATCH_BYTES,
    ) -> None:
        if kraft_version == 0 and voters is not None:
            raise ValueError("a voter set is not expected when the kraft.version is 0")
        snapshot_name(snapshot_id)  # refuses a negative id before a file exists
        self.directory = directory
        self.snapshot_id = SnapshotId(*snapshot_id)
        self.timestamp = _now_ms() if timestamp is None else timestamp
        self.max_batch_bytes = max_batch_bytes
        self.frozen = False
        self._pending: list[Record] = []
        self._pending_bytes = 0
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=directory, prefix=snapshot_name(self.snapshot_id, "-"),
                                    suffix=PARTIAL_SUFFIX)
        self.part_path = Path(name)
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
        header: list[ControlRecord] = [SnapshotHeaderRecord(last_contained_log_timestamp)]
        if kraft_version >= 1:
            header.append(KRaftVersionRecord(kraft_version))
            if voters is not None:
                header.append(voters)
        self._next_offset = 0
        self._write_control(header)

    def _out(self) -> BinaryIO:
        if self._file is None:
            raise ValueError(f"snapshot {snapshot_name(self.snapshot_id)} is "
                             f"{'frozen' if self.frozen else 'closed'}")
        return self._file

    def _write_control(self, records: list[ControlRecord]) -> None:
        batch = build_control_batch(records, base_offset=self._next_offset,
                                    leader_epoch=self.snapshot_id.epoch, timestamp=self.timestamp)
        self._out().write(batch)
        self._next_offset += len(records)

    def _flush_pending(self) -> None:
        if not self._pending:
            return
        batch = build_batch(self._pending, base_offset=self._pending[0].offset,
                            partition_leader_epoch=self.snapshot_id.epoch)
        self._out().write(batch)
        self._pending = []
        self._pending_bytes = 0

    def append(self, values: Iterable[bytes]) -> None:
        """Add state machine records (opaque values) after those appended before."""
        self._out()  # refuses a frozen or closed writer
        for value in values:
            size = len(value) + _RECORD_OVERHEAD
            if self._pending and (RECORD_BATCH_OVERHEAD + self._pending_bytes + size
                                  > self.max_batch_bytes):
                self._flush_pending()
            self._pending.append(Record(self._next_offset, self.timestamp, None, bytes(value)))
            self._pending_bytes += size
            self._next_offset += 1

    def freeze(self) -> Path:
        """Write the footer, fsync, and rename the file to its final name (fsyncing the
        directory too); returns the final path."""
        self._flush_pending()
        self._write_control([SnapshotFooterRecord()])
        out = self._out()
        out.flush()
        files.fsync(out.fileno())
        out.close()
        self._file = None
        final = self.directory / snapshot_name(self.snapshot_id)
        os.replace(self.part_path, final)
        dir_fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            files.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        self.frozen = True
        return final

    def abort(self) -> None:
        """Drop an unfrozen snapshot (its ``.part`` file goes)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if not self.frozen:
            self.part_path.unlink(missing_ok=True)

    def __enter__(self) -> SnapshotWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.abort()


def write_snapshot(
    directory: Path,
    snapshot_id: SnapshotId,
    values: Iterable[bytes],
    *,
    last_contained_log_timestamp: int,
    kraft_version: int = 0,
    voters: VotersRecord | None = None,
    timestamp: int | None = None,
) -> Path:
    """Write a whole snapshot; returns its path."""
    with SnapshotWriter(directory, snapshot_id,
                        last_contained_log_timestamp=last_contained_log_timestamp,
                        kraft_version=kraft_version, voters=voters, timestamp=timestamp) as w:
        w.append(values)
        return w.freeze()


@dataclass(frozen=True, slots=True)
class SnapshotBatch:
    """One batch of a snapshot: control records (control batches) or record values."""

    base_offset: int
    leader_epoch: int
    controls: tuple[ControlRecord, ...] = ()
    values: tuple[bytes, ...] = ()


def _batches(f: BinaryIO, name: str) -> Iterator[bytes]:
    """Whole batches of a file; a torn or impossible length is corruption."""
    pos = 0
    while True:
        head = f.read(RECORD_BATCH_OVERHEAD)
        if not head:
            return
        if len(head) < RECORD_BATCH_OVERHEAD:
            raise SnapshotCorruptError(f"{name}: {len(head)} stray bytes at position {pos}")
        h = read_header(head, 0)
        if h.length < MIN_BATCH_LENGTH:
            raise SnapshotCorruptError(f"{name}: batch length {h.length} at position {pos}")
        rest = f.read(h.length + LOG_OVERHEAD - RECORD_BATCH_OVERHEAD)
        batch = head + rest
        if len(batch) != h.size:
            raise SnapshotCorruptError(f"{name}: batch at position {pos} is cut short "
                                       f"({len(batch)} of {h.size} bytes)")
        yield batch
        pos += len(batch)


def read_snapshot(path: Path) -> Iterator[SnapshotBatch]:
    """The batches of a snapshot file, checked as they are read: framing, CRCs, offsets
    following each other from 0, the header first and the footer last (the error for a missing
    footer comes after the last batch). Raises `SnapshotCorruptError` naming the file."""
    name = str(path)
    expected = 0
    footer_seen = False
    with open(path, "rb") as f:
        for batch in _batches(f, name):
            try:
                h = check_batch(batch)
                records = decode_records(batch)
                controls = decoded_controls(records) if h.is_control else ()
            except SnapshotCorruptError:
                raise
            except CorruptRecordError as e:
                raise SnapshotCorruptError(f"{name}: {e}") from e
            if footer_seen:
                raise SnapshotCorruptError(f"{name}: batch at offset {h.base_offset} after the "
                                           "footer")
            if h.base_offset != expected or not records:
                raise SnapshotCorruptError(f"{name}: batch at offset {h.base_offset} with "
                                           f"{len(records)} records, expected offset {expected}")
            if expected == 0 and not (controls and isinstance(controls[0], SnapshotHeaderRecord)):
                raise SnapshotCorruptError(f"{name}: the first batch is not a snapshot header")
            expected = h.next_offset
            if h.is_control:
                footer_seen = isinstance(controls[-1], SnapshotFooterRecord)
                yield SnapshotBatch(h.base_offset, h.partition_leader_epoch, controls=controls)
                continue
            values = []
            for r in records:
                if r.value is None:
                    raise SnapshotCorruptError(f"{name}: record {r.offset} has no value")
                values.append(r.value)
            yield SnapshotBatch(h.base_offset, h.partition_leader_epoch, values=tuple(values))
    if expected == 0:
        raise SnapshotCorruptError(f"{name}: empty, no snapshot header")
    if not footer_seen:
        raise SnapshotCorruptError(f"{name}: no snapshot footer (an incomplete snapshot)")


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A whole snapshot: its header facts, voter set and record values."""

    snapshot_id: SnapshotId | None  # None for a file not named as a snapshot (bootstrap.checkpoint)
    last_contained_log_timestamp: int
    kraft_version: int
    voters: VotersRecord | None
    values: tuple[bytes, ...]


def load_snapshot(path: Path) -> Snapshot:
    """Read and check a whole snapshot file."""
    header: SnapshotHeaderRecord | None = None
    kraft_version = 0
    voters: VotersRecord | None = None
    values: list[bytes] = []
    for batch in read_snapshot(path):
        values.extend(batch.values)
        for rec in batch.controls:
            if isinstance(rec, SnapshotHeaderRecord) and header is None:
                header = rec
            elif isinstance(rec, KRaftVersionRecord):
                kraft_version = rec.kraft_version
            elif isinstance(rec, VotersRecord):
                voters = rec
    assert header is not None  # read_snapshot checked it
    parsed = parse_snapshot_path(path)
    sid = parsed.snapshot_id if parsed is not None else None
    return Snapshot(sid, header.last_contained_log_timestamp, kraft_version, voters,
                    tuple(values))

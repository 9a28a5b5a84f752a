"""The Raft log on disk: a `RaftLog` over Strom's `PartitionLog` in ``__cluster_metadata-0``.

The metadata log is an ordinary partition directory in ``metadata.log.dir`` (by default the
first of ``log.dirs``), so ``strom dump-log`` and Kafka's ``kafka-dump-log`` read it:

- every batch carries the Raft epoch that wrote it as its partition leader epoch, so the
  partition's leader-epoch cache (``leader-epoch-checkpoint``) answers "where did epoch E end"
  for the divergence check, and a log without that file rebuilds it from the batch headers;
- control records (LeaderChange, ...) are control batches in Kafka's bytes (raft/control.py);
  state-machine records are data batches of null-key records holding the value;
- a Fetch answer carries raw batch bytes read from the segment, and a follower appends them as
  they came (offsets and epochs kept), after checking that they continue its log;
- ``flush`` fsyncs (segments, indexes, the epoch checkpoint) and moves the recovery point:
  a voter flushes before it sends its next Fetch, a leader before it counts its own end offset.

Like `PartitionLog`, this is single-threaded; the driver calls it from one thread, its Raft
thread, so the disk work stays off the event loop. The log is opened as after a crash
(recovery from offset 0: the metadata log is small), as Kafka's KafkaMetadataLog does; the
high watermark is not stored, a replica learns it again from the quorum.

Snapshots are Kafka's files (``<end offset>-<epoch>.checkpoint`` in the same directory,
raft/snapshot.py), written through `new_snapshot` (a ``.part`` file renamed into place once
fsynced), whether made here or downloaded; the log start moves to one (`delete_before_snapshot`)
or restarts from one (`install_snapshot`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO

from strom.record import (
    CorruptRecordError,
    Record,
    build_batch,
    decode_records,
    iter_batches,
    read_header,
)
from strom.storage import files
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog, sync_directory
from strom.storage.validator import ORIGIN_COORDINATOR, ORIGIN_REPLICATION

from .control import decode_control_body, encode_control_body, encoded_control_batch
from .log import LogAppendInfo, LogFetchInfo, RawSnapshot, SnapshotIds
from .snapshot import (
    PARTIAL_SUFFIX,
    SnapshotId,
    delete_snapshot,
    mark_for_delete,
    snapshot_ids,
    snapshot_name,
    snapshot_paths,
)
from .types import (
    METADATA_PARTITION,
    METADATA_TOPIC,
    METADATA_TOPIC_ID,
    ControlEntry,
    DataRecord,
    Entry,
    OffsetAndEpoch,
    RaftBatch,
)

log = logging.getLogger(__name__)

METADATA_DIR_NAME = f"{METADATA_TOPIC}-{METADATA_PARTITION}"
QUORUM_STATE_FILE = "quorum-state"
# Kafka's limits for the metadata log: one Raft batch is at most 8 MiB, and a segment is never
# smaller than that.
MAX_BATCH_BYTES = 8 * 1024 * 1024
_READ_CHUNK = 1 << 20


def metadata_log_config(*, segment_bytes: int = 1073741824,
                        segment_ms: int = 604800000) -> LogConfig:
    """The metadata partition's settings: nothing is deleted by retention (snapshots move the
    log start, stage 4), and any batch up to the Raft maximum is taken."""
    return LogConfig(segment_bytes=max(segment_bytes, MAX_BATCH_BYTES), segment_ms=segment_ms,
                     retention_ms=-1, retention_bytes=-1, max_message_bytes=2**31 - 1,
                     file_delete_delay_ms=0)


class FileRawSnapshot:
    """A frozen snapshot file, read in slices by FetchSnapshot."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def size(self) -> int:
        return self.path.stat().st_size

    def read(self, position: int, max_bytes: int) -> bytes:
        with open(self.path, "rb") as f:
            f.seek(position)
            return f.read(max(0, max_bytes))


class FileSnapshotWriter:
    """A snapshot being written to ``<id>-<random>.checkpoint.part``; `freeze` fsyncs it and
    renames it into place (fsyncing the directory), `abort` removes it."""

    def __init__(self, directory: Path, snapshot_id: OffsetAndEpoch) -> None:
        self.snapshot_id = snapshot_id
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(
            dir=directory, prefix=snapshot_name(_sid(snapshot_id), "-"), suffix=PARTIAL_SUFFIX)
        self.part_path = Path(name)
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
        self._size = 0
        self.frozen = False

    def size(self) -> int:
        return self._size

    def _out(self) -> BinaryIO:
        if self._file is None:
            raise ValueError(f"snapshot {self.snapshot_id} is already frozen or aborted")
        return self._file

    def append(self, data: bytes) -> None:
        self._out().write(data)
        self._size += len(data)

    def freeze(self) -> None:
        out = self._out()
        out.flush()
        files.fsync(out.fileno())
        out.close()
        self._file = None
        os.replace(self.part_path, self.directory / snapshot_name(_sid(self.snapshot_id)))
        sync_directory(self.directory)
        self.frozen = True

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if not self.frozen:
            self.part_path.unlink(missing_ok=True)


def _sid(snapshot_id: OffsetAndEpoch) -> SnapshotId:
    return SnapshotId(snapshot_id.offset, snapshot_id.epoch)


class PartitionRaftLog(SnapshotIds):
    """`RaftLog` (raft/log.py) on a `PartitionLog`.

    ``sync=False`` flushes without fsync (tests and simulations only: what "flushed" means is
    kept, the durability is not).
    """

    def __init__(self, plog: PartitionLog, *, sync: bool = True) -> None:
        self.plog = plog
        self.sync = sync
        plog.hw_follows_leo = False

    @classmethod
    def open(cls, log_dir: Path, *, config: LogConfig | None = None, sync: bool = True,
             clock: Callable[[], float] = time.time) -> PartitionRaftLog:
        """Open (or create) ``<log_dir>/__cluster_metadata-0``, recovering it from the start.

        Snapshots being written or deleted when the node stopped are removed; the log starts at
        the oldest snapshot's end (the records below it were being dropped); a snapshot past the
        log's end (a download frozen just before a crash) becomes the log's start."""
        directory = Path(log_dir) / METADATA_DIR_NAME
        for sp in snapshot_paths(directory):
            if sp.partial or sp.deleted:
                sp.path.unlink(missing_ok=True)
        ids = snapshot_ids(directory)
        plog = PartitionLog(directory, METADATA_TOPIC, METADATA_PARTITION, METADATA_TOPIC_ID,
                            config or metadata_log_config(), clock=clock, clean_shutdown=False,
                            recovery_point=0, log_start_offset=ids[0].end_offset if ids else 0,
                            high_watermark=0, hw_follows_leo=False)
        raft_log = cls(plog, sync=sync)
        latest = raft_log.latest_snapshot_id()
        if latest is not None and raft_log._past_end(latest):
            log.info("metadata log %s: restarting from snapshot %s past its end %d", plog.dir,
                     latest, plog.log_end_offset)
            raft_log.install_snapshot(latest)
        log.info("metadata log %s: offsets [%d, %d), last epoch %d", plog.dir,
                 plog.log_start_offset, plog.log_end_offset, raft_log.last_fetched_epoch())
        return raft_log

    @property
    def dir(self) -> Path:
        return Path(self.plog.dir)

    def close(self) -> None:
        self.plog.close(sync=self.sync)

    # -- positions ------------------------------------------------------------------------

    def start_offset(self) -> int:
        return self.plog.log_start_offset

    def end_offset(self) -> int:
        return self.plog.log_end_offset

    def last_fetched_epoch(self) -> int:
        plog = self.plog
        if plog.log_end_offset > plog.log_start_offset:
            return max(plog.epoch_for_offset(plog.log_end_offset - 1), 0)
        start = [sid for sid in self._snapshot_ids() if sid.offset == plog.log_start_offset]
        return start[-1].epoch if start else 0

    def _past_end(self, sid: OffsetAndEpoch) -> bool:
        lfe = self.last_fetched_epoch()
        return sid.epoch > lfe or (sid.epoch == lfe and sid.offset > self.plog.log_end_offset)

    def end_offset_for_epoch(self, epoch: int) -> OffsetAndEpoch:
        # Unknown here (no epoch at or below it, or above the last one): the log's end, as
        # Kafka's KafkaMetadataLog answers; an empty log after a snapshot ends in its epoch.
        found_epoch, offset = self.plog.end_offset_for_epoch(epoch)
        if found_epoch < 0:
            return OffsetAndEpoch(self.plog.log_end_offset, self.last_fetched_epoch())
        return OffsetAndEpoch(offset, found_epoch)

    def initialize_leader_epoch(self, epoch: int) -> None:
        self.plog.epochs.note(epoch, self.plog.log_end_offset)

    # -- appends ----------------------------------------------------------------------------

    def append_as_leader(self, records: list[Entry], epoch: int, now_ms: int) -> LogAppendInfo:
        base = self.plog.log_end_offset
        batch = encode_batch(records, base_offset=base, epoch=epoch, now_ms=now_ms)
        result = self.plog.append(memoryview(bytearray(batch)), leader_epoch=epoch,
                                  now_ms=now_ms, origin=ORIGIN_COORDINATOR)
        controls = tuple((result.first_offset + i, r) for i, r in enumerate(records)
                         if isinstance(r, ControlEntry))
        return LogAppendInfo(result.first_offset, result.last_offset, controls)

    def append_as_follower(self, records: object) -> LogAppendInfo | None:
        if not isinstance(records, bytes | bytearray | memoryview) or len(records) == 0:
            return None
        data = memoryview(records)
        expected = self.plog.log_end_offset
        last_epoch = self.last_fetched_epoch() if expected > self.plog.log_start_offset else -1
        count = 0
        controls: list[tuple[int, ControlEntry]] = []
        for pos, h in iter_batches(data):
            if h.base_offset != expected:
                raise CorruptRecordError(f"fetched batch at offset {h.base_offset}, but the "
                                         f"metadata log ends at {expected}")
            if h.partition_leader_epoch < last_epoch:
                raise CorruptRecordError(f"fetched batch at offset {h.base_offset} has epoch "
                                         f"{h.partition_leader_epoch}, after epoch {last_epoch}")
            last_epoch = h.partition_leader_epoch
            expected = h.base_offset + h.last_offset_delta + 1
            count += 1
            if h.is_control:
                controls.extend(_control_entries(bytes(data[pos:pos + h.size]), h.base_offset))
        if count == 0:
            return None
        now_ms = int(time.time() * 1000)
        result = self.plog.append(data, leader_epoch=-1, now_ms=now_ms,
                                  origin=ORIGIN_REPLICATION)
        return LogAppendInfo(result.first_offset, result.last_offset, tuple(controls))

    # -- reads ------------------------------------------------------------------------------

    def read(self, offset: int, max_bytes: int) -> LogFetchInfo:
        result = self.plog.read(offset, max_bytes, max_offset=self.plog.log_end_offset)
        if result.slice is None:
            return LogFetchInfo(b"", 0)
        data = result.slice.read_bytes()
        return LogFetchInfo(data, len(data))

    def _raw_batches(self, start: int, end: int) -> Iterator[tuple[int, int, bytes]]:
        """(base offset, epoch, bytes) of the whole batches holding [start, end)."""
        offset = max(start, self.plog.log_start_offset)
        while offset < end:
            result = self.plog.read(offset, _READ_CHUNK, max_offset=end)
            if result.slice is None:
                return
            data = result.slice.read_bytes()
            mv = memoryview(data)
            moved = False
            for pos, h in iter_batches(mv):
                yield h.base_offset, h.partition_leader_epoch, bytes(mv[pos:pos + h.size])
                offset = h.base_offset + h.last_offset_delta + 1
                moved = True
            if not moved:
                raise CorruptRecordError(f"no whole batch at offset {offset} of {self.plog.dir}")

    def read_batches(self, start: int, end: int) -> list[RaftBatch]:
        out: list[RaftBatch] = []
        for base, epoch, data in self._raw_batches(start, end):
            batch = decode_batch(data, base, epoch)
            piece = batch.slice_from(start).slice_to(end)
            if piece is not None:
                out.append(piece)
        return out

    def control_entries(self, start: int, end: int) -> list[tuple[int, ControlEntry]]:
        out: list[tuple[int, ControlEntry]] = []
        for base, _epoch, data in self._raw_batches(start, end):
            if read_header(data, 0).is_control:
                out.extend((o, e) for o, e in _control_entries(data, base) if start <= o < end)
        return out

    # -- truncation, durability, the high watermark -----------------------------------------

    def truncate_to(self, offset: int) -> None:
        if offset >= self.plog.log_end_offset:
            return
        if offset < self.plog.high_watermark:
            raise ValueError(f"truncation to {offset} below the high watermark "
                             f"{self.plog.high_watermark}")
        self.plog.truncate_to(offset)

    def flush(self) -> None:
        if self.plog.recovery_point < self.plog.log_end_offset or not self.plog.epochs.current:
            self.plog.flush(sync=self.sync)

    def flushed_offset(self) -> int:
        return self.plog.recovery_point

    def update_high_watermark(self, offset: int) -> None:
        plog = self.plog
        plog.high_watermark = max(plog.high_watermark, min(offset, plog.log_end_offset))

    def high_watermark(self) -> int:
        return self.plog.high_watermark

    # -- snapshots --------------------------------------------------------------------------

    def _snapshot_ids(self) -> list[OffsetAndEpoch]:
        return [OffsetAndEpoch(s.end_offset, s.epoch) for s in snapshot_ids(self.dir)]

    def size_bytes(self) -> int:
        snapshots = 0
        for sid in self._snapshot_ids():
            with contextlib.suppress(OSError):  # deleted meanwhile
                snapshots += (self.dir / snapshot_name(_sid(sid))).stat().st_size
        return self.plog.size_bytes() + snapshots

    def read_snapshot(self, snapshot_id: OffsetAndEpoch) -> RawSnapshot | None:
        if snapshot_id.offset < 0 or snapshot_id.epoch < 0:
            return None
        path = self.dir / snapshot_name(_sid(snapshot_id))
        return FileRawSnapshot(path) if path.is_file() else None

    def new_snapshot(self, snapshot_id: OffsetAndEpoch) -> FileSnapshotWriter | None:
        if snapshot_id.offset < 0 or snapshot_id.epoch < 0:
            raise ValueError(f"snapshot id {snapshot_id} has a negative part")
        if (self.dir / snapshot_name(_sid(snapshot_id))).is_file():
            return None
        return FileSnapshotWriter(self.dir, snapshot_id)

    def _forget_snapshots_before(self, snapshot_id: OffsetAndEpoch) -> None:
        """Delete the snapshots older than `snapshot_id` (ids ordered by offset, then epoch),
        as the memory log does."""
        for sid in self._snapshot_ids():
            if _sid(sid) < _sid(snapshot_id):
                mark_for_delete(self.dir, _sid(sid))  # a crash now leaves only a .deleted
                delete_snapshot(self.dir, _sid(sid))

    def install_snapshot(self, snapshot_id: OffsetAndEpoch) -> None:
        if self.read_snapshot(snapshot_id) is None:
            raise ValueError(f"no frozen snapshot {snapshot_id} to install")
        if self.plog.high_watermark > snapshot_id.offset:
            raise ValueError(f"installing snapshot {snapshot_id} would drop committed records "
                             f"(high watermark {self.plog.high_watermark})")
        self.plog.truncate_fully_and_start_at(snapshot_id.offset)
        self.plog.flush(sync=self.sync)
        self._forget_snapshots_before(snapshot_id)

    def delete_before_snapshot(self, snapshot_id: OffsetAndEpoch) -> bool:
        plog = self.plog
        latest = self.latest_snapshot_id()
        end = snapshot_id.offset
        if (latest is None or self.read_snapshot(snapshot_id) is None
                or end <= plog.log_start_offset or end > latest.offset
                or end > plog.high_watermark or end > plog.log_end_offset):
            return False
        plog.delete_records_before(end)
        self._forget_snapshots_before(snapshot_id)
        return True


# ---------------------------------------------------------------------------------------------
# Batches <-> the core's entries


def encode_batch(records: list[Entry], *, base_offset: int, epoch: int, now_ms: int) -> bytes:
    """One v2 batch of `records` (all control entries or all data records)."""
    if not records:
        raise ValueError("an empty batch")
    if isinstance(records[0], ControlEntry):
        pairs = []
        for r in records:
            if not isinstance(r, ControlEntry):
                raise ValueError("a batch mixes control and data records")
            pairs.append(encode_control_body(r.type, r.body))
        return encoded_control_batch(pairs, base_offset=base_offset, leader_epoch=epoch,
                                     timestamp=now_ms)
    values: list[Record] = []
    for r in records:
        if not isinstance(r, DataRecord):
            raise ValueError("a batch mixes control and data records")
        values.append(Record(base_offset + len(values), now_ms, None, r.value))
    return build_batch(values, base_offset=base_offset, partition_leader_epoch=epoch)


def decode_batch(data: bytes, base_offset: int, epoch: int) -> RaftBatch:
    """The core's view of one stored batch."""
    records = decode_records(data)
    if not records:
        raise CorruptRecordError(f"empty batch at offset {base_offset}")
    control = read_header(data, 0).is_control
    entries: list[Entry] = []
    for rec in records:
        if control:
            kind, body = decode_control_body(rec.key, rec.value)
            entries.append(ControlEntry(kind, body))
        else:
            entries.append(DataRecord(rec.value or b""))
    timestamp = records[0].timestamp
    return RaftBatch(base_offset, max(epoch, 0), tuple(entries), timestamp)


def _control_entries(data: bytes, base_offset: int) -> list[tuple[int, ControlEntry]]:
    """The records of one control batch, by offset."""
    out = []
    for rec in decode_records(data):
        kind, body = decode_control_body(rec.key, rec.value)
        out.append((rec.offset, ControlEntry(kind, body)))
    return out

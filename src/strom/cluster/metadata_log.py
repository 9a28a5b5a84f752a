"""The embedded metadata log of a single broker: metadata records in `__cluster_metadata-0`.

Records are appended as JSON record values in ordinary v2 batches (so `strom dump-log` reads the
log), replayed on start after the newest snapshot. A snapshot (`<offset>.checkpoint`, the whole
image, checksummed: `metadata_snapshot`) is written every `snapshot_every` records, once the log
is durable up to it. The two newest snapshots are kept, and the log from the older one on.

Damaged metadata never turns into an empty or partial image (which would make the broker drop
the logs it no longer knows): a damaged newest snapshot falls back to the older one plus the
log after it (the image is then marked `unverified`, so no directory is judged stray on that
start); when nothing complete can be loaded (both snapshots damaged, a replayed batch damaged,
records cut out of the log by recovery) the load raises `MetadataDamagedError`, one line naming
the file and what to do.

Large commits must not stall the event loop: `encode_batch` is pure (callers run it in a worker
thread), `write` + `sync` split the append from its fsync, and a snapshot taken while the loop
runs is encoded and written in a worker thread from a copy made on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from strom.cluster import metadata_snapshot as snap
from strom.cluster.image import METADATA_TOPIC, ImageCapture, MetadataImage
from strom.cluster.metadata_snapshot import SNAPSHOT_SUFFIX, SnapshotDamaged
from strom.cluster.records import Change, apply
from strom.record import (
    LOG_OVERHEAD,
    MAGIC_V2,
    MIN_BATCH_LENGTH,
    RECORD_BATCH_OVERHEAD,
    CorruptRecordError,
    Record,
    build_batch,
    crc_ok,
    decode_records,
    read_header,
)
from strom.storage.config import LogConfig
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog
from strom.storage.manager import LogManager
from strom.storage.segment import CORRUPT_SUFFIX

log = logging.getLogger(__name__)

METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed id for the metadata topic
KEPT_SNAPSHOTS = 2  # the newest, and the one to fall back to when it is damaged
DOCS = 'see "Metadata damage" in docs/operations.md'

__all__ = ["SNAPSHOT_SUFFIX", "MetadataDamagedError", "MetadataLog", "encode_batch"]


class MetadataDamagedError(Exception):
    """The metadata cannot be loaded completely; the message is one line naming the damaged
    file and what to do (the broker refuses to start with it)."""


def encode_batch(records: list[dict[str, Any]], now_ms: int) -> bytes:
    """The v2 batch holding `records` as JSON values (pure: callers may run it in a thread)."""
    return build_batch(
        Record(i, now_ms, None, json.dumps(r, separators=(",", ":")).encode())
        for i, r in enumerate(records)
    )


class MetadataLog:
    """Durable, replayable store of metadata records for one node."""

    def __init__(self, logs: LogManager, *, snapshot_every: int = 1000) -> None:
        self._logs = logs
        self._snapshot_every = snapshot_every
        self._since_snapshot = 0
        self._snapshotting = False  # a background snapshot is being written
        self._tasks: set[asyncio.Task[None]] = set()
        # why the loaded image may lack what the newest snapshot had (None: it is complete)
        self.unverified: str | None = None
        # Internal and atomic: one topic creation is one batch, however many partitions it has,
        # so the client-facing max.message.bytes does not apply here.
        config = LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=64 * 1024 * 1024,
                           max_message_bytes=2**31 - 1)
        self._log: PartitionLog = logs.create(METADATA_TOPIC, 0, METADATA_TOPIC_ID, config)

    @property
    def dir(self) -> Path:
        return Path(self._log.dir)

    def load(self, cluster_id: str) -> MetadataImage:
        """Build the image: the newest whole snapshot, then every record after it, each batch
        checked. Falls back to the older snapshot when the newest is damaged (`unverified`
        then says so); raises MetadataDamagedError when no complete image can be had."""
        self.unverified = None
        snapshots = snap.snapshot_files(self.dir)
        damaged: list[tuple[Path, str]] = []
        image: MetadataImage | None = None
        source: Path | None = None
        for path in reversed(snapshots):
            try:
                image = snap.read_snapshot(path)
            except SnapshotDamaged as exc:
                log.warning("metadata snapshot %s is damaged: %s", path, exc)
                damaged.append((path, str(exc)))
                continue
            source = path
            break
        # records cut out by recovery first: they explain a log ending too early best
        self._check_cut_records(snap.snapshot_offset(source) if source is not None
                                else self._log.log_start_offset)
        offset = self._check_start(source, snapshots, damaged)
        if image is None:
            image = MetadataImage(cluster_id=cluster_id)
        count = self._replay(image, offset, source)
        self._since_snapshot = count
        older = [p for p in snapshots if source is not None and p < source]
        self._set_aside_damaged(damaged, older)
        log.info("metadata loaded: %d topics, %d records replayed after offset %d",
                 len(image.topics), count, offset)
        if damaged:
            newest = damaged[0][0]
            self.unverified = (f"the metadata was loaded from "
                               f"{source.name if source else 'the log alone'} because the "
                               f"newest snapshot {newest} is damaged")
            log.warning("%s; replaying the log from offset %d rebuilt everything after it, and a "
                        "new snapshot is written now", self.unverified, offset)
            try:
                self.snapshot(image)  # two whole snapshots again
            except (OSError, StorageError) as exc:  # the log still holds it all: retried later
                log.error("cannot write a metadata snapshot after the fallback: %s", exc)
        return image

    def _check_start(self, source: Path | None, snapshots: list[Path],
                     damaged: list[tuple[Path, str]]) -> int:
        """The offset to replay from, once sure the log holds every record from there to the
        newest thing ever written (else MetadataDamagedError)."""
        start, end = self._log.log_start_offset, self._log.log_end_offset
        where = f"{self.dir}"
        if source is None:
            if damaged and start > 0:
                names = " and ".join(str(p) for p, _ in damaged)
                raise MetadataDamagedError(
                    f"metadata snapshot{'s' if len(damaged) > 1 else ''} {names} "
                    f"{'are' if len(damaged) > 1 else 'is'} damaged ({damaged[0][1]}) and the "
                    f"metadata log in {where} no longer holds the records before offset {start}: "
                    f"restore the snapshot files from a backup; {DOCS}")
            if not snapshots and start > 0:
                raise MetadataDamagedError(
                    f"the metadata log in {where} starts at offset {start} but no snapshot "
                    f"(*{SNAPSHOT_SUFFIX}) holds the metadata before it: restore the snapshot "
                    f"files from a backup; {DOCS}")
            offset = start
        else:
            offset = snap.snapshot_offset(source)
            if offset < start:
                raise MetadataDamagedError(
                    f"the metadata log in {where} starts at offset {start}, after the snapshot "
                    f"{source} (offset {offset}): the records in between are gone; restore "
                    f"{where} from a backup; {DOCS}")
        needed = max([offset] + [snap.snapshot_offset(p) for p, _ in damaged])
        if end < needed:
            what = (f"the damaged snapshot {damaged[0][0]}" if damaged and needed > offset
                    else f"the snapshot {source}")
            raise MetadataDamagedError(
                f"the metadata log in {where} ends at offset {end}, before {what} (offset "
                f"{needed}): its segments are damaged or missing; restore {where} from a "
                f"backup; {DOCS}")
        return offset

    def _check_cut_records(self, offset: int) -> None:
        """Refuse when start-up recovery cut metadata records from offset `offset` on out of
        the log (side files holding whole batches: its middle was damaged). A side file with
        no whole batch held a torn last write, which crash recovery rightly drops."""
        for side in sorted(self.dir.glob(f"*.log{CORRUPT_SUFFIX}*")):
            try:
                found = snap.batches_in(side)
            except OSError as exc:
                raise MetadataDamagedError(f"cannot read {side} ({exc}), bytes cut out of the "
                                           f"metadata log: {DOCS}") from None
            if found is not None and found[1] >= offset:
                raise MetadataDamagedError(
                    f"the metadata log was damaged: {side} holds metadata records (offsets "
                    f"{found[0]} to {found[1]}) that recovery cut out of the log; restore "
                    f"{self.dir} from a backup, or move {side.name} out of the directory to "
                    f"start without them; {DOCS}")

    def _replay(self, image: MetadataImage, offset: int, source: Path | None) -> int:
        """Apply every record from `offset` to the log end, checking each batch (CRC, framing,
        offsets following on): a damaged one raises MetadataDamagedError."""
        position, end = offset, self._log.log_end_offset
        count = 0
        while position < end:
            try:
                result = self._log.read(position, 1 << 20, max_offset=end)
            except (CorruptRecordError, StorageError, OSError) as exc:
                raise self._damaged(position, str(exc), source) from None
            if result.slice is None:
                raise self._damaged(position, "no batch holds it", source)
            data = memoryview(result.slice.read_bytes())
            pos = 0
            while pos < len(data):
                h = read_header(data, pos) if pos + RECORD_BATCH_OVERHEAD <= len(data) else None
                if (h is None or h.magic != MAGIC_V2 or h.length < MIN_BATCH_LENGTH
                        or pos + LOG_OVERHEAD + h.length > len(data)):
                    raise self._damaged(position, "the batch there does not frame", source)
                if not crc_ok(data, pos, h):
                    raise self._damaged(position, "CRC mismatch", source)
                last = h.base_offset + h.last_offset_delta
                if not h.base_offset <= position <= last:
                    raise self._damaged(position, f"the next batch holds offsets "
                                                  f"{h.base_offset} to {last}", source)
                batch = data[pos : pos + LOG_OVERHEAD + h.length]
                try:
                    for rec in decode_records(batch):
                        if position <= rec.offset < end and rec.value is not None:
                            apply(image, json.loads(rec.value))
                            count += 1
                except (ValueError, KeyError, TypeError, AttributeError) as exc:
                    raise self._damaged(h.base_offset, f"unreadable record: {exc}",
                                        source) from None
                position = last + 1
                pos += LOG_OVERHEAD + h.length
        return count

    def _damaged(self, offset: int, why: str, source: Path | None) -> MetadataDamagedError:
        segment = next((s.log_path for s in reversed(self._log.segments)
                        if s.base_offset <= offset), self.dir)
        after = f"after the snapshot {source.name}" if source is not None else "from its start"
        return MetadataDamagedError(
            f"the metadata log is damaged at offset {offset} in {segment} ({why}), among the "
            f"records that must be replayed {after}: restore {self.dir} from a backup; {DOCS}")

    def _set_aside_damaged(self, damaged: list[tuple[Path, str]], older: list[Path]) -> None:
        """Rename damaged snapshots (those found by the load, and older ones failing the cheap
        check) to `.damaged`, so the two kept are whole; they are never removed."""
        bad = [p for p, _ in damaged]
        for path in older:
            try:
                snap.check_snapshot(path)
            except SnapshotDamaged as exc:
                log.warning("metadata snapshot %s is damaged: %s", path, exc)
                bad.append(path)
        for path in bad:
            try:
                aside = snap.set_aside(path)
            except OSError as exc:  # still skipped by every load: it fails its check
                log.error("cannot rename damaged metadata snapshot %s: %s", path, exc)
                continue
            log.warning("damaged metadata snapshot %s renamed to %s (kept for inspection; "
                        "never loaded, never removed automatically)", path, aside.name)

    def append(self, image: MetadataImage, records: list[dict[str, Any]]) -> list[Change]:
        """Persist records (one batch, fsynced: metadata is small and must survive) then apply them."""
        now_ms = int(time.time() * 1000)
        self.write(encode_batch(records, now_ms), now_ms)
        self._log.flush()
        changes = [c for c in (apply(image, r) for r in records) if c is not None]
        self.applied(image, len(records))
        return changes

    def write(self, batch: bytes, now_ms: int) -> int:
        """Append a batch from `encode_batch` without syncing it (`sync` does); the log end
        offset after it."""
        self._log.append(memoryview(bytearray(batch)), leader_epoch=0, now_ms=now_ms)
        return self._log.log_end_offset

    def sync_now(self, end_offset: int) -> None:
        """Make the log durable up to `end_offset` on the spot (blocking: rare commits only)."""
        if self._log.recovery_point < end_offset:
            self._log.flush()

    async def sync(self, end_offset: int) -> None:
        """Make the log durable up to `end_offset`, the fsync in a worker thread (a flush begun
        before our write is followed by another); blocking when no loop runs or the background
        flush did not get there, so a failing disk raises here."""
        for _ in range(2):
            if self._log.recovery_point >= end_offset:
                return
            running = self._log.flush_in_background(full=True)
            if running is None:
                break
            await running
        if self._log.recovery_point < end_offset:
            self._log.flush()

    def applied(self, image: MetadataImage, count: int) -> None:
        """`count` more records are in the log and the image: snapshot when one is due (in the
        background when a loop runs; one at a time)."""
        self._since_snapshot += count
        if self._since_snapshot < self._snapshot_every or self._snapshotting:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.snapshot(image)
            return
        offset = self._log.log_end_offset
        data = image.capture()  # taken on the loop (the image changes meanwhile), cheaply
        self._since_snapshot = 0
        self._snapshotting = True
        task = loop.create_task(self._snapshot_in_background(offset, data),
                                name="metadata-snapshot")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def snapshot(self, image: MetadataImage) -> None:
        """Write a snapshot of `image` at the log end now (blocking, the log fsynced first)
        and release the log below the older kept snapshot."""
        offset = self._log.log_end_offset
        self._log.flush()
        self._install(self._write_snapshot(offset, image.to_snapshot()), offset)
        self._since_snapshot = 0

    async def _snapshot_in_background(self, offset: int, data: ImageCapture) -> None:
        try:
            # never a snapshot past the durable log: a crash must not leave the log ending
            # before the newest snapshot (the load takes that for damage)
            await self.sync(offset)
            path = await asyncio.to_thread(self._write_capture, offset, data)
            self._install(path, offset)
        except (OSError, StorageError) as exc:  # the log still holds every record: retried
            log.error("metadata snapshot at offset %d failed, the log below it is kept: %s",
                      offset, exc)
        finally:
            self._snapshotting = False

    def _write_capture(self, offset: int, capture: ImageCapture) -> Path:
        """Turn a capture into plain data and write it (a worker thread's whole job)."""
        return self._write_snapshot(offset, capture.to_snapshot())

    def _write_snapshot(self, offset: int, data: dict[str, Any]) -> Path:
        """Write and fsync the snapshot file (any thread): its final path."""
        path = snap.snapshot_path(self.dir, offset)
        snap.write_snapshot(path, offset, data)
        return path

    def _install(self, path: Path, offset: int) -> None:
        """Keep the two newest snapshots (a slow background one may finish after a newer one)
        and release the log below the older of them: it is where a damaged newest snapshot
        falls back to, with the log after it."""
        snapshots = snap.snapshot_files(self.dir) or [path]
        kept = snapshots[-KEPT_SNAPSHOTS:]
        for old in snapshots[:-KEPT_SNAPSHOTS]:
            old.unlink(missing_ok=True)
        if len(kept) == KEPT_SNAPSHOTS:
            self._log.delete_records_before(min(offset, snap.snapshot_offset(kept[0])))

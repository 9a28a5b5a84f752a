"""The embedded metadata log of a single broker: metadata records in `__cluster_metadata-0`.

Records are appended as JSON record values in ordinary v2 batches (so `strom dump-log` reads the
log), replayed on start after the newest snapshot. A snapshot (`<offset>.checkpoint`, the whole
image as JSON) is written every `snapshot_every` records, and the log below it is released.

Large commits must not stall the event loop: `encode_batch` is pure (callers run it in a worker
thread), `write` + `sync` split the append from its fsync, and a snapshot taken while the loop
runs is encoded and written in a worker thread from a copy made on the loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from strom.cluster.image import METADATA_TOPIC, ImageCapture, MetadataImage
from strom.cluster.records import Change, apply
from strom.record import Record, build_batch, decode_records, iter_batches
from strom.storage.config import LogConfig
from strom.storage.log import PartitionLog
from strom.storage.manager import LogManager

log = logging.getLogger(__name__)

METADATA_TOPIC_ID = uuid.UUID(int=1)  # Kafka's fixed id for the metadata topic
SNAPSHOT_SUFFIX = ".checkpoint"


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
        # Internal and atomic: one topic creation is one batch, however many partitions it has,
        # so the client-facing max.message.bytes does not apply here.
        config = LogConfig(retention_ms=-1, retention_bytes=-1, segment_bytes=64 * 1024 * 1024,
                           max_message_bytes=2**31 - 1)
        self._log: PartitionLog = logs.create(METADATA_TOPIC, 0, METADATA_TOPIC_ID, config)

    @property
    def dir(self) -> Path:
        return Path(self._log.dir)

    def load(self, cluster_id: str) -> MetadataImage:
        """Build the image: newest snapshot, then every record after it."""
        image, offset = self._read_snapshot(cluster_id)
        count = 0
        for record in self._records_from(offset):
            apply(image, record)
            count += 1
        self._since_snapshot = count
        log.info("metadata loaded: %d topics, %d records replayed after offset %d",
                 len(image.topics), count, offset)
        return image

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
        """Write a snapshot of `image` at the log end now (blocking) and release the log below."""
        offset = self._log.log_end_offset
        self._install(self._write_snapshot(offset, image.to_snapshot()), offset)
        self._since_snapshot = 0

    async def _snapshot_in_background(self, offset: int, data: ImageCapture) -> None:
        try:
            path = await asyncio.to_thread(self._write_capture, offset, data)
            self._install(path, offset)
        except OSError as exc:  # the log still holds every record: the next snapshot retries
            log.error("metadata snapshot at offset %d failed, the log below it is kept: %s",
                      offset, exc)
        finally:
            self._snapshotting = False

    def _write_capture(self, offset: int, capture: ImageCapture) -> Path:
        """Turn a capture into plain data and write it (a worker thread's whole job)."""
        return self._write_snapshot(offset, capture.to_snapshot())

    def _write_snapshot(self, offset: int, data: dict[str, Any]) -> Path:
        """Encode, write and fsync the snapshot file (any thread): its final path. Encoded
        piece by piece: one C-level json.dumps of a large image would hold the GIL (and stall
        the loop) for tens of milliseconds."""
        path = self.dir / f"{offset:020d}{SNAPSHOT_SUFFIX}"
        tmp = path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            for chunk in json.JSONEncoder().iterencode(data):
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    def _install(self, path: Path, offset: int) -> None:
        """Keep only the newest snapshot (a slow background one may finish after a newer one)
        and release the log below it."""
        snapshots = sorted(self.dir.glob(f"*{SNAPSHOT_SUFFIX}")) or [path]
        for old in snapshots[:-1]:
            old.unlink(missing_ok=True)
        self._log.delete_records_before(max(offset, int(snapshots[-1].name[:20])))

    def _read_snapshot(self, cluster_id: str) -> tuple[MetadataImage, int]:
        snapshots = sorted(self.dir.glob(f"*{SNAPSHOT_SUFFIX}"))
        for path in reversed(snapshots):
            try:
                data = json.loads(path.read_text())
                return MetadataImage.from_snapshot(data), int(path.name[:20])
            except (ValueError, KeyError) as exc:
                log.warning("ignoring unreadable metadata snapshot %s: %s", path, exc)
        return MetadataImage(cluster_id=cluster_id), self._log.log_start_offset

    def _records_from(self, offset: int) -> Iterator[dict[str, Any]]:
        position = max(offset, self._log.log_start_offset)
        while position < self._log.log_end_offset:
            result = self._log.read(position, 1 << 20, max_offset=self._log.log_end_offset)
            if result.slice is None:
                break
            data = memoryview(result.slice.read_bytes())
            last = position
            for pos, header in iter_batches(data):
                batch = data[pos : pos + header.size]
                for rec in decode_records(bytes(batch)):
                    if rec.offset >= position and rec.value is not None:
                        yield json.loads(rec.value)
                last = header.base_offset + header.last_offset_delta + 1
            if last <= position:
                break
            position = last

"""PartitionLog: one partition's segments, offsets, leader epochs, retention and recovery.

Single-threaded by design (call it from the event loop). ``flush`` calls ``fsync`` and
blocks; a broker flushes in the background instead (``flush_in_background``, started on every
roll and by the periodic flush): what to write and sync is decided on the loop (index tails and
producer snapshots as bytes), the writes and fsyncs run in a worker thread on pinned
descriptors, and the recovery point moves back on the loop once they are done. The next
segment's log file is created ahead of the roll in a worker thread too, and deleted segments'
files are unlinked in one, so a roll costs the loop a rename and no file writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
import uuid
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from strom.record import (
    CONTROL_MASK,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    CorruptRecordError,
    decode_records,
    read_header,
)
from strom.record.buffers import Buf
from strom.storage import files
from strom.storage.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    PARTITION_METADATA,
    ZERO_UUID,
    read_partition_metadata,
    write_partition_metadata,
)
from strom.storage.config import LogConfig
from strom.storage.epochs import DeferredEpochCache
from strom.storage.errors import KafkaStorageError, OffsetOutOfRangeError
from strom.storage.files import FileBudget, FileSlice, SegmentFile, fsync, fsync_paths
from strom.storage.health import RateLimitedLog, describe, io_cause
from strom.storage.index import TailWrite
from strom.storage.producer_state import (
    DEFAULT_EXPIRATION_MS,
    BatchMetadata,
    CompletedTxn,
    PendingUpdate,
    ProducerStateManager,
    SnapshotWrite,
)
from strom.storage.recovery import open_segments
from strom.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    CorruptSegmentError,
    LogSegment,
    segment_name,
)
from strom.storage.txn_index import TXN_INDEX_SUFFIX, AbortedTxn, TransactionIndex
from strom.storage.validator import ORIGIN_CLIENT, ORIGIN_REPLICATION, validate_append

log = logging.getLogger(__name__)
_unreported = RateLimitedLog(log)  # I/O failures of logs without a LogManager to tell

# (log, what failed, the OSError): the LogManager takes a failing log dir offline
IoErrorHandler = Callable[["PartitionLog", str, OSError], None]

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# the next segment's log file, created empty in a worker thread once the active segment is
# half full and renamed at the roll; a ``*.tmp`` left by a crash is deleted at load
NEXT_SEGMENT_FILE = "next-segment.log.tmp"


@dataclass(slots=True)
class AppendResult:
    first_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    max_timestamp: int
    log_start_offset: int
    record_count: int
    duplicate: bool = False  # an idempotent retry: nothing written, offsets of the original
    # log.flush.interval.messages was reached and the flush runs in the background: done once
    # this append is on disk (Kafka answers the produce after that flush)
    flushed: asyncio.Future[None] | None = None


@dataclass(slots=True)
class ReadResult:
    slice: FileSlice | None
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


@dataclass(slots=True)
class FlushJob:
    """One flush, captured on the event loop: ``sync`` (any thread) only fsyncs descriptors
    pinned for it and files named by path, so it needs no lock on the log's state.

    Kafka runs the same work on its scheduler threads (``flushUptoOffsetExclusive`` after a
    roll, the log flusher), never on a request handler."""

    files: list[tuple[SegmentFile, int]]  # log files, pinned until the flush ends
    tails: list[TailWrite]  # index entries not in their files yet
    snapshot_writes: list[SnapshotWrite]  # producer snapshots taken at rolls, not written yet
    producer_state: ProducerStateManager
    txn_indexes: list[TransactionIndex]
    snapshots: list[Path]  # producer snapshots written without an fsync
    epochs: tuple[int, list[tuple[int, int]]] | None  # leader-epoch checkpoint to write
    upto: int  # the recovery point once everything above is durable
    generation: int  # the log's truncation count when captured
    rolled: list[LogSegment]
    messages: int  # unflushed messages it covers (counted again if it fails)
    epoch_cache: DeferredEpochCache

    def sync(self) -> None:
        for t in self.tails:
            try:
                t.write()
            except OSError as e:
                raise KafkaStorageError(f"cannot write index {t.index.path}: {e}") from e
        self.producer_state.write_pending(self.snapshot_writes)
        for f, fd in self.files:
            try:
                files.fsync(fd)
            except OSError as e:
                raise KafkaStorageError(f"fsync of {f.path} failed: {e}") from e
        try:
            fsync_paths([t.path for t in self.txn_indexes])
            fsync_paths(self.snapshots)
        except OSError as e:
            raise KafkaStorageError(f"fsync failed: {e}") from e
        if self.epochs is not None:
            self.epoch_cache.write_version(*self.epochs, fsync_dir=True)


def _unlink_all(paths: list[Path]) -> None:
    """Unlink files (any thread); one already gone is skipped."""
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)


def _make_dir(path: Path) -> bool:
    """Create a partition directory; True when it did not exist before."""
    try:
        os.mkdir(path)
        return True
    except FileExistsError:
        return False
    except FileNotFoundError:  # the log dir itself is missing
        pass
    except OSError as e:
        raise KafkaStorageError(f"cannot create {path}: {e}") from e
    try:
        path.mkdir(parents=True)
        return True
    except FileExistsError:
        return False
    except OSError as e:
        raise KafkaStorageError(f"cannot create {path}: {e}") from e


def sync_directory(path: Path | str) -> None:
    """fsync a directory, so the renames in it are durable (any thread)."""
    dfd = os.open(path, os.O_RDONLY)
    try:
        fsync(dfd)
    finally:
        os.close(dfd)


class PartitionLog:
    """The log of one partition in directory ``dir`` (``<topic>-<partition>``).

    Opening an existing directory loads it: ``clean_shutdown`` skips recovery; otherwise the
    segments from ``recovery_point`` on are re-validated.
    """

    def __init__(
        self,
        dir: Path,
        topic: str,
        partition: int,
        topic_id: uuid.UUID | None = None,
        config: LogConfig | None = None,
        *,
        budget: FileBudget | None = None,
        clock: Callable[[], float] = time.time,
        clean_shutdown: bool = False,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        high_watermark: int | None = None,
        hw_follows_leo: bool = True,
        producer_id_expiration_ms: int = DEFAULT_EXPIRATION_MS,
        prepared: bool = False,
    ) -> None:
        self.dir = Path(dir)
        self.topic = topic
        self.partition = partition
        self.topic_partition = f"{topic}-{partition}"  # as Kafka quotes it in errors
        self.config = config or LogConfig()
        self._budget = budget or FileBudget()
        self._clock = clock
        self._closed = False
        # One broker: everything appended is committed. Replication turns this off and moves
        # ``high_watermark`` itself.
        self.hw_follows_leo = hw_follows_leo
        # called after every append (a leader wakes its followers' fetches, whoever wrote)
        self.on_append: Callable[[], None] | None = None
        self.on_io_error: IoErrorHandler | None = None
        self._offline: str | None = None  # why the log dir is offline (see take_offline)
        # A new directory: nothing on disk to load or recover. ``prepared``: the caller made it
        # moments ago (LogManager.prepare_dirs), empty but for partition.metadata of topic_id.
        fresh = prepared or _make_dir(self.dir)
        meta_path = self.dir / PARTITION_METADATA
        stored = topic_id if prepared else None if fresh else read_partition_metadata(meta_path)
        if topic_id is None or topic_id == ZERO_UUID:
            topic_id = stored or ZERO_UUID
        elif stored != topic_id:
            if stored is not None and stored != ZERO_UUID:
                raise KafkaStorageError(
                    f"{self.dir} belongs to topic id {stored}, not {topic_id}")  # fmt: skip
            write_partition_metadata(meta_path, topic_id, fresh=fresh)
        self.topic_id: uuid.UUID = topic_id

        epochs_path = self.dir / LEADER_EPOCH_CHECKPOINT
        self.epochs = DeferredEpochCache(epochs_path, [] if fresh else None)
        now_ms = self._now_ms()
        self.recovered_segments = 0  # how many segments the load had to re-read
        self._reported_damage: set[str] = set()  # damaged batches reads have logged
        if fresh:
            segs = [self._new_segment(max(log_start_offset, 0), fresh=True)]
        else:
            segs = open_segments(
                self.dir, self.config, self._budget, self.epochs, clean=clean_shutdown,
                recovery_point=recovery_point, log_start_offset=log_start_offset,
                now_ms=now_ms, on_recover=self._count_recovery,
            )  # fmt: skip
        self._segments: list[LogSegment] = segs
        self._bases: list[int] = [s.base_offset for s in segs]
        self._active = segs[-1]
        self.log_end_offset: int = self._active.next_offset
        leo = self.log_end_offset
        self.log_start_offset: int = min(max(log_start_offset, segs[0].base_offset), leo)
        if not self.epochs.loaded and self.recovered_segments < len(segs) and \
                leo > segs[0].base_offset:  # fmt: skip
            self._rebuild_epochs()  # (a recovery from the first segment noted them all)
        self.epochs.truncate_from_end(leo)
        self.epochs.truncate_from_start(self.log_start_offset)
        self.recovery_point: int = leo if clean_shutdown else min(recovery_point, leo)
        if hw_follows_leo or high_watermark is None:
            hw = leo
        else:
            hw = min(max(high_watermark, self.log_start_offset), leo)
        self.high_watermark: int = hw
        self._unflushed_messages = 0
        self._last_flush_ms = now_ms
        self._rolled_unflushed: list[LogSegment] = []
        self._inflight: FlushJob | None = None  # the background flush running now
        self._inflight_done: asyncio.Future[None] | None = None
        self._want_full_flush = False  # a full flush was asked for while one was in flight
        self._generation = 0  # truncations so far: a flush captured before one advances nothing
        self._pending_deletes: list[tuple[int, list[Path], LogSegment]] = []
        # the next segment's file created ahead in a worker thread ("": creating it failed,
        # the roll creates one itself), and whether that is under way
        self._next_file: str | None = None
        self._preparing = False
        self.producer_state = ProducerStateManager(
            self.dir, expiration_ms=producer_id_expiration_ms, fresh=fresh
        )
        # bases of the segments that may hold aborted transactions (a .txnindex): read_committed
        # fetches look only at these, so a log without aborts costs nothing extra
        self._txn_bases: list[int] = [] if fresh else self._find_txn_indexes()
        if not fresh:
            self.producer_state.remove_stray_snapshots(self._bases)
        self._reload_producer_state(now_ms)

    def _count_recovery(self, _seg: LogSegment) -> None:
        self.recovered_segments += 1

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def __repr__(self) -> str:
        return (f"PartitionLog({self.topic}-{self.partition}, start={self.log_start_offset}, "
                f"end={self.log_end_offset}, hw={self.high_watermark})")  # fmt: skip

    # --- simple views --------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def generation(self) -> int:
        """How often the log was truncated or reloaded: bytes of a segment file seen at one
        generation are still there, unchanged, while it stays the same."""
        return self._generation

    @property
    def last_stable_offset(self) -> int:
        """Below it every transaction is decided: the first offset of the oldest open
        transaction, capped by the high watermark (read_committed consumers stop here)."""
        hw = self.high_watermark
        first = self.producer_state.first_undecided_offset()
        return hw if first is None or first > hw else first

    @property
    def latest_epoch(self) -> int:
        return self.epochs.latest_epoch

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._active

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def epoch_for_offset(self, offset: int) -> int:
        """Leader epoch that wrote ``offset`` (-1 if unknown), for ListOffsets responses."""
        return self.epochs.epoch_for_offset(offset)

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (largest epoch <= ``epoch``, end offset of that epoch)."""
        return self.epochs.end_offset_for(epoch, self.log_end_offset)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        self._active.index_interval = config.index_interval_bytes

    def _check_open(self) -> None:
        if self._offline is not None:
            raise KafkaStorageError(self._offline)
        if self._closed:
            raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")

    # --- append --------------------------------------------------------------------------------

    def append(
        self, records: Buf, *, leader_epoch: int, now_ms: int, origin: str = ORIGIN_CLIENT
    ) -> AppendResult:
        """Validate, assign offsets and write ``records`` (whole v2 batches) in one write.

        A writable ``records`` buffer is patched in place; nothing is written when any batch
        is invalid. ``origin`` is ``client`` (producers), ``coordinator`` (internal writes,
        control batches allowed) or ``replication`` (offsets and epochs kept as sent).
        An I/O failure raises KafkaStorageError and is reported to ``on_io_error`` (Kafka's
        LogDirFailureChannel); a write that failed half-way has been cut off again.
        """
        try:
            return self._append(records, leader_epoch, now_ms, origin)
        except (KafkaStorageError, OSError) as e:
            err = self._io_failed("Error while appending records to "
                                  f"{self.topic}-{self.partition} in dir {self.dir.parent}", e)
            if err is e:
                raise
            raise err from e

    def _io_failed(self, what: str, exc: BaseException) -> BaseException:
        """The error to raise for ``exc`` met while doing ``what``: an I/O failure is reported
        (the log dir goes offline, with one ERROR) and becomes a KafkaStorageError naming its
        cause; anything else is ``exc`` itself."""
        cause = io_cause(exc)
        if cause is None:
            return exc
        if self.on_io_error is not None:
            self.on_io_error(self, what, cause)
        else:
            _unreported.error(str(self.dir), "%s: %s", what, describe(cause))
        return KafkaStorageError(f"{what}: {describe(cause)}")

    def _append(self, records: Buf, leader_epoch: int, now_ms: int, origin: str) -> AppendResult:
        if self._closed:
            self._check_open()
        v = validate_append(
            records, next_offset=self.log_end_offset, leader_epoch=leader_epoch,
            now_ms=now_ms, config=self.config, origin=origin,
            partition=self.topic_partition,
        )  # fmt: skip
        pending = None
        if v.producers:  # idempotent/transactional batches: sequence and epoch checks
            dup, pending = self.producer_state.prepare(v.producers, v.data, origin)
            if dup is not None:
                return self._duplicate_result(dup)
        seg = self._active
        size = len(v.data)
        seg_size = seg.size
        if seg_size:  # non-empty: maybe roll first
            cfg = self.config
            if (
                seg_size > cfg.segment_bytes - size
                or self._time_to_roll(seg, now_ms, v.max_timestamp)
                or seg.indexes_full()
                or not seg.can_hold_offset(v.last_offset)
            ):
                seg = self._roll(v.first_offset)
        elif v.first_offset != seg.base_offset and seg.base_offset == self.log_end_offset:
            seg = self._replace_empty_active(v.first_offset)  # replicated data after a gap
        seg.append(v.data, v.metas)
        if self._next_file is None and not self._preparing and \
                seg.size >= self.config.segment_bytes >> 1:  # fmt: skip
            self._prepare_next_segment()
        latest = self.epochs.latest_epoch
        for e, o in v.epochs:
            if e > latest:
                self.epochs.note(e, o)
                latest = e
        leo = self.log_end_offset = v.last_offset + 1
        if pending is not None:
            self.producer_state.apply(pending)
            if isinstance(pending, PendingUpdate) and pending.completed:  # markers were appended
                self._index_aborted(seg, pending.completed)
        self.producer_state.map_end_offset = leo
        if self.hw_follows_leo:
            self.high_watermark = leo
        self._unflushed_messages += v.record_count
        flushed = None
        if self._unflushed_messages >= self.config.flush_messages:
            flushed = self._flush_messages_due(leo)
        if self.on_append is not None:
            self.on_append()
        return AppendResult(
            v.first_offset, v.last_offset, v.log_append_time, v.max_timestamp,
            self.log_start_offset, v.record_count, flushed=flushed,
        )  # fmt: skip

    def _duplicate_result(self, dup: BatchMetadata) -> AppendResult:
        """A retried batch already in the log: answer with the offsets it got the first time."""
        ts = dup[4]
        return AppendResult(
            dup[2], dup[3], ts if self.config.log_append_time else -1, ts,
            self.log_start_offset, 0, True,
        )  # fmt: skip

    def _time_to_roll(self, seg: LogSegment, now_ms: int, max_ts: int) -> bool:
        limit = self.config.max_segment_ms - seg.roll_jitter_ms
        rts = seg.rolling_timestamp()
        waited = max_ts - rts if rts is not None and rts >= 0 else now_ms - seg.created_ms
        return waited > limit

    def roll(self) -> LogSegment:
        """Start a new segment at the log end offset (no-op when the active one is empty)."""
        self._check_open()
        return self._roll(self.log_end_offset)

    def _roll(self, base: int) -> LogSegment:
        old = self._active
        if old.size == 0:
            return old
        old.seal(persist=False)  # its index tails are written by the flush started below
        if old not in self._rolled_unflushed:  # (a roll that failed half-way is retried)
            self._rolled_unflushed.append(old)
        seg = self._add_segment(base)
        ps = self.producer_state
        ps.map_end_offset = max(ps.map_end_offset, base)
        ps.snapshot_later()  # written and fsynced with the rolled segment
        # as Kafka's roll schedules flushUptoOffsetExclusive; without an event loop (tests,
        # tools) the files are written now and fsynced by the next flush
        if self._start_flush(False) is None:
            old.persist_indexes()
            ps.settle(sync=False)
        return seg

    def _prepare_next_segment(self) -> None:
        """Create the next segment's empty log file in a worker thread, so the roll renames
        it instead of creating a file on the event loop (no loop: the roll creates it)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        path = os.path.join(self.dir, NEXT_SEGMENT_FILE)
        self._preparing = True

        def work() -> None:  # in a worker thread
            error: OSError | None = None
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            except OSError as e:
                error = e
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the broker
                loop.call_soon_threadsafe(self._next_segment_ready, path, error)

        loop.run_in_executor(None, work)

    def _next_segment_ready(self, path: str, error: OSError | None) -> None:
        if os.path.dirname(path) != str(self.dir):
            return  # begun before the log moved to another log dir (`relocate`): not ours now
        self._preparing = False
        if error is not None:
            log.warning("cannot create the next segment file of %s-%d ahead of the roll (the "
                        "roll creates it): %s", self.topic, self.partition, error)  # fmt: skip
            self._next_file = ""
        elif self._closed:
            with contextlib.suppress(OSError):
                os.unlink(path)
        else:
            self._next_file = path

    def _new_segment(
        self, base: int, *, fresh: bool = False, prepared: str | None = None
    ) -> LogSegment:
        """An empty segment at ``base`` (``fresh``: in a new directory, nothing to replace;
        ``prepared``: its log file, created ahead of time)."""
        cfg = self.config
        return LogSegment(
            self.dir, base, self._budget, segment_index_bytes=cfg.segment_index_bytes,
            index_interval_bytes=cfg.index_interval_bytes,
            segment_jitter_ms=cfg.segment_jitter_ms, create=True, fresh=fresh,
            prepared=prepared, now_ms=self._now_ms(),
        )  # fmt: skip

    def _add_segment(self, base: int) -> LogSegment:
        prepared, self._next_file = self._next_file or None, None
        seg = self._new_segment(base, prepared=prepared)
        self._segments.append(seg)
        self._bases.append(base)
        self._active = seg
        return seg

    def _replace_empty_active(self, base: int) -> LogSegment:
        old = self._segments.pop()
        self._bases.pop()
        old.close()
        for p in (old.log_path, old.index_path, old.timeindex_path):
            p.unlink(missing_ok=True)
        if not self._segments:
            self.log_start_offset = base
        return self._add_segment(base)

    # --- read ----------------------------------------------------------------------------------

    def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches from the segment holding ``offset``, up to ``max_bytes`` (at least one
        batch when ``min_one_batch``), never past ``max_offset`` (default: high watermark).

        A damaged batch on the way raises ``CorruptSegmentError`` (CORRUPT_MESSAGE), logged
        as an ERROR once per damaged position."""
        try:
            return self._read(offset, max_bytes, max_offset, min_one_batch)
        except CorruptSegmentError as e:
            if str(e) not in self._reported_damage:
                self._reported_damage.add(str(e))
                log.error("cannot read offset %d of %s-%d: %s", offset, self.topic,
                          self.partition, e)  # fmt: skip
            raise
        except (KafkaStorageError, OSError) as e:
            err = self._io_failed(f"Error while reading offset {offset} of {self.topic}-"
                                  f"{self.partition} in dir {self.dir.parent}", e)  # fmt: skip
            if err is e:
                raise
            raise err from e

    def _read(
        self, offset: int, max_bytes: int, max_offset: int | None, min_one_batch: bool
    ) -> ReadResult:
        if self._closed:
            self._check_open()
        lso, leo, hw = self.log_start_offset, self.log_end_offset, self.high_watermark
        if offset < lso or offset > leo:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{lso}, {leo}] of {self.topic}-{self.partition}"
            )
        limit = hw if max_offset is None else min(max_offset, leo)
        if offset >= limit:
            return ReadResult(None, hw, lso, leo)
        segs = self._segments
        i = max(0, bisect_right(self._bases, offset) - 1)
        while i < len(segs):
            seg = segs[i]
            if seg.base_offset >= limit:
                break
            found = seg.translate(offset)
            if found is None:
                i += 1
                continue
            pos, h = found
            if h.base_offset >= limit:
                break
            if limit >= leo or (i + 1 < len(segs) and limit >= segs[i + 1].base_offset):
                max_pos = seg.size
            else:
                end = seg.translate(limit, pos)
                max_pos = end[0] if end is not None else seg.size
            first_end = pos + LOG_OVERHEAD + h.length
            cap = min(max_pos, pos + max(max_bytes, 0))
            end_pos = seg.batch_end_within(pos, cap) if cap >= first_end else pos
            if end_pos == pos:
                if not min_one_batch or first_end > max_pos:
                    break
                end_pos = first_end
            return ReadResult(FileSlice(seg.file, pos, end_pos - pos), hw, lso, leo)
        return ReadResult(None, hw, lso, leo)

    # --- timestamps ----------------------------------------------------------------------------

    def _read_batch(self, seg: LogSegment, pos: int, size: int) -> bytes:
        return FileSlice(seg.file, pos, size).read_bytes()

    def offset_for_timestamp(
        self, ts: int, *, max_offset: int | None = None
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with timestamp >= ``ts`` (ListOffsets).

        Uses the time index to find the batch, then decodes that one batch for the exact
        record as Kafka does. None when no such record is below ``max_offset`` (default HW).
        """
        limit = self.high_watermark if max_offset is None else max_offset
        lso = self.log_start_offset
        for seg in self._segments:
            if seg.max_timestamp < ts:
                continue
            _t, t_off = seg.time_index.lookup(ts)
            start = max(t_off, lso, seg.base_offset)
            pos = seg.offset_index.lookup(start)[1]
            for p, h in seg.iter_headers(pos):
                if h.base_offset >= limit:
                    return None
                if h.max_timestamp < ts or h.base_offset + h.last_offset_delta < lso:
                    continue
                found = self._record_at_or_after(seg, p, h, ts, lso)
                if found is not None:
                    return found if found[0] < limit else None
        return None

    def _record_at_or_after(
        self, seg: LogSegment, pos: int, h: BatchHeader, ts: int, min_offset: int
    ) -> tuple[int, int] | None:
        if h.attributes & TIMESTAMP_TYPE_MASK:
            return max(h.base_offset, min_offset), h.max_timestamp
        try:
            recs = decode_records(self._read_batch(seg, pos, h.size))
        except CorruptRecordError as e:
            raise KafkaStorageError(f"corrupt batch in {seg.log_path} at {pos}: {e}") from e
        for r in recs:
            if r.timestamp >= ts and r.offset >= min_offset:
                return r.offset, r.timestamp
        return None

    def batch_timestamp_at(self, offset: int) -> int | None:
        """The timestamp of the batch holding ``offset`` (its first record's, or the append
        time), from the batch header alone: consumer lag in seconds is estimated from it.
        None when the offset is not below the high watermark."""
        if not self.log_start_offset <= offset < self.high_watermark:
            return None
        found = self.read(offset, 1).slice
        if found is None or found.length < RECORD_BATCH_OVERHEAD:
            return None
        head = FileSlice(found.file, found.position, RECORD_BATCH_OVERHEAD).read_bytes()
        h = read_header(head)
        return h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else h.base_timestamp

    def max_timestamp_offset(self, *, max_offset: int | None = None) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3)."""
        best, best_ts = None, -1
        for seg in self._segments:
            if seg.max_timestamp > best_ts:
                best, best_ts = seg, seg.max_timestamp
        if best is None:
            return None
        found = best.translate(best.offset_of_max_timestamp)
        if found is None:
            return None
        pos, h = found
        result = self._record_at_or_after(best, pos, h, best_ts, self.log_start_offset)
        limit = self.high_watermark if max_offset is None else max_offset
        if result is None or result[0] >= limit:
            return None
        return result

    # --- deletion, truncation, retention -------------------------------------------------------

    def _schedule_delete(self, segs: list[LogSegment]) -> None:
        due = self._now_ms() + self.config.file_delete_delay_ms
        for seg in segs:
            if seg in self._rolled_unflushed:
                self._rolled_unflushed.remove(seg)
            entry = (due, seg.rename_for_deletion(), seg)
            if self.config.file_delete_delay_ms <= 0:
                self._remove_deleted([entry])
            else:
                self._pending_deletes.append(entry)

    def _remove_deleted(
        self, entries: list[tuple[int, list[Path], LogSegment]], *, now: bool = False
    ) -> None:
        """Close the segments and unlink their ``*.deleted`` files: in a worker thread when an
        event loop runs (Kafka deletes on its scheduler threads too), else (or ``now``) here."""
        paths = []
        for _due, seg_paths, seg in entries:
            seg.close()  # a pinned file stays open until its reader unpins it
            paths.extend(seg_paths)
        if not paths:
            return
        try:
            loop = None if now else asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            _unlink_all(paths)
            return

        def work() -> None:  # in a worker thread
            try:
                _unlink_all(paths)
            except OSError as e:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._unlink_failed, paths, e)

        loop.run_in_executor(None, work)

    def _unlink_failed(self, paths: list[Path], error: OSError) -> None:
        self._io_failed(f"Error while deleting {', '.join(map(str, paths))} of {self.topic}-"
                        f"{self.partition} in dir {self.dir.parent}", error)  # fmt: skip

    def purge_deleted(self, now_ms: int | None = None) -> None:
        """Remove ``*.deleted`` files whose delay (file.delete.delay.ms) has passed."""
        if not self._pending_deletes:
            return
        now = self._now_ms() if now_ms is None else now_ms
        keep: list[tuple[int, list[Path], LogSegment]] = []
        due: list[tuple[int, list[Path], LogSegment]] = []
        for entry in self._pending_deletes:
            (due if entry[0] <= now else keep).append(entry)
        self._pending_deletes = keep
        self._remove_deleted(due)

    def _delete_prefix(self, count: int) -> int:
        """Delete the ``count`` oldest segments (rolling first if that is all of them)."""
        if count <= 0:
            return 0
        if count >= len(self._segments):
            self._roll(self.log_end_offset)
            count = min(count, len(self._segments) - 1)
        doomed = self._segments[:count]
        del self._segments[:count]
        del self._bases[:count]
        freed = sum(s.size for s in doomed)
        self._schedule_delete(doomed)
        first = self._segments[0].base_offset
        if first > self.log_start_offset:
            self.log_start_offset = first
            self.epochs.truncate_from_start(first)
        self.producer_state.delete_snapshots_before(first)
        self._txn_bases = [b for b in self._txn_bases if b >= first]
        return freed

    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset to ``offset`` (-1: the HW); returns it."""
        self._check_open()
        if offset == -1:
            offset = self.high_watermark
        if offset < 0 or offset > self.high_watermark:
            raise OffsetOutOfRangeError(
                f"cannot delete records before {offset}: high watermark is {self.high_watermark}"
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.epochs.truncate_from_start(offset)
            self._delete_prefix(self._count_below_start())
        return self.log_start_offset

    def _count_below_start(self) -> int:
        """Segments wholly below the log start offset (the next segment starts at or before it)."""
        bases = self._bases
        n = 0
        while n + 1 < len(bases) and bases[n + 1] <= self.log_start_offset:
            n += 1
        return n

    def _deletable(self, predicate: Callable[[LogSegment], bool]) -> int:
        """How many oldest segments satisfy ``predicate`` without passing the HW."""
        segs = self._segments
        hw = self.high_watermark
        n = 0
        for i, seg in enumerate(segs):
            last = i + 1 == len(segs)
            upper = self.log_end_offset if last else segs[i + 1].base_offset
            if hw < upper or (last and seg.size == 0) or not predicate(seg):
                break
            n += 1
        return n

    def apply_retention(self, now_ms: int) -> int:
        """Delete segments past retention.ms / retention.bytes / the log start offset.

        A segment's age is measured from its largest timestamp; an expired active segment is
        rolled and then deleted. Never deletes data at or above the high watermark. Returns
        the bytes deleted.
        """
        self._check_open()
        self.purge_deleted(now_ms)
        cfg = self.config
        freed = 0
        if cfg.delete:
            if cfg.retention_ms >= 0:
                rms = cfg.retention_ms
                freed += self._delete_prefix(
                    self._deletable(lambda s: now_ms - s.largest_timestamp() > rms)
                )
            if cfg.retention_bytes >= 0:
                diff = self.size_bytes() - cfg.retention_bytes
                if diff > 0:

                    def fits(s: LogSegment) -> bool:
                        nonlocal diff
                        if diff - s.size >= 0:
                            diff -= s.size
                            return True
                        return False

                    freed += self._delete_prefix(self._deletable(fits))
        freed += self._delete_prefix(self._count_below_start())
        return freed

    def truncate_to(self, offset: int) -> None:
        """Cut the log so that ``offset`` is the new log end (replication: follower truncation).

        An ``offset`` at or past the log end cuts no record but still drops the leader epochs
        that start at the log end: a broker that became leader and was replaced before it
        wrote anything holds such an epoch, which its new leader never saw. Kept, the follower
        would ask with it for ever and never catch up (issue 28)."""
        self._check_open()
        if offset >= self.log_end_offset:
            self.epochs.truncate_from_end(self.log_end_offset)
            return
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        if offset < self._segments[0].base_offset or offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self._generation += 1
        doomed = [s for s in self._segments if s.base_offset > offset]
        if doomed:
            keep = len(self._segments) - len(doomed)
            del self._segments[keep:]
            del self._bases[keep:]
            self._schedule_delete(doomed)
        seg = self._segments[-1]
        self._active = seg
        seg.truncate_to(offset)
        seg.index_interval = self.config.index_interval_bytes
        if seg in self._rolled_unflushed:
            self._rolled_unflushed.remove(seg)
        leo = self.log_end_offset = seg.next_offset
        self.high_watermark = min(self.high_watermark, leo)
        self.recovery_point = min(self.recovery_point, leo)
        self.epochs.truncate_from_end(leo)
        self._reload_producer_state(self._now_ms())

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at ``offset``."""
        self._check_open()
        self._generation += 1
        doomed = list(self._segments)
        self._segments.clear()
        self._bases.clear()
        self._rolled_unflushed.clear()
        self._schedule_delete(doomed)
        self._add_segment(offset)
        self.log_end_offset = self.log_start_offset = self.high_watermark = offset
        self.recovery_point = offset
        self.epochs.clear()
        self.producer_state.truncate_fully_and_start_at(offset)
        self._txn_bases = []

    # --- producer state ------------------------------------------------------------------------

    def _reload_producer_state(self, now_ms: int) -> None:
        """Load the latest snapshot at or below the log end and replay the batch headers after it
        (Kafka's rebuildProducerState). Only control batches are read beyond their header."""
        ps = self.producer_state
        ps.truncate_and_reload(self.log_start_offset, self.log_end_offset, now_ms)
        start, leo = ps.map_end_offset, self.log_end_offset
        if start >= leo:
            ps.map_end_offset = leo
            return
        prepare, apply = ps.prepare, ps.apply
        for i, seg in enumerate(self._segments):
            nxt = self._segments[i + 1].base_offset if i + 1 < len(self._segments) else leo
            if nxt <= start:
                continue
            pos = seg.offset_index.lookup(start)[1] if start > seg.base_offset else 0
            for p, h in self._replay_headers(seg, pos):
                if h.base_offset + h.last_offset_delta < start or h.producer_id < 0:
                    continue
                data = b""
                if h.attributes & CONTROL_MASK:
                    data = self._read_batch(seg, p, h.size)
                batch = (h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta,
                         h.attributes, h.base_offset, h.max_timestamp, 0, h.size)  # fmt: skip
                _dup, pending = prepare([batch], data, ORIGIN_REPLICATION)
                if pending is None:
                    continue
                apply(pending)
                if isinstance(pending, PendingUpdate) and pending.completed:
                    self._index_aborted(seg, pending.completed)
        ps.map_end_offset = leo
        if start < self._active.base_offset:
            # Save the replay, or a later load would repeat it over whole segments. (fsynced
            # at the next flush: a snapshot torn by a crash fails its CRC and is rebuilt.) A
            # replay within the active segment is left to the next roll or close to save: a
            # crash before then re-reads that segment anyway.
            ps.take_snapshot(sync=False)

    def _rebuild_epochs(self) -> None:
        """Leader epochs from the batch headers, as leader-epoch-checkpoint was missing or
        unreadable. Epochs never decrease along a log, so a segment whose first batch has the
        epoch of the next segment's first batch holds no change and is not walked."""
        firsts = [next((h for _p, h in self._replay_headers(s, 0)), None) for s in self._segments]
        entries: list[tuple[int, int]] = []

        def note(h: BatchHeader) -> None:
            e = h.partition_leader_epoch
            if e >= 0 and (not entries or e > entries[-1][0]):
                entries.append((e, h.base_offset))

        for i, seg in enumerate(self._segments):
            first = firsts[i]
            if first is None:
                continue
            nxt = firsts[i + 1] if i + 1 < len(firsts) else None
            if nxt is not None and nxt.partition_leader_epoch == first.partition_leader_epoch:
                note(first)
                continue
            for _p, h in self._replay_headers(seg, 0):
                note(h)
        log.info("rebuilt the leader epochs of %s-%d from its batches: %s", self.topic,
                 self.partition, entries)  # fmt: skip
        self.epochs.replace(entries)

    def _replay_headers(self, seg: LogSegment, pos: int) -> Iterator[tuple[int, BatchHeader]]:
        """The segment's batch headers from ``pos``, stopping at a damaged batch with an ERROR
        (the load goes on: the records stay readable up to it, and a fetch of it fails)."""
        try:
            yield from seg.iter_headers(pos)
        except CorruptSegmentError as e:
            log.error("producer state of %s-%d rebuilt without the batches after a damaged one "
                      "(idempotent producers of them may be fenced or see sequence errors): %s",
                      self.topic, self.partition, e)  # fmt: skip

    # --- transactions --------------------------------------------------------------------------

    def _index_aborted(self, seg: LogSegment, completed: list[CompletedTxn]) -> None:
        """Record aborted transactions in the transaction index of the segment holding their
        markers, with the LSO right after each (Kafka's updateTxnIndex). Idempotent, so the
        replay after a crash can run over markers already indexed."""
        ongoing = self.producer_state.ongoing_txns
        for pid, first, last, aborted in completed:
            if not aborted:
                continue
            others = [f for f, p in ongoing.items() if p != pid]
            lso = min(others) if others else last + 1
            seg.txn_index.append(AbortedTxn(pid, first, last, lso))
            self._note_txn_index(seg.base_offset)

    def _find_txn_indexes(self) -> list[int]:
        try:
            names = os.listdir(self.dir)
        except OSError:
            return []
        bases = set(self._bases)
        found = (int(n[:20]) for n in names
                 if n.endswith(TXN_INDEX_SUFFIX) and len(n) == 20 + len(TXN_INDEX_SUFFIX)
                 and n[:20].isdigit())  # fmt: skip
        return sorted(b for b in found if b in bases)

    def _note_txn_index(self, base: int) -> None:
        i = bisect_left(self._txn_bases, base)
        if i == len(self._txn_bases) or self._txn_bases[i] != base:
            insort(self._txn_bases, base)

    def _txn_segments_from(self, fetch_offset: int) -> list[LogSegment]:
        """Segments that may list aborted transactions relevant from `fetch_offset` on."""
        if not self._txn_bases:
            return []
        bases = self._bases
        start = bases[max(0, bisect_right(bases, fetch_offset) - 1)]
        out = []
        for base in self._txn_bases[bisect_left(self._txn_bases, start):]:
            j = bisect_left(bases, base)
            if j < len(bases) and bases[j] == base:
                out.append(self._segments[j])
        return out

    def aborted_transactions(self, fetch_offset: int, upper: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of the aborted transactions overlapping
        [fetch_offset, upper): what a read_committed fetch of that range reports."""
        out: list[tuple[int, int]] = []
        for seg in self._txn_segments_from(fetch_offset):
            found, complete = seg.txn_index.collect(fetch_offset, upper)
            out.extend((e.producer_id, e.first_offset) for e in found)
            if complete:
                break
        return out

    def aborted_transactions_in(self, fetch_offset: int, data: FileSlice) -> list[tuple[int, int]]:
        """The aborted transactions a read_committed fetch that returned `data` (read from
        `fetch_offset`) reports; free when the log holds no aborted transaction."""
        if not self._txn_segments_from(fetch_offset):
            return []
        return self.aborted_transactions(fetch_offset, self.offset_after(fetch_offset, data))

    def offset_after(self, fetch_offset: int, data: FileSlice) -> int:
        """The first offset after the batches of a slice returned by ``read(fetch_offset)``
        (the upper bound of the aborted transactions a read_committed fetch must report)."""
        segs = self._segments
        i = max(0, bisect_right(self._bases, fetch_offset) - 1)
        while i < len(segs) and segs[i].file is not data.file:
            i += 1
        if i == len(segs):
            return self.log_end_offset
        seg = segs[i]
        end = data.position + data.length
        if end >= seg.size:
            return segs[i + 1].base_offset if i + 1 < len(segs) else self.log_end_offset
        try:
            head = os.pread(seg.file.fileno(), 8, end)
        except OSError as e:
            raise KafkaStorageError(f"cannot read {seg.log_path}: {e}") from e
        return int.from_bytes(head, "big", signed=True) if len(head) == 8 \
            else self.log_end_offset

    def remove_expired_producers(self, now_ms: int) -> int:
        """Forget producer ids idle longer than producer.id.expiration.ms."""
        return self.producer_state.remove_expired(now_ms)

    # --- cleaning (log compaction) -------------------------------------------------------------

    def replace_segments(self, base: int, old: list[LogSegment], *,
                         sync_dir: bool = True) -> LogSegment:
        """Swap the cleaned segment ``<base>.*.cleaned`` in for ``old`` (consecutive, closed).

        Kafka's protocol, so that a crash at any step leaves a consistent log: the cleaned files
        are renamed ``.swap`` (the log file last: a ``.log.swap`` means the new segment is
        complete), the old segments are renamed ``.deleted``, then the swap files take their
        final names. Recovery completes a swap it finds and deletes ``.cleaned`` leftovers.
        The renames go with the switch of the segment list (a reader must never meet a name
        that is not there yet); the directory's fsync may be left to the caller
        (``sync_dir=False``: the cleaner does it in a worker thread, `sync_directory`).
        """
        self._check_open()
        segs = self._segments
        try:
            i = next(j for j, s in enumerate(segs) if s is old[0])
        except StopIteration:
            raise KafkaStorageError("segments to replace are no longer in the log") from None
        if segs[i : i + len(old)] != old or (i + len(old)) >= len(segs) or old[0].base_offset != base:
            raise KafkaStorageError("segments to replace are not consecutive closed segments")
        stem = str(self.dir / segment_name(base))
        suffixes = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, LOG_SUFFIX)
        try:
            for suf in suffixes:
                os.replace(stem + suf + CLEANED_SUFFIX, stem + suf + SWAP_SUFFIX)
        except OSError as e:
            raise KafkaStorageError(f"cannot swap in cleaned segment {stem}: {e}") from e
        aborted = [e for s in old for e in s.txn_index.entries]
        del segs[i : i + len(old)]
        del self._bases[i : i + len(old)]
        self._schedule_delete(old)
        for seg in old[1:]:  # as Kafka: snapshots of segments that no longer exist go too
            self.producer_state.delete_snapshot(seg.base_offset)
        try:
            for suf in suffixes:
                os.replace(stem + suf + SWAP_SUFFIX, stem + suf)
            if sync_dir:
                sync_directory(self.dir)
        except OSError as e:  # the swap files stay: the next load completes the swap
            raise KafkaStorageError(f"cannot rename swapped segment {stem}: {e}") from e
        cfg = self.config
        new = LogSegment(
            self.dir, base, self._budget, segment_index_bytes=cfg.segment_index_bytes,
            index_interval_bytes=cfg.index_interval_bytes,
            segment_jitter_ms=cfg.segment_jitter_ms, now_ms=self._now_ms(),
        )  # fmt: skip
        if aborted:  # offsets do not change, so the replaced segments' entries stay valid
            new.txn_index.replace(aborted)
            self._note_txn_index(base)
        segs.insert(i, new)
        self._bases.insert(i, base)
        return new

    # --- flush and close -----------------------------------------------------------------------

    def flush(self, *, sync: bool = True) -> None:
        """fsync everything written so far; the recovery point moves to the log end.

        Blocks on the fsyncs (tests, shutdown, the metadata log); a broker serving requests
        uses ``flush_in_background``. ``sync=False`` writes indexes and checkpoints but leaves
        the fsyncs to the caller, who must sync the whole filesystem before it records the new
        recovery point (a clean shutdown does, once for every log)."""
        self._check_open()
        self._cover_inflight(sync)
        for seg in self._rolled_unflushed:
            seg.flush(sync=sync)
        self._rolled_unflushed.clear()
        self._active.flush(sync=sync)
        self.producer_state.settle(sync=sync)
        if sync:
            self.producer_state.sync_snapshots()
        self.epochs.sync(fsync=sync)
        self.recovery_point = self.log_end_offset
        self._unflushed_messages = 0
        self._last_flush_ms = self._now_ms()

    def _cover_inflight(self, sync: bool) -> None:
        """A blocking flush claims what a background one has not synced yet: do its work too
        (its epochs as a newer version, so the late background write is skipped)."""
        job = self._inflight
        if job is None:
            return
        self._write_taken_tails(job)
        if job.epochs is not None:
            self.epochs.write(fsync=sync)
        if sync:
            for f, fd in job.files:
                try:
                    files.fsync(fd)
                except OSError as e:
                    raise KafkaStorageError(f"fsync of {f.path} failed: {e}") from e
            for t in job.txn_indexes:
                fsync_paths([t.path])
            fsync_paths(job.snapshots)

    @staticmethod
    def _write_taken_tails(job: FlushJob) -> None:
        """Write here the index tails a background flush has taken (if it has not written
        them yet: it then skips them; a retired index is left alone)."""
        for t in job.tails:
            if t.version == t.index._version:
                try:
                    t.index.persist()
                except OSError as e:
                    raise KafkaStorageError(f"cannot write index {t.index.path}: {e}") from e

    def flush_rolled(self) -> None:
        """fsync segments rolled since the last flush (Kafka flushes them after a roll)."""
        if (self._rolled_unflushed or self._inflight is not None) and not self._closed:
            self._cover_inflight(True)
            for seg in self._rolled_unflushed:
                seg.flush()
            self._rolled_unflushed.clear()
            self.producer_state.sync_snapshots()
            self.epochs.sync()
            self.recovery_point = max(self.recovery_point, self._active.base_offset)

    def flush_if_due(self, now_ms: int) -> None:
        if self._closed:
            return
        if self._unflushed_messages and now_ms - self._last_flush_ms >= self.config.flush_ms:
            self.flush()
        else:
            self.flush_rolled()
        self.purge_deleted(now_ms)

    # --- background flush ----------------------------------------------------------------------

    @property
    def flushing(self) -> bool:
        """A background flush is running."""
        return self._inflight is not None

    def flush_if_due_in_background(self, now_ms: int) -> asyncio.Future[None] | None:
        """The periodic flush without blocking: rolled segments, and everything once
        log.flush.interval.ms has passed. Returns the flush's future (None: nothing to do)."""
        if self._closed:
            return None
        full = bool(self._unflushed_messages) and \
            now_ms - self._last_flush_ms >= self.config.flush_ms
        done = self._start_flush(full)
        self.purge_deleted(now_ms)
        return None if done is None else asyncio.shield(done)

    def flush_in_background(self, *, full: bool = False) -> asyncio.Future[None] | None:
        """Start syncing the rolled segments (``full``: everything up to the log end) in a
        worker thread; the future is done when the recovery point has moved (never fails:
        an error is logged and the work is left for the next flush). Only one runs at a time:
        asked again meanwhile, the running one's future is returned and the next starts when
        it ends. None: nothing to flush, or no running event loop (a blocking caller flushes
        with ``flush``). Cancelling the returned future does not cancel the flush."""
        done = self._start_flush(full)
        return None if done is None else asyncio.shield(done)

    def _start_flush(self, full: bool) -> asyncio.Future[None] | None:
        if self._closed:
            return None
        if self._inflight_done is not None:
            self._want_full_flush = self._want_full_flush or full
            return self._inflight_done
        if not self._rolled_unflushed and not (full and self._unflushed_messages):
            return None  # nothing to do (as _begin_flush), found without a syscall: the
            # periodic flush asks every log every second
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return None
        job = self._begin_flush(full)
        if job is None:
            return None
        done = self._inflight_done = loop.create_future()

        def work() -> None:  # in the worker thread
            error: BaseException | None = None
            try:
                job.sync()
            except BaseException as e:
                error = e
            with contextlib.suppress(RuntimeError):  # the loop is gone: so is the broker
                loop.call_soon_threadsafe(self._end_flush, job, error)

        loop.run_in_executor(None, work)
        return done

    def _flush_messages_due(self, leo: int) -> asyncio.Future[None] | None:
        """log.flush.interval.messages reached: flush everything, in the background when a
        loop runs. The future is done once ``leo`` is durable."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return None
        done = self._start_flush(True)
        return None if done is None else self._durable_after(done, leo)

    def _durable_after(self, running: asyncio.Future[None], offset: int) -> asyncio.Future[None]:
        """A future done once the recovery point reaches ``offset`` (a flush that started
        before it was written is followed by the next one); it fails with KafkaStorageError
        when the flush failed."""
        waiter = running.get_loop().create_future()

        def check(f: asyncio.Future[None]) -> None:
            if waiter.done():
                return
            nxt = self._inflight_done
            if self.recovery_point >= offset or (self._closed and self._offline is None):
                waiter.set_result(None)
            elif nxt is None or nxt is f:
                waiter.set_exception(KafkaStorageError(
                    f"flush of {self.topic}-{self.partition} up to offset {offset} failed"))
            else:
                nxt.add_done_callback(check)

        running.add_done_callback(check)
        return waiter

    def _begin_flush(self, full: bool) -> FlushJob | None:
        """Capture on the loop what a background flush syncs (None: nothing)."""
        rolled = self._rolled_unflushed
        if not rolled and not (full and self._unflushed_messages):
            return None
        segs = [*rolled, self._active] if full else list(rolled)
        upto = self.log_end_offset if full else self._active.base_offset
        pinned: list[tuple[SegmentFile, int]] = []
        txns: list[TransactionIndex] = []
        tails: list[TailWrite] = []
        try:
            for seg in segs:
                if not seg.file.created:  # never written: no file yet
                    continue
                tails.extend(seg.take_index_tails())  # bytes now, written by the worker
                seg.file.pin()
                pinned.append((seg.file, seg.file.fileno()))
                txn = seg._txn  # only a loaded transaction index can have unsynced appends
                if txn is not None and txn._dirty:
                    txn._dirty = False
                    txns.append(txn)
        except BaseException:
            for f, _fd in pinned:
                f.unpin()
            for t in txns:
                t._dirty = True
            for w in tails:
                w.index.untake(w)
            raise
        ps = self.producer_state
        job = FlushJob(
            pinned, tails, ps.pending_writes(), ps, txns, ps.take_unsynced(),
            self.epochs.take_dirty(), upto, self._generation, list(rolled),
            self._unflushed_messages if full else 0, self.epochs,
        )  # fmt: skip
        rolled.clear()
        if full:
            self._unflushed_messages = 0
            self._last_flush_ms = self._now_ms()
        self._inflight = job
        return job

    def _end_flush(self, job: FlushJob, error: BaseException | None) -> None:
        """Back on the loop: unpin, then move the recovery point, or requeue the work."""
        self._inflight = None
        done, self._inflight_done = self._inflight_done, None
        for f, _fd in job.files:
            f.unpin()
        if self._closed:
            pass  # closing synced (or syncfs'd) everything itself
        elif error is None:
            if job.generation == self._generation:  # no truncation while it ran
                self.recovery_point = max(self.recovery_point, min(job.upto, self.log_end_offset))
        else:
            self._requeue(job)
            log.error("flush of %s-%d failed; the recovery point stays at %d and the flush is "
                      "retried: %s", self.topic, self.partition, self.recovery_point, error)  # fmt: skip
            self._io_failed(f"Error while flushing {self.topic}-{self.partition} in dir "
                            f"{self.dir.parent}", error)  # a failing dir goes offline
        if done is not None and not done.done():
            done.set_result(None)
        if error is None and not self._closed and (self._rolled_unflushed or self._want_full_flush):
            full, self._want_full_flush = self._want_full_flush, False
            self._start_flush(full)

    def _requeue(self, job: FlushJob) -> None:
        live = set(map(id, self._segments))
        active = self._active
        self._rolled_unflushed[:0] = [
            s for s in job.rolled if id(s) in live and s is not active
        ]  # fmt: skip
        for t in job.txn_indexes:
            t._dirty = True
        for w in job.tails:  # (snapshot writes not done stay pending by themselves)
            w.index.untake(w)
        self.producer_state.requeue(job.snapshots)
        if job.epochs is not None:
            self.epochs.mark_dirty()
        self._unflushed_messages += job.messages

    def discard(self) -> None:
        """Close the files and write nothing: the log's directory is being deleted (indexes,
        the leader-epoch checkpoint and a producer snapshot written now would only be removed
        with it, and a topic of 1,000 partitions would write 3,000 files on the event loop)."""
        if self._closed:
            return
        self._closed = True
        for seg in self._segments:
            seg.close()
        for _due, _paths, seg in self._pending_deletes:
            seg.close()  # their files go with the directory
        self._pending_deletes.clear()
        self._next_file = None

    def close(self, *, sync: bool = True) -> None:
        """Write indexes (with the active segment's final time-index entry) and close files;
        ``sync=False`` as for ``flush``."""
        if self._closed:
            return
        try:
            if self._inflight is not None:
                self._write_taken_tails(self._inflight)
            for seg in self._rolled_unflushed:
                seg.persist_indexes()
            self._active.seal()
            self.epochs.sync(fsync=sync)
            ps = self.producer_state
            ps.settle(sync=False)  # roll snapshots a background flush has not written yet
            ps.map_end_offset = self.log_end_offset
            try:
                ps.take_snapshot(sync=sync)  # the next load starts here instead of replaying the log
            except Exception as e:  # the log is still consistent: a load replays instead
                log.warning("no producer snapshot for %s-%d: %s", self.topic, self.partition, e)
        finally:
            self._closed = True
            for seg in self._segments:
                seg.close()
            self._remove_deleted(self._pending_deletes, now=True)
            self._pending_deletes.clear()
            if self._next_file:
                with contextlib.suppress(OSError):
                    os.unlink(self._next_file)
                self._next_file = None

    # --- offline log dir -----------------------------------------------------------------------

    @property
    def offline(self) -> str | None:
        """Why the log's dir is offline (every request answers KAFKA_STORAGE_ERROR); None when
        it serves."""
        return self._offline

    def take_offline(self, reason: str) -> None:
        """Stop serving because the log dir failed: every call raises KafkaStorageError with
        ``reason``. Files are closed without writing anything (indexes, snapshots and epochs
        are rebuilt by ``reload`` from what is on disk, as after a crash)."""
        self._offline = reason
        self._closed = True
        for seg in self._segments:
            seg.close()
        for _due, _paths, seg in self._pending_deletes:
            seg.close()  # their *.deleted files are removed by the reload

    def reload(self) -> None:
        """Serve again after ``take_offline``: load the directory as start-up does after a crash
        (segments from the recovery point on are re-validated; a batch torn by a failed write is
        cut, saved aside and logged as an ERROR). The object stays the same, so every holder of
        it (partition manager, coordinators, replication) sees the reloaded log."""
        if self._inflight is not None:
            raise KafkaStorageError(f"{self.topic}-{self.partition} is still flushing")
        fresh = PartitionLog(
            self.dir, self.topic, self.partition, self.topic_id, self.config,
            budget=self._budget, clock=self._clock, clean_shutdown=False,
            recovery_point=self.recovery_point, log_start_offset=self.log_start_offset,
            high_watermark=self.high_watermark, hw_follows_leo=self.hw_follows_leo,
            producer_id_expiration_ms=self.producer_state.expiration_ms,
        )  # fmt: skip
        fresh._generation = self._generation + 1  # a flush captured before is not counted
        keep = {"on_append": self.on_append, "on_io_error": self.on_io_error}
        vars(self).update(vars(fresh))
        vars(self).update(keep)

    def relocate(self, dir: Path) -> None:
        """Serve again after ``close``, from ``dir``: a complete copy of this log's files,
        fsynced (`LogManager.alter_log_dir` moves logs between log dirs), or the log's own
        directory once its files are fsynced. Loaded as after a clean shutdown, so the recovery
        point is the log end. The object stays the same, as with ``reload``; should the load
        fail, it stays closed with ``dir`` as its directory (``reload`` then loads from there)."""
        if not self._closed or self._inflight is not None:
            raise KafkaStorageError(f"{self.topic}-{self.partition} must be closed to move it")
        self.dir = Path(dir)
        fresh = PartitionLog(
            self.dir, self.topic, self.partition, self.topic_id, self.config,
            budget=self._budget, clock=self._clock, clean_shutdown=True,
            log_start_offset=self.log_start_offset, high_watermark=self.high_watermark,
            hw_follows_leo=self.hw_follows_leo,
            producer_id_expiration_ms=self.producer_state.expiration_ms,
        )  # fmt: skip
        fresh._generation = self._generation + 1
        keep = {"on_append": self.on_append, "on_io_error": self.on_io_error}
        vars(self).update(vars(fresh))
        vars(self).update(keep)

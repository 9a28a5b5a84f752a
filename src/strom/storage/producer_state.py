"""Per-partition producer state: idempotent sequence checks, duplicate detection, epoch fencing.

Kafka's ProducerStateManager in miniature. For every producer id that wrote to the partition we
keep its epoch, the metadata of its last 5 batches (a producer has at most 5 in flight, so a
retry always matches one of them), the coordinator epoch of its last transaction marker and the
first offset of its open transaction (the seams transactions will use). Everything comes from
batch headers, so the produce path stays header-only; only control batches (transaction markers,
rare) are decoded.

State survives restarts through snapshot files beside the segments, ``<20-digit offset>.snapshot``,
in Kafka's layout (version 1, CRC32C, one 46-byte entry per producer). We may write up to five
entries per producer, oldest batch first: Kafka's reader keeps the last entry of a producer id, so
it sees exactly what it would have written itself, while we get all cached batches back. On load
the latest snapshot at or below the log end is read and the batch headers after it are replayed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
from bisect import bisect_right, insort
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeAlias

from crc32c import crc32c

from strom import record as R
from strom.protocol.errors import ErrorCode
from strom.record.buffers import Buf
from strom.storage import files
from strom.storage.errors import CorruptRecordError, StorageError
from strom.storage.files import fsync_paths
from strom.storage.validator import ORIGIN_CLIENT, ORIGIN_REPLICATION, ProducerBatch

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
DEFAULT_EXPIRATION_MS = 86400000  # producer.id.expiration.ms
INT32_MAX = 2147483647

_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_ENTRY = struct.Struct(">qhiqiqiq")  # pid, epoch, last seq, last offset, delta, ts, coord epoch, txn
_CRC_START = 6  # the CRC covers everything after version and crc


class OutOfOrderSequenceError(StorageError):
    error_code = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


class InvalidProducerEpochError(StorageError):
    error_code = ErrorCode.INVALID_PRODUCER_EPOCH


class InvalidTxnStateError(StorageError):
    error_code = ErrorCode.INVALID_TXN_STATE


class TransactionCoordinatorFencedError(StorageError):
    error_code = ErrorCode.TRANSACTION_COORDINATOR_FENCED


class CorruptSnapshotError(Exception):
    """A snapshot file that fails its CRC or layout check; it is deleted and skipped."""


def snapshot_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


@dataclass(slots=True)
class SnapshotWrite:
    """A snapshot taken on the event loop as bytes; a worker thread writes and fsyncs it."""

    path: Path
    data: bytes
    done: bool = False  # written, or dropped because its snapshot was deleted meanwhile


def increment_sequence(seq: int, inc: int) -> int:
    """Sequences wrap from INT32_MAX to 0 (Kafka's DefaultRecordBatch.incrementSequence)."""
    if seq > INT32_MAX - inc:
        return inc - (INT32_MAX - seq) - 1
    return seq + inc


def decrement_sequence(seq: int, dec: int) -> int:
    if seq < dec:
        return INT32_MAX - (dec - seq) + 1
    return seq - dec


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


# One batch: (first seq, last seq, first offset, last offset, max timestamp).
BatchMetadata = tuple[int, int, int, int, int]
FIRST_SEQ, LAST_SEQ, FIRST_OFFSET, LAST_OFFSET, TIMESTAMP = range(5)


class ProducerStateEntry:
    """What the partition knows about one producer id."""

    __slots__ = ("batches", "coordinator_epoch", "epoch", "last_timestamp", "producer_id",
                 "txn_first_offset")  # fmt: skip

    def __init__(
        self,
        producer_id: int,
        epoch: int = R.NO_PRODUCER_EPOCH,
        *,
        coordinator_epoch: int = -1,
        last_timestamp: int = R.NO_TIMESTAMP,
        txn_first_offset: int = -1,
        batches: list[BatchMetadata] | None = None,
    ) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.txn_first_offset = txn_first_offset  # -1: no open transaction
        self.batches: list[BatchMetadata] = batches if batches is not None else []

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(pid={self.producer_id}, epoch={self.epoch}, "
                f"batches={self.batches}, coordinator_epoch={self.coordinator_epoch}, "
                f"txn_first_offset={self.txn_first_offset})")  # fmt: skip

    @property
    def last_seq(self) -> int:
        return self.batches[-1][LAST_SEQ] if self.batches else R.NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1][LAST_OFFSET] if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        """The cached batch with exactly this sequence range under this epoch, if any."""
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b[FIRST_SEQ] == first_seq and b[LAST_SEQ] == last_seq:
                return b
        return None

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def _add(self, b: BatchMetadata) -> None:
        batches = self.batches
        if len(batches) >= NUM_BATCHES_TO_RETAIN:
            del batches[0]
        batches.append(b)

    def copy_header(self) -> ProducerStateEntry:
        """Same epoch, coordinator epoch, timestamp and open transaction; no batches."""
        return ProducerStateEntry(
            self.producer_id, self.epoch, coordinator_epoch=self.coordinator_epoch,
            last_timestamp=self.last_timestamp, txn_first_offset=self.txn_first_offset,
        )  # fmt: skip


class CompletedTxn(tuple[int, int, int, bool]):
    """(producer id, first offset, last offset (the marker), aborted): for the transaction index."""

    __slots__ = ()

    def __new__(
        cls, producer_id: int, first_offset: int, last_offset: int, aborted: bool
    ) -> CompletedTxn:
        return tuple.__new__(cls, (producer_id, first_offset, last_offset, aborted))


class _Update:
    """One producer's changes within one append (Kafka's ProducerAppendInfo)."""

    __slots__ = ("current", "entry", "origin", "pid")

    def __init__(self, pid: int, current: ProducerStateEntry | None, origin: str) -> None:
        self.pid = pid
        self.current = current
        self.origin = origin
        self.entry = current.copy_header() if current is not None else ProducerStateEntry(pid)

    def _check_epoch(self, epoch: int, offset: int) -> None:
        current = self.entry.epoch
        if epoch < current:
            msg = (f"epoch of producer {self.pid} at offset {offset} is {epoch}, older than the "
                   f"last seen epoch {current}")  # fmt: skip
            if self.origin == ORIGIN_REPLICATION:
                log.warning(msg)
            else:
                raise InvalidProducerEpochError(msg)

    def _check_sequence(self, epoch: int, first_seq: int, offset: int) -> None:
        entry, current = self.entry, self.current
        if epoch != entry.epoch:
            # a new epoch must start at 0, unless the producer is unknown here (KIP-360: its
            # state may have expired or been removed with the segments that held it)
            if first_seq != 0 and entry.epoch != R.NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"invalid sequence {first_seq} for the new epoch {epoch} of producer "
                    f"{self.pid} at offset {offset} (current epoch {entry.epoch})"
                )
            return
        if entry.batches:
            last = entry.batches[-1][LAST_SEQ]
        elif current is not None and epoch == current.epoch:
            last = current.last_seq
        else:
            last = R.NO_SEQUENCE
        cur_epoch = current.epoch if current is not None else R.NO_PRODUCER_EPOCH
        if cur_epoch != R.NO_PRODUCER_EPOCH and not _in_sequence(last, first_seq):
            raise OutOfOrderSequenceError(
                f"out of order sequence {first_seq} for producer {self.pid} at offset {offset}: "
                f"the last sequence is {last}"
            )

    def append_data(self, epoch: int, first_seq: int, last_seq: int, first_offset: int,
                    last_offset: int, timestamp: int, transactional: bool) -> bool:
        """Validate and record a data batch; True when it starts a transaction."""
        self._check_epoch(epoch, first_offset)
        if self.origin == ORIGIN_CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        entry = self.entry
        entry._set_epoch(epoch)
        entry._add((first_seq, last_seq, first_offset, last_offset, timestamp))
        entry.last_timestamp = timestamp
        if entry.txn_first_offset >= 0:
            if not transactional:
                raise InvalidTxnStateError(
                    f"non-transactional write from producer {self.pid} at offset {first_offset} "
                    "while its transaction is open"
                )
        elif transactional:
            entry.txn_first_offset = first_offset
            return True
        return False

    def append_marker(self, epoch: int, coordinator_epoch: int, offset: int, timestamp: int,
                      aborted: bool) -> CompletedTxn | None:
        """An end-transaction marker (control batch) closes the producer's transaction."""
        self._check_epoch(epoch, offset)
        entry = self.entry
        if entry.coordinator_epoch > coordinator_epoch:
            msg = (f"coordinator epoch {coordinator_epoch} of the marker for producer {self.pid} "
                   f"at offset {offset} is older than {entry.coordinator_epoch}")  # fmt: skip
            if self.origin == ORIGIN_REPLICATION:
                log.info(msg)
            else:
                raise TransactionCoordinatorFencedError(msg)
        done = None
        if entry.txn_first_offset >= 0:
            done = CompletedTxn(self.pid, entry.txn_first_offset, offset, aborted)
        entry._set_epoch(epoch)
        entry.coordinator_epoch = coordinator_epoch
        entry.txn_first_offset = -1
        entry.last_timestamp = timestamp
        return done


class PendingUpdate:
    """Validated producer changes of one append, applied after the write succeeds."""

    __slots__ = ("completed", "started", "updates")

    def __init__(self) -> None:
        self.updates: dict[int, _Update] = {}
        self.started: list[tuple[int, int]] = []  # (first offset, producer id) of new txns
        self.completed: list[CompletedTxn] = []


Pending: TypeAlias = PendingUpdate | tuple[int, int, BatchMetadata, bool]
"""What `ProducerStateManager.apply` takes: a `PendingUpdate`, or for the common single data
batch (pid, epoch, batch metadata, starts a transaction)."""


def _control_record(batch: Buf) -> tuple[int, int, int] | None:
    """(marker type, coordinator epoch, timestamp) of a control batch; None if it is empty."""
    try:
        recs = R.decode_records(batch)
        if not recs:
            return None
        kind, coord_epoch = R.parse_control_record(recs[0].key, recs[0].value)
    except R.CorruptRecordError as e:
        raise CorruptRecordError(f"invalid control batch: {e}") from e
    return kind, coord_epoch, recs[0].timestamp


class ProducerStateManager:
    """Producer ids of one partition, their snapshots, and the partition's open transactions."""

    def __init__(
        self, dir: Path, *, expiration_ms: int = DEFAULT_EXPIRATION_MS, fresh: bool = False
    ) -> None:
        """``fresh``: the partition's directory was just created, so it holds no snapshots."""
        self.dir = Path(dir)
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        self.ongoing_txns: dict[int, int] = {}  # first offset -> producer id (seam: LSO)
        self.map_end_offset = -1  # state reflects the log up to here (exclusive); -1: not loaded
        self.last_snap_offset = 0
        self._unsynced: list[Path] = []  # snapshots written without an fsync, for the next flush
        # snapshots taken at a roll whose file a background flush writes (see snapshot_later);
        # the lock orders those writes against deleting or settling them on the loop
        self._writes: list[SnapshotWrite] = []
        self._lock = threading.Lock()
        self.snapshots: list[int] = [] if fresh else self._list_snapshots()

    # --- files ---------------------------------------------------------------------------------

    def _list_snapshots(self) -> list[int]:
        out: list[int] = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        for name in names:
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if len(stem) == 20 and stem.isdigit():
                    out.append(int(stem))
        out.sort()
        return out

    def snapshot_path(self, offset: int) -> Path:
        return self.dir / snapshot_name(offset)

    def delete_snapshot(self, offset: int) -> None:
        self._delete_snapshot(offset)

    def _delete_snapshot(self, offset: int) -> None:
        i = bisect_right(self.snapshots, offset) - 1
        if i >= 0 and self.snapshots[i] == offset:
            del self.snapshots[i]
        path = self.snapshot_path(offset)
        if self._writes:
            with self._lock:  # a background write of it must not create it again
                for w in self._writes:
                    if w.path == path:
                        w.done = True
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)

    def latest_snapshot_offset(self) -> int | None:
        return self.snapshots[-1] if self.snapshots else None

    def delete_snapshots_before(self, offset: int) -> None:
        """Snapshots of deleted segments go with them (Kafka deletes them with the segment)."""
        for off in [o for o in self.snapshots if o < offset]:
            self._delete_snapshot(off)

    def remove_stray_snapshots(self, segment_bases: list[int]) -> None:
        """Keep snapshots at segment bases plus the latest one above them all (clean shutdown)."""
        bases = set(segment_bases)
        top = max(segment_bases) if segment_bases else -1
        strays = [o for o in self.snapshots if o not in bases]
        keep = strays[-1] if strays and strays[-1] > top else None
        for off in strays:
            if off != keep:
                self._delete_snapshot(off)

    def take_snapshot(self, *, sync: bool = True) -> Path | None:
        """Write the state at ``map_end_offset`` unless a snapshot there already exists."""
        if self.map_end_offset <= self.last_snap_offset:
            return None  # nothing new since the last one
        offset = self.map_end_offset
        path = self.snapshot_path(offset)
        write_snapshot(path, self.producers.values(), fsync=sync)
        if not sync:
            self._unsynced.append(path)
        if offset not in self.snapshots:
            insort(self.snapshots, offset)
        self.last_snap_offset = offset
        return path

    def snapshot_later(self) -> SnapshotWrite | None:
        """``take_snapshot`` whose file a background flush writes (with its fsync): only the
        bytes are built now, so a roll does no file work on the event loop. Until written,
        the snapshot counts as taken; anything that reads, deletes or must have it on disk
        first settles it (``settle``)."""
        if self.map_end_offset <= self.last_snap_offset:
            return None
        offset = self.map_end_offset
        w = SnapshotWrite(self.snapshot_path(offset), encode_snapshot(self.producers.values()))
        self._writes.append(w)
        if offset not in self.snapshots:
            insort(self.snapshots, offset)
        self.last_snap_offset = offset
        return w

    def pending_writes(self) -> list[SnapshotWrite]:
        """Snapshots not written yet, for a background flush (``write_pending``)."""
        self._writes = [w for w in self._writes if not w.done]
        return list(self._writes)

    def write_pending(self, writes: list[SnapshotWrite]) -> None:
        """Write and fsync snapshots taken by ``snapshot_later`` (a worker thread). Only the
        final rename holds the lock, so the loop never waits for this thread's fsync."""
        for w in writes:
            if w.done:
                continue
            tmp = w.path.with_name(w.path.name + ".bg.tmp")
            write_snapshot_data(tmp, w.data, fsync=True, direct=True)
            with self._lock:
                try:
                    if w.done:  # deleted or written by the loop meanwhile
                        os.unlink(tmp)
                    else:
                        os.replace(tmp, w.path)
                        w.done = True
                except OSError as e:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp)
                    raise StorageError(f"cannot write producer snapshot {w.path}: {e}") from e

    def settle(self, *, sync: bool = True) -> None:
        """Write, on the calling thread, the snapshots a background flush has not written
        yet (``sync=False``: without an fsync, left for the next flush)."""
        if not self._writes:
            return
        with self._lock:
            for w in self._writes:
                if not w.done:
                    write_snapshot_data(w.path, w.data, fsync=sync)
                    w.done = True
                    if not sync:
                        self._unsynced.append(w.path)
            self._writes.clear()

    def sync_snapshots(self) -> None:
        """fsync snapshots written without it (called when the log flushes)."""
        self.settle()
        fsync_paths(self.take_unsynced())

    def take_unsynced(self) -> list[Path]:
        """Snapshots written without an fsync, handed to a flush (which may run them through
        ``fsync_paths`` in a worker thread, and gives them back with ``requeue`` if it fails)."""
        pending, self._unsynced = self._unsynced, []
        return pending

    def requeue(self, paths: list[Path]) -> None:
        self._unsynced[:0] = paths

    # --- loading and truncation ----------------------------------------------------------------

    def _expired(self, entry: ProducerStateEntry, now_ms: int) -> bool:
        return entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def _clear(self) -> None:
        self.producers.clear()
        self.ongoing_txns.clear()

    def load_entry(self, entry: ProducerStateEntry) -> None:
        self.producers[entry.producer_id] = entry
        if entry.txn_first_offset >= 0:
            self.ongoing_txns[entry.txn_first_offset] = entry.producer_id

    def _load_latest_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        self.settle(sync=False)
        while self.snapshots:
            offset = self.snapshots[-1]
            try:
                entries = read_snapshot(self.snapshot_path(offset))
            except (CorruptSnapshotError, OSError) as e:
                log.warning("discarding producer snapshot %s: %s", self.snapshot_path(offset), e)
                self._delete_snapshot(offset)
                continue
            for entry in entries:
                if not self._expired(entry, now_ms):
                    self.load_entry(entry)
            self.map_end_offset = self.last_snap_offset = offset
            return
        self.map_end_offset = self.last_snap_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots outside [log start, log end] and reload from the latest one left.

        The caller replays the log from ``map_end_offset`` to the log end afterwards.
        """
        for off in [o for o in self.snapshots if o > log_end_offset or o < log_start_offset]:
            self._delete_snapshot(off)
        if log_end_offset != self.map_end_offset:
            self._clear()
            self._load_latest_snapshot(log_start_offset, now_ms)
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self._clear()
        for off in list(self.snapshots):
            self._delete_snapshot(off)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for producer.id.expiration.ms (never one with an open txn)."""
        doomed = [pid for pid, e in self.producers.items() if self._expired(e, now_ms)]
        for pid in doomed:
            del self.producers[pid]
        return len(doomed)

    # --- appends -------------------------------------------------------------------------------

    def prepare(
        self, batches: list[ProducerBatch], data: Buf, origin: str
    ) -> tuple[BatchMetadata | None, Pending | None]:
        """Check the producer batches of one append (tuples from the validator).

        Returns (the cached batch a client retry duplicates, None) or (None, changes to apply
        once the write succeeded). Raises the Kafka errors for bad sequences and epochs.
        """
        producers = self.producers
        client = origin == ORIGIN_CLIENT
        if len(batches) == 1 and not batches[0][4] & R.CONTROL_MASK:
            return self._prepare_one(batches[0], client, origin)
        pending = PendingUpdate()
        updates = pending.updates
        for pid, epoch, base_seq, last_delta, attrs, first_offset, ts, pos, size in batches:
            current = producers.get(pid)
            last_seq = base_seq if base_seq < 0 else increment_sequence(base_seq, last_delta)
            if client and current is not None:
                dup = current.find_duplicate(epoch, base_seq, last_seq)
                if dup is not None:
                    return dup, None
            upd = updates.get(pid)
            if upd is None:
                upd = updates[pid] = _Update(pid, current, origin)
            if attrs & R.CONTROL_MASK:
                marker = _control_record(memoryview(data)[pos : pos + size])
                if marker is None:  # an empty control batch: its transaction was cleaned away
                    continue
                kind, coord_epoch, mts = marker
                done = upd.append_marker(epoch, coord_epoch, first_offset, mts,
                                         kind == R.CONTROL_ABORT)  # fmt: skip
                if done is not None:
                    pending.completed.append(done)
            elif upd.append_data(epoch, base_seq, last_seq, first_offset,
                                 first_offset + last_delta, ts,
                                 bool(attrs & R.TRANSACTIONAL_MASK)):  # fmt: skip
                pending.started.append((first_offset, pid))
        return None, pending

    def _prepare_one(
        self, b: ProducerBatch, client: bool, origin: str
    ) -> tuple[BatchMetadata | None, Pending | None]:
        """The common case, one data batch, without the bookkeeping objects (hot path). Anything
        unusual goes through ``_Update``, which raises the precise error."""
        pid, epoch, base_seq, last_delta, attrs, first_offset, ts, _pos, _size = b
        if base_seq < 0:
            last_seq = base_seq
        elif base_seq > INT32_MAX - last_delta:
            last_seq = last_delta - (INT32_MAX - base_seq) - 1
        else:
            last_seq = base_seq + last_delta
        meta: BatchMetadata = (base_seq, last_seq, first_offset, first_offset + last_delta, ts)
        transactional = attrs & R.TRANSACTIONAL_MASK
        current = self.producers.get(pid)
        if current is None:
            if epoch < R.NO_PRODUCER_EPOCH and origin != ORIGIN_REPLICATION:
                raise InvalidProducerEpochError(f"invalid epoch {epoch} of producer {pid}")
            return None, (pid, epoch, meta, bool(transactional))
        cur_epoch = current.epoch
        ok = True
        if epoch == cur_epoch:
            if client:
                batches = current.batches
                last = batches[-1][LAST_SEQ] if batches else -1
                if base_seq != last + 1:  # not simply the next batch: a retry, or a gap
                    for d in batches:
                        if d[FIRST_SEQ] == base_seq and d[LAST_SEQ] == last_seq:
                            return d, None
                    ok = cur_epoch == R.NO_PRODUCER_EPOCH or _in_sequence(last, base_seq)
        elif epoch < cur_epoch:
            ok = False
        elif client:
            ok = base_seq == 0 or cur_epoch == R.NO_PRODUCER_EPOCH
        txn_open = current.txn_first_offset >= 0
        if not ok or (txn_open and not transactional):
            upd = _Update(pid, current, origin)
            upd.append_data(epoch, base_seq, last_seq, first_offset, first_offset + last_delta,
                            ts, bool(transactional))  # fmt: skip
            pending = PendingUpdate()  # (replication: only warned, so it gets here)
            pending.updates[pid] = upd
            return None, pending
        return None, (pid, epoch, meta, bool(transactional) and not txn_open)

    def apply(self, pending: Pending) -> None:
        if not isinstance(pending, PendingUpdate):
            pid, epoch, meta, starts_txn = pending
            cur = self.producers.get(pid)
            if cur is None:
                self.producers[pid] = ProducerStateEntry(
                    pid, epoch, last_timestamp=meta[TIMESTAMP], batches=[meta],
                    txn_first_offset=meta[FIRST_OFFSET] if starts_txn else -1)  # fmt: skip
            else:
                batches = cur.batches
                if cur.epoch != epoch:
                    batches.clear()
                    cur.epoch = epoch
                elif len(batches) >= NUM_BATCHES_TO_RETAIN:
                    del batches[0]
                batches.append(meta)
                cur.last_timestamp = meta[TIMESTAMP]
                if starts_txn:
                    cur.txn_first_offset = meta[FIRST_OFFSET]
            if starts_txn:
                self.ongoing_txns[meta[FIRST_OFFSET]] = pid
            return
        producers = self.producers
        for pid, upd in pending.updates.items():
            new = upd.entry
            cur = producers.get(pid)
            if cur is None:
                producers[pid] = new
                continue
            cur._set_epoch(new.epoch)
            for b in new.batches:
                cur._add(b)
            cur.coordinator_epoch = new.coordinator_epoch
            cur.txn_first_offset = new.txn_first_offset
            cur.last_timestamp = new.last_timestamp
        for first, pid in pending.started:
            self.ongoing_txns[first] = pid
        for done in pending.completed:
            self.ongoing_txns.pop(done[1], None)

    def first_undecided_offset(self) -> int | None:
        """First offset of the oldest open transaction (transactions will bound the LSO by it)."""
        return min(self.ongoing_txns) if self.ongoing_txns else None

    def last_records_of_active_producers(self) -> dict[int, tuple[int, int]]:
        """{producer id: (last data offset or -1, epoch)}: batches the cleaner must keep."""
        return {pid: (e.last_data_offset, e.epoch) for pid, e in self.producers.items()}


# --- snapshot files ----------------------------------------------------------------------------




def write_snapshot(
    path: Path, entries: Iterable[ProducerStateEntry], *, fsync: bool = True
) -> None:
    write_snapshot_data(path, encode_snapshot(entries), fsync=fsync)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """Kafka's producer snapshot (version 1), up to five entries per producer, oldest first."""
    body = bytearray(_HEAD.size)
    n = 0
    pack = _ENTRY.pack
    for e in entries:
        txn = e.txn_first_offset
        batches = e.batches
        if not batches:
            body += pack(e.producer_id, e.epoch, -1, -1, 0, e.last_timestamp,
                         e.coordinator_epoch, txn)  # fmt: skip
            n += 1
            continue
        last = len(batches) - 1
        for i, b in enumerate(batches):
            ts = e.last_timestamp if i == last else b[TIMESTAMP]
            body += pack(e.producer_id, e.epoch, b[LAST_SEQ], b[LAST_OFFSET],
                         b[LAST_OFFSET] - b[FIRST_OFFSET], ts, e.coordinator_epoch, txn)  # fmt: skip
            n += 1
    struct.pack_into(">i", body, _CRC_START, n)
    crc = crc32c(memoryview(body)[_CRC_START:])
    struct.pack_into(">hI", body, 0, SNAPSHOT_VERSION, crc)
    return bytes(body)


def write_snapshot_data(
    path: Path, body: bytes, *, fsync: bool = True, direct: bool = False
) -> None:
    """Write a snapshot's bytes through a temporary file, so a crash leaves the old one whole
    (``direct``: ``path`` is itself a temporary file, the caller renames it)."""
    tmp = path if direct else path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(fd, view) :]
            if fsync:
                files.fsync(fd)
        finally:
            os.close(fd)
        if not direct:
            os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StorageError(f"cannot write producer snapshot {path}: {e}") from e


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    data = path.read_bytes()
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError("file too short")
    version, crc, count = _HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unknown snapshot version {version}")
    if crc32c(memoryview(data)[_CRC_START:]) != crc:
        raise CorruptSnapshotError("CRC mismatch")
    if count < 0 or len(data) != _HEAD.size + count * _ENTRY.size:
        raise CorruptSnapshotError("entry count does not match the file size")
    out: dict[int, ProducerStateEntry] = {}
    for pid, epoch, seq, last_off, delta, ts, coord, txn in _ENTRY.iter_unpack(data[_HEAD.size :]):
        e = out.get(pid)
        if e is None:
            e = out[pid] = ProducerStateEntry(pid, epoch)
        e._set_epoch(epoch)
        e.coordinator_epoch = coord
        e.last_timestamp = ts
        e.txn_first_offset = txn if txn >= 0 else -1
        if last_off >= 0:
            e._add((decrement_sequence(seq, delta) if seq >= 0 else seq, seq,
                    last_off - delta, last_off, ts))  # fmt: skip
    return list(out.values())

"""Cleaning one log: choose the range (Kafka's LogCleanerManager), then build the key map and
rewrite segment groups (Kafka's Cleaner).

The heavy part runs in a worker thread over a ``CleanPlan``: plain data captured on the event
loop (segment paths, sizes, offsets, the producers whose last batch must stay). The thread reads
the segment files through its own descriptors and writes ``<base>.{log,index,timeindex}.cleaned``;
it never touches ``PartitionLog`` or ``LogSegment`` objects. The swap back into the log happens
on the event loop (``swap_in``), after checking that the replaced segments are still there
unchanged (retention, deletion or truncation in the meantime abort the pass).

Rules, as Kafka's:
- Only closed segments below the last stable offset (and below the first segment younger than
  ``min.compaction.lag.ms``) are cleaned; the active segment never is.
- The newest record of each key survives; keyless records are dropped; offsets never change
  (gaps are fine) and a rebuilt batch keeps its base offset, last offset delta, producer id,
  epoch, base sequence and flags.
- A tombstone (null value) is kept at least ``delete.retention.ms`` after the pass that first saw
  it: that pass stores the delete horizon in the batch (KIP-534), a later pass drops it.
- The last batch of every active producer stays (possibly emptied) so its sequence state can be
  rebuilt from the log; the last batch of each group stays too, so a swap's offset range is exact.
- Aborted transactional data is dropped and never enters the key map; a COMMIT/ABORT marker is
  kept while data of its transaction remains, then kept ``delete.retention.ms`` more.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from strom import record as R
from strom.record.buffers import Buf
from strom.storage import files
from strom.storage.cleaner.batches import (
    H_ATTRS,
    H_BASE,
    H_BASE_TS,
    H_COUNT,
    H_EPOCH,
    H_LAST_DELTA,
    H_MAX_TS,
    H_PID,
    FileBatches,
    HeaderTuple,
    RecordSlot,
    build_filtered,
    control_type,
    empty_batch,
    records_of,
)
from strom.storage.cleaner.offset_map import OffsetMap
from strom.storage.index import (
    INT32_MAX,
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY_SIZE,
    OffsetIndex,
    TimeIndex,
)
from strom.storage.log import CLEANED_SUFFIX, PartitionLog
from strom.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_name,
)

log = logging.getLogger(__name__)

_CONTROL = R.CONTROL_MASK
_TXN = R.TRANSACTIONAL_MASK
_HORIZON = R.DELETE_HORIZON_MASK
_FLUSH_BYTES = 1 << 20


class CleaningAborted(Exception):
    """The pass was stopped (shutdown) or the log changed under it; retried later."""


class MapTooSmallError(Exception):
    """log.cleaner.dedupe.buffer.size cannot hold the keys of a single batch."""


# --- choosing what to clean ----------------------------------------------------------------


@dataclass
class LogToClean:
    """A compacted log and its cleanable range, as the cleaner manager sees it."""

    log: PartitionLog
    first_dirty: int
    first_uncleanable: int
    clean_bytes: int
    cleanable_bytes: int
    need_compaction_now: bool = False
    horizon_due: bool = False
    reset_checkpoint: bool = False

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def cleanable_ratio(self) -> float:
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def should_clean(self) -> bool:
        if self.total_bytes <= 0:
            return False
        if self.need_compaction_now and self.cleanable_bytes > 0:
            return True
        if self.horizon_due and self.clean_bytes > 0:
            return True
        return self.cleanable_ratio > self.log.config.min_cleanable_dirty_ratio


def _segments_overlapping(log: PartitionLog, start: int, end: int) -> list[LogSegment]:
    """Segments holding offsets in [start, end) (judged by base offsets, as Kafka does)."""
    segs = log.segments
    out = []
    for i, seg in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else log.log_end_offset + 1
        if seg.base_offset < end and nxt > start:
            out.append(seg)
    return out


def cleanable_offsets(log: PartitionLog, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, checkpoint was invalid)."""
    lso = log.log_start_offset
    first_dirty = lso if checkpoint is None else checkpoint
    reset = False
    if first_dirty < lso or first_dirty > log.log_end_offset:
        first_dirty, reset = lso, checkpoint is not None
    active = log.active_segment
    candidates = [log.last_stable_offset, active.base_offset]
    lag = max(log.config.min_compaction_lag_ms, 0)
    if lag > 0:  # the first segment holding a record younger than min.compaction.lag.ms
        for seg in _segments_overlapping(log, first_dirty, active.base_offset):
            if seg is not active and seg.largest_timestamp() > now_ms - lag:
                candidates.append(seg.base_offset)
                break
    return first_dirty, max(first_dirty, min(candidates)), reset


def _needs_compaction_now(log: PartitionLog, first_dirty: int, now_ms: int) -> bool:
    """max.compaction.lag.ms: the oldest dirty closed segment's first batch is older than it."""
    until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    for seg in _segments_overlapping(log, first_dirty, log.active_segment.base_offset):
        if seg is log.active_segment:
            continue
        ts = seg.rolling_timestamp()
        if ts is not None and 0 < ts < until:
            return True
    return False


def log_to_clean(log: PartitionLog, checkpoint: int | None, now_ms: int,
                 next_horizon: int | None = None) -> LogToClean:  # fmt: skip
    first_dirty, uncleanable, reset = cleanable_offsets(log, checkpoint, now_ms)
    clean = sum(s.size for s in _segments_overlapping(log, -1, first_dirty))
    dirty = sum(s.size for s in _segments_overlapping(log, first_dirty, uncleanable))
    return LogToClean(
        log, first_dirty, uncleanable, clean, dirty,
        need_compaction_now=_needs_compaction_now(log, first_dirty, now_ms),
        horizon_due=next_horizon is not None and next_horizon <= now_ms,
        reset_checkpoint=reset,
    )  # fmt: skip


# --- the plan handed to the worker thread --------------------------------------------------


@dataclass(slots=True)
class SegmentRef:
    segment: LogSegment  # only compared by identity on the event loop
    base: int
    path: str
    size: int
    end: int  # base offset of the next segment (or the log end for the active one)
    mtime_ns: int
    start_pos: int = 0  # where the dirty part starts (first dirty segment only)


@dataclass
class CleanPlan:
    dir: str
    name: str
    refs: list[SegmentRef]  # closed segments from the start of the log to the first uncleanable
    txn_refs: list[SegmentRef]  # every segment up to the high watermark, for the marker pass
    first_dirty: int
    first_uncleanable: int
    active_producers: dict[int, tuple[int, int]]
    delete_retention_ms: int
    segment_bytes: int
    max_index_entries: int
    index_interval: int
    now_ms: int


def make_plan(ltc: LogToClean, now_ms: int) -> CleanPlan:
    """Capture what the worker needs (runs on the event loop, touches only headers/indexes)."""
    plog = ltc.log
    segs = plog.segments
    refs: list[SegmentRef] = []
    txn_refs: list[SegmentRef] = []
    hw = plog.high_watermark
    for i, seg in enumerate(segs):
        end = segs[i + 1].base_offset if i + 1 < len(segs) else plog.log_end_offset
        if i > 0 and seg.base_offset >= hw:
            break
        try:
            mtime = os.stat(seg.log_path).st_mtime_ns
        except OSError:
            mtime = 0
        ref = SegmentRef(seg, seg.base_offset, str(seg.log_path), seg.size, end, mtime)
        txn_refs.append(ref)
        if i + 1 < len(segs) and seg.base_offset < ltc.first_uncleanable:
            if seg.base_offset < ltc.first_dirty < end:
                ref.start_pos = seg.offset_index.lookup(ltc.first_dirty)[1]
            refs.append(ref)
    cfg = plog.config
    return CleanPlan(
        dir=str(plog.dir), name=f"{plog.topic}-{plog.partition}", refs=refs, txn_refs=txn_refs,
        first_dirty=ltc.first_dirty, first_uncleanable=ltc.first_uncleanable,
        active_producers=plog.producer_state.last_records_of_active_producers(),
        delete_retention_ms=cfg.delete_retention_ms, segment_bytes=cfg.segment_bytes,
        max_index_entries=max(1, cfg.segment_index_bytes // OFFSET_ENTRY_SIZE),
        index_interval=cfg.index_interval_bytes, now_ms=now_ms,
    )  # fmt: skip


# --- transactions while cleaning -------------------------------------------------------------


class TxnTracker:
    """Which batches belong to aborted transactions and when a marker may go (Kafka's
    CleanedTransactionMetadata); fed in offset order."""

    def __init__(self, aborted: list[tuple[int, int, int]]) -> None:
        self._aborted = aborted  # (first offset, producer id, marker offset), by first offset
        self._next = 0
        self._ongoing_aborted: dict[int, bool] = {}  # pid -> a batch of it was seen
        self._ongoing_committed: set[int] = set()

    def _consume(self, offset: int) -> None:
        a = self._aborted
        while self._next < len(a) and a[self._next][0] <= offset:
            self._ongoing_aborted.setdefault(a[self._next][1], False)
            self._next += 1

    def on_batch(self, pid: int, transactional: bool, last_offset: int) -> bool:
        """True when the data batch is part of an aborted transaction (it can go)."""
        if self._aborted:
            self._consume(last_offset)
        if not transactional:
            return False
        if pid in self._ongoing_aborted:
            self._ongoing_aborted[pid] = True
            return True
        self._ongoing_committed.add(pid)
        return False

    def on_control(self, pid: int, kind: int | None, last_offset: int) -> bool:
        """True when the marker may be discarded: no data of its transaction is left."""
        if self._aborted:
            self._consume(last_offset)
        if kind is None:
            return True  # an empty control batch: already cleaned
        if kind == R.CONTROL_ABORT:
            return not self._ongoing_aborted.pop(pid, False)
        if kind == R.CONTROL_COMMIT:
            if pid in self._ongoing_committed:
                self._ongoing_committed.discard(pid)
                return False
            return True
        return False


# --- the cleaned segment being written -----------------------------------------------------


class _Output:
    def __init__(self, dir: str, base: int, max_index_entries: int, index_interval: int) -> None:
        stem = os.path.join(dir, segment_name(base))
        self.paths = [stem + s + CLEANED_SUFFIX for s in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)]
        self.fd = os.open(self.paths[0], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.buf = bytearray()
        self.written = 0
        self.oi = OffsetIndex(Path(self.paths[1]), base, max_index_entries)
        self.ti = TimeIndex(Path(self.paths[2]), base,
                            max(1, max_index_entries * OFFSET_ENTRY_SIZE // TIME_ENTRY_SIZE))  # fmt: skip
        self.interval = index_interval
        self.since_index = 0
        self.max_ts, self.max_off = -1, base
        self.batches = 0

    @property
    def size(self) -> int:
        return self.written + len(self.buf)

    def add(self, data: Buf, last_offset: int, max_ts: int) -> None:
        position = self.written + len(self.buf)
        if max_ts > self.max_ts:
            self.max_ts, self.max_off = max_ts, last_offset
        if self.since_index > self.interval:
            if len(self.oi) < self.oi.max_entries:
                self.oi.append(last_offset, position)
            self.ti.maybe_append(self.max_ts, self.max_off)
            self.since_index = 0
        self.since_index += len(data)
        self.buf += data
        self.batches += 1
        if len(self.buf) >= _FLUSH_BYTES:
            self._flush()

    def _flush(self) -> None:
        with memoryview(self.buf) as view:
            done, total = 0, len(view)
            while done < total:
                n = os.pwrite(self.fd, view[done:], self.written)
                self.written += n
                done += n
        self.buf.clear()

    def finish(self, mtime_ns: int) -> None:
        self._flush()
        self.ti.maybe_append(self.max_ts, self.max_off, skip_full_check=True)
        self.oi.persist()
        self.ti.persist()
        files.fsync(self.fd)
        os.close(self.fd)
        self.fd = -1
        for p in self.paths[1:]:
            fd = os.open(p, os.O_RDONLY)
            try:
                files.fsync(fd)
            finally:
                os.close(fd)
        if mtime_ns:  # the cleaned segment keeps the age of what it replaces (retention by mtime)
            os.utime(self.paths[0], ns=(mtime_ns, mtime_ns))

    def discard(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        for p in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)


@dataclass
class CleanedGroup:
    base: int
    refs: list[SegmentRef]
    bytes_in: int
    bytes_out: int
    paths: list[str] = field(default_factory=list)


# --- the job ---------------------------------------------------------------------------------


class CleanJob:
    """One cleaning pass over a plan; every method but ``groups`` runs in the worker thread."""

    def __init__(self, plan: CleanPlan, *, memory: int, load_factor: float = 0.9,
                 cancel: threading.Event | None = None) -> None:  # fmt: skip
        self.plan = plan
        self.memory = memory
        self.load_factor = load_factor
        self.cancel = cancel or threading.Event()
        self.aborted: list[tuple[int, int, int]] = []
        self.dirty_records = 0
        self.map: OffsetMap | None = None
        self.end_offset = plan.first_dirty
        self.next_horizon: int | None = None  # earliest delete horizon left in the cleaned log
        self._txn: TxnTracker | None = None

    def _check(self) -> None:
        if self.cancel.is_set():
            raise CleaningAborted("cleaner is stopping")

    def _open(self, ref: SegmentRef) -> FileBatches:
        try:
            return FileBatches(ref.path, ref.size)
        except FileNotFoundError as e:  # deleted by retention meanwhile
            raise CleaningAborted(f"segment {ref.path} is gone") from e

    def prepare(self) -> int:
        """Passes 1 and 2; returns the end offset of this cleaning (exclusive)."""
        self.scan()
        return self.build_map()

    # pass 1: markers (aborted transactions) and the size of the dirty part, headers only
    def scan(self) -> None:
        p = self.plan
        open_txns: dict[int, int] = {}
        aborted = []
        count = 0
        for ref in p.txn_refs:
            self._check()
            with self._open(ref) as fb:
                for pos, h in fb.headers():
                    attrs = h[H_ATTRS]
                    base = h[H_BASE]
                    if attrs & _TXN:
                        pid = h[H_PID]
                        if attrs & _CONTROL:
                            kind = control_type(fb.read(pos, h[1] + R.LOG_OVERHEAD), h)
                            first = open_txns.pop(pid, None)
                            if kind == R.CONTROL_ABORT and first is not None:
                                aborted.append((first, pid, base))
                        elif pid not in open_txns:
                            open_txns[pid] = base
                    if base + h[H_LAST_DELTA] >= p.first_dirty and base < p.first_uncleanable:
                        count += h[H_COUNT]
        aborted.sort()
        self.aborted = aborted
        self.dirty_records = count

    # pass 2: key -> latest offset over the dirty part, until the map is full
    def build_map(self) -> int:
        p = self.plan
        m = self.map = OffsetMap(self.memory, self.load_factor,
                                 expected_keys=max(self.dirty_records, 1))  # fmt: skip
        m.latest_offset = p.first_dirty - 1
        txn = TxnTracker(self.aborted)
        first_dirty, upper = p.first_dirty, p.first_uncleanable
        full = False
        for ref in p.refs:
            if ref.end <= first_dirty or ref.base >= upper:
                continue
            with self._open(ref) as fb:
                for _pos, h, mv in fb.batches(ref.start_pos):
                    self._check()
                    base = h[H_BASE]
                    last = base + h[H_LAST_DELTA]
                    if last < first_dirty:
                        continue
                    attrs = h[H_ATTRS]
                    if attrs & _CONTROL:
                        txn.on_control(h[H_PID], control_type(mv, h), last)
                    elif not txn.on_batch(h[H_PID], bool(attrs & _TXN), last):
                        _section, recs = records_of(mv, h)
                        put = m.put
                        for rec in recs:
                            key = rec[5]
                            if key is not None:
                                off = base + rec[2]
                                if off >= first_dirty and not put(key, off):
                                    full = True
                                    break
                        if full:
                            break
                    m.latest_offset = last
            if full:
                break
            m.latest_offset = max(m.latest_offset, min(ref.end, upper) - 1)
        self.end_offset = m.latest_offset + 1
        if self.end_offset <= first_dirty and upper > first_dirty and self.dirty_records:
            raise MapTooSmallError(
                f"log.cleaner.dedupe.buffer.size ({self.memory} bytes) cannot hold the keys of "
                f"one batch of {p.name}"
            )
        log.debug("offset map of %s: %d keys, dirty %d..%d, cleaning to %d", p.name, m.size,
                  first_dirty, upper, self.end_offset)  # fmt: skip
        return self.end_offset

    def groups(self) -> list[list[SegmentRef]]:
        """Segments below the end of this pass, grouped so one group fits one segment."""
        p = self.plan
        refs = [r for r in p.refs if r.base < self.end_offset]
        out: list[list[SegmentRef]] = []
        for r in refs:
            cur = out[-1] if out else None
            if (cur is not None and sum(x.size for x in cur) + r.size <= p.segment_bytes
                    and r.end - 1 - cur[0].base <= INT32_MAX):  # fmt: skip
                cur.append(r)
            else:
                out.append([r])
        return [g for g in out if sum(r.size for r in g) > 0]

    # pass 3: rewrite one group into <base>.*.cleaned
    def clean_group(self, group: list[SegmentRef]) -> CleanedGroup:
        p = self.plan
        m = self.map
        assert m is not None
        self._check()
        if self._txn is None:
            self._txn = TxnTracker(self.aborted)
        txn = self._txn
        now = p.now_ms
        latest = m.latest_offset
        get = m.get
        active = p.active_producers
        retention = p.delete_retention_ms
        try:
            out = _Output(p.dir, group[0].base, p.max_index_entries, p.index_interval)
        except FileNotFoundError as e:  # the partition was deleted meanwhile
            raise CleaningAborted(f"cannot write in {p.dir}: {e}") from e
        bytes_in = 0
        try:
            last_ref = group[-1]
            for ref in group:
                bytes_in += ref.size
                with self._open(ref) as fb:
                    for pos, h, mv in fb.batches(0):
                        self._check()
                        group_last = ref is last_ref and pos + len(mv) == ref.size
                        data = self._filter(h, mv, txn, now, latest, get, active, retention,
                                            group_last)  # fmt: skip
                        if data is not None:
                            mts = h[H_MAX_TS] if data is mv else R.I64.unpack_from(data, 35)[0]
                            out.add(data, h[H_BASE] + h[H_LAST_DELTA], mts)
            out.finish(last_ref.mtime_ns)
        except FileNotFoundError as e:
            out.discard()
            raise CleaningAborted(f"partition directory {p.dir} is gone: {e}") from e
        except BaseException:
            out.discard()
            raise
        return CleanedGroup(group[0].base, group, bytes_in, out.size, out.paths)

    def _filter(
        self,
        h: HeaderTuple,
        mv: memoryview,
        txn: TxnTracker,
        now: int,
        latest: int,
        get: Callable[[Buf], int],
        active: dict[int, tuple[int, int]],
        retention: int,
        group_last: bool,
    ) -> Buf | None:
        """The bytes to keep for one batch (``mv`` itself when unchanged), or None."""
        attrs = h[H_ATTRS]
        pid = h[H_PID]
        base = h[H_BASE]
        last = base + h[H_LAST_DELTA]
        is_control = attrs & _CONTROL
        if is_control:
            can_discard = txn.on_control(pid, control_type(mv, h), last)
            if not h[H_COUNT]:  # an empty marker left for its producer's state
                return mv if retain_empty_for(h, pid, last, active, group_last) else None
        else:
            can_discard = txn.on_batch(pid, bool(attrs & _TXN), last)
        horizon = h[H_BASE_TS] if attrs & _HORIZON else None
        if is_control:
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            discard_records = can_discard
        retain_empty = retain_empty_for(h, pid, last, active, group_last)
        if discard_records:
            return empty_batch(h) if retain_empty else None
        if is_control:
            if not can_discard:
                return mv
            if horizon is not None:  # waiting for its delete horizon
                self._note_horizon(horizon)
                return mv
            section, recs = records_of(mv, h)
            new_horizon = now + retention
            self._note_horizon(new_horizon)
            return build_filtered(h, section, recs, delete_horizon=new_horizon)
        section, recs = records_of(mv, h)
        kept: list[RecordSlot] = []
        tombstones = False
        for rec in recs:
            off = base + rec[2]
            if off <= latest:
                key = rec[5]
                if key is None or off < get(key):
                    continue
                if not rec[6] and horizon is not None and now >= horizon:
                    continue  # a tombstone past its delete horizon
            if not rec[6]:
                tombstones = True
            kept.append(rec)
        if not kept:
            if not retain_empty:
                return None
            return mv if not recs else empty_batch(h)
        need_horizon = tombstones and horizon is None
        if tombstones:
            self._note_horizon(horizon if horizon is not None else now + retention)
        if len(kept) == len(recs) and not need_horizon:
            return mv
        return build_filtered(h, section, kept,
                              delete_horizon=now + retention if need_horizon else horizon)  # fmt: skip

    def _note_horizon(self, horizon: int) -> None:
        """Remember the earliest future delete horizon (the service cleans again then)."""
        if horizon > self.plan.now_ms and (self.next_horizon is None or horizon < self.next_horizon):
            self.next_horizon = horizon


def retain_empty_for(
    h: HeaderTuple, pid: int, last: int, active: dict[int, tuple[int, int]], group_last: bool
) -> bool:
    """Keep this batch even with no record: the last of a group (exact swap ranges) or the last
    one of an active producer (its sequence and epoch must be rebuildable from the log)."""
    if group_last:
        return True
    if pid < 0:
        return False
    lr = active.get(pid)
    if lr is None:
        return False
    if lr[0] >= 0:
        return last == lr[0]
    return bool(h[H_ATTRS] & _CONTROL) and h[H_EPOCH] == lr[1]


def swap_in(plog: PartitionLog, cleaned: CleanedGroup, *, sync_dir: bool = True) -> LogSegment:
    """Replace the group's segments by the cleaned one (event loop), if they are unchanged
    (``sync_dir=False``: the caller fsyncs the log's directory afterwards, off the loop)."""
    if plog.closed:
        raise CleaningAborted("log closed")
    current = plog.segments
    olds = []
    for ref in cleaned.refs:
        seg = ref.segment
        if seg not in current or seg is plog.active_segment or seg.size != ref.size:
            raise CleaningAborted(f"segment {ref.base} of {plog} changed while cleaning")
        olds.append(seg)
    return plog.replace_segments(cleaned.base, olds, sync_dir=sync_dir)


def discard_cleaned(cleaned: CleanedGroup) -> None:
    for p in cleaned.paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(p)

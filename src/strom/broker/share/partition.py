"""The state machine of one share partition (KIP-932): in-flight records, acquisition locks,
delivery counts and the share-partition start offset (SPSO). Pure logic: no I/O, no clock, no
timers. Every method that depends on time takes `now_ms`; the caller arms one timer at
`next_deadline()` and calls `expire_locks` when it fires.

Records are kept as runs of equal state (like Kafka's in-flight batches), so acquiring a
10,000-record batch is one run; a partial acknowledgement splits a run and runs of equal state
merge back. The runs cover [start_offset, end_offset) without holes: an offset the log does not
hold (compacted away, or a gap reported by the leader) is an ARCHIVED run.

Semantics follow Kafka 4.4's SharePartition, with these points the caller must know:

- Acquisition is never persisted (KIP-932: "the Acquired state is not persisted"). Kafka writes
  nothing on acquire; the incremented delivery count reaches the share coordinator only with
  the record's next transition (acknowledge, release, lock timeout). `take_changes` therefore
  never reports an acquisition by itself; if a range it must report is ACQUIRED again by then,
  it is written as what Kafka wrote before the acquisition: AVAILABLE with the count minus one.
- Delivery-count limit: acquiring increments the count; when an acquired record goes back to
  AVAILABLE (RELEASE, lock timeout, member gone) with count >= limit it is archived instead
  (ARCHIVING when a dead-letter topic is configured). A record is thus delivered at most
  `delivery_count_limit` times.
- ARCHIVING (KIP-1191) is not terminal: the start offset stops at it until `dead_lettered`,
  so a restart reads it back and the dead-letter write is redone.
- RENEW with renewal disabled (share.renew.acknowledge.enable=false) fails the partition's
  acknowledgement with INVALID_RECORD_STATE, as Kafka does. RENEW persists nothing.
- Acknowledgements of offsets below the start offset are ignored (success), as in Kafka.
- Kafka hands gap offsets to the client inside the acquired ranges and lets it acknowledge them
  as GAP; here gaps are archived at acquisition and left out of the acquired ranges (the same
  end state, ARCHIVED, without relying on the client).
- `share.partition.max.record.locks` (max_in_flight_records) is a hard cap on the offsets in
  flight (start to end offset): new records are acquired up to it and no further, a log batch
  that straddles it is acquired only up to the cap (its rest is read again once records
  settle), so no fetch hands out more. Kafka treats the cap as soft in batch-optimized mode (it
  keeps the whole log batch); `max_records` stays soft here as in Kafka.
- Offsets the caller lists as gaps (control batches; under read_committed the batches of aborted
  transactions) are archived when reached, never acquired.
- The redelivery delay (Strom's own) is persisted with the state: an AVAILABLE run held back
  carries its end as `StateBatch.not_before_ms` (wall-clock ms, as `now_ms`), so a restart
  keeps holding it back.
- Kafka isolates records near the delivery limit: a record on its last delivery attempt is
  delivered alone, and records whose count reached max(2, ceil(limit / 2)) are delivered in
  batches halved for each further attempt. The batch size halved is the size of the log batch
  that holds them (Kafka uses its in-flight batch, normally the same log batch).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from enum import IntEnum

from strom.coordinator.share.state import RecordState, StateBatch
from strom.protocol.errors import ErrorCode

REJECTED = "Offset rejected by client."
DELIVERY_LIMIT_REACHED = "Offset delivery count exceeded the threshold."

_TERMINAL = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


class AckType(IntEnum):
    """Acknowledgement types of ShareFetch/ShareAcknowledge (0 is a gap)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


@dataclass(frozen=True)
class SharePartitionConfig:
    """The group's share configs for this partition, plus Strom's redelivery delay."""

    delivery_count_limit: int = 5  # share.delivery.count.limit
    max_in_flight_records: int = 2000  # share.partition.max.record.locks
    lock_duration_ms: int = 30000  # share.record.lock.duration.ms
    dead_letter: bool = False  # a dead-letter topic is configured (KIP-1191)
    redelivery_delay_ms: int = 0  # Strom extension: delay before a released record is redelivered
    redelivery_backoff_multiplier: float = 1.0
    redelivery_max_delay_ms: int = 60000
    renew_enabled: bool = True  # share.renew.acknowledge.enable

    def redelivery_delay(self, delivery_count: int) -> int:
        """How long a record released after `delivery_count` deliveries waits to be available."""
        if self.redelivery_delay_ms <= 0:
            return 0
        delay = self.redelivery_delay_ms * self.redelivery_backoff_multiplier ** max(
            0, delivery_count - 1)
        return int(min(self.redelivery_max_delay_ms, delay))


@dataclass(frozen=True)
class AcquiredRange:
    """Offsets handed to a member (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True)
class DeadLetter:
    """Offsets to copy to the dead-letter topic; `reason` is the __dlq.errors.message text."""

    first_offset: int
    last_offset: int
    delivery_count: int
    reason: str


@dataclass(slots=True)
class _Run:
    first: int
    last: int
    state: RecordState
    count: int
    member: str | None = None  # the owner while ACQUIRED
    deadline: int = 0  # ACQUIRED: lock expiry; AVAILABLE: when the redelivery delay ends
    reason: str | None = None  # ARCHIVING: why

    def key(self) -> tuple:
        return (self.state, self.count, self.member, self.deadline, self.reason)


class SharePartition:
    """The in-flight records of one share group on one topic partition."""

    def __init__(self, config: SharePartitionConfig, start_offset: int,
                 batches: Iterable[StateBatch] = ()):
        """Rebuild from the persisted state (ReadShareGroupState's start offset and batches)."""
        self.config = config
        self._start = start_offset
        self._end = start_offset
        self._runs: list[_Run] = []
        self._dirty: list[tuple[int, int]] = []
        self._start_dirty = False
        self._dlq_pending: list[tuple[int, int]] = []
        for batch in sorted(batches, key=lambda b: b.first_offset):
            first = max(batch.first_offset, start_offset, self._end)
            if batch.last_offset < first:
                continue
            if first > self._end:  # never delivered as far as the persisted state knows
                self._runs.append(_Run(self._end, first - 1, RecordState.AVAILABLE, 0))
            state = RecordState(batch.delivery_state)
            run = _Run(first, batch.last_offset, state, batch.delivery_count)
            if state == RecordState.ACQUIRED:
                run.state = RecordState.AVAILABLE
            elif state == RecordState.AVAILABLE and batch.not_before_ms > 0:
                run.deadline = batch.not_before_ms  # still in its redelivery delay
            elif state == RecordState.ARCHIVING:
                if config.dead_letter:
                    run.reason = (DELIVERY_LIMIT_REACHED
                                  if run.count >= config.delivery_count_limit else REJECTED)
                    self._dlq_pending.append((run.first, run.last))
                else:
                    run.state = RecordState.ARCHIVED
                    self._dirty.append((run.first, run.last))
            self._runs.append(run)
            self._end = batch.last_offset + 1
        self._normalize()

    # ---------------------------------------------------------------- reading

    @property
    def start_offset(self) -> int:
        """The share-partition start offset: every offset below it is delivered or archived."""
        return self._start

    @property
    def end_offset(self) -> int:
        """One past the last in-flight offset."""
        return self._end

    @property
    def in_flight_count(self) -> int:
        """Offsets between start and end offset (what max_in_flight_records bounds)."""
        return self._end - self._start

    @property
    def acquired_count(self) -> int:
        """Records currently acquired by some member."""
        return sum(r.last - r.first + 1 for r in self._runs if r.state == RecordState.ACQUIRED)

    @property
    def delivery_complete_count(self) -> int:
        """In-flight records already ACKNOWLEDGED or ARCHIVED (for the lag computation)."""
        return sum(r.last - r.first + 1 for r in self._runs if r.state in _TERMINAL)

    def state_batches(self) -> list[StateBatch]:
        """The whole in-flight state as it is in memory, ACQUIRED included (describe)."""
        out: list[StateBatch] = []
        for r in self._runs:
            _append_batch(out, r.first, r.last, int(r.state), r.count, _not_before(r))
        return out

    def fetch_offset(self, now_ms: int) -> int | None:
        """Where the leader reads the log next: the first AVAILABLE in-flight record whose
        redelivery delay has passed, else end_offset; None when nothing may be acquired."""
        for r in self._runs:
            if r.state == RecordState.AVAILABLE and r.deadline <= now_ms:
                return r.first
        if self.in_flight_count >= self.config.max_in_flight_records:
            return None
        return self._end

    def next_deadline(self) -> int | None:
        """The earliest lock expiry or redelivery-delay end; None when there is none."""
        times = [r.deadline for r in self._runs
                 if r.state == RecordState.ACQUIRED
                 or (r.state == RecordState.AVAILABLE and r.deadline > 0)]
        return min(times, default=None)

    # ---------------------------------------------------------------- acquiring

    def acquire(self, member_id: str, log_batches: Sequence[tuple[int, int]], max_records: int,
                now_ms: int, *, record_limit: bool = False, gaps: Iterable[int] = (),
                gap_ranges: Iterable[tuple[int, int]] = (),
                fetch_offset: int | None = None) -> list[AcquiredRange]:
        """Acquire for `member_id` what the leader read: `log_batches` are the (base, last)
        offsets of the record batches read from `fetch_offset` (default: the first base);
        offsets in no batch, those in `gaps` and those in the (first, last) `gap_ranges` are
        archived. Batch-optimized mode keeps whole log batches and may exceed `max_records`;
        `record_limit` (ShareAcquireMode 1) acquires at most `max_records`. Neither goes past
        `max_in_flight_records` offsets in flight."""
        self.expire_locks(now_ms)
        batches = sorted(log_batches)
        if not batches or max_records <= 0:
            return []
        cfg = self.config
        lo = max(self._start, batches[0][0] if fetch_offset is None else fetch_offset)
        hi = batches[-1][1]
        if hi < lo:
            return []
        if not self._runs and lo > self._end:
            self._set_start(lo)
            self._end = lo
        room = cfg.max_in_flight_records - self.in_flight_count
        if room > 0:
            budget = min(max_records, room)
            hi = min(hi, self._start + cfg.max_in_flight_records - 1)  # the hard cap
        elif lo < self._end:  # full, but re-acquiring released records in the middle
            budget = min(max_records, self._end - lo)
            hi = min(hi, self._end - 1)
        else:
            return []
        if hi < lo:
            return []
        gap_set = _merge_intervals([(g, g) for g in gaps] + list(gap_ranges))
        plan: list[tuple[str, int, int, int]] = []  # (kind, first, last, count)
        if lo > self._end:  # the log holds nothing between the end offset and the read
            plan.append(("gap", self._end, lo - 1, 0))
        limit = cfg.delivery_count_limit
        throttle_at = max(2, math.ceil(limit / 2))
        taken = 0
        prev_last = lo - 1
        for b_first, b_last in batches:
            if b_last < lo or b_first > hi:
                continue
            if taken >= budget:  # batch-optimized mode stops only between log batches
                break
            for kind, p_first, p_last, count in self._pieces(max(prev_last + 1, lo),
                                                             min(b_first - 1, hi), now_ms, ()):
                if kind != "blocked":
                    plan.append(("gap", p_first, p_last, count))
            prev_last = max(prev_last, b_last)
            size = b_last - b_first + 1
            stop = False
            for kind, p_first, p_last, count in self._pieces(max(b_first, lo), min(b_last, hi),
                                                             now_ms, gap_set):
                if kind == "blocked":
                    continue
                if kind == "gap":
                    plan.append(("gap", p_first, p_last, count))
                    continue
                if taken >= budget and record_limit:
                    if kind == "new":
                        plan.append(("tail", p_first, p_last, 0))
                    continue
                length = p_last - p_first + 1
                if kind == "avail" and count >= throttle_at:
                    if taken > 0:
                        stop = True
                        break
                    if limit > 2 and count == limit - 1:
                        cap = 1  # last delivery attempt: delivered alone
                    else:
                        cap = max(1, size >> (count - throttle_at + 1))
                    if record_limit:
                        cap = min(cap, budget - taken)
                    n = min(cap, length)
                    plan.append(("acq", p_first, p_first + n - 1, count))
                    taken += n
                    stop = True
                    break
                n = min(length, budget - taken) if record_limit else length
                plan.append(("acq", p_first, p_first + n - 1, count))
                taken += n
                if n < length and kind == "new":
                    plan.append(("tail", p_first + n, p_last, 0))
            if stop:
                break
        return self._apply_acquire(member_id, plan, now_ms)

    def _pieces(self, first: int, last: int, now_ms: int,
                gap_set: Sequence[tuple[int, int]]) -> list[tuple[str, int, int, int]]:
        """Split [first, last] into (kind, first, last, count): "avail" (acquirable in-flight),
        "new" (past the end offset), "gap" (in one of the sorted, disjoint (first, last)
        ranges of `gap_set`) or "blocked" (anything else)."""
        out: list[tuple[str, int, int, int]] = []
        if first > last:
            return out
        if first < self._end:
            i = self._find(first)
            while i < len(self._runs) and self._runs[i].first <= last:
                r = self._runs[i]
                a, b = max(r.first, first), min(r.last, last)
                ready = r.state == RecordState.AVAILABLE and r.deadline <= now_ms
                out.append(("avail" if ready else "blocked", a, b, r.count))
                i += 1
        if last >= self._end:
            out.append(("new", max(first, self._end), last, 0))
        if not gap_set:
            return out
        split: list[tuple[str, int, int, int]] = []
        for kind, a, b, count in out:
            if kind == "blocked":
                split.append((kind, a, b, count))
                continue
            j = bisect.bisect_left(gap_set, a, key=lambda g: g[1])  # first gap ending at or after a
            while a <= b and j < len(gap_set) and gap_set[j][0] <= b:
                g_first, g_last = gap_set[j]
                if g_first > a:
                    split.append((kind, a, g_first - 1, count))
                split.append(("gap", max(a, g_first), min(b, g_last), count))
                a = min(b, g_last) + 1
                j += 1
            if a <= b:
                split.append((kind, a, b, count))
        return split

    def _apply_acquire(self, member_id: str, plan: list[tuple[str, int, int, int]],
                       now_ms: int) -> list[AcquiredRange]:
        deadline = now_ms + self.config.lock_duration_ms
        acquired: list[AcquiredRange] = []
        for kind, first, last, count in plan:
            if first >= self._end:  # new territory, in order from the end offset
                assert first == self._end, (first, self._end)
                if kind == "acq":
                    run = _Run(first, last, RecordState.ACQUIRED, 1, member_id, deadline)
                elif kind == "gap":
                    run = _Run(first, last, RecordState.ARCHIVED, 1)
                    self._dirty.append((first, last))
                else:
                    run = _Run(first, last, RecordState.AVAILABLE, 0)
                self._runs.append(run)
                self._end = last + 1
            else:
                i, j = self._carve(first, last)
                for r in self._runs[i:j]:
                    if kind == "acq":
                        r.state, r.member, r.deadline = RecordState.ACQUIRED, member_id, deadline
                        r.count += 1
                    else:
                        r.state, r.deadline = RecordState.ARCHIVED, 0
                if kind == "gap":
                    self._dirty.append((first, last))
            if kind == "acq":
                if (acquired and acquired[-1].last_offset + 1 == first
                        and acquired[-1].delivery_count == count + 1):
                    acquired[-1] = replace(acquired[-1], last_offset=last)
                else:
                    acquired.append(AcquiredRange(first, last, count + 1))
        self._normalize()
        return acquired

    # ---------------------------------------------------------------- acknowledging

    def acknowledge(self, member_id: str, acks: Sequence[tuple[int, int, Sequence[int]]],
                    now_ms: int) -> ErrorCode:
        """Apply ShareAcknowledge's AcknowledgementBatches (first, last, types): all or nothing.
        INVALID_REQUEST for a malformed batch or unknown type or offsets past the end;
        INVALID_RECORD_STATE for records not acquired by this member (or lock expired)."""
        previous_last = -1
        for first, last, types in acks:
            if first < 0 or last < first or not types or first <= previous_last:
                return ErrorCode.INVALID_REQUEST
            if len(types) != 1 and len(types) != last - first + 1:
                return ErrorCode.INVALID_REQUEST
            if any(t not in _ACK_TYPES for t in types):
                return ErrorCode.INVALID_REQUEST
            previous_last = last
        if not self.config.renew_enabled and any(AckType.RENEW in t for _, _, t in acks):
            return ErrorCode.INVALID_RECORD_STATE
        segments: list[tuple[int, int, int]] = []
        for first, last, types in acks:
            if last < self._start:
                continue
            a = max(first, self._start)
            if a >= self._end:
                return (ErrorCode.INVALID_RECORD_STATE if not self._runs
                        else ErrorCode.INVALID_REQUEST)
            if last >= self._end:
                return ErrorCode.INVALID_REQUEST
            for r in self._runs[self._find(a):]:
                if r.first > last:
                    break
                if (r.state != RecordState.ACQUIRED or r.member != member_id
                        or r.deadline <= now_ms):
                    return ErrorCode.INVALID_RECORD_STATE
            if len(types) == 1:
                segments.append((a, last, types[0]))
                continue
            seg_first = a
            for offset in range(a + 1, last + 2):
                if offset > last or types[offset - first] != types[seg_first - first]:
                    segments.append((seg_first, offset - 1, types[seg_first - first]))
                    seg_first = offset
        for first, last, ack in segments:
            i, j = self._carve(first, last)
            runs = self._runs[i:j]
            if ack == AckType.RENEW:
                for r in runs:
                    r.deadline = now_ms + self.config.lock_duration_ms
                continue
            for r in runs:
                if ack == AckType.ACCEPT:
                    self._finish(r, RecordState.ACKNOWLEDGED)
                elif ack == AckType.RELEASE:
                    self._release(r, now_ms)
                elif ack == AckType.REJECT:
                    self._archive(r, REJECTED)
                else:
                    self._finish(r, RecordState.ARCHIVED)
            self._dirty.append((first, last))
        self._normalize()
        return ErrorCode.NONE

    def release_member(self, member_id: str, now_ms: int) -> bool:
        """The member left or closed its share session: its acquired records are released
        (delivery count kept). Returns whether anything changed."""
        return self._release_where(lambda r: r.member == member_id, now_ms)

    def expire_locks(self, now_ms: int) -> bool:
        """Release acquired records whose lock expired, and make AVAILABLE the records whose
        redelivery delay ended. Returns whether anything changed."""
        changed = False
        for r in self._runs:
            if r.state == RecordState.AVAILABLE and 0 < r.deadline <= now_ms:
                r.deadline = 0
                changed = True
        released = self._release_where(lambda r: r.deadline <= now_ms, now_ms)
        if changed and not released:
            self._normalize()
        return changed or released

    def _release_where(self, predicate, now_ms: int) -> bool:
        changed = False
        for r in self._runs:
            if r.state == RecordState.ACQUIRED and predicate(r):
                self._release(r, now_ms)
                self._dirty.append((r.first, r.last))
                changed = True
        if changed:
            self._normalize()
        return changed

    def _release(self, r: _Run, now_ms: int) -> None:
        if r.count >= self.config.delivery_count_limit:
            self._archive(r, DELIVERY_LIMIT_REACHED)
        else:
            self._finish(r, RecordState.AVAILABLE)
            delay = self.config.redelivery_delay(r.count)
            r.deadline = now_ms + delay if delay > 0 else 0

    def _archive(self, r: _Run, reason: str) -> None:
        if self.config.dead_letter:
            self._finish(r, RecordState.ARCHIVING)
            r.reason = reason
            self._dlq_pending.append((r.first, r.last))
        else:
            self._finish(r, RecordState.ARCHIVED)

    @staticmethod
    def _finish(r: _Run, state: RecordState) -> None:
        r.state, r.member, r.deadline, r.reason = state, None, 0, None

    # ---------------------------------------------------------------- dead letters

    def take_dead_letters(self) -> list[DeadLetter]:
        """Ranges that entered ARCHIVING since the last call (and, after a restart, those
        persisted as ARCHIVING): copy them to the dead-letter topic, then `dead_lettered`."""
        pending, self._dlq_pending = self._dlq_pending, []
        out: list[DeadLetter] = []
        for first, last in _merge_intervals(pending):
            first, last = max(first, self._start), min(last, self._end - 1)
            if first > last:
                continue
            for r in self._runs[self._find(first):]:
                if r.first > last:
                    break
                if r.state != RecordState.ARCHIVING:
                    continue
                a, b = max(r.first, first), min(r.last, last)
                if (out and out[-1].last_offset + 1 == a and out[-1].reason == r.reason
                        and out[-1].delivery_count == r.count):
                    out[-1] = replace(out[-1], last_offset=b)
                else:
                    out.append(DeadLetter(a, b, r.count, r.reason or REJECTED))
        return out

    def dead_lettered(self, first_offset: int, last_offset: int) -> None:
        """The dead-letter write of these offsets finished: ARCHIVING -> ARCHIVED."""
        first, last = max(first_offset, self._start), min(last_offset, self._end - 1)
        if first > last:
            return
        i, j = self._carve(first, last)
        for r in self._runs[i:j]:
            if r.state == RecordState.ARCHIVING:
                self._finish(r, RecordState.ARCHIVED)
                self._dirty.append((r.first, r.last))
        self._normalize()

    # ---------------------------------------------------------------- persistence

    def take_changes(self) -> tuple[int, list[StateBatch]]:
        """What to write to the share coordinator since the last call: the start offset (-1
        when unchanged) and the batches whose state or delivery count changed, merged."""
        start = self._start if self._start_dirty else -1
        self._start_dirty = False
        dirty, self._dirty = self._dirty, []
        out: list[StateBatch] = []
        for first, last in _merge_intervals(dirty):
            first, last = max(first, self._start), min(last, self._end - 1)
            if first > last:
                continue
            for r in self._runs[self._find(first):]:
                if r.first > last:
                    break
                state, count = int(r.state), r.count
                if r.state == RecordState.ACQUIRED:  # what Kafka wrote before acquiring it
                    state, count = int(RecordState.AVAILABLE), r.count - 1
                _append_batch(out, max(r.first, first), min(r.last, last), state, count,
                              _not_before(r))
        return start, out

    def restore_changes(self, start: int, batches: list[StateBatch]) -> None:
        """A write of what `take_changes` gave failed: the next one carries it again (with
        whatever state those offsets have by then)."""
        if start >= 0:
            self._start_dirty = True
        self._dirty.extend((b.first_offset, b.last_offset) for b in batches)

    def move_start_offset(self, offset: int) -> None:
        """The log start advanced (retention, DeleteRecords) or an admin reset the start:
        records below `offset` leave the in-flight state; a move back resets all of it."""
        if offset == self._start:
            return
        if offset < self._start or offset >= self._end:
            self._runs.clear()
            self._end = offset
        else:
            i = self._split(offset)
            del self._runs[:i]
        self._set_start(offset)
        self._normalize()

    # ---------------------------------------------------------------- runs

    def _set_start(self, offset: int) -> None:
        if offset != self._start:
            self._start = offset
            self._start_dirty = True

    def _find(self, offset: int) -> int:
        """Index of the run holding `offset` (start_offset <= offset < end_offset)."""
        return bisect.bisect_right(self._runs, offset, key=lambda r: r.first) - 1

    def _split(self, offset: int) -> int:
        """Make a run start at `offset`; return its index (len(runs) at the end offset)."""
        if offset >= self._end:
            return len(self._runs)
        i = self._find(offset)
        r = self._runs[i]
        if r.first == offset:
            return i
        self._runs.insert(i + 1, replace(r, first=offset))
        r.last = offset - 1
        return i + 1

    def _carve(self, first: int, last: int) -> tuple[int, int]:
        """Split so that runs[i:j] cover exactly [first, last]."""
        i = self._split(first)
        return i, self._split(last + 1)  # inserts after i: i stays valid

    def _normalize(self) -> None:
        """Merge equal neighbours and move the start offset past leading finished records."""
        merged: list[_Run] = []
        for r in self._runs:
            if merged and merged[-1].key() == r.key() and merged[-1].last + 1 == r.first:
                merged[-1].last = r.last
            else:
                merged.append(r)
        k = 0
        while k < len(merged) and merged[k].state in _TERMINAL:
            k += 1
        if k:
            self._set_start(merged[k].first if k < len(merged) else self._end)
            merged = merged[k:]
        self._runs = merged


_ACK_TYPES = frozenset(int(t) for t in AckType)


def _not_before(r: _Run) -> int:
    """What a run persists as `StateBatch.not_before_ms`: its redelivery delay's end, if any."""
    return r.deadline if r.state == RecordState.AVAILABLE else 0


def _append_batch(out: list[StateBatch], first: int, last: int, state: int, count: int,
                  not_before: int = 0) -> None:
    if (out and out[-1].last_offset + 1 == first and out[-1].delivery_state == state
            and out[-1].delivery_count == count and out[-1].not_before_ms == not_before):
        out[-1] = replace(out[-1], last_offset=last)
    else:
        out.append(StateBatch(first, last, state, count, not_before))


def _merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for first, last in sorted(intervals):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out

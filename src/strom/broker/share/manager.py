"""The share partitions this broker leads: loading, acquiring, acknowledging, persisting.

One `SharePartition` (the state machine, `partition`) per (group, topic partition) this broker
leads, created on the first ShareFetch: its state is read from the share coordinator through
the `Persister`, or, for a partition the group never consumed, started at the offset
`share.auto.offset.reset` names. Every change of state (acknowledgements, released or timed-out
locks, records archived) is written through the persister before the request that caused it
is answered, so a restart, even a kill -9, redelivers what was acquired but not acknowledged
and never what was acknowledged.

Acquisition reads the log from the partition's fetch offset and hands the batches out as they
are (opaque bytes; only batch headers are read). Control batches are never acquired; a group
with share.isolation.level=read_committed reads only up to the last stable offset and archives
the batches of aborted transactions instead of acquiring them, as Kafka does. Lock expiries
and redelivery delays run on one loop timer per partition, armed at its next deadline. Records
that end rejected or over the delivery limit go to the group's dead-letter topic (KIP-1191)
before they are archived.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from strom.broker.share.dlq import DeadLetterWriter
from strom.broker.share.partition import AcquiredRange, SharePartition
from strom.broker.share.settings import ShareSettings, duration_ms
from strom.cluster.image import MetadataImage
from strom.common.waiters import WaiterRegistry
from strom.coordinator.share.state import Persister, SharePartitionKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.record import BatchHeader, CorruptRecordError, iter_batches
from strom.storage.errors import StorageError
from strom.storage.log import PartitionLog

log = logging.getLogger(__name__)

UNINITIALIZED = -1
_ROUNDS = 4  # reads per acquisition when a read only archived offsets
FENCED = frozenset({ErrorCode.FENCED_STATE_EPOCH, ErrorCode.FENCED_LEADER_EPOCH})


class PartitionLogs(Protocol):
    """The subset of `strom.broker.partitions.PartitionManager` share partitions use."""

    waiters: WaiterRegistry

    def get(self, topic: str, partition: int) -> PartitionLog | None: ...


@dataclass
class Fetched:
    """What one partition gives a ShareFetch: its batches and the ranges acquired in them."""

    records: bytes = b""
    acquired: list[AcquiredRange] = field(default_factory=list)
    error: int = 0
    error_message: str | None = None


@dataclass
class Held:
    """One share partition with what the manager keeps beside its state machine."""

    key: SharePartitionKey
    topic: str
    partition: SharePartition
    state_epoch: int
    leader_epoch: int
    settings: ShareSettings
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    timer: asyncio.TimerHandle | None = None
    timer_at: int | None = None
    # False while the share coordinator holds start offset -1 ("not known yet", as Kafka
    # writes it first): the first write then carries the start offset this broker chose
    start_written: bool = True
    # the partition's latest leader epoch known to be this broker's uninterrupted leadership
    # (`leader_epoch` stays the one the state was read with)
    seen_epoch: int = -1

    def __post_init__(self) -> None:
        self.seen_epoch = max(self.seen_epoch, self.leader_epoch)


def _read_window(plog: PartitionLog, offset: int, max_bytes: int, limit: int,
                 reach: int) -> bytes:
    """Whole batches from the one holding `offset`, below `limit` (the high watermark), at most
    `max_bytes` (at least one batch): those that end before `reach`, then the one batch after
    them (it holds `reach` - 1 or follows a gap), as far as the bytes allow."""
    head = plog.read(offset, max_bytes, max_offset=min(limit, reach), min_one_batch=True)
    data = head.slice.read_bytes() if head.slice is not None and head.slice.length else b""
    after = offset
    for _, header in iter_batches(data):
        after = header.last_offset + 1
    if after >= limit or len(data) >= max_bytes:
        return data
    tail = plog.read(after, 1, max_offset=limit, min_one_batch=True)
    if tail.slice is None or tail.slice.length == 0:
        return data
    if data and len(data) + tail.slice.length > max_bytes:
        return data
    return data + tail.slice.read_bytes() if data else tail.slice.read_bytes()


def _undeliverable(headers: list[BatchHeader], offset: int,
                   committed_log: PartitionLog | None) -> list[tuple[int, int]]:
    """The (first, last) offset ranges of the batches read from `offset` that no share consumer
    gets: control batches (transaction markers), and, with `committed_log` (read_committed),
    the batches of aborted transactions, found as a read_committed consumer finds them: a
    transactional batch is aborted while its producer has an aborted transaction (the log's
    index of them) begun at or before it and not yet ended by the producer's marker."""
    out: list[tuple[int, int]] = []
    pending: list[tuple[int, int]] = []  # (first offset, producer id), by first offset
    if committed_log is not None and headers:
        upper = headers[-1].last_offset + 1
        pending = sorted((first, pid) for pid, first
                         in committed_log.aborted_transactions(offset, upper))
    aborting: set[int] = set()
    k = 0
    for h in headers:
        while k < len(pending) and pending[k][0] <= h.last_offset:
            aborting.add(pending[k][1])
            k += 1
        span = (max(h.base_offset, offset), h.last_offset)
        if h.is_control:
            aborting.discard(h.producer_id)  # its marker ends the producer's transaction
        elif not (h.is_transactional and h.producer_id in aborting):
            continue
        if span[0] <= span[1]:
            out.append(span)
    return out


class SharePartitionManager:
    def __init__(self, broker_id: int, image: MetadataImage, logs: PartitionLogs,
                 persister: Persister, settings: Callable[[str], ShareSettings],
                 dead_letters: DeadLetterWriter, now_ms: Callable[[], int],
                 loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop  # timers and background writes (hooks may run outside a task)
        self.broker_id = broker_id
        self.image = image
        self.logs = logs
        self.persister = persister
        self.settings = settings
        self.dead_letters = dead_letters
        self.now_ms = now_ms
        self._held: dict[SharePartitionKey, Held] = {}
        self._loading: dict[SharePartitionKey, asyncio.Future[Held]] = {}
        self._tasks: set[asyncio.Task[None]] = set()  # background writes, kept alive
        # the latest background write of each share partition: a reload waits for it
        self._writing: dict[SharePartitionKey, asyncio.Task[None]] = {}

    # -- loading -----------------------------------------------------------------------------

    def _leader_log(self, topic_id: uuid.UUID, partition: int) -> tuple[str, int, PartitionLog]:
        topic = self.image.topics_by_id.get(topic_id)
        if topic is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_ID, f"Unknown topic id {topic_id}.")
        state = topic.partitions.get(partition)
        if state is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Unknown partition {topic.name}-{partition}.")
        plog = self.logs.get(topic.name, partition)
        if plog is None or state.leader != self.broker_id:
            raise KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER,
                             f"This broker does not lead {topic.name}-{partition}.")
        return topic.name, state.leader_epoch, plog

    async def held(self, group_id: str, topic_id: uuid.UUID, partition: int) -> Held:
        """The share partition, loaded (or started) on first use; raises KafkaError."""
        key = SharePartitionKey(group_id, topic_id, partition)
        topic, leader_epoch, _plog = self._leader_log(topic_id, partition)
        held = self._held.get(key)
        if held is not None and held.seen_epoch != leader_epoch:
            if await self._led_meanwhile(held):
                self.drop(key)  # leadership moved away and back: reload what was written
            else:
                held.seen_epoch = max(held.seen_epoch, leader_epoch)
        held = self._held.get(key)
        if held is not None:
            return held
        loading = self._loading.get(key)
        if loading is None:
            loading = self.loop.create_future()
            self._loading[key] = loading
            try:
                writing = self._writing.get(key)
                if writing is not None:  # what the dropped instance still writes comes first
                    await asyncio.wait([writing])
                held = await self._load(key, topic, leader_epoch)
                self._held[key] = held
                loading.set_result(held)
            except BaseException as exc:
                loading.set_exception(exc)
                loading.exception()  # retrieved: waiters re-raise it themselves
                raise
            finally:
                self._loading.pop(key, None)
            return held
        return await asyncio.shield(loading)

    async def _load(self, key: SharePartitionKey, topic: str, leader_epoch: int) -> Held:
        settings = self.settings(key.group_id)
        state = await self.persister.read(key, leader_epoch)
        _, _, plog = self._leader_log(key.topic_id, key.partition)
        if state is None or state.start_offset == UNINITIALIZED:
            # As Kafka: the state exists with start offset -1 until the first change is
            # written, so the admin tools show the partition as not started ("-") until then.
            start = self._reset_offset(plog, settings.auto_offset_reset)
            state_epoch = 0 if state is None else state.state_epoch
            if state is None:
                await self.persister.initialize(key, state_epoch, UNINITIALIZED)
            sp = SharePartition(settings.partition, start)
            log.info("share group %s: started share partition %s-%d at offset %d (%s)",
                     key.group_id, topic, key.partition, start, settings.auto_offset_reset)
            held = Held(key, topic, sp, state_epoch, leader_epoch, settings)
            held.start_written = False
            return held
        else:
            state_epoch = state.state_epoch
            sp = SharePartition(settings.partition, state.start_offset, state.batches)
            log.info("share group %s: loaded share partition %s-%d at offset %d with %d state "
                     "batches", key.group_id, topic, key.partition, state.start_offset,
                     len(state.batches))
        if sp.start_offset < plog.log_start_offset:  # retention or DeleteRecords moved on
            sp.move_start_offset(plog.log_start_offset)
        return Held(key, topic, sp, state_epoch, leader_epoch, settings)

    async def _led_meanwhile(self, held: Held) -> bool:
        """The partition's leader epoch moved while this broker leads it: did another leader
        take up the share partition meanwhile? Losing leadership drops a share partition
        (`drop_partition`), but a broker may see the leadership leave and come back as one
        change, and in ZooKeeper mode the epoch also moves when the controller shrinks the ISR
        (a follower died) — reloading then would forget the records members hold. Another
        leader's read records its higher leader epoch with the share coordinator."""
        try:
            summary = await self.persister.read_summary(held.key)
        except KafkaError as exc:
            log.info("share group %s: reloading %s-%d (its leader epoch moved and the share "
                     "coordinator cannot say by whom: %s)", held.key.group_id, held.topic,
                     held.key.partition, exc)
            return True
        return summary.leader_epoch > held.leader_epoch

    def _reset_offset(self, plog: PartitionLog, reset: str) -> int:
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            found = plog.offset_for_timestamp(self.now_ms() - duration_ms(reset))
            return plog.high_watermark if found is None else found[0]
        return plog.high_watermark

    def drop(self, key: SharePartitionKey) -> None:
        """Forget a share partition (leadership moved, or its state was deleted)."""
        held = self._held.pop(key, None)
        if held is not None and held.timer is not None:
            held.timer.cancel()

    def drop_partition(self, topic: str, partition: int) -> None:
        for key, held in list(self._held.items()):
            if held.topic == topic and key.partition == partition:
                self.drop(key)

    def drop_group(self, group_id: str) -> None:
        for key in [k for k in self._held if k.group_id == group_id]:
            self.drop(key)

    def reconfigure(self, group_id: str | None) -> None:
        """A group's configs changed (None: a broker config they fall back to): the share
        partitions loaded here take the new lock duration, limits and dead-letter topic."""
        for key, held in self._held.items():
            if group_id is None or key.group_id == group_id:
                held.settings = self.settings(key.group_id)
                held.partition.config = held.settings.partition

    @property
    def pending_writes(self) -> int:
        """State writes still running in the background (releases, lock expiries)."""
        return len(self._tasks)

    def in_flight(self, group_id: str) -> list[Held]:
        return [h for k, h in self._held.items() if k.group_id == group_id]

    # -- acquiring ---------------------------------------------------------------------------

    def acquire(self, held: Held, member_id: str, max_records: int, max_bytes: int,
                record_limit: bool) -> Fetched:
        """Acquire records for `member_id` from what the log has; no I/O besides the read.
        A read that only archived offsets (control batches, aborted transactions) moved the
        share partition on: read again rather than answer nothing, a few times at most."""
        for _ in range(_ROUNDS):
            end_before = held.partition.end_offset
            fetched = self._acquire_once(held, member_id, max_records, max_bytes, record_limit)
            if fetched.acquired or fetched.error or held.partition.end_offset == end_before:
                return fetched
        return fetched

    def _acquire_once(self, held: Held, member_id: str, max_records: int, max_bytes: int,
                      record_limit: bool) -> Fetched:
        now = self.now_ms()
        sp = held.partition
        offset = sp.fetch_offset(now)
        try:
            _, _, plog = self._leader_log(held.key.topic_id, held.key.partition)
        except KafkaError as exc:
            return Fetched(error=int(exc.code), error_message=exc.message)
        # share.isolation.level=read_committed: nothing at or past the last stable offset (an
        # open transaction holds delivery there), as Kafka's share fetch reads up to the LSO
        read_committed = held.settings.read_committed
        limit = plog.last_stable_offset if read_committed else plog.high_watermark
        if offset is None or offset >= limit:
            return Fetched()
        # Acquisition never goes past the in-flight window (share.partition.max.record.locks
        # from the start offset; the batch holding its last offset may straddle it): read no
        # further, or a client's 50 MiB max_bytes copies up to 50 MiB per fetch for a few.
        reach = max(sp.end_offset, sp.start_offset + sp.config.max_in_flight_records)
        if offset >= sp.end_offset:  # all new records: acquiring stops at the batch that
            reach = min(reach, offset + max(max_records, 1))  # completes max_records
        try:
            data = _read_window(plog, offset, max(max_bytes, 1), limit, reach)
        except StorageError as exc:
            return Fetched(error=int(exc.error_code), error_message=str(exc))
        except CorruptRecordError as exc:
            log.error("share group %s: cannot read %s-%d at offset %d: %s", held.key.group_id,
                      held.topic, held.key.partition, offset, exc)
            return Fetched(error=int(ErrorCode.CORRUPT_MESSAGE), error_message=str(exc))
        if not data:
            return Fetched()
        spans: list[tuple[int, int, int, int]] = []  # (base, last, start pos, end pos)
        headers: list[BatchHeader] = []
        try:
            for pos, header in iter_batches(data):
                headers.append(header)
                spans.append((header.base_offset, header.last_offset, pos, pos + header.size))
            gaps = _undeliverable(headers, offset, plog if read_committed else None)
        except CorruptRecordError as exc:
            log.error("share group %s: cannot read %s-%d at offset %d: %s", held.key.group_id,
                      held.topic, held.key.partition, offset, exc)
            return Fetched(error=int(ErrorCode.CORRUPT_MESSAGE), error_message=str(exc))
        except StorageError as exc:
            return Fetched(error=int(exc.error_code), error_message=str(exc))
        if not spans:
            return Fetched()
        batches = [(base, last) for base, last, _, _ in spans]
        acquired = sp.acquire(member_id, batches, max_records, now, record_limit=record_limit,
                              gap_ranges=gaps, fetch_offset=offset)
        self._arm(held)
        if not acquired:
            return Fetched()
        first, last = acquired[0].first_offset, acquired[-1].last_offset
        keep = [(s, e) for base, end_offset, s, e in spans
                if end_offset >= first and base <= last]
        if not keep:
            return Fetched(acquired=acquired)
        start, end = keep[0][0], keep[-1][1]
        return Fetched(records=data if (start, end) == (0, len(data)) else data[start:end],
                       acquired=acquired)

    # -- acknowledging and persisting ----------------------------------------------------------

    async def acknowledge(self, held: Held, member_id: str,
                          acks: list[tuple[int, int, list[int]]]) -> int:
        """Apply a member's acknowledgements and write them; Kafka's error code."""
        code = held.partition.acknowledge(member_id, acks, self.now_ms())
        if code:
            return int(code)
        try:
            await self.persist(held)
        except KafkaError as exc:
            log.warning("share group %s: cannot persist acknowledgements of %s-%d: %s",
                        held.key.group_id, held.topic, held.key.partition, exc)
            return int(exc.code)
        self._arm(held)
        return 0

    async def persist(self, held: Held) -> None:
        """Dead-letter what must be, then write every change of state since the last write."""
        async with held.lock:
            await self._dead_letter(held)
            start, batches = held.partition.take_changes()
            if start < 0 and not held.start_written:
                start = held.partition.start_offset
            if start < 0 and not batches:
                return
            try:
                await self.persister.write(held.key, held.state_epoch, held.leader_epoch,
                                           start, batches,
                                           held.partition.delivery_complete_count)
            except KafkaError as exc:
                if exc.code in FENCED:
                    # As Kafka: the state was replaced (an admin reset or deleted it, another
                    # leader wrote it): forget this copy, the next fetch reads the new state.
                    if self._held.get(held.key) is held:
                        self.drop(held.key)
                else:  # not written: the next write carries these changes again
                    held.partition.restore_changes(start, batches)
                raise
            held.start_written = True
        if batches:
            self.logs.waiters.notify((held.topic, held.key.partition))

    async def write_start(self, held: Held) -> None:
        """Before the first records of a new share partition go out, write where it starts:
        otherwise a restart would pick the start again (`latest` past them) and never
        redeliver them."""
        if not held.start_written:
            await self.persist(held)

    async def _dead_letter(self, held: Held) -> None:
        for dead in held.partition.take_dead_letters():
            await self.dead_letters.write(held.key.group_id, held.topic, held.key.partition,
                                          dead, held.settings)
            held.partition.dead_lettered(dead.first_offset, dead.last_offset)

    def release_member(self, group_id: str, member_id: str, group_left: bool = False) -> None:
        """A member left its group or closed its session: its records are available again.
        `group_left`: no member of the group has a share session here any more; as Kafka's
        onGroupEmpty, the group's share partitions are forgotten once their last changes are
        written, so the next fetch reads their state again (an admin may reset or delete it
        meanwhile through the group coordinator, which may be another broker)."""
        now = self.now_ms()
        for held in self.in_flight(group_id):
            if held.partition.release_member(member_id, now):
                self._persist_later(held)
        if group_left:
            self.drop_group(group_id)

    def _persist_later(self, held: Held) -> None:
        async def run() -> None:
            try:
                await self.persist(held)
            except KafkaError as exc:
                log.warning("share group %s: cannot persist the state of %s-%d: %s",
                            held.key.group_id, held.topic, held.key.partition, exc)
            self._arm(held)

        task = self.loop.create_task(run(), name=f"share-persist-{held.topic}")
        self._tasks.add(task)
        self._writing[held.key] = task

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            if self._writing.get(held.key) is t:
                del self._writing[held.key]

        task.add_done_callback(done)

    # -- lock expiry and redelivery delays -----------------------------------------------------

    def _arm(self, held: Held) -> None:
        deadline = held.partition.next_deadline()
        if deadline == held.timer_at and held.timer is not None:
            return
        if held.timer is not None:
            held.timer.cancel()
            held.timer = None
        held.timer_at = deadline
        if deadline is None:
            return
        delay = max(0.0, (deadline - self.now_ms()) / 1000)
        held.timer = self.loop.call_later(delay, self._expire, held)

    def _expire(self, held: Held) -> None:
        held.timer = held.timer_at = None
        if self._held.get(held.key) is not held:
            return
        changed = held.partition.expire_locks(self.now_ms())
        if changed:
            self._persist_later(held)
        else:
            self._arm(held)
        self.logs.waiters.notify((held.topic, held.key.partition))


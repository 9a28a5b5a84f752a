"""The share coordinator: durable state of share partitions in `__share_group_state`.

Kafka's ShareCoordinatorService and ShareCoordinatorShard in one event-loop-bound object. The
state of a share partition (group, topic id, partition) belongs to partition
`abs(hash("group:topicId:partition")) % n` of `__share_group_state`; this coordinator serves
the keys of the partitions this broker leads (`on_leadership`), rebuilding them from the log
first (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and answering NOT_COORDINATOR for the others.

A change is written as a ShareUpdate record (the batches that changed) or, once
`share.coordinator.snapshot.update.records.per.snapshot` updates have accumulated since the
last snapshot, as a new ShareSnapshot (the whole state); initialization always writes a
snapshot and deletion a tombstone. Each record is appended to the log before the request is
answered, and applied to memory by the same code that replays the log, once the append
succeeded; in a cluster the answer also waits until the partition's in-sync replicas have it.
As Kafka's acks=all append, a write is refused before anything is appended or applied while
the partition's ISR is below its min.insync.replicas. A record appended and applied stays
applied when the wait for the replicas then fails, as in Kafka's coordinator runtime: memory
follows the leader's log, and only a leader change, which reloads the partition, can drop it.

Fencing follows Kafka 4.4: a request whose state epoch is below the stored one is
FENCED_STATE_EPOCH, a leader epoch below the stored one FENCED_LEADER_EPOCH; a read by a new
leader records its leader epoch. Records no key still needs (everything before the oldest
snapshot a live key refers to) are pruned every `share.coordinator.state.topic.prune.interval.ms`.
"""

from __future__ import annotations

import base64
import binascii
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from strom.coordinator.partitioning import partition_for
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.loader import ShardLoader
from strom.coordinator.runtime.timers import Scheduler, Timers
from strom.coordinator.share import records as rec
from strom.coordinator.share.config import ShareCoordinatorConfig
from strom.coordinator.share.merge import combine
from strom.coordinator.share.state import PartitionState, SharePartitionKey, StateBatch
from strom.coordinator.share.store import SHARE_STATE_TOPIC, ShareStateTopic, ShareStore
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

NO_OFFSET = 2**63 - 1  # Long.MAX_VALUE: nothing redundant yet

# Kafka's messages for the requests its share coordinator refuses as INVALID_REQUEST
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."


def parse_coordinator_key(key: str) -> SharePartitionKey:
    """The SharePartitionKey of a FindCoordinator(key_type SHARE) key, "group:topicId:partition"
    (the group id may hold colons); raises ValueError as Kafka refuses a malformed one."""
    tokens = key.split(":")
    if not key or len(tokens) < 3:
        raise ValueError(f"Invalid key format: expected - groupId:topicId:partition, found - {key}")
    group_id = ":".join(tokens[:-2])
    if not group_id.strip():
        raise ValueError("GroupId must not be empty")
    try:
        raw = base64.urlsafe_b64decode(tokens[-2] + "=" * (-len(tokens[-2]) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 16:
        raise ValueError(f"Invalid topic id {tokens[-2]}")
    try:
        partition = int(tokens[-1])
    except ValueError:
        raise ValueError(f"Invalid partition {tokens[-1]}") from None
    return SharePartitionKey(group_id, uuid.UUID(bytes=raw), partition)


class UninitializedSharePartition(KafkaError):
    """ReadShareGroupState of a share partition that was never initialized (INVALID_REQUEST on
    the wire, as in Kafka); the persisters turn it into None."""

    def __init__(self) -> None:
        super().__init__(ErrorCode.INVALID_REQUEST, READ_UNINITIALIZED)


class TopicPartitions(Protocol):
    """The cluster's topics by id, as the coordinator checks them (the metadata image)."""

    def partition_count(self, topic_id: uuid.UUID) -> int | None:
        """The topic's partition count, or None when no topic has this id."""


ShareState = rec.ShareSnapshot  # the whole state of a share partition (Kafka's ShareGroupOffset)
Entry = tuple[int, rec.ShareRecord]  # a replayed record and its offset


class ShareShard:
    """The share-partition states of one `__share_group_state` partition this broker leads."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.loading = True
        self.loader: Iterator[list[Entry]] | None = None
        self.states: dict[SharePartitionKey, ShareState] = {}
        self.leader_epochs: dict[SharePartitionKey, int] = {}
        self.state_epochs: dict[SharePartitionKey, int] = {}
        self.update_counts: dict[SharePartitionKey, int] = {}
        # Offset of each live key's latest snapshot: the records below the oldest are redundant
        # (Kafka's ShareCoordinatorOffsetsManager).
        self.snapshot_offsets: dict[SharePartitionKey, int] = {}
        self.redundant_offset = NO_OFFSET
        self.pruned_to: int | None = None


class ShareCoordinator:
    def __init__(self, config: ShareCoordinatorConfig, topic: ShareStateTopic,
                 topics: TopicPartitions, scheduler: Scheduler, now_ms: Callable[[], int],
                 commits: Commits | None = None) -> None:
        self.config = config
        self.topic = topic
        self.topics = topics
        self.store = ShareStore(topic, now_ms, commits)
        self.store.commits.register(SHARE_STATE_TOPIC, config.write_timeout_ms)
        self.scheduler = scheduler
        self.now_ms = now_ms
        self.timers = Timers(scheduler)
        self.shards: dict[int, ShareShard] = {}
        self._loader = ShardLoader(self.shards, self.store.replay, scheduler, SHARE_STATE_TOPIC,
                                   self)
        self.active = False

    # ========================================================================================
    # Lifecycle, partitioning and leadership
    # ========================================================================================

    def start(self) -> None:
        """Start serving and arm the periodic pruning of `__share_group_state`."""
        if not self.active:
            self.active = True
            self._schedule_prune()

    def shutdown(self) -> None:
        self.active = False
        self.timers.cancel_all()
        self.shards.clear()

    def _schedule_prune(self) -> None:
        def run() -> None:
            try:
                self.prune()
            except Exception:
                log.exception("pruning %s failed", SHARE_STATE_TOPIC)
            if self.active:
                self._schedule_prune()

        self.timers.schedule(("prune", ""), self.config.prune_interval_ms, run)

    def num_partitions(self) -> int:
        n = self.topic.num_partitions()
        return n if n else self.config.state_partitions

    def partition_for(self, key: SharePartitionKey) -> int:
        """Kafka's `Utils.abs(key.asCoordinatorKey().hashCode()) % partitions`."""
        return partition_for(key.coordinator_key(), self.num_partitions())

    def ensure_topic(self) -> int:
        """Create `__share_group_state` on first need; returns its partition count."""
        n = self.topic.num_partitions()
        return n if n else self.topic.create()

    def is_local(self, key: SharePartitionKey) -> bool:
        """True when this broker serves (or is loading) the key's partition."""
        return self.partition_for(key) in self.shards

    def is_loading(self, partition: int) -> bool:
        shard = self.shards.get(partition)
        return shard is not None and shard.loading

    def on_leadership(self, partition: int, leader: bool, epoch: int = 0) -> None:
        """Called when this broker starts or stops leading `__share_group_state-<partition>`."""
        self._loader.on_leadership(partition, leader, epoch)

    # -- ShardHooks ------------------------------------------------------------------------

    def new_shard(self, partition: int, epoch: int) -> ShareShard:
        return ShareShard(partition, epoch)

    def replay_chunk(self, shard: ShareShard, chunk: list[Entry]) -> None:
        for offset, record in chunk:
            self._replay(shard, offset, record)

    def loaded(self, shard: ShareShard) -> None:
        shard.loading = False
        if shard.states:
            log.info("loaded the state of %d share partitions from %s-%d", len(shard.states),
                     SHARE_STATE_TOPIC, shard.partition)

    def unload(self, shard: ShareShard) -> None:
        shard.loader = None
        shard.states.clear()

    # ========================================================================================
    # Replay: the one place records change the in-memory state (loads and writes alike)
    # ========================================================================================

    def _replay(self, shard: ShareShard, offset: int, record: rec.ShareRecord) -> None:
        key, value = record.key, record.value
        if record.record_type == rec.SHARE_SNAPSHOT:
            if value is None:
                shard.states.pop(key, None)
                shard.leader_epochs.pop(key, None)
                shard.state_epochs.pop(key, None)
                shard.update_counts.pop(key, None)
            else:
                assert isinstance(value, rec.ShareSnapshot)
                _raise_to(shard.leader_epochs, key, value.leader_epoch)
                _raise_to(shard.state_epochs, key, value.state_epoch)
                shard.states[key] = value
                count = shard.update_counts.get(key)
                if count is not None and count >= self.config.updates_per_snapshot:
                    shard.update_counts[key] = 0
            self._snapshot_at(shard, key, offset, deleted=value is None)
        elif value is not None:
            assert isinstance(value, rec.ShareUpdate)
            _raise_to(shard.leader_epochs, key, value.leader_epoch)
            current = shard.states.get(key)
            shard.states[key] = _as_state(value) if current is None else _merged(current, value)
            shard.update_counts[key] = shard.update_counts.get(key, 0) + 1

    @staticmethod
    def _snapshot_at(shard: ShareShard, key: SharePartitionKey, offset: int,
                     deleted: bool) -> None:
        shard.snapshot_offsets[key] = offset
        shard.redundant_offset = min(shard.snapshot_offsets.values())
        if deleted:
            del shard.snapshot_offsets[key]

    # ========================================================================================
    # Lookups and checks
    # ========================================================================================

    def _shard(self, key: SharePartitionKey) -> ShareShard:
        if not self.active:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             "Share coordinator is not available.")
        partition = self.partition_for(key)
        shard = self.shards.get(partition)
        if shard is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker does not lead {SHARE_STATE_TOPIC}-{partition}.")
        if shard.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"{SHARE_STATE_TOPIC}-{partition} is loading.")
        return shard

    def state(self, key: SharePartitionKey) -> ShareState | None:
        """The stored state of a share partition this broker coordinates (tests and tools)."""
        shard = self.shards.get(self.partition_for(key))
        return None if shard is None or shard.loading else shard.states.get(key)

    def update_count(self, key: SharePartitionKey) -> int:
        """ShareUpdate records written since the key's last snapshot (tests and tools)."""
        shard = self.shards.get(self.partition_for(key))
        return 0 if shard is None else shard.update_counts.get(key, 0)

    def _check_topic(self, key: SharePartitionKey) -> None:
        count = self.topics.partition_count(key.topic_id)
        if count is None or count <= key.partition:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"Topic {key.topic_id} partition {key.partition} not found.")

    @staticmethod
    def _check_partition(key: SharePartitionKey) -> None:
        if key.partition < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID)

    # ========================================================================================
    # Writing
    # ========================================================================================

    async def _write(self, shard: ShareShard, record: tuple[bytes, bytes | None]) -> None:
        """Append one record (refused first while the ISR is below min.insync.replicas), apply
        it, and wait until it is committed."""
        offset = self.store.append(shard.partition, [record])
        self._replay(shard, offset, rec.decode(*record))
        code = await self.store.commits.wait(SHARE_STATE_TOPIC, shard.partition, offset + 1)
        if code:
            raise KafkaError(code, f"the write to {SHARE_STATE_TOPIC}-{shard.partition} was not "
                                   "replicated")

    def _state_record(self, shard: ShareShard, key: SharePartitionKey, leader_epoch: int,
                      start_offset: int, batches: Iterable[StateBatch],
                      delivery_complete_count: int,
                      update_leader_epoch: bool) -> tuple[bytes, bytes]:
        """A ShareUpdate of the change, or a ShareSnapshot of the whole new state once enough
        updates have accumulated (Kafka's generateShareStateRecord)."""
        current = shard.states[key]
        new_leader_epoch = leader_epoch if update_leader_epoch else current.leader_epoch
        new_start = max(start_offset, current.start_offset)
        complete = delivery_complete_count
        if start_offset == current.start_offset:
            complete = max(delivery_complete_count, current.delivery_complete_count)
        elif start_offset < current.start_offset:
            complete = current.delivery_complete_count
        if shard.update_counts.get(key, 0) >= self.config.updates_per_snapshot:
            now = self.now_ms()
            return rec.snapshot_record(key, rec.ShareSnapshot(
                current.snapshot_epoch + 1, current.state_epoch, new_leader_epoch, new_start,
                complete, now, now, tuple(combine(current.batches, batches, new_start))))
        return rec.update_record(key, rec.ShareUpdate(
            current.snapshot_epoch, new_leader_epoch, new_start, complete,
            tuple(combine((), batches, new_start))))

    # ========================================================================================
    # InitializeShareGroupState, ReadShareGroupState, WriteShareGroupState,
    # DeleteShareGroupState, ReadShareGroupStateSummary
    # ========================================================================================

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        """Start (or restart, with a state epoch at least the stored one) a share partition at
        `start_offset` (-1: not known yet): a new snapshot with no batches."""
        shard = self._shard(key)
        self._check_partition(key)
        if state_epoch < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, NEGATIVE_STATE_EPOCH)
        stored = shard.state_epochs.get(key)
        if stored is not None and stored > state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH,
                             f"The state epoch {state_epoch} is below the stored {stored}.")
        self._check_topic(key)
        current = shard.states.get(key)
        now = self.now_ms()
        snapshot = rec.ShareSnapshot(
            snapshot_epoch=current.snapshot_epoch + 1 if current is not None else 0,
            state_epoch=state_epoch, leader_epoch=0, start_offset=start_offset,
            delivery_complete_count=-1 if start_offset == -1 else 0,
            create_timestamp=now, write_timestamp=now)
        await self._write(shard, rec.snapshot_record(key, snapshot))

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState:
        """The whole state of a share partition, for its (new) leader: a leader epoch above
        the stored one is recorded first. Raises `UninitializedSharePartition` when the
        partition was never initialized."""
        shard = self._shard(key)
        self._check_partition(key)
        if leader_epoch < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, NEGATIVE_LEADER_EPOCH)
        current = shard.states.get(key)
        if current is None:
            raise UninitializedSharePartition()
        self._check_leader_epoch(shard, key, leader_epoch)
        self._check_topic(key)
        result = PartitionState(current.state_epoch, current.start_offset, leader_epoch,
                                list(current.batches), current.delivery_complete_count)
        if shard.leader_epochs.get(key) != leader_epoch:
            await self._write(shard, self._state_record(
                shard, key, leader_epoch, current.start_offset, (),
                current.delivery_complete_count, update_leader_epoch=True))
        return result

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        """Record a change of a share partition: its new start offset (-1: unchanged) and the
        batches whose state changed (combined with the stored ones as Kafka combines them)."""
        shard = self._shard(key)
        self._check_partition(key)
        if leader_epoch < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, NEGATIVE_LEADER_EPOCH)
        if state_epoch < 0:
            raise KafkaError(ErrorCode.INVALID_REQUEST, NEGATIVE_STATE_EPOCH)
        if key not in shard.states:
            raise KafkaError(ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED)
        self._check_leader_epoch(shard, key, leader_epoch)
        stored = shard.state_epochs.get(key)
        if stored is not None and stored > state_epoch:
            raise KafkaError(ErrorCode.FENCED_STATE_EPOCH,
                             f"The state epoch {state_epoch} is below the stored {stored}.")
        self._check_topic(key)
        await self._write(shard, self._state_record(
            shard, key, leader_epoch, start_offset, batches, delivery_complete_count,
            update_leader_epoch=False))

    async def delete(self, key: SharePartitionKey) -> None:
        """Forget a share partition's state (a tombstone); nothing to forget is no error."""
        shard = self._shard(key)
        self._check_partition(key)
        self._check_topic(key)
        if key not in shard.states:
            return
        await self._write(shard, rec.tombstone(key))

    def read_summary(self, key: SharePartitionKey) -> PartitionState:
        """State epoch, leader epoch, start offset and delivery complete count of a share
        partition, without its batches (start offset -1 when never initialized)."""
        shard = self._shard(key)
        self._check_partition(key)
        self._check_topic(key)
        current = shard.states.get(key)
        if current is None:
            return PartitionState(state_epoch=0, start_offset=-1, leader_epoch=0,
                                  delivery_complete_count=-1)
        return PartitionState(current.state_epoch, current.start_offset, current.leader_epoch,
                              [], current.delivery_complete_count)

    @staticmethod
    def _check_leader_epoch(shard: ShareShard, key: SharePartitionKey, leader_epoch: int) -> None:
        stored = shard.leader_epochs.get(key)
        if stored is not None and stored > leader_epoch:
            raise KafkaError(ErrorCode.FENCED_LEADER_EPOCH,
                             f"The leader epoch {leader_epoch} is below the stored {stored}.")

    # ========================================================================================
    # Housekeeping: pruning, deleted topics
    # ========================================================================================

    def prunable_offset(self, partition: int) -> int | None:
        """The offset below which partition's records are no longer needed (None: nothing)."""
        shard = self.shards.get(partition)
        if shard is None or shard.loading:
            return None
        value = shard.redundant_offset
        return None if value <= 0 or value == NO_OFFSET else value

    def prune(self) -> dict[int, int]:
        """Drop the redundant records of every loaded partition (Kafka deletes them with
        DeleteRecords); returns {partition: new log start offset} for those pruned."""
        out: dict[int, int] = {}
        for partition, shard in list(self.shards.items()):
            target = self.prunable_offset(partition)
            if target is None or shard.pruned_to == target:
                continue
            try:
                start = self.store.prune(partition, target)
            except Exception as exc:
                log.warning("cannot prune %s-%d below %d: %s", SHARE_STATE_TOPIC, partition,
                            target, exc)
                continue
            if start is not None:
                shard.pruned_to = target
                out[partition] = start
        return out

    async def on_topics_deleted(self, topic_ids: set[uuid.UUID]) -> None:
        """Forget the share partitions of deleted topics (Kafka's maybeCleanupShareState)."""
        for shard in list(self.shards.values()):
            if shard.loading:
                continue
            for key in [k for k in shard.states if k.topic_id in topic_ids]:
                if self.shards.get(shard.partition) is not shard or key not in shard.states:
                    continue
                try:
                    await self._write(shard, rec.tombstone(key))
                except KafkaError as exc:
                    log.warning("cannot forget the share state of %s: %s", key, exc)


# ============================================================================================
# Helpers
# ============================================================================================


def _raise_to(epochs: dict[SharePartitionKey, int], key: SharePartitionKey, epoch: int) -> None:
    old = epochs.get(key)
    if old is None or old < epoch:
        epochs[key] = epoch


def _as_state(update: rec.ShareUpdate) -> ShareState:
    """An update met without a snapshot before it (Kafka keeps it as the state)."""
    return rec.ShareSnapshot(update.snapshot_epoch, 0, update.leader_epoch, update.start_offset,
                             update.delivery_complete_count, 0, 0, update.batches)


def _merged(current: ShareState, update: rec.ShareUpdate) -> ShareState:
    """The state after a ShareUpdate (Kafka's ShareCoordinatorShard.merge)."""
    start = current.start_offset if update.start_offset == -1 else update.start_offset
    leader_epoch = current.leader_epoch if update.leader_epoch == -1 else update.leader_epoch
    return rec.ShareSnapshot(
        current.snapshot_epoch, current.state_epoch, leader_epoch, start,
        update.delivery_complete_count, current.create_timestamp, current.write_timestamp,
        tuple(combine(current.batches, update.batches, start)))

"""The state the group managers share: the `__consumer_offsets` partitions this broker leads.

A group belongs to partition `abs(hash(group_id)) % n` of `__consumer_offsets`. `GroupShards`
holds one `Shard` (groups and committed offsets) per partition this broker leads, loads it from
the log when leadership arrives (COORDINATOR_LOAD_IN_PROGRESS meanwhile), drops it when
leadership leaves, and answers NOT_COORDINATOR for groups of other partitions. It also holds
what every manager writes through: the store (appends to `__consumer_offsets`), the timers and
the clock. The classic, consumer-protocol and offsets managers each receive this one object
(composition, as Kafka's GroupMetadataManager and OffsetMetadataManager share a shard); the
records a load replays go to a `ShardListener` (the coordinator), which routes them by type.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol

from strom.coordinator.group import records as rec
from strom.coordinator.group.config import BrokerGroupConfigs, GroupConfig
from strom.coordinator.group.group_configs import EffectiveGroupConfig, GroupConfigs
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.group.state import (
    ClassicGroup,
    ClassicState,
    ConsumerGroup,
    OffsetAndMetadata,
)
from strom.coordinator.group.store import STATE_TOPIC, GroupStore, OffsetsTopic
from strom.coordinator.group.streams_state import StreamsGroup
from strom.coordinator.partitioning import partition_for
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.loader import ShardLoader
from strom.coordinator.runtime.store import TxnMarkerRecord
from strom.coordinator.runtime.timers import Scheduler, Timers
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

Group = ClassicGroup | ConsumerGroup | StreamsGroup | ShareGroup
LogEntry = rec.CoordinatorRecord | TxnMarkerRecord
Offsets = dict[tuple[str, int], OffsetAndMetadata]


class TopicsView(Protocol):
    """The cluster's topics as the coordinator sees them (the metadata image, adapted)."""

    def version(self) -> int:
        """Changes whenever topics or partition counts change (cache key)."""

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        """(topic id, partition count) of a topic, or None."""

    def topic_name(self, topic_id: uuid.UUID) -> str | None: ...

    def names(self) -> Iterable[str]:
        """Names of the user topics (internal topics left out)."""


class Shard:
    """The groups and committed offsets of one `__consumer_offsets` partition this broker leads.

    `offsets` and `pending_txn` are written only by the offsets manager; `groups` by the
    manager of each group's protocol (and by the offsets manager for "simple" groups)."""

    def __init__(self, partition: int, epoch: int) -> None:
        self.partition = partition
        self.epoch = epoch
        self.loading = True
        self.groups: dict[str, Group] = {}
        self.offsets: dict[str, Offsets] = {}
        self.loader: Iterator[list[LogEntry]] | None = None
        # TxnOffsetCommit offsets waiting for their transaction marker, per producer id
        self.pending_txn: dict[int, dict[str, Offsets]] = {}


class ShardListener(Protocol):
    """Who turns a shard's replayed records into groups and offsets (the coordinator)."""

    def replay(self, shard: Shard, record: LogEntry) -> None: ...

    def loaded(self, shard: Shard) -> None:
        """The shard's log is replayed: arm the timers its groups need."""

    def unloading(self, shard: Shard) -> None:
        """The shard is about to be dropped: answer the requests parked on its groups."""


def group_tombstones(group: Group) -> list[rec.KeyValue]:
    """The records that delete a group's membership state (its offsets are separate)."""
    if isinstance(group, ClassicGroup):
        return [rec.group_tombstone(group.group_id)]
    if isinstance(group, StreamsGroup):
        return rec.streams_group_tombstones(group.group_id, set(group.members) | set(group.target))
    if isinstance(group, ShareGroup):
        return rec.share_group_tombstones(group.group_id, set(group.members) | set(group.target))
    return rec.consumer_group_tombstones(group.group_id, set(group.members) | set(group.target))


class GroupShards:
    """The shards this broker leads, and the store, timers and clock the managers share."""

    def __init__(self, config: GroupConfig, offsets_topic: OffsetsTopic, topics: TopicsView,
                 scheduler: Scheduler, now_ms: Callable[[], int],
                 listener: ShardListener, group_configs: GroupConfigs | None = None,
                 commits: Commits | None = None) -> None:
        self.config = config
        self.group_configs: GroupConfigs = group_configs or BrokerGroupConfigs(config)
        self.offsets_topic = offsets_topic
        self.topics = topics
        self.store = GroupStore(offsets_topic, now_ms, commits)
        self.timers = Timers(scheduler)
        self.now_ms = now_ms
        self.shards: dict[int, Shard] = {}
        self._listener = listener
        self._loader: ShardLoader[Shard, list[LogEntry]] = ShardLoader(
            self.shards, self.store.replay, scheduler, STATE_TOPIC, self)

    def settings(self, group_id: str) -> EffectiveGroupConfig:
        """The group's configs in force (its group configs, else the broker's)."""
        return self.group_configs.for_group(group_id)

    # -- partitions ----------------------------------------------------------------------------

    def num_partitions(self) -> int:
        n = self.offsets_topic.num_partitions()
        return n if n else self.config.offsets_partitions

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions())

    def ensure_offsets_topic(self) -> int:
        """Create `__consumer_offsets` on first need (FindCoordinator); returns partitions."""
        n = self.offsets_topic.num_partitions()
        return n if n else self.offsets_topic.create()

    # -- loading (ShardHooks of the loader) ----------------------------------------------------

    def on_leadership(self, partition: int, leader: bool, epoch: int = 0) -> None:
        self._loader.on_leadership(partition, leader, epoch)

    def is_loading(self, partition: int) -> bool:
        shard = self.shards.get(partition)
        return shard is not None and shard.loading

    def new_shard(self, partition: int, epoch: int) -> Shard:
        return Shard(partition, epoch)

    def replay_chunk(self, shard: Shard, chunk: list[LogEntry]) -> None:
        for record in chunk:
            self._listener.replay(shard, record)

    def loaded(self, shard: Shard) -> None:
        shard.loading = False
        self._listener.loaded(shard)
        if shard.groups or shard.offsets:
            log.info("loaded %d groups and offsets of %d groups from %s-%d",
                     len(shard.groups), len(shard.offsets), STATE_TOPIC, shard.partition)

    def unload(self, shard: Shard) -> None:
        for group_id in shard.groups:
            self.timers.cancel_group(group_id)
        self._listener.unloading(shard)
        shard.groups.clear()
        shard.offsets.clear()
        shard.pending_txn.clear()
        shard.loader = None

    def shutdown(self) -> None:
        for shard in list(self.shards.values()):
            self.unload(shard)
        self.shards.clear()
        self.timers.cancel_all()

    # -- lookups -------------------------------------------------------------------------------

    def serving(self, group_id: str | None) -> Shard:
        """The loaded shard of a group this broker coordinates; raises the error to answer."""
        if not group_id:
            raise KafkaError(ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
        shard = self.shards.get(self.partition_for(group_id))
        if shard is None:
            raise KafkaError(ErrorCode.NOT_COORDINATOR,
                             f"This broker is not the coordinator of group {group_id}.")
        if shard.loading:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             f"The coordinator is loading the state of group {group_id}.")
        self.store.touch(shard.partition)  # the answer waits for what it read to be committed
        return shard

    def shard_of(self, group_id: str) -> Shard | None:
        """The group's shard if this broker leads its partition, loaded or not (timers)."""
        return self.shards.get(self.partition_for(group_id)) if group_id else None

    def group(self, group_id: str) -> Group | None:
        """The group if this broker coordinates it, has loaded it and it exists."""
        shard = self.shard_of(group_id)
        return shard.groups.get(group_id) if shard is not None and not shard.loading else None

    def loaded_shards(self) -> list[Shard]:
        return [shard for shard in self.shards.values() if not shard.loading]

    # -- changes shared by the managers --------------------------------------------------------

    def new_classic_group(self, shard: Shard, group_id: str) -> ClassicGroup:
        """A new empty classic group (JoinGroup, or a "simple" group of offsets only)."""
        group = ClassicGroup(group_id, self.now_ms())
        shard.groups[group_id] = group
        return group

    def remove_group(self, shard: Shard, group_id: str) -> None:
        """Forget a group and its timers (the caller has written its tombstones)."""
        shard.groups.pop(group_id, None)
        self.timers.cancel_group(group_id)

    def delete_group_state(self, shard: Shard, group: Group) -> None:
        """Write the tombstones of a group's membership state, then forget it (offsets stay),
        e.g. before a group of the other protocol takes over its id."""
        self.store.append(shard.partition, group_tombstones(group))
        self.remove_group(shard, group.group_id)


def mark_deleted(group: Group) -> None:
    """A deleted group answers Dead to whoever still holds it."""
    if isinstance(group, ClassicGroup):
        group.state = ClassicState.DEAD
    else:
        group.deleted = True

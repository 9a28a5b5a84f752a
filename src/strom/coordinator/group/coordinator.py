"""The group coordinator: the shared state and the managers over it, built and wired together.

Kafka splits its group coordinator shard into a GroupMetadataManager and an
OffsetMetadataManager over shared state; Strom does the same by composition:

- `shards.GroupShards`: the `__consumer_offsets` partitions this broker leads (groups and
  offsets per partition), their loading, the store, timers and clock; shared by
- `classic_groups.ClassicGroupManager`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
  DescribeGroups;
- `consumer_groups.ConsumerGroupManager`: KIP-848 ConsumerGroupHeartbeat and
  ConsumerGroupDescribe, and the online migration between the two protocols (`migration`);
- `classic_members.ClassicMemberManager`: the classic requests of members of a consumer group
  (the classic manager hands them over when the group is a consumer group);
- `streams_groups.StreamsGroupManager`: KIP-1071 StreamsGroupHeartbeat and
  StreamsGroupDescribe;
- `share_groups.ShareGroupManager`: KIP-932 ShareGroupHeartbeat and ShareGroupDescribe
  (the share partitions themselves live with the partitions' leaders, `strom.broker.share`);
- `offsets.OffsetManager`: OffsetCommit, OffsetFetch, OffsetDelete, TxnOffsetCommit, expiry.

The broker's handlers call the managers directly (`broker.groups.classic.join_group`,
`broker.groups.offsets.commit_offsets`, ...). This facade keeps what is not one manager's:
the lifecycle (start, shutdown, the leadership of the `__consumer_offsets` partitions and
their loading), the routing of records replayed on load to the manager of their type (Kafka's
GroupCoordinatorShard.replay) and of loaded and unloading groups, the deleted topics (the
offsets and the share groups both forget them), the committed offsets of every group (for
consumer lag), and the two requests that span the protocols and the offsets: ListGroups and
DeleteGroups.
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from strom.coordinator.group import records as rec
from strom.coordinator.group.classic_groups import ClassicGroupManager
from strom.coordinator.group.classic_members import ClassicMemberManager
from strom.coordinator.group.config import GroupConfig
from strom.coordinator.group.consumer_groups import ConsumerGroupManager
from strom.coordinator.group.group_configs import GroupConfigs
from strom.coordinator.group.offsets import OffsetManager, is_offset_record
from strom.coordinator.group.replies import ListedGroup
from strom.coordinator.group.shards import (
    Group,
    GroupShards,
    LogEntry,
    Shard,
    TopicsView,
    group_tombstones,
    mark_deleted,
)
from strom.coordinator.group.share_groups import ShareGroupManager
from strom.coordinator.group.share_state import ShareGroup
from strom.coordinator.group.state import ClassicGroup, ClassicState
from strom.coordinator.group.store import STATE_TOPIC, GroupStore, OffsetsTopic
from strom.coordinator.group.streams_groups import InternalTopicCreator, StreamsGroupManager
from strom.coordinator.group.streams_state import StreamsGroup
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.store import TxnMarkerRecord
from strom.coordinator.runtime.timers import Scheduler
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

__all__ = ["GroupConfig", "GroupCoordinator", "InternalTopicCreator", "TopicsView"]


class GroupCoordinator:
    def __init__(self, config: GroupConfig, offsets_topic: OffsetsTopic, topics: TopicsView,
                 scheduler: Scheduler, now_ms: Callable[[], int],
                 internal_topics: InternalTopicCreator | None = None,
                 group_configs: GroupConfigs | None = None,
                 commits: Commits | None = None) -> None:
        self.state = GroupShards(config, offsets_topic, topics, scheduler, now_ms, self,
                                 group_configs, commits)
        self.state.store.commits.register(STATE_TOPIC, config.commit_timeout_ms)
        # each group's configs in force (group configs over the broker's group.* configs)
        self.group_configs = self.state.group_configs
        self.classic = ClassicGroupManager(self.state)
        self.consumer = ConsumerGroupManager(self.state, self.classic)
        self.streams = StreamsGroupManager(self.state, internal_topics)
        self.share = ShareGroupManager(self.state)
        self.classic.in_consumer_groups = ClassicMemberManager(self.consumer)
        self.offsets = OffsetManager(self.state, self.classic)

    @property
    def store(self) -> GroupStore:
        return self.state.store

    # -- lifecycle, partitions and loading -----------------------------------------------------

    def start(self) -> None:
        """Arm the periodic offset-expiration check."""
        self.offsets.start()

    def shutdown(self) -> None:
        self.offsets.stop()
        self.state.shutdown()

    def num_partitions(self) -> int:
        return self.state.num_partitions()

    def partition_for(self, group_id: str) -> int:
        return self.state.partition_for(group_id)

    def ensure_offsets_topic(self) -> int:
        """Create `__consumer_offsets` on first need (FindCoordinator); returns partitions."""
        return self.state.ensure_offsets_topic()

    def on_leadership(self, partition: int, leader: bool, epoch: int = 0) -> None:
        """Called when this broker starts or stops leading `__consumer_offsets-<partition>`."""
        self.state.on_leadership(partition, leader, epoch)

    def is_loading(self, partition: int) -> bool:
        return self.state.is_loading(partition)

    def is_local(self, group_id: str) -> bool:
        """True when this broker serves (or is loading) the group's partition. The empty group
        id too: it has a partition like any other (OffsetFetch accepts it; JoinGroup refuses it
        with INVALID_GROUP_ID, which the client must reach rather than retry FindCoordinator)."""
        return self.state.partition_for(group_id) in self.state.shards

    def committed_offsets(self) -> dict[str, dict[tuple[str, int], int]]:
        """Every committed offset of the groups this broker coordinates and has loaded, per
        group (consumer lag is computed from them)."""
        out: dict[str, dict[tuple[str, int], int]] = {}
        for partition, shard in list(self.state.shards.items()):
            if self.state.is_loading(partition):
                continue
            for group_id, offsets in list(shard.offsets.items()):
                group = shard.groups.get(group_id)
                if isinstance(group, ClassicGroup) and group.is_state(ClassicState.DEAD):
                    continue
                out[group_id] = {tp: oam.offset for tp, oam in list(offsets.items())}
        return out

    def group(self, group_id: str) -> Group | None:
        """The group if this broker coordinates it and it exists (tests and tools)."""
        return self.state.group(group_id)

    # -- ShardListener: replayed records go to the manager of their type -----------------------

    def replay(self, shard: Shard, record: LogEntry) -> None:
        # (every transaction marker is an offset record: the isinstance only tells the checker)
        if is_offset_record(record) or isinstance(record, TxnMarkerRecord):
            self.offsets.replay(shard, record)
        elif record.type == rec.GROUP_METADATA:
            self.classic.replay(shard, record)
        elif record.type in rec.STREAMS_RECORDS:
            self.streams.replay(shard, record)
        elif record.type in rec.SHARE_RECORDS:
            self.share.replay(shard, record)
        else:
            self.consumer.replay(shard, record)

    def loaded(self, shard: Shard) -> None:
        for group in shard.groups.values():
            if isinstance(group, ClassicGroup):
                self.classic.on_loaded(group)
            elif isinstance(group, StreamsGroup):
                self.streams.on_loaded(group)
            elif isinstance(group, ShareGroup):
                self.share.on_loaded(group)
            else:
                self.consumer.on_loaded(group)

    def unloading(self, shard: Shard) -> None:
        for group in shard.groups.values():
            if isinstance(group, ClassicGroup):
                self.classic.on_unloading(group)

    # -- deleted topics: both the offsets and the share groups forget them ----------------------

    def on_topics_deleted(self, topics: set[str]) -> None:
        self.offsets.on_topics_deleted(topics)
        self.share.on_topics_deleted(topics)

    # -- ListGroups and DeleteGroups: both protocols, and the offsets --------------------------

    def list_groups(self, states: Iterable[str] = (), types: Iterable[str] = ()
                    ) -> tuple[int, list[ListedGroup]]:
        states_filter = {s.lower() for s in states}
        types_filter = {t.lower() for t in types}
        error = ErrorCode.NONE
        out: list[ListedGroup] = []
        for shard in self.state.shards.values():
            if shard.loading:
                error = ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                continue
            for group in shard.groups.values():
                if states_filter and group.state_name.lower() not in states_filter:
                    continue
                if types_filter and group.type not in types_filter:
                    continue
                out.append(ListedGroup(group.group_id, group.protocol_type or "",
                                       group.state_name, group.type))
        return error, out

    def delete_groups(self, group_ids: list[str]) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for gid in group_ids:
            try:
                shard = self.state.serving(gid)
                group = shard.groups.get(gid)
                if group is None or (isinstance(group, ClassicGroup)
                                     and group.is_state(ClassicState.DEAD)):
                    raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND)
                if not group.is_empty:
                    raise KafkaError(ErrorCode.NON_EMPTY_GROUP)
                self._delete_group(shard, group)
                out.append((gid, ErrorCode.NONE))
            except KafkaError as exc:
                out.append((gid, exc.code))
        return out

    def _delete_group(self, shard: Shard, group: Group) -> None:
        """Tombstones for the group's offsets and metadata, then forget it."""
        gid = group.group_id
        records = self.offsets.tombstones(shard, gid) + group_tombstones(group)
        self.state.store.append(shard.partition, records)
        self.offsets.forget(shard, gid)
        self.state.remove_group(shard, gid)
        mark_deleted(group)
        log.info("group %s deleted (%d records written)", gid, len(records))

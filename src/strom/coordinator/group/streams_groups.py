"""KIP-1071, the streams rebalance protocol: StreamsGroupHeartbeat and StreamsGroupDescribe.

A Kafka Streams application with `group.protocol=streams` sends its topology when a member
joins; the group keeps the first one and, as Kafka 4.4 does, refuses any other (INVALID_REQUEST
"Topology updates are not supported yet."). The coordinator configures it against the topics
(`streams_topology`: task counts, partition counts of internal topics, copartition checks),
creates the internal topics that are missing through the broker's topic-creation path
(`InternalTopicCreator`), and assigns tasks (`streams_assignor`) once a group that was empty
has waited `group.streams.initial.rebalance.delay.ms` for more members. Each heartbeat then
moves its member towards its target (`streams_reconciliation`): tasks are revoked before they
move, so an active task never runs in two members. What the application must hear about is
reported as heartbeat statuses (MISSING_SOURCE_TOPICS, MISSING_INTERNAL_TOPICS,
INCORRECTLY_PARTITIONED_TOPICS, ASSIGNMENT_DELAYED, SHUTDOWN_APPLICATION); an unusable
topology is refused with STREAMS_INVALID_TOPOLOGY.

The group epoch is bumped when a member joins or leaves, when what the assignor reads of a
member changes (process, rack, client tags), when the topology is set, when the topics it uses
change and when the initial delay ends. State is written to `__consumer_offsets` as Kafka's
StreamsGroup* records (types 17, 19-23) before the heartbeat is answered, and replayed on load.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from strom.coordinator.group import records as rec
from strom.coordinator.group import streams_topology as topo
from strom.coordinator.group.replies import (
    EndpointPartitions,
    NamedPartitions,
    StreamsAssignment,
    StreamsGroupDescription,
    StreamsHeartbeatReply,
    StreamsMemberDescription,
    StreamsStatus,
    SubtopologyDescription,
    TopologyDescription,
    named_partitions,
)
from strom.coordinator.group.shards import GroupShards, Shard
from strom.coordinator.group.state import (
    GROUP_AUTHORIZED_OPERATIONS,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    UNKNOWN_AUTHORIZED_OPERATIONS,
    ClassicGroup,
)
from strom.coordinator.group.streams_assignor import MemberSpec, assign
from strom.coordinator.group.streams_reconciliation import reconcile
from strom.coordinator.group.streams_state import (
    StreamsGroup,
    StreamsMember,
    StreamsMemberState,
    StreamsTopology,
    Tasks,
    TasksTuple,
    TopicInfo,
    tasks_of,
)
from strom.coordinator.group.streams_topology import ConfiguredTopology, NewTopic, Status
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)


class InternalTopicCreator(Protocol):
    """The broker's topic-creation path, for the internal topics a topology needs."""

    def create(self, topics: list[NewTopic]) -> None:
        """Create these topics, or start creating them (a cluster's controller answers later;
        a failure is logged, and the next heartbeat finds the topic still missing)."""


def _nothing_refused(names: list[str]) -> list[str]:
    return []


@dataclass
class StreamsHeartbeat:
    """A StreamsGroupHeartbeat request, decoded by the handler. `refused_to_create` names the
    topics (of those given) the sender may not create (the handler's ACL check)."""

    group_id: str
    member_id: str
    member_epoch: int
    client_id: str
    client_host: str
    endpoint_information_epoch: int = -1
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout: int = -1
    topology: StreamsTopology | None = None
    active_tasks: Tasks | None = None
    standby_tasks: Tasks | None = None
    warmup_tasks: Tasks | None = None
    process_id: str | None = None
    user_endpoint: tuple[str, int] | None = None
    client_tags: tuple[tuple[str, str], ...] | None = None
    task_offsets: tuple[tuple[str, int, int], ...] | None = None
    task_end_offsets: tuple[tuple[str, int, int], ...] | None = None
    shutdown_application: bool = False
    refused_to_create: Callable[[list[str]], list[str]] = _nothing_refused

    def owned(self) -> TasksTuple | None:
        """The tasks the member reports, None when it did not report them."""
        if self.active_tasks is None or self.standby_tasks is None or self.warmup_tasks is None:
            return None
        return TasksTuple(tasks_of(self.active_tasks), tasks_of(self.standby_tasks),
                          tasks_of(self.warmup_tasks))


def task_ids(tasks: Tasks) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partitions": sorted(ps)} for s, ps in sorted(tasks.items())]


def tasks_from(entries: list[dict[str, Any]] | None) -> Tasks:
    return tasks_of({e["subtopology_id"]: e["partitions"] for e in entries or ()})


def _assignment_fields(t: TasksTuple) -> dict[str, Any]:
    return {"active_tasks": task_ids(t.active), "standby_tasks": task_ids(t.standby),
            "warmup_tasks": task_ids(t.warmup)}


def _reply_assignment(t: TasksTuple) -> StreamsAssignment:
    return StreamsAssignment(named_partitions(t.active), named_partitions(t.standby),
                             named_partitions(t.warmup))


def validate_heartbeat(req: StreamsHeartbeat) -> None:
    """Kafka's request checks (INVALID_REQUEST), then the topology's own (STREAMS_INVALID_TOPOLOGY)."""
    def invalid(message: str) -> KafkaError:
        return KafkaError(ErrorCode.INVALID_REQUEST, message)

    if not req.group_id:
        raise invalid("GroupId can't be empty.")
    if req.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if req.rack_id == "":
        raise invalid("RackId can't be empty.")
    if not req.member_id:
        raise invalid("MemberId can't be empty.")
    epoch = req.member_epoch
    if epoch == 0:
        if req.rebalance_timeout == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        for name, tasks in (("ActiveTasks", req.active_tasks), ("StandbyTasks", req.standby_tasks),
                            ("WarmupTasks", req.warmup_tasks)):
            if tasks is None or tasks:
                raise invalid(f"{name} must be empty when (re-)joining.")
        if req.topology is None:
            raise invalid("Topology must be non-null when (re-)joining.")
        if not req.process_id:
            raise invalid("ProcessId must be provided when (re-)joining.")
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise invalid("InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise invalid(f"MemberEpoch is {epoch}, but must be greater than or equal to -2.")
    if epoch != 0 and req.topology is not None:
        raise invalid("Topology can only be provided when (re-)joining.")
    if req.topology is not None:
        topo.validate(req.topology)


class StreamsGroupManager:
    """Streams groups of the shards in `state`."""

    def __init__(self, state: GroupShards, internal_topics: InternalTopicCreator | None) -> None:
        self.state = state
        self.config = state.config
        self.topics = state.topics
        self.store = state.store
        self.timers = state.timers
        self.now_ms = state.now_ms
        self.internal_topics = internal_topics

    # ========================================================================================
    # StreamsGroupHeartbeat
    # ========================================================================================

    def heartbeat(self, req: StreamsHeartbeat) -> StreamsHeartbeatReply:
        try:
            if "streams" not in self.config.rebalance_protocols:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                 "The streams rebalance protocol is disabled.")
            validate_heartbeat(req)
            shard = self.state.serving(req.group_id)
            if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(shard, req)
            return self._heartbeat(shard, req)
        except KafkaError as exc:
            return StreamsHeartbeatReply.failed(exc.code, exc.message)

    def _group_for_heartbeat(self, shard: Shard, group_id: str, epoch: int,
                             records: list[rec.KeyValue]) -> StreamsGroup:
        group = shard.groups.get(group_id)
        if isinstance(group, StreamsGroup):
            return group
        if group is not None:
            if not (isinstance(group, ClassicGroup) and group.is_empty
                    and not group.pending_members):
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND,
                                 f"Group {group_id} is not a streams group.")
            log.info("group %s: replacing the empty classic group by a streams group", group_id)
            records.append(rec.group_tombstone(group_id))
            self.timers.cancel_group(group_id)
            del shard.groups[group_id]
        if epoch != 0:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {group_id} not found.")
        created = StreamsGroup(group_id, self.now_ms())
        shard.groups[group_id] = created
        return created

    def _heartbeat(self, shard: Shard, req: StreamsHeartbeat) -> StreamsHeartbeatReply:
        records: list[rec.KeyValue] = []
        before = shard.groups.get(req.group_id)
        group = self._group_for_heartbeat(shard, req.group_id, req.member_epoch, records)
        try:
            return self._heartbeat_in_group(shard, group, req, records)
        except KafkaError:
            if group is not before and not group.members:  # nothing was written: undo
                if before is None:
                    shard.groups.pop(req.group_id, None)
                else:
                    shard.groups[req.group_id] = before
            raise

    def _heartbeat_in_group(self, shard: Shard, group: StreamsGroup, req: StreamsHeartbeat,
                            records: list[rec.KeyValue]) -> StreamsHeartbeatReply:
        gid = group.group_id
        owned = req.owned()
        if len(group.members) >= self.config.streams_max_size and \
                req.member_id not in group.members and group.static_member(req.instance_id) is None:
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED,
                             f"The streams group has reached its maximum capacity of "
                             f"{self.config.streams_max_size} members.")
        old = self._member_for_heartbeat(group, req, owned, records)
        if req.topology is not None:
            _check_topology(group, req.topology)  # before anything changes
        settings = self.state.settings(group.group_id)
        if not group.members and settings.streams_initial_rebalance_delay_ms > 0:
            # a group starting from empty waits a moment for the application's other members
            group.delayed_until = self.now_ms() + settings.streams_initial_rebalance_delay_ms
        persisted = (group.group_epoch, group.metadata_hash, group.validated_topology_epoch)
        member = self._updated_member(old, req)
        is_new = req.member_id not in group.members
        if is_new or member.metadata_fields() != old.metadata_fields():
            records.append(rec.consumer_group_record(rec.STREAMS_GROUP_MEMBER_METADATA, gid,
                                                     member.member_id, member.metadata_fields()))
        group.put_member(member)
        bump = is_new or member.assignment_key() != old.assignment_key()
        if req.topology is not None:
            bump |= self._maybe_update_topology(group, req.topology, records)
        if req.shutdown_application and group.shutdown_requested_by is None:
            log.info("group %s: member %s asks the application to shut down", gid,
                     member.member_id)
            group.shutdown_requested_by = member.member_id
        bump |= self._refresh_configured(group, req.refused_to_create)
        delayed = group.delayed_until is not None and self.now_ms() < group.delayed_until
        if group.delayed_until is not None and not delayed:
            group.delayed_until = None
            bump = True  # the delay is over: the real first assignment
        if bump:
            group.group_epoch += 1
            log.info("group %s: bumped group epoch to %d", gid, group.group_epoch)
        if (group.group_epoch, group.metadata_hash, group.validated_topology_epoch) != persisted:
            records.append(self._metadata_record(group))
        if group.group_epoch > group.assignment_epoch:
            records += self._update_target(group, delayed)
        updated = self._reconcile(group, member, owned, is_new, records)
        self.store.append(shard.partition, records)
        self._schedule_session_timeout(group, updated)
        # the tasks go back when the member joins or they changed; the endpoints' partitions
        # when the member has an endpoint and does not know the group's endpoint epoch
        sent = req.member_epoch == 0 or updated.assigned != old.assigned
        endpoints = updated.user_endpoint is not None and \
            req.endpoint_information_epoch != group.endpoint_epoch
        return StreamsHeartbeatReply(
            member_id=updated.member_id, member_epoch=updated.member_epoch,
            heartbeat_interval=settings.streams_heartbeat_interval_ms,
            # the group's streams.acceptable.recovery.lag and streams.task.offset.interval.ms:
            # Strom assigns no warm-up tasks, so they only set the client's reporting pace
            acceptable_recovery_lag=settings.streams_acceptable_recovery_lag,
            task_offset_interval=settings.streams_task_offset_interval_ms,
            status=self._statuses(group, delayed),
            assignment=_reply_assignment(updated.assigned) if sent else None,
            endpoint_information_epoch=group.endpoint_epoch,
            partitions_by_user_endpoint=self._endpoints(group) if endpoints else None)

    def _member_for_heartbeat(self, group: StreamsGroup, req: StreamsHeartbeat,
                              owned: TasksTuple | None,
                              records: list[rec.KeyValue]) -> StreamsMember:
        """The member the heartbeat is about: new, existing, or a static member coming back
        under a new member id."""
        gid, mid, epoch = group.group_id, req.member_id, req.member_epoch
        if req.instance_id is None:
            member = group.members.get(mid)
            if member is None:
                if epoch != 0:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                     f"Member {mid} is not a member of group {gid}.")
                log.info("group %s: member %s joins", gid, mid)
                return StreamsMember(mid)
            if epoch != 0:
                _check_member_epoch(member, epoch, owned)
            return member
        existing = group.static_member(req.instance_id)
        if epoch == 0:
            if existing is None or existing.member_id == mid:
                return existing or group.members.get(mid) or StreamsMember(mid)
            if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(ErrorCode.UNRELEASED_INSTANCE_ID,
                                 f"Static member {mid} with instance id {req.instance_id} cannot "
                                 f"join the group because the instance id is owned by member "
                                 f"{existing.member_id}.")
            return self._replace_static_member(group, existing, mid, records)
        if existing is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Instance id {req.instance_id} is unknown.")
        if existing.member_id != mid:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                             f"Static member {mid} with instance id {req.instance_id} was "
                             f"fenced by member {existing.member_id}.")
        _check_member_epoch(existing, epoch, owned)
        return existing

    def _replace_static_member(self, group: StreamsGroup, existing: StreamsMember,
                               member_id: str, records: list[rec.KeyValue]) -> StreamsMember:
        gid = group.group_id
        log.info("group %s: static member %s rejoins as %s", gid, existing.instance_id, member_id)
        replacement = existing.copy(member_id=member_id, member_epoch=0,
                                    previous_member_epoch=0, pending_revocation=TasksTuple())
        target = group.target.get(existing.member_id)
        records += rec.streams_member_tombstones(gid, existing.member_id)
        group.remove_member(existing.member_id)
        self._cancel_member_timers(gid, existing.member_id)
        if target is not None:
            group.target[member_id] = target
            records.append(self._target_record(gid, member_id, target))
        records.append(rec.consumer_group_record(rec.STREAMS_GROUP_MEMBER_METADATA, gid,
                                                 member_id, replacement.metadata_fields()))
        group.put_member(replacement)
        return replacement

    @staticmethod
    def _updated_member(old: StreamsMember, req: StreamsHeartbeat) -> StreamsMember:
        """A copy of the member with what the heartbeat sent (absent fields keep their value)."""
        changes: dict[str, Any] = {"member_id": req.member_id, "client_id": req.client_id,
                                   "client_host": req.client_host}
        if req.instance_id is not None:
            changes["instance_id"] = req.instance_id
        if req.rack_id is not None:
            changes["rack_id"] = req.rack_id
        if req.rebalance_timeout != -1:
            changes["rebalance_timeout"] = req.rebalance_timeout
        if req.topology is not None:
            changes["topology_epoch"] = req.topology.epoch
        if req.process_id is not None:
            changes["process_id"] = req.process_id
        if req.user_endpoint is not None:
            changes["user_endpoint"] = req.user_endpoint
        if req.client_tags is not None:
            changes["client_tags"] = req.client_tags
        if req.task_offsets is not None:
            changes["task_offsets"] = req.task_offsets
        if req.task_end_offsets is not None:
            changes["task_end_offsets"] = req.task_end_offsets
        return old.copy(**changes)

    def _maybe_update_topology(self, group: StreamsGroup, topology: StreamsTopology,
                               records: list[rec.KeyValue]) -> bool:
        """The first member's topology becomes the group's (later ones must equal it, see
        `_check_topology`). Returns whether the topology changed."""
        if group.topology is not None:
            return False
        log.info("group %s: topology epoch %d with %d subtopologies", group.group_id,
                 topology.epoch, len(topology.subtopologies))
        group.topology = topology
        group.configured = None
        records.append(rec.consumer_group_record(rec.STREAMS_GROUP_TOPOLOGY, group.group_id,
                                                 None, topology.fields()))
        return True

    def _refresh_configured(self, group: StreamsGroup,
                            refused_to_create: Callable[[list[str]], list[str]]) -> bool:
        """Configure the topology against the topics when they or the topology changed,
        creating missing internal topics (none while the member may not create one of them,
        as Kafka does). Returns whether the topics the topology uses changed (a new group
        epoch)."""
        if group.topology is None:
            return False
        configured = group.configured
        made_at = group.metadata_version
        if not (isinstance(configured, ConfiguredTopology) and made_at == self.topics.version()
                and configured.epoch == group.topology.epoch):
            configured, made_at = topo.configure(group.topology, self.topics), self.topics.version()
        elif not configured.to_create:
            return False
        refused = refused_to_create([t.name for t in configured.to_create])
        if refused:
            configured.status = (Status.MISSING_INTERNAL_TOPICS,
                                 f"{topo.missing_detail(configured.to_create)} Unauthorized to "
                                 f"CREATE on topics {', '.join(sorted(refused))}.")
        elif configured.to_create and self.internal_topics is not None:
            # asked for again by later heartbeats while missing (the creator paces a cluster)
            log.log(logging.INFO if made_at != group.metadata_version else logging.DEBUG,
                    "group %s: creating internal topics %s", group.group_id,
                    ", ".join(t.name for t in configured.to_create))
            self.internal_topics.create(configured.to_create)
            if self.topics.version() != made_at:
                configured = topo.configure(group.topology, self.topics)
        group.configured = configured
        group.metadata_version = self.topics.version()
        if configured.ready:
            group.validated_topology_epoch = configured.epoch
        elif configured.status is not None:
            log.info("group %s: topology epoch %d not ready: %s", group.group_id,
                     configured.epoch, configured.status[1])
        changed = configured.metadata_hash != group.metadata_hash
        group.metadata_hash = configured.metadata_hash
        return changed

    def _update_target(self, group: StreamsGroup, delayed: bool) -> list[rec.KeyValue]:
        """A new target assignment: no tasks while the topology is not ready or the initial
        rebalance delay runs."""
        configured = group.configured
        tasks = configured.task_counts if isinstance(configured, ConfiguredTopology) and \
            configured.ready and not delayed else {}
        specs = [MemberSpec(mid, m.process_id, group.target.get(mid, TasksTuple()))
                 for mid, m in group.members.items()]
        stateful = frozenset(s.subtopology_id for s in group.topology.subtopologies
                             if s.state_changelog_topics) if group.topology else frozenset()
        standbys = self.state.settings(group.group_id).streams_num_standby_replicas
        new = assign(specs, tasks, standbys, stateful)
        records = []
        for mid in group.members:
            target = new.get(mid, TasksTuple())
            if group.target.get(mid) != target:
                records.append(self._target_record(group.group_id, mid, target))
            group.target[mid] = target
        group.assignment_epoch = group.group_epoch
        records.append(rec.consumer_group_record(
            rec.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA, group.group_id, None,
            {"assignment_epoch": group.assignment_epoch, "assignment_timestamp": self.now_ms()}))
        log.info("group %s: new target assignment at epoch %d (%d tasks, %d members)",
                 group.group_id, group.assignment_epoch, sum(tasks.values()), len(specs))
        return records

    def _reconcile(self, group: StreamsGroup, member: StreamsMember, owned: TasksTuple | None,
                   is_new: bool, records: list[rec.KeyValue]) -> StreamsMember:
        updated = reconcile(group, member, owned)
        if updated is not member or is_new:
            group.put_member(updated)
            records.append(self._current_assignment_record(group.group_id, updated))
            if updated.assigned != member.assigned or is_new:
                group.endpoint_epoch += 1
            if updated.state == StreamsMemberState.UNREVOKED_TASKS:
                self._schedule_rebalance_timeout(group.group_id, updated)
            else:
                self.timers.cancel(("rebalance", group.group_id, member.member_id))
        return updated

    @staticmethod
    def _statuses(group: StreamsGroup, delayed: bool) -> tuple[StreamsStatus, ...]:
        out = []
        if delayed:
            out.append(StreamsStatus(int(Status.ASSIGNMENT_DELAYED),
                                     "Assignment delayed due to the configured initial "
                                     "rebalance delay."))
        configured = group.configured
        if isinstance(configured, ConfiguredTopology) and configured.status is not None:
            code, detail = configured.status
            out.append(StreamsStatus(int(code), detail))
        if group.shutdown_requested_by is not None:
            out.append(StreamsStatus(int(Status.SHUTDOWN_APPLICATION),
                                     f"Streams member {group.shutdown_requested_by} "
                                     "requested to shut down the application."))
        return tuple(out)

    def _endpoints(self, group: StreamsGroup) -> tuple[EndpointPartitions, ...]:
        """Which source partitions each member with an endpoint (Interactive Queries) has."""
        configured = group.configured
        sources = configured.source_topics if isinstance(configured, ConfiguredTopology) else {}

        def partitions(tasks: list[Tasks]) -> NamedPartitions:
            by_topic: dict[str, set[int]] = {}
            for t in tasks:
                for sub, ps in t.items():
                    for topic in sources.get(sub, ()):
                        found = self.topics.topic(topic)
                        n = found[1] if found else 0
                        by_topic.setdefault(topic, set()).update(p for p in ps if p < n)
            return named_partitions({t: ps for t, ps in by_topic.items() if ps})

        return tuple(EndpointPartitions(m.user_endpoint[0], m.user_endpoint[1],
                                        active=partitions([m.assigned.active]),
                                        standby=partitions([m.assigned.standby,
                                                            m.assigned.warmup]))
                     for m in group.members.values() if m.user_endpoint is not None)

    # -- records -------------------------------------------------------------------------------

    @staticmethod
    def _metadata_record(group: StreamsGroup) -> rec.KeyValue:
        return rec.consumer_group_record(rec.STREAMS_GROUP_METADATA, group.group_id, None, {
            "epoch": group.group_epoch, "metadata_hash": group.metadata_hash,
            "validated_topology_epoch": group.validated_topology_epoch})

    @staticmethod
    def _target_record(gid: str, member_id: str, target: TasksTuple) -> rec.KeyValue:
        return rec.consumer_group_record(rec.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER, gid,
                                         member_id, _assignment_fields(target))

    @staticmethod
    def _current_assignment_record(gid: str, m: StreamsMember) -> rec.KeyValue:
        p = m.pending_revocation
        return rec.consumer_group_record(rec.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT, gid,
                                         m.member_id, {
            "member_epoch": m.member_epoch, "previous_member_epoch": m.previous_member_epoch,
            "state": int(m.state), **_assignment_fields(m.assigned),
            "active_tasks_pending_revocation": task_ids(p.active),
            "standby_tasks_pending_revocation": task_ids(p.standby),
            "warmup_tasks_pending_revocation": task_ids(p.warmup)})

    # -- leaving, fencing, timers --------------------------------------------------------------

    def _leave(self, shard: Shard, req: StreamsHeartbeat) -> StreamsHeartbeatReply:
        gid, mid = req.group_id, req.member_id
        group = shard.groups.get(gid)
        if not isinstance(group, StreamsGroup):
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Streams group {gid} not found.")
        if req.instance_id is None:
            member = group.members.get(mid)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {mid} is not a member of group {gid}.")
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Instance id {req.instance_id} is unknown.")
            if member.member_id != mid:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID,
                                 f"Static member {mid} with instance id {req.instance_id} was "
                                 f"fenced by member {member.member_id}.")
        # the group's endpoint epoch as it was before the leave bumps it
        response = StreamsHeartbeatReply(member_id=mid, member_epoch=req.member_epoch,
                                         endpoint_information_epoch=group.endpoint_epoch)
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("group %s: static member %s (instance %s) left temporarily", gid, mid,
                     req.instance_id)
            left = member.copy(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                               pending_revocation=TasksTuple())
            self.store.append(shard.partition, [self._current_assignment_record(gid, left)])
            group.put_member(left)
            self.timers.cancel(("rebalance", gid, mid))
            return response
        log.info("group %s: member %s left", gid, mid)
        self.fence_members(shard, group, [mid])
        return response

    def fence_members(self, shard: Shard, group: StreamsGroup, member_ids: list[str]) -> None:
        """Remove members and bump the group epoch so the others take over their tasks."""
        gid = group.group_id
        records: list[rec.KeyValue] = []
        for mid in member_ids:
            records += rec.streams_member_tombstones(gid, mid)
            group.remove_member(mid)
            self._cancel_member_timers(gid, mid)
        group.group_epoch += 1
        group.endpoint_epoch += 1
        records.append(self._metadata_record(group))
        try:
            self.store.append(shard.partition, records)
        except KafkaError as exc:
            log.warning("group %s: cannot persist the removal of members %s: %s", gid,
                        member_ids, exc)

    def _cancel_member_timers(self, group_id: str, member_id: str) -> None:
        for kind in ("session", "rebalance"):
            self.timers.cancel((kind, group_id, member_id))

    def _fence_if_present(self, group_id: str, member_id: str, epoch: int | None,
                          why: str) -> None:
        shard = self.state.shard_of(group_id)
        if shard is None or shard.loading:
            return
        group = shard.groups.get(group_id)
        if not isinstance(group, StreamsGroup):
            return
        member = group.members.get(member_id)
        if member is None or (epoch is not None and member.member_epoch != epoch):
            return
        log.info("group %s: member %s fenced because %s", group_id, member_id, why)
        self.fence_members(shard, group, [member_id])

    def _schedule_session_timeout(self, group: StreamsGroup, member: StreamsMember) -> None:
        gid, mid = group.group_id, member.member_id
        self.timers.schedule(("session", gid, mid),
                             self.state.settings(gid).streams_session_timeout_ms,
                             lambda: self._fence_if_present(gid, mid, None,
                                                            "its session expired"))

    def _schedule_rebalance_timeout(self, group_id: str, member: StreamsMember) -> None:
        mid, epoch = member.member_id, member.member_epoch
        timeout = member.rebalance_timeout if member.rebalance_timeout > 0 \
            else self.state.settings(group_id).streams_session_timeout_ms
        self.timers.schedule(("rebalance", group_id, mid), timeout,
                             lambda: self._fence_if_present(
                                 group_id, mid, epoch,
                                 f"it did not revoke its tasks within its rebalance timeout "
                                 f"(epoch {epoch})"))

    # ========================================================================================
    # StreamsGroupDescribe
    # ========================================================================================

    def describe(self, group_ids: list[str], *, include_authorized_operations: bool
                 ) -> list[StreamsGroupDescription]:
        ops = GROUP_AUTHORIZED_OPERATIONS if include_authorized_operations \
            else UNKNOWN_AUTHORIZED_OPERATIONS
        out = []
        for gid in group_ids:
            try:
                shard = self.state.serving(gid)
            except KafkaError as exc:
                out.append(StreamsGroupDescription.failed(gid, ops, exc.code, exc.message))
                continue
            group = shard.groups.get(gid)
            if not isinstance(group, StreamsGroup):
                what = "not found" if group is None else "is not a streams group"
                out.append(StreamsGroupDescription.failed(
                    gid, ops, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} {what}."))
                continue
            out.append(StreamsGroupDescription(
                gid, ops, group_state=group.state_name, group_epoch=group.group_epoch,
                assignment_epoch=group.assignment_epoch,
                topology=self._describe_topology(group),
                members=tuple(self._describe_member(group, m)
                              for m in group.members.values())))
        return out

    @staticmethod
    def _describe_topology(group: StreamsGroup) -> TopologyDescription | None:
        """The configured topology (partition counts decided) when it is ready, else the
        topology as the application sent it."""
        if group.topology is None:
            return None
        configured = group.configured
        decided = configured.internal_partitions if isinstance(configured, ConfiguredTopology) \
            and configured.ready else {}

        def info(t: TopicInfo) -> TopicInfo:
            return replace(t, partitions=decided.get(t.name, t.partitions))

        subs = []
        for s in group.topology.subtopologies:
            sources = configured.source_topics.get(s.subtopology_id) if decided else None
            subs.append(SubtopologyDescription(
                s.subtopology_id,
                source_topics=tuple(t for t in sources if t not in
                                    {r.name for r in s.repartition_source_topics})
                if sources is not None else s.source_topics,
                repartition_sink_topics=s.repartition_sink_topics,
                state_changelog_topics=tuple(info(t) for t in s.state_changelog_topics),
                repartition_source_topics=tuple(info(t) for t in s.repartition_source_topics)))
        return TopologyDescription(group.topology.epoch, tuple(subs))

    @staticmethod
    def _describe_member(group: StreamsGroup, m: StreamsMember) -> StreamsMemberDescription:
        return StreamsMemberDescription(
            member_id=m.member_id, member_epoch=m.member_epoch, instance_id=m.instance_id,
            rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            topology_epoch=m.topology_epoch, process_id=m.process_id,
            user_endpoint=m.user_endpoint, client_tags=m.client_tags,
            task_offsets=m.task_offsets, task_end_offsets=m.task_end_offsets,
            assignment=_reply_assignment(m.assigned),
            target_assignment=_reply_assignment(group.target.get(m.member_id, TasksTuple())))

    # ========================================================================================
    # Load
    # ========================================================================================

    def replay(self, shard: Shard, r: rec.CoordinatorRecord) -> None:
        """A StreamsGroup* record (types 17, 19-23) or its tombstone read back from the log."""
        gid = r.key["group_id"]
        group = shard.groups.get(gid)
        mid = r.key.get("member_id")
        if r.value is None:
            if not isinstance(group, StreamsGroup):
                return
            if r.type == rec.STREAMS_GROUP_METADATA:
                del shard.groups[gid]
            elif r.type == rec.STREAMS_GROUP_TOPOLOGY:
                group.topology = None
            elif r.type == rec.STREAMS_GROUP_MEMBER_METADATA and mid is not None:
                group.remove_member(mid)
            elif r.type == rec.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER and mid is not None:
                group.target.pop(mid, None)
            elif r.type == rec.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT and mid is not None:
                member = group.members.get(mid)
                if member is not None:
                    group.put_member(member.copy(member_epoch=0, previous_member_epoch=0,
                                                 state=StreamsMemberState.STABLE,
                                                 assigned=TasksTuple(),
                                                 pending_revocation=TasksTuple()))
            return
        if not isinstance(group, StreamsGroup):
            if isinstance(group, ClassicGroup) and not group.is_empty:
                return
            group = StreamsGroup(gid, self.now_ms())
            shard.groups[gid] = group
        v = r.value
        if r.type == rec.STREAMS_GROUP_METADATA:
            group.group_epoch = v["epoch"]
            group.metadata_hash = v["metadata_hash"]
            group.validated_topology_epoch = v["validated_topology_epoch"]
        elif r.type == rec.STREAMS_GROUP_TOPOLOGY:
            group.topology = StreamsTopology.from_fields(v)
        elif r.type == rec.STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA:
            group.assignment_epoch = v["assignment_epoch"]
        elif r.type == rec.STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER and mid is not None:
            group.target[mid] = _tuple_from(v, "")
        elif r.type == rec.STREAMS_GROUP_MEMBER_METADATA and mid is not None:
            old = group.members.get(mid) or StreamsMember(mid)
            endpoint = v["user_endpoint"]
            group.put_member(old.copy(
                instance_id=v["instance_id"], rack_id=v["rack_id"], client_id=v["client_id"],
                client_host=v["client_host"], rebalance_timeout=v["rebalance_timeout"],
                topology_epoch=v["topology_epoch"], process_id=v["process_id"],
                user_endpoint=None if endpoint is None else (endpoint["host"], endpoint["port"]),
                client_tags=tuple((t["key"], t["value"]) for t in v["client_tags"] or ())))
        elif r.type == rec.STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT and mid is not None:
            old = group.members.get(mid) or StreamsMember(mid)
            try:
                state = StreamsMemberState(v["state"])
            except ValueError:
                state = StreamsMemberState.UNKNOWN
            group.put_member(old.copy(
                member_epoch=v["member_epoch"], previous_member_epoch=v["previous_member_epoch"],
                state=state, assigned=_tuple_from(v, ""),
                pending_revocation=_tuple_from(v, "_pending_revocation")))

    def on_loaded(self, group: StreamsGroup) -> None:
        """Arm the session (and pending revocation) timers of a loaded group's members."""
        for member in group.members.values():
            self._schedule_session_timeout(group, member)
            if member.state == StreamsMemberState.UNREVOKED_TASKS:
                self._schedule_rebalance_timeout(group.group_id, member)


def _tuple_from(v: dict[str, Any], suffix: str) -> TasksTuple:
    return TasksTuple(tasks_from(v[f"active_tasks{suffix}"]),
                      tasks_from(v[f"standby_tasks{suffix}"]),
                      tasks_from(v[f"warmup_tasks{suffix}"]))


def _check_topology(group: StreamsGroup, topology: StreamsTopology) -> None:
    """Kafka 4.4 keeps a group's first topology: another one, or the same at another epoch,
    is refused (even in an empty group: delete the group to change the topology)."""
    if group.topology is not None and topology != group.topology:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Topology updates are not supported yet.")


def _check_member_epoch(member: StreamsMember, epoch: int, owned: TasksTuple | None) -> None:
    """Kafka's rule: a greater epoch is fenced; a smaller one only passes when it is the
    previous epoch and the member owns nothing it was not given (a lost response)."""
    if epoch > member.member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The streams group member has a greater member epoch ({epoch}) than "
                         f"the one known by the group coordinator ({member.member_epoch}). The "
                         "member must abandon all its partitions and rejoin.")
    if epoch < member.member_epoch and (epoch != member.previous_member_epoch or owned is None
                                        or not owned.is_subset_of(member.assigned)):
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH,
                         f"The streams group member has a smaller member epoch ({epoch}) than "
                         f"the one known by the group coordinator ({member.member_epoch}). The "
                         "member must abandon all its partitions and rejoin.")

"""Typed replies of the group managers; the broker's handlers turn them into wire responses."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, Self, TypeVar

from strom.coordinator.group.streams_state import TopicInfo

# An assignment as a reply carries it: (topic id, its partitions sorted) per topic.
TopicPartitions = tuple[tuple[uuid.UUID, tuple[int, ...]], ...]


def reply_assignment(assignment: Mapping[uuid.UUID, Collection[int]]) -> TopicPartitions:
    """The assignment's topics in its order, each with its partitions sorted."""
    return tuple((topic_id, tuple(sorted(ps))) for topic_id, ps in assignment.items())


@dataclass(frozen=True, slots=True)
class HeartbeatReply:
    """A ConsumerGroupHeartbeat or ShareGroupHeartbeat response but its throttle time (the two
    responses have the same fields). `assignment` None is not sent: the member's assignment is
    unchanged (or the heartbeat failed)."""

    member_id: str | None
    member_epoch: int
    heartbeat_interval: int = 0
    assignment: TopicPartitions | None = None
    error_code: int = 0
    error_message: str | None = None

    @classmethod
    def failed(cls, code: int, message: str | None) -> HeartbeatReply:
        return cls(member_id=None, member_epoch=0, error_code=int(code), error_message=message)

    def fields(self) -> dict[str, Any]:
        """The response's fields as the encoder takes them."""
        return {"error_code": self.error_code, "error_message": self.error_message,
                "member_id": self.member_id, "member_epoch": self.member_epoch,
                "heartbeat_interval": self.heartbeat_interval,
                "assignment": None if self.assignment is None else {"topic_partitions": [
                    {"topic_id": topic_id, "partitions": list(ps)}
                    for topic_id, ps in self.assignment]}}


# Tasks or partitions as a StreamsGroupHeartbeat reply carries them: (subtopology id or topic
# name, its partitions sorted), sorted by name.
NamedPartitions = tuple[tuple[str, tuple[int, ...]], ...]


def named_partitions(by_name: Mapping[str, Collection[int]]) -> NamedPartitions:
    """The names sorted, each with its partitions sorted (a name without partitions stays)."""
    return tuple((name, tuple(sorted(ps))) for name, ps in sorted(by_name.items()))


def _named_fields(key: str, entries: NamedPartitions) -> list[dict[str, Any]]:
    return [{key: name, "partitions": list(ps)} for name, ps in entries]


@dataclass(frozen=True, slots=True)
class StreamsAssignment:
    """A streams member's active, standby and warm-up tasks, by subtopology id."""

    active: NamedPartitions = ()
    standby: NamedPartitions = ()
    warmup: NamedPartitions = ()

    def fields(self) -> dict[str, Any]:
        return {"active_tasks": _named_fields("subtopology_id", self.active),
                "standby_tasks": _named_fields("subtopology_id", self.standby),
                "warmup_tasks": _named_fields("subtopology_id", self.warmup)}


_NO_TASKS: dict[str, Any] = {"active_tasks": None, "standby_tasks": None, "warmup_tasks": None}


@dataclass(frozen=True, slots=True)
class StreamsStatus:
    """A StreamsGroupHeartbeat status (streams_topology.Status) and its detail."""

    code: int
    detail: str


@dataclass(frozen=True, slots=True)
class EndpointPartitions:
    """A member's Interactive Queries endpoint and the source partitions, by topic name, of its
    active tasks and of its standby and warm-up tasks."""

    host: str
    port: int
    active: NamedPartitions = ()
    standby: NamedPartitions = ()


@dataclass(frozen=True, slots=True)
class StreamsHeartbeatReply:
    """A StreamsGroupHeartbeat response but its throttle time. `assignment` None is not sent
    (the member's tasks are unchanged, or the heartbeat failed), nor is
    `partitions_by_user_endpoint` None (the member has no endpoint, or knows the group's
    endpoint information epoch)."""

    member_id: str
    member_epoch: int
    heartbeat_interval: int = 0
    acceptable_recovery_lag: int = 0
    task_offset_interval: int = 0
    status: tuple[StreamsStatus, ...] = ()
    assignment: StreamsAssignment | None = None
    endpoint_information_epoch: int = 0
    partitions_by_user_endpoint: tuple[EndpointPartitions, ...] | None = None
    error_code: int = 0
    error_message: str | None = None

    @classmethod
    def failed(cls, code: int, message: str | None) -> StreamsHeartbeatReply:
        return cls(member_id="", member_epoch=0, error_code=int(code), error_message=message)

    def fields(self) -> dict[str, Any]:
        """The response's fields as the encoder takes them."""
        endpoints = self.partitions_by_user_endpoint
        return {
            "error_code": self.error_code, "error_message": self.error_message,
            "member_id": self.member_id, "member_epoch": self.member_epoch,
            "heartbeat_interval": self.heartbeat_interval,
            "acceptable_recovery_lag": self.acceptable_recovery_lag,
            "task_offset_interval": self.task_offset_interval,
            "status": [{"status_code": s.code, "status_detail": s.detail} for s in self.status],
            **(_NO_TASKS if self.assignment is None else self.assignment.fields()),
            "endpoint_information_epoch": self.endpoint_information_epoch,
            "partitions_by_user_endpoint": None if endpoints is None else [
                {"user_endpoint": {"host": e.host, "port": e.port},
                 "active_partitions": _named_fields("topic", e.active),
                 "standby_partitions": _named_fields("topic", e.standby)}
                for e in endpoints]}


def _offsets_fields(entries: tuple[tuple[str, int, int], ...]) -> list[dict[str, Any]]:
    return [{"subtopology_id": s, "partition": p, "offset": o} for s, p, o in entries]


@dataclass(frozen=True, slots=True)
class SubtopologyDescription:
    """A subtopology as StreamsGroupDescribe shows it (its internal topics with the partition
    counts the coordinator decided, once the topology is ready)."""

    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()

    def fields(self) -> dict[str, Any]:
        return {"subtopology_id": self.subtopology_id,
                "source_topics": list(self.source_topics),
                "repartition_sink_topics": list(self.repartition_sink_topics),
                "state_changelog_topics": [t.fields() for t in self.state_changelog_topics],
                "repartition_source_topics": [t.fields()
                                              for t in self.repartition_source_topics]}


@dataclass(frozen=True, slots=True)
class TopologyDescription:
    """A streams group's topology as StreamsGroupDescribe shows it."""

    epoch: int
    subtopologies: tuple[SubtopologyDescription, ...]

    def fields(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "subtopologies": [s.fields() for s in self.subtopologies]}


@dataclass(frozen=True, slots=True)
class StreamsMemberDescription:
    """A streams group member as StreamsGroupDescribe shows it."""

    member_id: str
    member_epoch: int
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: tuple[tuple[str, str], ...]
    task_offsets: tuple[tuple[str, int, int], ...]
    task_end_offsets: tuple[tuple[str, int, int], ...]
    assignment: StreamsAssignment
    target_assignment: StreamsAssignment

    def fields(self) -> dict[str, Any]:
        endpoint = self.user_endpoint
        return {"member_id": self.member_id, "member_epoch": self.member_epoch,
                "instance_id": self.instance_id, "rack_id": self.rack_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "topology_epoch": self.topology_epoch, "process_id": self.process_id,
                "user_endpoint": None if endpoint is None else
                {"host": endpoint[0], "port": endpoint[1]},
                "client_tags": [{"key": k, "value": v} for k, v in self.client_tags],
                "task_offsets": _offsets_fields(self.task_offsets),
                "task_end_offsets": _offsets_fields(self.task_end_offsets),
                "assignment": self.assignment.fields(),
                "target_assignment": self.target_assignment.fields(),
                "is_classic": False}


@dataclass(frozen=True, slots=True)
class _GroupEntry:
    """What the group entry of every describe response has: the group, whether describing it
    failed, its state, and the operations the caller may perform on it (which the handler
    replaces when an authorizer decides them)."""

    group_id: str
    authorized_operations: int
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""

    @classmethod
    def failed(cls, group_id: str, authorized_operations: int, code: int,
               message: str | None, group_state: str = "") -> Self:
        return cls(group_id, authorized_operations, error_code=int(code), error_message=message,
                   group_state=group_state)

    def with_operations(self, authorized_operations: int) -> Self:
        return replace(self, authorized_operations=authorized_operations)


@dataclass(frozen=True, slots=True)
class StreamsGroupDescription(_GroupEntry):
    """A StreamsGroupDescribe group entry. `topology` None: the group has none (or the describe
    failed)."""

    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: TopologyDescription | None = None
    members: tuple[StreamsMemberDescription, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The group entry's fields as the encoder takes them."""
        return {"group_id": self.group_id, "error_code": self.error_code,
                "error_message": self.error_message, "group_state": self.group_state,
                "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "topology": None if self.topology is None else self.topology.fields(),
                "members": [m.fields() for m in self.members],
                "authorized_operations": self.authorized_operations}


# --------------------------------------------------------------------------------------------
# The classic protocol: JoinGroup, SyncGroup, LeaveGroup
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinMember:
    """A member as the leader's JoinGroup answer lists it: its metadata for the chosen
    protocol, from which the leader computes the assignment."""

    member_id: str
    instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinReply:
    """A JoinGroup response but its throttle time. Only the leader gets `members`; a failed
    join still carries a member id (the one to rejoin with, for MEMBER_ID_REQUIRED)."""

    member_id: str
    error_code: int = 0
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinMember, ...] = ()

    @classmethod
    def failed(cls, member_id: str, code: int) -> JoinReply:
        return cls(member_id=member_id, error_code=int(code))

    def fields(self) -> dict[str, Any]:
        """The response's fields as the encoder takes them."""
        return {"error_code": self.error_code, "generation_id": self.generation_id,
                "protocol_type": self.protocol_type, "protocol_name": self.protocol_name,
                "leader": self.leader, "skip_assignment": self.skip_assignment,
                "member_id": self.member_id,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                             "metadata": m.metadata} for m in self.members]}


@dataclass(frozen=True, slots=True)
class SyncReply:
    """A SyncGroup response but its throttle time: the member's assignment (empty when the
    sync failed)."""

    error_code: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""

    @classmethod
    def failed(cls, code: int) -> SyncReply:
        return cls(error_code=int(code))

    def fields(self) -> dict[str, Any]:
        """The response's fields as the encoder takes them."""
        return {"error_code": self.error_code, "protocol_type": self.protocol_type,
                "protocol_name": self.protocol_name, "assignment": self.assignment}


# Who waits for a JoinGroup or SyncGroup answer (called exactly once, possibly right away).
JoinRespond = Callable[[JoinReply], None]
SyncRespond = Callable[[SyncReply], None]


@dataclass(frozen=True, slots=True)
class LeaveResult:
    """What became of one member a LeaveGroup named (as it named it: by member id, or by
    instance id with an empty member id)."""

    member_id: str
    instance_id: str | None
    error_code: int = 0

    def fields(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.instance_id,
                "error_code": self.error_code}


# --------------------------------------------------------------------------------------------
# DescribeGroups, ConsumerGroupDescribe, ShareGroupDescribe, ListGroups
# --------------------------------------------------------------------------------------------


class GroupDescription(Protocol):
    """A group entry of a describe response, as the broker's handler filters it: the group's
    id, whether describing it failed, and its authorized operations, which the handler
    replaces when an authorizer decides them."""

    @property
    def group_id(self) -> str: ...

    @property
    def error_code(self) -> int: ...

    def with_operations(self, authorized_operations: int) -> Self: ...

    def fields(self) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class ClassicMemberDescription:
    """A classic group member as DescribeGroups shows it (metadata and assignment only while
    the group is stable)."""

    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes = b""
    assignment: bytes = b""

    def fields(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "group_instance_id": self.instance_id,
                "client_id": self.client_id, "client_host": self.client_host,
                "member_metadata": self.metadata, "member_assignment": self.assignment}


@dataclass(frozen=True, slots=True)
class ClassicGroupDescription(_GroupEntry):
    """A DescribeGroups group entry. A group the coordinator does not know as a classic group
    is "Dead" without members (before v6, which answers GROUP_ID_NOT_FOUND)."""

    group_state: str = "Dead"
    protocol_type: str = ""
    protocol_data: str = ""
    members: tuple[ClassicMemberDescription, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The group entry's fields as the encoder takes them."""
        return {"group_id": self.group_id, "error_code": self.error_code,
                "error_message": self.error_message, "group_state": self.group_state,
                "protocol_type": self.protocol_type, "protocol_data": self.protocol_data,
                "members": [m.fields() for m in self.members],
                "authorized_operations": self.authorized_operations}


@dataclass(frozen=True, slots=True)
class DescribedTopic:
    """A topic of a described assignment: its id, its name ("" once deleted), its partitions
    sorted."""

    topic_id: uuid.UUID
    topic_name: str
    partitions: tuple[int, ...]


DescribedAssignment = tuple[DescribedTopic, ...]


def described_assignment(assignment: Mapping[uuid.UUID, Collection[int]],
                         topic_name: Callable[[uuid.UUID], str | None]) -> DescribedAssignment:
    """The assignment's topics that have partitions, in its order."""
    return tuple(DescribedTopic(t, topic_name(t) or "", tuple(sorted(ps)))
                 for t, ps in assignment.items() if ps)


def _assignment_fields(topics: DescribedAssignment) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": t.topic_id, "topic_name": t.topic_name,
                                  "partitions": list(t.partitions)} for t in topics]}


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    """A consumer group member as ConsumerGroupDescribe shows it; `member_type` tells a
    classic member (of a group in migration) from a consumer-protocol one."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: DescribedAssignment
    target_assignment: DescribedAssignment
    member_type: int

    def fields(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "instance_id": self.instance_id,
                "rack_id": self.rack_id, "member_epoch": self.member_epoch,
                "client_id": self.client_id, "client_host": self.client_host,
                "subscribed_topic_names": list(self.subscribed_topic_names),
                "subscribed_topic_regex": self.subscribed_topic_regex,
                "assignment": _assignment_fields(self.assignment),
                "target_assignment": _assignment_fields(self.target_assignment),
                "member_type": self.member_type}


@dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """A share group member as ShareGroupDescribe shows it."""

    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: DescribedAssignment

    def fields(self) -> dict[str, Any]:
        return {"member_id": self.member_id, "rack_id": self.rack_id,
                "member_epoch": self.member_epoch, "client_id": self.client_id,
                "client_host": self.client_host,
                "subscribed_topic_names": list(self.subscribed_topic_names),
                "assignment": _assignment_fields(self.assignment)}


_Member = TypeVar("_Member", "ConsumerMemberDescription", "ShareMemberDescription")


@dataclass(frozen=True, slots=True)
class DescribedGroup(_GroupEntry, Generic[_Member]):
    """A ConsumerGroupDescribe or ShareGroupDescribe group entry: the same fields, other
    members. The defaults are the encoder's, which an entry the handler refuses shows; the
    coordinator's failed entries say "Dead"."""

    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[_Member, ...] = ()

    def fields(self) -> dict[str, Any]:
        """The group entry's fields as the encoder takes them."""
        return {"group_id": self.group_id, "error_code": self.error_code,
                "error_message": self.error_message, "group_state": self.group_state,
                "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "assignor_name": self.assignor_name,
                "members": [m.fields() for m in self.members],
                "authorized_operations": self.authorized_operations}


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription(DescribedGroup[ConsumerMemberDescription]):
    """A ConsumerGroupDescribe group entry."""


@dataclass(frozen=True, slots=True)
class ShareGroupDescription(DescribedGroup[ShareMemberDescription]):
    """A ShareGroupDescribe group entry."""


@dataclass(frozen=True, slots=True)
class ListedGroup:
    """A ListGroups row."""

    group_id: str
    protocol_type: str
    group_state: str
    group_type: str

    def fields(self) -> dict[str, Any]:
        return {"group_id": self.group_id, "protocol_type": self.protocol_type,
                "group_state": self.group_state, "group_type": self.group_type}

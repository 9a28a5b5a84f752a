"""Typed replies of the group managers; the broker's handlers turn them into wire responses."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

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
class StreamsGroupDescription:
    """A StreamsGroupDescribe group entry. `topology` None: the group has none (or the describe
    failed)."""

    group_id: str
    authorized_operations: int
    error_code: int = 0
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    topology: TopologyDescription | None = None
    members: tuple[StreamsMemberDescription, ...] = ()

    @classmethod
    def failed(cls, group_id: str, authorized_operations: int, code: int,
               message: str | None) -> StreamsGroupDescription:
        return cls(group_id, authorized_operations, error_code=int(code), error_message=message)

    def fields(self) -> dict[str, Any]:
        """The group entry's fields as the encoder takes them (a new dict each time: the
        handler may set its authorized operations)."""
        return {"group_id": self.group_id, "error_code": self.error_code,
                "error_message": self.error_message, "group_state": self.group_state,
                "group_epoch": self.group_epoch, "assignment_epoch": self.assignment_epoch,
                "topology": None if self.topology is None else self.topology.fields(),
                "members": [m.fields() for m in self.members],
                "authorized_operations": self.authorized_operations}

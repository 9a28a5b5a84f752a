"""Typed replies of the group managers; the broker's handlers turn them into wire responses."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

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
        a = self.assignment
        endpoints = self.partitions_by_user_endpoint
        return {
            "error_code": self.error_code, "error_message": self.error_message,
            "member_id": self.member_id, "member_epoch": self.member_epoch,
            "heartbeat_interval": self.heartbeat_interval,
            "acceptable_recovery_lag": self.acceptable_recovery_lag,
            "task_offset_interval": self.task_offset_interval,
            "status": [{"status_code": s.code, "status_detail": s.detail} for s in self.status],
            "active_tasks": None if a is None else _named_fields("subtopology_id", a.active),
            "standby_tasks": None if a is None else _named_fields("subtopology_id", a.standby),
            "warmup_tasks": None if a is None else _named_fields("subtopology_id", a.warmup),
            "endpoint_information_epoch": self.endpoint_information_epoch,
            "partitions_by_user_endpoint": None if endpoints is None else [
                {"user_endpoint": {"host": e.host, "port": e.port},
                 "active_partitions": _named_fields("topic", e.active),
                 "standby_partitions": _named_fields("topic", e.standby)}
                for e in endpoints]}

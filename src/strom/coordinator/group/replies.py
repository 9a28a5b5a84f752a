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

"""Share-group state (KIP-932): members, their subscriptions and assignments, and the group.

A share group has no offsets to hand over between members, so it has no reconciliation: a
member's assignment is its target, given at the group's assignment epoch, and several members
may share a partition. Plain data; the transitions, timers and records live in `share_groups`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

SHARE = "share"

Assignment = dict[uuid.UUID, frozenset[int]]  # topic id -> partitions


def assignment_of(entries: Any) -> Assignment:
    """An assignment from TopicPartitions fields (dicts or kio entities); empty topics dropped."""
    out: dict[uuid.UUID, set[int]] = {}
    for e in entries or ():
        topic_id = e["topic_id"] if isinstance(e, dict) else e.topic_id
        partitions = e["partitions"] if isinstance(e, dict) else e.partitions
        out.setdefault(topic_id, set()).update(partitions)
    return {t: frozenset(ps) for t, ps in out.items() if ps}


def topic_partitions(assignment: Assignment) -> list[dict[str, Any]]:
    return [{"topic_id": t, "partitions": sorted(ps)} for t, ps in sorted(
        assignment.items(), key=lambda kv: str(kv[0])) if ps]


class ShareGroupState(Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ShareMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()
    assigned: Assignment = field(default_factory=dict)

    def metadata_fields(self) -> dict[str, Any]:
        return {"rack_id": self.rack_id, "client_id": self.client_id,
                "client_host": self.client_host,
                "subscribed_topic_names": list(self.subscribed_topic_names)}

    def assignment_fields(self) -> dict[str, Any]:
        # State 0 is Kafka's STABLE: a share member is always reconciled to its target.
        return {"member_epoch": self.member_epoch,
                "previous_member_epoch": self.previous_member_epoch, "state": 0,
                "assigned_partitions": topic_partitions(self.assigned)}


@dataclass
class ShareGroup:
    group_id: str
    now_ms: int
    group_epoch: int = 0
    assignment_epoch: int = 0
    metadata_hash: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    target: dict[str, Assignment] = field(default_factory=dict)
    # Partitions whose share-partition state exists (Kafka's ShareGroupStatePartitionMetadata
    # InitializedTopics): topic id -> (topic name, partitions). Offsets are described, reset
    # and deleted through these.
    initialized: dict[uuid.UUID, tuple[str, frozenset[int]]] = field(default_factory=dict)
    deleted: bool = False
    metadata_version: int | None = None  # the topics-view version the assignment was made at
    # topic name -> (topic id, partition count) of the subscribed topics at the last assignment
    subscribed: dict[str, tuple[uuid.UUID, int]] = field(default_factory=dict)

    type = SHARE
    protocol_type = SHARE

    @property
    def state(self) -> ShareGroupState:
        if self.deleted:
            return ShareGroupState.DEAD
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    @property
    def state_name(self) -> str:
        return self.state.value

    @property
    def is_empty(self) -> bool:
        return not self.members

    def subscribed_topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}

    def is_subscribed_to(self, topic: str) -> bool:
        return topic in self.subscribed_topics()

    def initialized_fields(self) -> dict[str, Any]:
        return {"initializing_topics": [],
                "initialized_topics": [
                    {"topic_id": t, "topic_name": name, "partitions": sorted(ps)}
                    for t, (name, ps) in sorted(self.initialized.items(),
                                                key=lambda kv: kv[1][0])],
                "deleting_topics": []}

"""The persisted state of a share partition, shared by its leader and the share coordinator.

`StateBatch` is the unit Kafka's share coordinator stores (the StateBatches of ShareSnapshotValue
and ShareUpdateValue, and of Read/WriteShareGroupState): a run of offsets with one delivery
state and one delivery count. `Persister` is how a share-partition leader reaches the share
coordinator, in this broker or, in a cluster, over the wire.
"""

from __future__ import annotations

import base64
import uuid
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Protocol


class RecordState(IntEnum):
    """Kafka's delivery states (org.apache.kafka.server.share.fetch.RecordState ids)."""

    AVAILABLE = 0
    ACQUIRED = 1
    ACKNOWLEDGED = 2
    ARCHIVING = 3  # on its way to the dead-letter topic (KIP-1191), then ARCHIVED
    ARCHIVED = 4


@dataclass(frozen=True)
class StateBatch:
    """Offsets first..last (inclusive) in one state with one delivery count.

    `not_before_ms` is Strom's own: for AVAILABLE records held back by the redelivery delay
    (`share.redelivery.delay.ms`), the wall-clock time before which they are not delivered
    again, so that a restart does not redeliver them early; 0 (Kafka's records never carry it)
    is no delay."""

    first_offset: int
    last_offset: int
    delivery_state: int
    delivery_count: int
    not_before_ms: int = 0


@dataclass(frozen=True)
class SharePartitionKey:
    """Which share partition: Kafka keys the state by group, topic id and partition."""

    group_id: str
    topic_id: uuid.UUID
    partition: int

    def coordinator_key(self) -> str:
        """The string FindCoordinator(key_type=SHARE) hashes: "group:topicId:partition"."""
        topic = base64.urlsafe_b64encode(self.topic_id.bytes).decode("ascii").rstrip("=")
        return f"{self.group_id}:{topic}:{self.partition}"


@dataclass
class PartitionState:
    """What ReadShareGroupState returns: the whole state of one share partition."""

    state_epoch: int
    start_offset: int
    leader_epoch: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    delivery_complete_count: int = -1  # v1 of Write/ReadSummary; -1 when unknown


class Persister(Protocol):
    """The share coordinator as a share-partition leader uses it. Every method raises
    `strom.protocol.errors.KafkaError` with Kafka's error code on failure (NOT_COORDINATOR,
    COORDINATOR_NOT_AVAILABLE, FENCED_STATE_EPOCH, FENCED_LEADER_EPOCH, ...)."""

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        """Start (or restart, with a higher state epoch) a share partition at start_offset."""

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState | None:
        """The partition's state, or None when it was never initialized."""

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        """Record a change: the new start offset (-1: unchanged), the batches whose state
        changed (combined with the stored ones as Kafka's share coordinator does) and how many
        in-flight records are done (for the lag; -1: unchanged)."""

    async def read_summary(self, key: SharePartitionKey) -> PartitionState:
        """The state without its batches: start offset (-1 when never initialized), state
        and leader epochs, delivery complete count (DescribeShareGroupOffsets)."""

    async def delete(self, key: SharePartitionKey) -> None:
        """Forget the partition's state (DeleteShareGroupOffsets, DeleteGroups)."""

"""The seam between request handling and cluster coordination.

`Controller` is what handlers call to change metadata. `LocalController` is the single-node
implementation over the embedded metadata log; a ZooKeeper (or Raft) controller implements the
same methods, and listeners (the partition manager) react to the same `Change` events.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from strom.cluster import records as rec
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.cluster.metadata_log import MetadataLog
from strom.cluster.records import Change
from strom.cluster.validation import check_topic_name, colliding
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

Listener = Callable[[list[Change]], None]
PRODUCER_ID_BLOCK = 1000


class Controller(Protocol):
    image: MetadataImage

    def subscribe(self, listener: Listener) -> None: ...

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        assignments: Mapping[int, list[int]] | None,
        configs: Mapping[str, str],
        *,
        validate_only: bool = False,
    ) -> TopicState: ...

    def delete_topic(self, topic: TopicState) -> None: ...

    def create_partitions(
        self, topic: TopicState, total: int, assignments: list[list[int]] | None, *,
        validate_only: bool = False,
    ) -> None: ...

    def alter_configs(self, resource: str, name: str, changes: Mapping[str, str | None]) -> None: ...

    def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]: ...


class LocalController:
    """Single-node controller: this broker leads every partition; changes go to the metadata log."""

    def __init__(self, metadata_log: MetadataLog, image: MetadataImage, broker: BrokerInfo) -> None:
        self._log = metadata_log
        self.image = image
        self._broker = broker
        self._listeners: list[Listener] = []
        image.brokers = {broker.broker_id: broker}
        image.controller_id = broker.broker_id

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def _commit(self, records: list[dict[str, Any]]) -> None:
        changes = self._log.append(self.image, records)
        for listener in self._listeners:
            listener(changes)

    # -- topics ---------------------------------------------------------------------------

    def create_topic(self, name, num_partitions, replication_factor, assignments, configs, *,
                     validate_only=False):
        check_topic_name(name)
        if name in self.image.topics:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        other = colliding(name, list(self.image.topics))
        if other is not None:
            raise KafkaError(
                ErrorCode.INVALID_TOPIC_EXCEPTION,
                f"Topic '{name}' collides with existing topic: {other}",
            )
        live = sorted(self.image.brokers)
        if assignments:
            if num_partitions not in (-1, len(assignments)) or replication_factor != -1:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "Both numPartitions or replicationFactor and replicasAssignments were set.",
                )
            plan = self._check_assignments(dict(assignments), live)
        else:
            if num_partitions <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                                 "Number of partitions must be larger than 0.")
            if replication_factor <= 0:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 "Replication factor must be larger than 0.")
            if replication_factor > len(live):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"Unable to replicate the partition {replication_factor} time(s): The target "
                    f"replication factor of {replication_factor} cannot be reached because only "
                    f"{len(live)} broker(s) are registered.",
                )
            plan = {p: [live[(p + i) % len(live)] for i in range(replication_factor)]
                    for p in range(num_partitions)}
        topic_id = uuid.uuid4()
        topic = TopicState(name, topic_id, configs=dict(configs))
        for p, replicas in plan.items():
            topic.partitions[p] = PartitionState(p, replicas, list(replicas), replicas[0])
        if validate_only:
            return topic
        records = [rec.topic_record(name, topic_id)]
        records += [rec.config_record("topic", name, k, v) for k, v in configs.items()]
        records += [rec.partition_record(topic_id, p) for p in topic.partitions.values()]
        self._commit(records)
        log.info("created topic %s (%s) with %d partitions", name, topic_id, len(plan))
        return self.image.topics[name]

    def _check_assignments(self, assignments: dict[int, list[int]], live: list[int]):
        if sorted(assignments) != list(range(len(assignments))):
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "Partitions should be a consecutive 0-based integer sequence")
        sizes = {len(r) for r in assignments.values()}
        if len(sizes) != 1 or 0 in sizes:
            raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                             "All partitions should have the same number of replicas")
        for p, replicas in assignments.items():
            if len(set(replicas)) != len(replicas):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Duplicate replica assignment for partition {p}: {replicas}")
            unknown = [b for b in replicas if b not in live]
            if unknown:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                 f"Unknown broker(s) {unknown} in assignment of partition {p}")
        return assignments

    def delete_topic(self, topic: TopicState) -> None:
        self._commit([rec.remove_topic_record(topic.topic_id)])
        log.info("deleted topic %s (%s)", topic.name, topic.topic_id)

    def create_partitions(self, topic, total, assignments, *, validate_only=False):
        current = len(topic.partitions)
        if total < current:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS,
                f"Topic currently has {current} partitions, which is higher than the requested "
                f"{total}.",
            )
        if total == current:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic already has {current} partitions.")
        live = sorted(self.image.brokers)
        rf = len(next(iter(topic.partitions.values())).replicas) if topic.partitions else 1
        new = list(range(current, total))
        if assignments is not None:
            if len(assignments) != len(new):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Increasing the number of partitions by {len(new)} but {len(assignments)} "
                    "assignments provided.",
                )
            plan = self._check_assignments(
                {p - current: a for p, a in zip(new, assignments, strict=True)}, live)
            plan = {p + current: a for p, a in plan.items()}
        else:
            if rf > len(live):
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                                 f"Replication factor {rf} exceeds {len(live)} live broker(s)")
            plan = {p: [live[(p + i) % len(live)] for i in range(rf)] for p in new}
        if validate_only:
            return
        self._commit([rec.partition_record(topic.topic_id, PartitionState(p, r, list(r), r[0]))
                      for p, r in plan.items()])

    # -- configs and ids ------------------------------------------------------------------

    def alter_configs(self, resource: str, name: str, changes: Mapping[str, str | None]) -> None:
        if changes:
            self._commit([rec.config_record(resource, name, k, v) for k, v in changes.items()])

    def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        first = self.image.next_producer_id
        self._commit([rec.producer_ids_record(first + PRODUCER_ID_BLOCK)])
        return first, PRODUCER_ID_BLOCK

"""The controller of a combined KRaft node whose quorum has one voter: itself.

It decides as the single node's controller does (`strom.cluster.controller.PlanningController`:
one broker leads every partition), but a change is made by appending its records to the
Raft log and is answered once the quorum has committed them and the `MetadataLoader` has
applied them to the image: the image never shows what the quorum has not agreed on.

Operations run one at a time, as Kafka's controller runs its event queue: each is checked and
planned against an image that already holds every earlier operation.

What a quorum of several controllers adds (brokers registering and heartbeating, ISR changes
and elections through the controller) is issue 30's next stage; a node with other voters is
refused at start-up (`strom.broker.kraft_mode`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from strom.cluster.controller import LARGE_COMMIT, PlanningController
from strom.cluster.features import feature_level_record
from strom.cluster.image import BrokerInfo, MetadataImage, PartitionState, TopicState
from strom.cluster.quotas import QuotaEntity
from strom.cluster.reassignment import Assignment
from strom.controller.loader import MetadataLoader
from strom.protocol.errors import ErrorCode, KafkaError
from strom.raft.types import NotLeaderError
from strom.security.acl import AclBinding

Record = dict[str, Any]
# How long a change may wait for its commit: a one-voter quorum commits on its own fsync, so
# only a stalled disk (or a lost leadership) gets here.
COMMIT_TIMEOUT_S = 30.0


def encode_values(records: list[Record]) -> list[bytes]:
    return [json.dumps(r, separators=(",", ":")).encode() for r in records]


class QuorumController(PlanningController):
    """`Controller` over the metadata quorum (see the module doc)."""

    def __init__(self, loader: MetadataLoader, append: Callable[[list[bytes]], Awaitable[int]],
                 broker: BrokerInfo | None, *,
                 commit_timeout_s: float = COMMIT_TIMEOUT_S) -> None:
        self.image = loader.image
        self._loader = loader
        self._append = append
        self._timeout_s = commit_timeout_s
        self._listeners = []
        self._serial = asyncio.Lock()
        if broker is not None:  # a quorum of one: this broker is the only one there is
            self.image.brokers = {broker.broker_id: broker}
            self.image.controller_id = broker.broker_id

    def subscribe(self, listener: Callable[[list[Any]], None]) -> None:
        self._loader.subscribe(listener)

    async def _commit(self, records: list[Record], *, durable_now: bool = False) -> None:
        """Append, then wait until the records are committed and in the image (a committed
        record is on the disk of a majority of the voters)."""
        await self._commit_at(records)

    async def _commit_at(self, records: list[Record]) -> int:
        """`_commit`, returning the offset of the last record."""
        if len(records) > LARGE_COMMIT:
            values = await asyncio.to_thread(encode_values, records)
        else:
            values = encode_values(records)
        return await self._commit_values(values)

    async def update_features(self, levels: Mapping[str, int], *, validate_only: bool) -> None:
        """Finalize feature levels (checked by the UpdateFeatures handler): FeatureLevelRecords,
        committed together, which the loader applies to the image."""
        if validate_only or not levels:
            return
        await self._commit_values([feature_level_record(name, level)
                                   for name, level in sorted(levels.items())])

    async def _commit_values(self, values: list[bytes]) -> int:
        """Append encoded values; their commit waited for as `_commit` does."""
        try:
            last = await self._append(values)
        except NotLeaderError as exc:
            raise KafkaError(ErrorCode.NOT_CONTROLLER, str(exc)) from exc
        epoch = self._loader.leader.epoch
        loader = self._loader

        def settled() -> bool:  # committed, or never will be in this epoch: another leads
            return loader.applied_offset > last or loader.leader.epoch != epoch

        if not await loader.wait_for(settled, self._timeout_s):
            raise KafkaError(ErrorCode.REQUEST_TIMED_OUT,
                             f"the metadata quorum did not commit the change within "
                             f"{self._timeout_s:.0f} s")
        if loader.applied_offset <= last:
            raise KafkaError(ErrorCode.NOT_CONTROLLER,
                             f"the metadata quorum has a new leader (epoch "
                             f"{loader.leader.epoch}): the change may not be committed")
        return last

    async def _commit_topic_records(self, records: list[Record], recheck: Callable[[], None],
                                    existing: TopicState | None = None) -> None:
        recheck()  # operations run one at a time: nothing can have changed, but be sure
        await self._commit(records)

    async def wait_until(self, predicate: Callable[[MetadataImage], bool],
                         timeout_s: float) -> bool:
        return await self._loader.wait_for(lambda: predicate(self.image), timeout_s)

    # -- one operation at a time ------------------------------------------------------------

    async def create_topic(self, name: str, num_partitions: int, replication_factor: int,
                           assignments: Mapping[int, list[int]] | None,
                           configs: Mapping[str, str], *,
                           validate_only: bool = False) -> TopicState:
        async with self._serial:
            return await super().create_topic(name, num_partitions, replication_factor,
                                              assignments, configs, validate_only=validate_only)

    async def delete_topic(self, topic: TopicState) -> None:
        async with self._serial:
            if topic.topic_id in self.image.topics_by_id:
                await super().delete_topic(topic)

    async def create_partitions(self, topic: TopicState, total: int,
                                assignments: list[list[int]] | None, *,
                                validate_only: bool = False) -> None:
        async with self._serial:
            current = self.image.topics_by_id.get(topic.topic_id)
            if current is None:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"The topic '{topic.name}' was deleted meanwhile.")
            await super().create_partitions(current, total, assignments,
                                            validate_only=validate_only)

    async def alter_configs(self, resource: str, name: str,
                            changes: Mapping[str, str | None]) -> None:
        async with self._serial:
            await super().alter_configs(resource, name, changes)

    async def alter_client_quotas(
            self, changes: Mapping[QuotaEntity, Mapping[str, float | None]]) -> None:
        async with self._serial:
            await super().alter_client_quotas(changes)

    async def alter_acls(self, create: Sequence[AclBinding], delete: Sequence[AclBinding]) -> None:
        async with self._serial:
            await super().alter_acls(create, delete)

    async def allocate_producer_ids(self, broker_id: int) -> tuple[int, int]:
        async with self._serial:
            return await super().allocate_producer_ids(broker_id)

    async def alter_partition_reassignments(
        self, wanted: Mapping[tuple[str, int], list[int] | None], allow_rf_change: bool,
    ) -> dict[tuple[str, int], tuple[int, str | None, Assignment | None]]:
        async with self._serial:
            return await super().alter_partition_reassignments(wanted, allow_rf_change)

    async def alter_isr(self, topic: str, partition: int, leader_epoch: int,
                        partition_epoch: int, isr: list[int]) -> PartitionState:
        async with self._serial:
            return await super().alter_isr(topic, partition, leader_epoch, partition_epoch, isr)

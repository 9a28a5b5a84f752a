"""The share-state persister of a broker: the share coordinator wherever it runs.

A share-partition leader keeps its state with the share coordinator of the share partition's
key, the leader of `__share_group_state-<abs(hash(key)) % n>`. `RoutingPersister` finds that
broker as Kafka's persister (PersisterStateManager) does: from the metadata it holds when the
topic exists, else by creating the topic first (what FindCoordinator(key_type SHARE) does on
any broker, so a local call is as good as the RPC). When the coordinator is this broker the call
goes straight to the local `ShareCoordinator`; otherwise Initialize/Read/Write/Delete/
ReadShareGroupStateSummary go to it over the inter-broker client. NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT and unreachable
brokers are retried with a short backoff (leadership moves, loads end) until
`share.coordinator.write.timeout.ms` has passed twice over; then the last error is raised.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from strom.broker.core import Node
from strom.cluster.client import BrokerClients, BrokerConnectionError
from strom.cluster.image import BrokerInfo
from strom.coordinator.share.coordinator import READ_UNINITIALIZED, ShareCoordinator
from strom.coordinator.share.persister import LocalPersister
from strom.coordinator.share.state import PartitionState, SharePartitionKey, StateBatch
from strom.coordinator.share.store import SHARE_STATE_TOPIC
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRIABLE = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                       ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT})
BACKOFF_S = 0.05
MAX_BACKOFF_S = 1.0
WRITE_VERSION = 1  # WriteShareGroupState v1 carries the delivery complete count
SUMMARY_VERSION = 1


class RoutingPersister:
    """`Persister` for any key: the local coordinator when this broker leads the key's
    `__share_group_state` partition, the leader over the wire otherwise."""

    def __init__(self, node: Node, coordinator: ShareCoordinator) -> None:
        self.node = node
        self.coordinator = coordinator
        self.local = LocalPersister(coordinator)
        self.deadline_s = 2 * coordinator.config.write_timeout_ms / 1000
        self._clients = BrokerClients(f"strom-share-persister-{node.broker_id}",
                                      node.config.get("replica.socket.timeout.ms") / 1000,
                                      node.inter_broker)

    def close(self) -> None:
        self._clients.close()

    # -- finding the coordinator ----------------------------------------------------------

    def coordinator_of(self, key: SharePartitionKey) -> BrokerInfo:
        return self.coordinator_node(self.node, self.coordinator, key)

    @staticmethod
    def coordinator_node(node: Node, coordinator: ShareCoordinator,
                         key: SharePartitionKey) -> BrokerInfo:
        """The live leader of the key's `__share_group_state` partition (the topic is created on
        first need). Raises COORDINATOR_NOT_AVAILABLE while there is none."""
        coordinator.ensure_topic()
        partition = coordinator.partition_for(key)
        topic = node.image.topics.get(SHARE_STATE_TOPIC)
        state = topic.partitions.get(partition) if topic is not None else None
        leader = node.image.brokers.get(state.leader) if state is not None else None
        if leader is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE,
                             f"{SHARE_STATE_TOPIC}-{partition} has no live leader.")
        return leader

    async def _call(self, key: SharePartitionKey, local: Callable[[], Awaitable[T]],
                    remote: Callable[[BrokerInfo], Awaitable[T]]) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.deadline_s
        backoff = BACKOFF_S
        while True:
            try:
                node = self.coordinator_of(key)
                if node.broker_id == self.node.broker_id:
                    return await local()
                return await remote(node)
            except KafkaError as exc:
                if exc.code not in RETRIABLE or loop.time() + backoff > deadline:
                    raise
                error: KafkaError = exc
            except BrokerConnectionError as exc:
                error = KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc))
                if loop.time() + backoff > deadline:
                    raise error from None
            log.debug("share state of %s: %s; retrying", key.coordinator_key(), error)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)

    async def _send(self, node: BrokerInfo, api: ApiKey, version: int,
                    key: SharePartitionKey, partition: dict[str, Any]) -> Any:
        """One request about one share partition; returns its partition result, or raises the
        KafkaError it carries."""
        client = self._clients.get(node.broker_id, node.host, node.port)  # inter-broker listener
        body = {"group_id": key.group_id,
                "topics": [{"topic_id": key.topic_id,
                            "partitions": [{"partition": key.partition, **partition}]}]}
        response = await client.request(int(api), version, body)
        for result in response.results:
            for p in result.partitions:
                if p.error_code:
                    raise KafkaError(p.error_code, p.error_message)
                return p
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR,
                         f"{api.name} answered without the partition")

    # -- Persister --------------------------------------------------------------------------

    async def initialize(self, key: SharePartitionKey, state_epoch: int,
                         start_offset: int) -> None:
        async def remote(node: BrokerInfo) -> None:
            await self._send(node, ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, key,
                             {"state_epoch": state_epoch, "start_offset": start_offset})

        await self._call(key, lambda: self.local.initialize(key, state_epoch, start_offset),
                         remote)

    async def read(self, key: SharePartitionKey, leader_epoch: int) -> PartitionState | None:
        async def remote(node: BrokerInfo) -> PartitionState | None:
            try:
                p = await self._send(node, ApiKey.READ_SHARE_GROUP_STATE, 0, key,
                                     {"leader_epoch": leader_epoch})
            except KafkaError as exc:
                if exc.code == ErrorCode.INVALID_REQUEST and exc.message == READ_UNINITIALIZED:
                    return None
                raise
            return PartitionState(p.state_epoch, p.start_offset, leader_epoch, [
                StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count,
                           b.not_before_ms) for b in p.state_batches])

        return await self._call(key, lambda: self.local.read(key, leader_epoch), remote)

    async def write(self, key: SharePartitionKey, state_epoch: int, leader_epoch: int,
                    start_offset: int, batches: list[StateBatch],
                    delivery_complete_count: int = -1) -> None:
        async def remote(node: BrokerInfo) -> None:
            await self._send(node, ApiKey.WRITE_SHARE_GROUP_STATE, WRITE_VERSION, key, {
                "state_epoch": state_epoch, "leader_epoch": leader_epoch,
                "start_offset": start_offset, "delivery_complete_count": delivery_complete_count,
                "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                   "delivery_state": b.delivery_state,
                                   "delivery_count": b.delivery_count,
                                   "not_before_ms": b.not_before_ms} for b in batches]})

        await self._call(key, lambda: self.local.write(
            key, state_epoch, leader_epoch, start_offset, batches, delivery_complete_count),
            remote)

    async def delete(self, key: SharePartitionKey) -> None:
        async def remote(node: BrokerInfo) -> None:
            await self._send(node, ApiKey.DELETE_SHARE_GROUP_STATE, 0, key, {})

        await self._call(key, lambda: self.local.delete(key), remote)

    async def read_summary(self, key: SharePartitionKey) -> PartitionState:
        """ReadShareGroupStateSummary: the state without its batches (start offset -1: never
        initialized)."""
        async def remote(node: BrokerInfo) -> PartitionState:
            p = await self._send(node, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, SUMMARY_VERSION,
                                 key, {"leader_epoch": 0})
            return PartitionState(p.state_epoch, p.start_offset, p.leader_epoch, [],
                                  p.delivery_complete_count)

        return await self._call(key, lambda: self.local.read_summary(key), remote)

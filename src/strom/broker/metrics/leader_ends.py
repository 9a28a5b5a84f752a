"""High watermarks of partitions this broker holds no replica of, asked of their leaders:
in a cluster a group's coordinator need not hold every partition the group consumes, and its
lag is computed all the same (consumer groups in the metrics, share groups in
DescribeShareGroupOffsets)."""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from strom.cluster.client import BrokerClients
from strom.cluster.image import MetadataImage
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.client import ClientSecurity

log = logging.getLogger(__name__)

LIST_OFFSETS_VERSION = 7
LATEST = -1
TIMEOUT_S = 3.0  # a scrape does not wait longer for a leader

Key = tuple[str, int]


class Cluster(Protocol):
    """What LeaderEnds needs of its broker (a `strom.broker.core.Node`)."""

    broker_id: int
    image: MetadataImage
    inter_broker: ClientSecurity


class LeaderEnds:
    def __init__(self, broker: Cluster) -> None:
        self._broker = broker
        self._clients = BrokerClients(f"strom-metrics-{broker.broker_id}", TIMEOUT_S,
                                      broker.inter_broker)

    async def high_watermarks(self, wanted: set[Key]) -> dict[Key, int]:
        """The leaders' answers for ``wanted``; partitions whose leader is down or does not
        answer in time are left out."""
        image = self._broker.image
        by_leader: dict[int, list[Key]] = {}
        for topic, partition in wanted:
            state = image.topics[topic].partitions.get(partition) if topic in image.topics else None
            if state is not None and state.leader >= 0 and state.leader in image.brokers:
                by_leader.setdefault(state.leader, []).append((topic, partition))
        answers = await asyncio.gather(*(self._ask(leader, keys)
                                         for leader, keys in by_leader.items()),
                                       return_exceptions=True)
        ends: dict[Key, int] = {}
        for leader, answer in zip(by_leader, answers, strict=True):
            if isinstance(answer, BaseException):
                log.debug("lag: no high watermarks from broker %d: %r", leader, answer)
            else:
                ends.update(answer)
        return ends

    async def _ask(self, leader: int, keys: list[Key]) -> dict[Key, int]:
        info = self._broker.image.brokers[leader]
        client = self._clients.get(leader, info.host, info.port)
        topics: dict[str, list[dict[str, int]]] = {}
        for topic, partition in keys:
            topics.setdefault(topic, []).append(
                {"partition_index": partition, "current_leader_epoch": -1, "timestamp": LATEST})
        response = await asyncio.wait_for(client.request(ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, {
            "replica_id": -1, "isolation_level": 0,
            "topics": [{"name": t, "partitions": parts} for t, parts in topics.items()]}),
            TIMEOUT_S)
        return {(t.name, r.partition_index): int(r.offset) for t in response.topics
                for r in t.partitions if r.error_code == ErrorCode.NONE}

    def close(self) -> None:
        self._clients.close()

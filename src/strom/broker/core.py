"""The broker's shared state, handed to every handler."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from strom.broker.partitions import PartitionManager
from strom.cluster.controller import Controller
from strom.cluster.image import BrokerInfo, MetadataImage
from strom.common.immediate import run_now, run_or_start
from strom.config.broker import BrokerConfig
from strom.protocol.errors import ErrorCode, KafkaError
from strom.storage.manager import LogManager

PREFETCH_BELOW = 100  # producer ids left in the block when the next one is asked for


def internal_rf(broker: Any, configured: int) -> int:
    """Replication factor of an internal topic: as configured in a cluster (creation fails
    while fewer brokers are live, as with Kafka); a single node has only itself."""
    return configured if not broker.controller.immediate else min(configured, 1)


@dataclass
class Broker:
    config: BrokerConfig
    broker_id: int
    cluster_id: str
    info: BrokerInfo
    image: MetadataImage
    controller: Controller
    partitions: PartitionManager
    logs: LogManager
    router: Any = None
    # per-topic encoded Metadata parts, keyed by (version, topic name); cleared on image change
    metadata_cache: dict[tuple[int, str], bytes] = field(default_factory=dict)
    metadata_cache_version: int = -1
    producer_ids: list[int] = field(default_factory=lambda: [0, 0])  # [next, end) of our block
    groups: Any = None  # the GroupCoordinator (strom.coordinator.group), set up by app.serve
    # the TransactionCoordinator (strom.coordinator.transaction), set up by app.serve
    transaction_coordinator: Any = None
    # the ReplicaManager (strom.cluster.replication) in a cluster; None on a single node
    replicas: Any = None
    next_block: tuple[int, int] | None = None  # (first, count): prefetched producer ids
    fetching_block: bool = False

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def next_producer_id(self) -> int:
        """Producer ids come in blocks from the controller, unique cluster-wide. In a cluster
        the next block is fetched in the background before this one runs out; while none is
        at hand, the caller gets COORDINATOR_LOAD_IN_PROGRESS and retries (as with Kafka)."""
        nxt, end = self.producer_ids
        if nxt >= end and self.next_block is not None:
            (nxt, size), self.next_block = self.next_block, None
            end = nxt + size
        if nxt >= end and self.controller.immediate:
            nxt, size = run_now(self.controller.allocate_producer_ids(self.broker_id))
            end = nxt + size
        if not self.controller.immediate and end - nxt < PREFETCH_BELOW:
            self._prefetch_block()
        if nxt >= end:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             "the next block of producer ids is on its way")
        self.producer_ids = [nxt + 1, end]
        return nxt

    def _prefetch_block(self) -> None:
        if self.next_block is not None or self.fetching_block:
            return
        self.fetching_block = True

        async def fetch() -> None:
            try:
                self.next_block = await self.controller.allocate_producer_ids(self.broker_id)
            finally:
                self.fetching_block = False

        run_or_start(False, fetch, "allocating producer ids")

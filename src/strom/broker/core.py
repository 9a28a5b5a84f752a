"""The broker's shared state, handed to every handler."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from strom.broker.partitions import PartitionManager
from strom.cluster.controller import Controller
from strom.cluster.image import BrokerInfo, MetadataImage
from strom.config.broker import BrokerConfig
from strom.storage.manager import LogManager


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

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)

    def next_producer_id(self) -> int:
        """Producer ids come in blocks from the controller, unique cluster-wide."""
        nxt, end = self.producer_ids
        if nxt >= end:
            nxt, size = self.controller.allocate_producer_ids(self.broker_id)
            end = nxt + size
        self.producer_ids = [nxt + 1, end]
        return nxt

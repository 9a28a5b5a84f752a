"""The broker's shared state, handed to every handler.

Two layers, so that nothing is filled in after construction: a `Node` is this broker's own
parts (identity, config, metadata image, controller, storage); the coordinators and the
replica manager are built from a Node (`strom.broker.wiring`), and a `Broker` is a Node with
them, complete when constructed.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from strom.broker.metrics.leader_ends import LeaderEnds
from strom.broker.metrics.stats import BrokerStats
from strom.broker.partitions import PartitionManager
from strom.broker.quotas.clients import ClientQuotas
from strom.broker.share.manager import SharePartitionManager
from strom.broker.share.sessions import ShareSessionCache
from strom.broker.txn_gate import TxnPartitionGate
from strom.cluster.controller import Controller
from strom.cluster.image import BrokerInfo, MetadataImage
from strom.cluster.replication.manager import ReplicaManager
from strom.common.immediate import run_now, run_or_start
from strom.config.broker import BrokerConfig
from strom.config.metrics import metrics_endpoint
from strom.coordinator.group.coordinator import GroupCoordinator
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.share.coordinator import ShareCoordinator
from strom.coordinator.share.state import Persister
from strom.coordinator.transaction.coordinator import TransactionCoordinator
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError
from strom.security.acl import Authorizer
from strom.security.client import ClientSecurity
from strom.storage.manager import LogManager

PREFETCH_BELOW = 100  # producer ids left in the block when the next one is asked for



if TYPE_CHECKING:  # the registry's modules load only when it is on (wiring)
    from strom.controller.loader import MetadataProgress
    from strom.registry.coordinator import RegistryCoordinator

@dataclass
class Node:
    """This broker's own parts: what the coordinators and the replica manager are built on."""

    config: BrokerConfig
    broker_id: int
    cluster_id: str
    info: BrokerInfo
    image: MetadataImage
    controller: Controller
    partitions: PartitionManager
    logs: LogManager
    inter_broker: ClientSecurity  # how this broker reaches the others (TLS, SASL credentials)
    authorizer: Authorizer | None  # ACLs (authorizer.class.name); None: everything allowed

    @staticmethod
    def now_ms() -> int:
        return int(time.time() * 1000)


def internal_rf(node: Node, configured: int) -> int:
    """Replication factor of an internal topic: as configured in a cluster (creation fails
    while fewer brokers are live, as with Kafka); a single node has only itself."""
    return min(configured, 1) if node.controller.single_broker else configured


class ProducerIds:
    """Producer ids come in blocks from the controller, unique cluster-wide (Kafka's
    ProducerIdManager). In a cluster the next block is fetched in the background before this
    one runs out; while none is at hand, the caller gets COORDINATOR_LOAD_IN_PROGRESS and
    retries (as with Kafka)."""

    def __init__(self, controller: Controller, broker_id: int) -> None:
        self._controller = controller
        self._broker_id = broker_id
        self._next = self._end = 0  # [next, end) of our block
        self._next_block: tuple[int, int] | None = None  # (first, count): prefetched
        self._fetching = False

    def next(self) -> int:
        nxt, end = self._next, self._end
        if nxt >= end and self._next_block is not None:
            (nxt, size), self._next_block = self._next_block, None
            end = nxt + size
        if nxt >= end and self._controller.immediate:
            nxt, size = run_now(self._controller.allocate_producer_ids(self._broker_id))
            end = nxt + size
        if not self._controller.immediate and end - nxt < PREFETCH_BELOW:
            self.prefetch()
        if nxt >= end:
            raise KafkaError(ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                             "the next block of producer ids is on its way")
        self._next, self._end = nxt + 1, end
        return nxt

    def prefetch(self) -> None:
        """Ask the controller for the next block in the background (once at a time)."""
        if self._next_block is not None or self._fetching:
            return
        self._fetching = True

        async def fetch() -> None:
            try:
                self._next_block = await self._controller.allocate_producer_ids(self._broker_id)
            finally:
                self._fetching = False

        run_or_start(False, fetch, "allocating producer ids")


@dataclass
class Broker(Node):
    """A Node with its coordinators: what every handler receives."""

    groups: GroupCoordinator
    transactions: TransactionCoordinator
    replicas: ReplicaManager | None  # a cluster's replication; None on a single node
    commits: Commits  # where coordinator replies wait for their state's replication
    producer_ids: ProducerIds
    txn_gate: TxnPartitionGate  # a transaction's first write to a partition is checked here
    quotas: ClientQuotas  # client quotas: rates measured and throttle times decided here
    # share groups (KIP-932): the state of the share partitions whose __share_group_state
    # partition this broker leads, and how a share-partition leader reaches any key's coordinator
    share_coordinator: ShareCoordinator
    share_persister: Persister
    # the share partitions this broker leads (their in-flight records) and the members' share
    # sessions with this broker (ShareFetch, ShareAcknowledge)
    share_partitions: SharePartitionManager
    share_sessions: ShareSessionCache
    # per-topic encoded Metadata parts, keyed by (version, topic name); cleared on image change
    metadata_cache: dict[tuple[int, str], bytes] = field(default_factory=dict)
    metadata_cache_version: int = -1
    # what the broker counts for its metrics; None with metrics.listener empty (nothing counted)
    stats: BrokerStats | None = None
    # high watermarks asked of other brokers (a cluster's share-group lag); None on one node
    leader_ends: LeaderEnds | None = None
    # the schema registry (schema.registry.listeners); None when it is off
    registry: RegistryCoordinator | None = None
    # a KRaft node's way to its metadata quorum (requests brokers pass on to the controller,
    # DescribeQuorum); None without KRaft
    metadata_quorum: Callable[[ApiKey, Mapping[str, Any]], Awaitable[Mapping[str, Any]]] | None \
        = None
    # a KRaft node's quorum's kraft.version (0 static voters, 1 dynamic); None without KRaft
    kraft_version: Callable[[], int] | None = None
    # ...and its upgrade (kraft.version 0 -> 1, answered once committed)
    kraft_upgrade: Callable[[int], Awaitable[None]] | None = None
    # a KRaft node's metadata: how far its image is (KIP-835's metrics); None without KRaft
    metadata_progress: Callable[[], MetadataProgress] | None = None
    # whether the node also has the controller role (its metrics name the controller's too)
    controller_role: bool = False

    @classmethod
    def of(cls, node: Node, *, groups: GroupCoordinator, transactions: TransactionCoordinator,
           replicas: ReplicaManager | None, commits: Commits, producer_ids: ProducerIds,
           share_coordinator: ShareCoordinator, share_persister: Persister,
           share_partitions: SharePartitionManager, share_sessions: ShareSessionCache
           ) -> Broker:
        parts = {f.name: getattr(node, f.name) for f in fields(Node)}
        counting = metrics_endpoint(node.config.get("metrics.listener")) is not None
        return cls(**parts, groups=groups, transactions=transactions, replicas=replicas,
                   commits=commits,
                   producer_ids=producer_ids, txn_gate=TxnPartitionGate(node, transactions),
                   share_coordinator=share_coordinator, share_persister=share_persister,
                   share_partitions=share_partitions, share_sessions=share_sessions,
                   stats=BrokerStats() if counting else None,
                   quotas=ClientQuotas.build(node.image, node.config),
                   leader_ends=LeaderEnds(node) if replicas is not None else None)

    def next_producer_id(self) -> int:
        return self.producer_ids.next()

    def start(self) -> None:
        """Start the coordinators (they load their partitions as leadership arrives)."""
        self.groups.start()
        self.transactions.start()
        self.share_coordinator.start()

    def stop(self) -> None:
        self.groups.shutdown()
        self.transactions.shutdown()
        self.share_coordinator.shutdown()
        self.txn_gate.close()

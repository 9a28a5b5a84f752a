"""Building a combined KRaft node (``process.roles=broker,controller``) whose quorum is itself.

The parts differ from the single node only below the `Controller` seam: the image is replayed
from the Raft log by the `MetadataLoader` (the KRaft controller's log, not the broker's
`LogManager`, owns ``__cluster_metadata-0``), and changes go through the `QuorumController`.
The node serves its CONTROLLER listener with the controller's router (the Raft RPCs,
DescribeQuorum, DescribeCluster for ``--bootstrap-controller``) and its other listeners with
the broker's.

A broker is built only once the quorum has elected this node and the loader has applied
everything committed before its epoch: a partition directory is judged against a complete
image, never an empty or partial one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from strom.broker.core import Broker, Node
from strom.broker.partitions import PartitionManager
from strom.broker.wiring import StartupError, advertised_info, build_authorizer, wire_broker
from strom.cluster.image import METADATA_TOPIC, BrokerInfo, MetadataImage
from strom.config.broker import BrokerConfig, ConfigSource
from strom.controller.loader import MetadataLoader, SnapshotPolicy
from strom.controller.node import ControllerNode
from strom.controller.quorum_controller import QuorumController
from strom.security.client import PLAINTEXT as PLAINTEXT_CLIENT
from strom.storage.manager import LogManager

log = logging.getLogger(__name__)

# How long a start waits for the one-voter quorum to elect this node and replay its log: an
# election of one takes an election timeout at most; the rest is reading the metadata log.
ELECTION_WAIT_S = 60.0


def combined(config: BrokerConfig) -> bool:
    roles = set(config.get("process.roles") or [])
    return roles == {"broker", "controller"}


@dataclass
class KRaftParts:
    controller_node: ControllerNode
    loader: MetadataLoader

    @property
    def controller_listener_names(self) -> set[str]:
        return {n.upper() for n in self.controller_node.quorum.controller_listener_names}


def _broker_info(config: BrokerConfig, controller_listeners: set[str]) -> BrokerInfo:
    """This broker as clients reach it: its advertised listeners without the controller's."""
    info = advertised_info(config)
    endpoints = {n: a for n, a in info.endpoints.items() if n not in controller_listeners}
    if not endpoints:
        raise StartupError("a node with the broker role needs a listener besides "
                           f"controller.listener.names ({', '.join(sorted(controller_listeners))})")
    if (info.host, info.port) not in endpoints.values():
        info.host, info.port = next(iter(endpoints.values()))
    info.endpoints = endpoints
    return info


async def build_combined_broker(config: BrokerConfig) -> tuple[Broker, KRaftParts]:
    """The broker and its controller (started: this node leads its one-voter quorum)."""
    broker_id, source = config.source_of("broker.id")
    if source is not ConfigSource.DEFAULT_CONFIG and int(broker_id) != config.get("node.id"):
        raise StartupError(f"broker.id={broker_id} must be equal to node.id="
                           f"{config.get('node.id')} (or left out)")
    if not config.get("controller.quorum.voters"):
        raise StartupError("a combined node needs controller.quorum.voters (a static quorum): "
                           "controller.quorum.bootstrap.servers (a dynamic quorum, KIP-853) is "
                           "not built yet")
    controller_node = ControllerNode(config)
    others = sorted(v.key.id for v in controller_node.voters if v.key.id != controller_node.node_id)
    if controller_node.node_id not in {v.key.id for v in controller_node.voters}:
        raise StartupError(f"node.id={controller_node.node_id} has the controller role but is not "
                           f"in controller.quorum.voters")
    if others:
        raise StartupError(
            f"controller.quorum.voters names other voters ({', '.join(map(str, others))}): "
            "Strom runs combined nodes on a quorum of one so far (a cluster of several KRaft "
            "nodes is not built yet; docs/clusters.md)")
    loop = asyncio.get_running_loop()
    image = MetadataImage(cluster_id=controller_node.cluster_id)
    loader = MetadataLoader(image, loop, policy=SnapshotPolicy(
        max_bytes=config.get("metadata.log.max.record.bytes.between.snapshots"),
        max_interval_ms=config.get("metadata.log.max.snapshot.interval.ms")))
    loader.snapshot = controller_node.snapshot
    parts = KRaftParts(controller_node, loader)
    info = _broker_info(config, parts.controller_listener_names)
    started = time.monotonic()
    await controller_node.start([loader])
    try:
        led = await loader.wait_for(lambda: loader.leader.leader_id == controller_node.node_id,
                                    ELECTION_WAIT_S)
        if not led:
            raise StartupError(f"the metadata quorum did not elect this node within "
                               f"{ELECTION_WAIT_S:.0f} s (see the log above)")
        logs = LogManager(config.log_dirs, max_open_files=config.get("max.open.files"),
                          producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
                          owned_elsewhere=frozenset({METADATA_TOPIC}))
        await asyncio.to_thread(logs.load)
        controller = QuorumController(loader, controller_node.append, info)
        partitions = PartitionManager(config.broker_id, config, image, logs)
        partitions.refresh_dynamic_broker_configs()
        partitions.sync_all()
        controller.subscribe(partitions.on_changes)
        loader.on_reset(partitions.sync_all)
    except BaseException:
        await controller_node.stop()
        raise
    log.info("loaded %d partition logs and %d topics in %.2fs (metadata log at offset %d, "
             "epoch %d)", sum(1 for _ in logs.logs()), len(image.topics),
             time.monotonic() - started, loader.applied_offset, loader.leader.epoch)
    node = Node(config, config.broker_id, controller_node.cluster_id, info, image, controller,
                partitions, logs, PLAINTEXT_CLIENT, build_authorizer(config, image))
    broker = wire_broker(node, loop)
    broker.metadata_quorum = controller_node.raft_request
    return broker, parts

"""Building a broker that is a member of a ZooKeeper-coordinated cluster (`zookeeper.connect`).

The parts differ from the single node only below the `Controller` seam: the metadata image is
filled by the ZooKeeper mirror instead of the embedded metadata log, the controller is a
`ZkController`, logs keep their high watermarks (replication moves them), and a
`ReplicaManager` fetches the partitions this broker follows.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from kazoo.exceptions import ConnectionLoss, NodeExistsError, SessionExpiredError

from strom.broker.core import Broker, Node
from strom.broker.partitions import PartitionManager
from strom.broker.replicas import build_replica_manager
from strom.broker.wiring import (
    StartupError,
    advertised_info,
    build_authorizer,
    cluster_id_for,
    wire_broker,
)
from strom.cluster.image import MetadataImage
from strom.cluster.zk import znodes as zn
from strom.cluster.zk.client import ZkClient
from strom.cluster.zk.controller import ZkController, unclean_from
from strom.cluster.zk.mirror import ZkMirror
from strom.cluster.zk.session import SessionFence
from strom.config.broker import BrokerConfig
from strom.config.listeners import advertised_listeners, inter_broker_listener_name
from strom.security.client import inter_broker_security
from strom.storage.manager import LogManager

log = logging.getLogger("strom.broker")

T = TypeVar("T")
RECONNECT_BACKOFF_S = 0.2


@dataclass
class ClusterParts:
    zk: ZkClient
    mirror: ZkMirror
    controller: ZkController


def _meta_cluster_id(log_dirs: list[Path]) -> str | None:
    for d in log_dirs:
        meta = d / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
    return None


async def cluster_id_from_zookeeper(zk: ZkClient, log_dirs: list[Path]) -> str:
    """The cluster's id lives in /cluster/id; the first broker writes it."""
    got = await zk.get(zn.CLUSTER_ID)
    if got is not None:
        return zn.decode_cluster_id(got[0])
    candidate = (_meta_cluster_id(log_dirs)
                 or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22])
    with contextlib.suppress(NodeExistsError):
        await zk.create(zn.CLUSTER_ID, zn.encode_cluster_id(candidate))
    got = await zk.get(zn.CLUSTER_ID)
    assert got is not None
    return zn.decode_cluster_id(got[0])


async def _retried_while_reconnecting(step: Callable[[], Awaitable[T]], timeout_s: float,
                                      where: str) -> T:
    """`step` again while the ZooKeeper connection is lost and comes back (a missed ping on a
    loaded machine drops it; kazoo reconnects on its own), for at most `timeout_s`: a
    connection lost just after start-up is no reason to refuse to start."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while True:
        try:
            return await step()
        except (ConnectionLoss, SessionExpiredError) as exc:
            if asyncio.get_running_loop().time() >= deadline:
                raise StartupError(f"lost the connection to ZooKeeper at {where} while "
                                   f"starting, for more than {timeout_s:g}s: "
                                   f"{type(exc).__name__}") from None
            log.warning("the connection to ZooKeeper was lost while starting (%s): trying "
                        "again", type(exc).__name__)
            await asyncio.sleep(RECONNECT_BACKOFF_S)  # a back-off, not synchronisation


async def build_cluster_broker(config: BrokerConfig) -> tuple[Broker, ClusterParts]:
    """The broker, complete with its replica manager, and the cluster parts `serve` starts and
    stops (the controller registers only once the broker listens)."""
    broker_id = config.broker_id
    session_ms = config.get("zookeeper.session.timeout.ms")
    zk = ZkClient(config.get("zookeeper.connect"), session_timeout_ms=session_ms,
                  connection_timeout_ms=config.get("zookeeper.connection.timeout.ms") or session_ms)
    await zk.start()

    async def first_steps() -> str:
        for path in zn.PERSISTENT_PATHS:
            await zk.ensure_path(path)
        return await cluster_id_from_zookeeper(zk, config.log_dirs)

    cluster_id = await _retried_while_reconnecting(
        first_steps, zk.connection_timeout_ms / 1000, config.get("zookeeper.connect"))
    local = cluster_id_for(config.log_dirs, broker_id, expected=cluster_id)
    if local != cluster_id:
        await zk.stop()
        raise StartupError(f"the log dirs belong to cluster {local}, but ZooKeeper at "
                           f"{config.get('zookeeper.connect')} holds cluster {cluster_id}")
    logs = LogManager(config.log_dirs, max_open_files=config.get("max.open.files"),
                      producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
                      replicated=True)
    logs.load()
    image = MetadataImage(cluster_id=cluster_id)
    info = advertised_info(config)
    mirror = ZkMirror(zk, image, inter_broker=inter_broker_listener_name(config),
                      own_broker=broker_id)
    partitions = PartitionManager(broker_id, config, image, logs)
    controller = ZkController(
        zk, mirror, image, info, unclean_for=unclean_from(partitions.resolve),
        rebalance_interval_s=(config.get("leader.imbalance.check.interval.seconds")
                              if config.get("auto.leader.rebalance.enable") else None),
        imbalance_percentage=config.get("leader.imbalance.per.broker.percentage"),
        listener_protocols={lst.name: lst.protocol for lst in advertised_listeners(config)})
    await mirror.start()  # one whole read of the tree (raises if ZooKeeper fails meanwhile)
    partitions.refresh_dynamic_broker_configs()
    # an unreadable topic znode leaves that topic out of the image: then judge nothing stray
    partitions.sync_all(unverified=mirror.incomplete())
    mirror.subscribe(partitions.on_changes)
    node = Node(config, broker_id, cluster_id, info, image, controller, partitions, logs,
                inter_broker_security(config), build_authorizer(config, image))
    replicas = build_replica_manager(node)
    mirror.subscribe(replicas.on_changes)
    fence = SessionFence(zk, mirror)  # no coordinator answers from a stale image
    broker = wire_broker(node, asyncio.get_running_loop(), replicas, fence.current)
    return broker, ClusterParts(zk, mirror, controller)

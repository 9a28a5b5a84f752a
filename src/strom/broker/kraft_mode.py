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
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from strom.broker.core import Broker, Node
from strom.broker.partitions import PartitionManager
from strom.broker.wiring import StartupError, advertised_info, build_authorizer, wire_broker
from strom.cluster.controller import Controller
from strom.cluster.image import METADATA_TOPIC, BrokerInfo, MetadataImage, TopicState
from strom.config.broker import BrokerConfig, ConfigSource
from strom.controller.loader import MetadataLoader, SnapshotPolicy
from strom.controller.node import ControllerNode
from strom.controller.quorum_controller import QuorumController
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import KafkaError
from strom.security.client import PLAINTEXT as PLAINTEXT_CLIENT
from strom.storage.checkpoints import topic_id_from_str
from strom.storage.manager import LogManager

if TYPE_CHECKING:
    from strom.broker.dir_assignments import DirectoryAssignments
    from strom.broker.kraft_cluster import AdminForwarder, BrokerLifecycle, ControllerChannel
    from strom.controller.cluster_controller import ClusterQuorumController

log = logging.getLogger(__name__)

# How long a start waits for the one-voter quorum to elect this node and replay its log: an
# election of one takes an election timeout at most; the rest is reading the metadata log.
ELECTION_WAIT_S = 60.0


def combined(config: BrokerConfig) -> bool:
    roles = set(config.get("process.roles") or [])
    return roles == {"broker", "controller"}


@dataclass
class ClusterRole:
    """What a broker of a KRaft cluster runs besides the broker (`strom.broker.app` starts
    and stops them)."""

    controller: ClusterQuorumController | None  # on a voter: active while it leads
    lifecycle: BrokerLifecycle
    forwarder: AdminForwarder
    assignments: DirectoryAssignments | None = None  # with several log.dirs


@dataclass
class KRaftParts:
    controller_node: ControllerNode
    loader: MetadataLoader
    cluster: ClusterRole | None = None

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


ServeControllerListener = Callable[[ControllerNode, set[str]], Awaitable[None]]


async def build_kraft_broker(config: BrokerConfig, serve_controller_listener: ServeControllerListener,
                             ) -> tuple[Broker, KRaftParts]:
    """A KRaft node with the broker role: combined on a quorum of one (the single node), or
    a broker of a cluster (combined with other voters, or broker-only: an observer)."""
    broker_id, source = config.source_of("broker.id")
    if source is not ConfigSource.DEFAULT_CONFIG and int(broker_id) != config.get("node.id"):
        raise StartupError(f"broker.id={broker_id} must be equal to node.id="
                           f"{config.get('node.id')} (or left out)")
    controller_node = ControllerNode(config)
    if controller_node.dynamic:
        # a dynamic quorum (KIP-853): whether this node votes is the log's to say, and may
        # change; a combined node serves its controller listener either way
        return await build_cluster_broker(config, controller_node, combined(config),
                                          serve_controller_listener)
    voter_ids = {v.key.id for v in controller_node.voters}
    is_voter = controller_node.node_id in voter_ids
    if not combined(config) and is_voter:
        raise StartupError(f"node.id={controller_node.node_id} is in controller.quorum.voters but "
                           "process.roles has no controller role")
    if voter_ids == {controller_node.node_id}:
        broker, parts = await build_combined_broker(config, controller_node)
        await serve_controller_listener(controller_node, parts.controller_listener_names)
        return broker, parts
    return await build_cluster_broker(config, controller_node, is_voter,
                                      serve_controller_listener)


async def build_combined_broker(config: BrokerConfig,
                                controller_node: ControllerNode) -> tuple[Broker, KRaftParts]:
    """The single node: the broker and its controller (started: this node leads its
    one-voter quorum)."""
    loop = asyncio.get_running_loop()
    image = MetadataImage(cluster_id=controller_node.cluster_id)
    loader = _loader(config, image, loop, controller_node)
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
        logs = await _load_logs(config, replicated=False)
        controller = QuorumController(loader, controller_node.append, info)
        controller_node.feature_controller = controller
        partitions = PartitionManager(config.broker_id, config, image, logs)
        _follow(partitions, controller, loader)
    except BaseException:
        await controller_node.stop()
        raise
    log.info("loaded %d partition logs and %d topics in %.2fs (metadata log at offset %d, "
             "epoch %d)", sum(1 for _ in logs.logs()), len(image.topics),
             time.monotonic() - started, loader.applied_offset, loader.leader.epoch)
    node = Node(config, config.broker_id, controller_node.cluster_id, info, image, controller,
                partitions, logs, PLAINTEXT_CLIENT, controller_node.authorizer)
    broker = wire_broker(node, loop)
    broker.metadata_quorum = controller_node.raft_request
    broker.kraft_version = controller_node.kraft_version
    broker.kraft_upgrade = controller_node.upgrade_kraft_version
    broker.metadata_progress = loader.progress
    broker.controller_role = controller_node.is_controller
    return broker, parts


async def _load_logs(config: BrokerConfig, *, replicated: bool) -> LogManager:
    """This node's partition logs, loaded off the event loop; the metadata log is the Raft
    client's, not the LogManager's."""
    logs = LogManager(config.log_dirs, max_open_files=config.get("max.open.files"),
                      producer_id_expiration_ms=config.get("producer.id.expiration.ms"),
                      replicated=replicated, owned_elsewhere=frozenset({METADATA_TOPIC}))
    await asyncio.to_thread(logs.load)
    return logs


def _follow(partitions: PartitionManager, controller: Controller,
            loader: MetadataLoader) -> None:
    """The partition logs follow the image: made or judged now, then on every change."""
    partitions.refresh_dynamic_broker_configs()
    partitions.sync_all()
    controller.subscribe(partitions.on_changes)
    loader.on_reset(partitions.sync_all)


def _loader(config: BrokerConfig, image: MetadataImage, loop: asyncio.AbstractEventLoop,
            controller_node: ControllerNode) -> MetadataLoader:
    loader = MetadataLoader(image, loop, policy=SnapshotPolicy(
        max_bytes=config.get("metadata.log.max.record.bytes.between.snapshots"),
        max_interval_ms=config.get("metadata.log.max.snapshot.interval.ms")))
    loader.snapshot = controller_node.snapshot
    controller_node.loader = loader
    # the ACLs, checked on the CONTROLLER listener from its first request (super users only
    # until the metadata is replayed), and the broker's
    controller_node.authorizer = build_authorizer(config, image)
    return loader


async def _caught_up(controller_node: ControllerNode, loader: MetadataLoader,
                     timeout_s: float) -> bool:
    """True once the quorum has a leader and the loader applied everything committed that
    this node knows of: only then is a partition directory judged against the image."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        raft, driver = controller_node.raft, controller_node.driver
        if raft is not None and driver is not None and loader.leader.leader_id is not None:
            hw = await driver.call(getattr, raft, "high_watermark")
            if hw is not None and hw > 0 and loader.applied_offset >= hw:
                return True
        await loader.wait_for(lambda: False, 0.1)  # woken by each applied step
    return False


async def build_cluster_broker(config: BrokerConfig, controller_node: ControllerNode,
                               is_voter: bool, serve_controller_listener: ServeControllerListener,
                               ) -> tuple[Broker, KRaftParts]:
    """A broker of a KRaft cluster: a voter (combined node) or an observer (broker-only) of
    the metadata quorum, which registers with the active controller and follows its
    decisions (strom.broker.kraft_cluster)."""
    from strom.broker.kraft_cluster import (
        AdminForwarder,
        BrokerLifecycle,
        ControllerChannel,
        ForwardingController,
    )
    from strom.broker.replicas import build_replica_manager
    from strom.config.listeners import advertised_listeners, inter_broker_listener_name
    from strom.security.client import controller_security, inter_broker_security

    loop = asyncio.get_running_loop()
    image = MetadataImage(cluster_id=controller_node.cluster_id)
    loader = _loader(config, image, loop, controller_node)
    loader.track_controller = True
    parts = KRaftParts(controller_node, loader)
    info = _broker_info(config, parts.controller_listener_names)
    started = time.monotonic()
    # initial.broker.registration.timeout.ms, as Kafka's broker: catching up with the quorum
    # and registering must both be done by then, or the broker exits
    registration_s = config.get("initial.broker.registration.timeout.ms") / 1000
    await controller_node.start([loader])
    try:
        if is_voter:
            await serve_controller_listener(controller_node, parts.controller_listener_names)
        if not await _caught_up(controller_node, loader, registration_s):
            where = ("controller.quorum.bootstrap.servers" if controller_node.dynamic
                     else "controller.quorum.voters")
            raise StartupError(f"the metadata quorum had no leader this node could catch up "
                               f"with within {registration_s:g} s "
                               f"(initial.broker.registration.timeout.ms; are the controllers "
                               f"of {where} up? see the log above)")
        inherited = loader.hold_inherited_leaderships(config.broker_id)
        if inherited:
            log.info("%d partition(s) led by this broker before it restarted are not served "
                     "until the controller elects their leaders again", inherited)
        logs = await _load_logs(config, replicated=True)
        partitions = PartitionManager(config.broker_id, config, image, logs)
        local = None
        incarnation = uuid.uuid4()  # this broker process's, for its registrations
        if is_voter:
            local = _cluster_controller(config, controller_node, loader, partitions,
                                        local_incarnation=str(incarnation))
            controller_node.cluster = local
            controller_node.feature_controller = local
        channel = ControllerChannel(
            lambda: loader.leader.leader_id, controller_node.controller_endpoints,
            client_id=f"broker-{config.broker_id}-to-controller",
            security=controller_security(config),
            timeout_s=config.get("controller.quorum.request.timeout.ms") / 1000)
        # registration and heartbeats on a connection of their own, as Kafka's broker has:
        # behind a burst of AlterPartition requests (a failover of 1,000 partitions) they
        # would wait past broker.session.timeout.ms, and the controller fence a live broker
        heartbeat_channel = ControllerChannel(
            lambda: loader.leader.leader_id, controller_node.controller_endpoints,
            client_id=f"broker-{config.broker_id}-heartbeat",
            security=controller_security(config),
            timeout_s=config.get("controller.quorum.request.timeout.ms") / 1000)
        protocols = {lst.name: lst.protocol for lst in advertised_listeners(config)}
        dir_ids = _log_dir_ids(logs)
        lifecycle = BrokerLifecycle(heartbeat_channel, info, controller_node.cluster_id,
                                    protocols, loader,
                                    interval_ms=config.get("broker.heartbeat.interval.ms"),
                                    session_timeout_ms=config.get("broker.session.timeout.ms"),
                                    register_by=started + registration_s,
                                    log_dirs=[topic_id_from_str(d) for d in dir_ids.values()],
                                    offline_dirs=lambda: [topic_id_from_str(dir_ids[d])
                                                          for d in logs.offline_dirs
                                                          if d in dir_ids],
                                    incarnation=incarnation)
        assignments = None
        if len(dir_ids) > 1:  # where each replica lives, for the controller (KIP-858)
            from strom.broker.dir_assignments import DirectoryAssignments

            assignments = DirectoryAssignments(config.broker_id, image, logs, dir_ids,
                                               channel.request, lambda: lifecycle.epoch)
            loader.subscribe(assignments.wake)
            logs.on_placed(assignments.wake)
        if combined(config):
            _keep_registered(config, controller_node, loader, channel)
        inter_broker = inter_broker_listener_name(config)
        forwarder = AdminForwarder(channel, lambda: local is not None and local.active,
                                   inter_broker, protocols.get(inter_broker, "PLAINTEXT"))
        controller_node.forwarded = forwarder.handle
        controller = ForwardingController(local, loader, channel, lifecycle, forwarder)
        _follow(partitions, controller, loader)
    except BaseException:
        await controller_node.stop()
        raise
    log.info("loaded %d partition logs and %d topics in %.2fs (metadata log at offset %d, "
             "epoch %d, leader %s)", sum(1 for _ in logs.logs()), len(image.topics),
             time.monotonic() - started, loader.applied_offset, loader.leader.epoch,
             loader.leader.leader_id)
    node = Node(config, config.broker_id, controller_node.cluster_id, info, image, controller,
                partitions, logs, inter_broker_security(config), controller_node.authorizer)
    replicas = build_replica_manager(node)
    controller.subscribe(replicas.on_changes)
    broker = wire_broker(node, loop, replicas, lifecycle.current)
    broker.metadata_quorum = _quorum_requests(controller_node, channel)
    broker.kraft_version = controller_node.kraft_version
    broker.kraft_upgrade = controller_node.upgrade_kraft_version
    broker.metadata_progress = loader.progress
    broker.controller_role = controller_node.is_controller
    parts.cluster = ClusterRole(local, lifecycle, forwarder, assignments)
    return broker, parts


def _log_dir_ids(logs: LogManager) -> dict[Path, str]:
    """The directory id (meta.properties' directory.id) of each log dir, when every one has
    one (a dir formatted before directory ids has none: then none is reported)."""
    from strom.broker.wiring import read_meta_properties

    out = {}
    for d in logs.log_dirs:
        meta = d / "meta.properties"
        props = read_meta_properties(meta) if meta.exists() else {}
        if "directory.id" not in props:
            return {}
        out[d] = props["directory.id"]
    return out


# the versions a broker forwards the quorum's requests at (Kafka 4.4's highest)
QUORUM_FORWARD_VERSIONS = {ApiKey.DESCRIBE_QUORUM: 2, ApiKey.ADD_RAFT_VOTER: 1,
                           ApiKey.REMOVE_RAFT_VOTER: 0}


def _quorum_requests(controller_node: ControllerNode, channel: ControllerChannel,
                     ) -> Callable[[ApiKey, Mapping[str, Any]], Awaitable[Mapping[str, Any]]]:
    """DescribeQuorum and voter changes from a broker listener: the quorum's leader answers
    them (this node's own Raft client when it leads, else the active controller's)."""
    async def request(api_key: ApiKey, body: Mapping[str, Any]) -> Mapping[str, Any]:
        if controller_node.leader_id() == controller_node.node_id:
            return await controller_node.raft_request(api_key, body)
        try:
            response = await channel.request(api_key, QUORUM_FORWARD_VERSIONS[api_key], body)
        except KafkaError as exc:
            return {"error_code": int(exc.code), "error_message": exc.message}
        return response.to_dict()

    return request


@dataclass
class ControllerOnlyParts:
    """A controller-only node of a cluster (`process.roles=controller`): its voter, the
    controller brokers register with while it leads, and the broker machinery (no partitions,
    no coordinators started) that handles the admin requests brokers forward to it."""

    controller_node: ControllerNode
    loader: MetadataLoader
    controller: ClusterQuorumController
    broker: Broker


async def build_controller_only(config: BrokerConfig,
                                serve_controller_listener: ServeControllerListener,
                                ) -> ControllerOnlyParts:
    """A voter that serves brokers: as Kafka's controllers, it replays the metadata log into
    an image (a standby is ready to lead at once), and while it leads the quorum it is the
    active controller (broker registrations, heartbeats, AlterPartition, forwarded admin
    requests). It hosts no partitions."""
    from strom.broker.handlers import MODULES
    from strom.broker.handlers import quorum as quorum_handlers
    from strom.broker.kraft_cluster import AdminForwarder, ControllerChannel
    from strom.broker.router import Router
    from strom.security.client import controller_security

    loop = asyncio.get_running_loop()
    controller_node = ControllerNode(config)
    image = MetadataImage(cluster_id=controller_node.cluster_id)
    loader = _loader(config, image, loop, controller_node)
    loader.track_controller = True
    await controller_node.start([loader])
    try:
        await serve_controller_listener(controller_node,
                                        {n.upper() for n in
                                         controller_node.quorum.controller_listener_names})
        logs = await _load_logs(config, replicated=True)
        partitions = PartitionManager(controller_node.node_id, config, image, logs)
        local = _cluster_controller(config, controller_node, loader, partitions)
        controller_node.cluster = local
        controller_node.feature_controller = local
        listener = controller_node.listener
        channel = ControllerChannel(lambda: loader.leader.leader_id,
                                    controller_node.controller_endpoints,
                                    client_id=f"controller-{controller_node.node_id}",
                                    security=controller_security(config),
                                    timeout_s=config.get("controller.quorum.request.timeout.ms")
                                    / 1000)
        _keep_registered(config, controller_node, loader, channel)
        forwarder = AdminForwarder(channel, lambda: local.active, listener, "PLAINTEXT")
        info = BrokerInfo(controller_node.node_id, "", 0)
        node = Node(config, controller_node.node_id, controller_node.cluster_id, info, image,
                    local, partitions, logs, PLAINTEXT_CLIENT, controller_node.authorizer)
        broker = wire_broker(node, loop)
        router = Router(broker, [*MODULES, quorum_handlers])
        forwarder.dispatch = router.dispatch
        forwarder.response_header = router.response_header
        controller_node.forwarded = forwarder.handle
        local.start()
    except BaseException:
        await controller_node.stop()
        raise
    return ControllerOnlyParts(controller_node, loader, local, broker)


def _keep_registered(config: BrokerConfig, controller_node: ControllerNode,
                     loader: MetadataLoader, channel: ControllerChannel) -> None:
    """Start the node's ControllerRegistration (KIP-919): a controller of a cluster, voter or
    observer, registers its CONTROLLER listeners with the active controller."""
    from strom.config.listeners import controller_endpoints, protocol_map
    from strom.controller.registration import ControllerRegistrationManager

    names = controller_node.quorum.controller_listener_names
    manager = ControllerRegistrationManager(
        controller_node.node_id, controller_endpoints(config, names), protocol_map(config),
        loader, channel.request)
    controller_node.registration = manager
    manager.start()


def _cluster_controller(config: BrokerConfig, controller_node: ControllerNode,
                        loader: MetadataLoader, partitions: PartitionManager,
                        local_incarnation: str | None = None) -> ClusterQuorumController:
    """The controller a voter of a cluster runs: active while it leads the quorum."""
    from strom.controller.cluster_controller import ClusterQuorumController

    rebalance_interval_s = (config.get("leader.imbalance.check.interval.seconds")
                            if config.get("auto.leader.rebalance.enable") else None)
    args: dict[str, Any] = dict(
        node_id=controller_node.node_id,
        is_leader=lambda: loader.leader.leader_id == controller_node.node_id,
        session_timeout_ms=config.get("broker.session.timeout.ms"),
        unclean_for=_unclean_from(partitions.resolve),
        rebalance_interval_s=rebalance_interval_s,
        imbalance_percentage=config.get("leader.imbalance.per.broker.percentage"),
        local_incarnation=local_incarnation,
        heartbeat_interval_ms=config.get("broker.heartbeat.interval.ms"))
    if not config.get("zookeeper.metadata.migration.enable"):
        return ClusterQuorumController(loader, controller_node.append, **args)
    from strom.config.listeners import inter_broker_listener_name, protocol_map
    from strom.controller.zk_migration import MigratingController, MigrationSettings

    settings = MigrationSettings(
        connect=config.get("zookeeper.connect"),
        session_timeout_ms=config.get("zookeeper.session.timeout.ms"),
        inter_broker_listener=inter_broker_listener_name(config),
        listener_protocols=protocol_map(config), rebalance_interval_s=rebalance_interval_s,
        imbalance_percentage=args["imbalance_percentage"])
    return MigratingController(loader, controller_node.append, migration=settings,
                               cluster_id=controller_node.cluster_id, **args)


def _unclean_from(resolve: Callable[[TopicState, str], object]) -> Callable[[TopicState], bool]:
    def unclean(topic: TopicState) -> bool:
        return bool(getattr(resolve(topic, "unclean.leader.election.enable"), "value", False))

    return unclean

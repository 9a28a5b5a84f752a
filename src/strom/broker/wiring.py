"""Putting a broker together, once, at start-up: its `Node` (identity, storage, metadata,
controller), then the coordinators built from it, then the complete `Broker`.

Both ways a broker runs use this module: the single node (`build_local_node`, here) and a
member of a ZooKeeper cluster (`strom.broker.zk_mode`); both end in `wire_broker`, the one
place the coordinators are constructed. The coordinators see the broker only through the
adapters below, never through the Broker itself.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import strom
from strom.broker.commit_gate import ReplicaCommits
from strom.broker.core import Broker, Node, ProducerIds
from strom.broker.group_configs import MetadataGroupConfigs
from strom.broker.internal_topics import InternalTopic
from strom.broker.markers import OFFSETS_TOPIC, ClusterMarkerWriter
from strom.broker.partitions import PartitionManager
from strom.broker.share.dlq import DeadLetterWriter
from strom.broker.share.manager import SharePartitionManager
from strom.broker.share.sessions import ShareSessionCache
from strom.broker.share.settings import group_settings
from strom.broker.share_persister import RoutingPersister
from strom.cluster.client import BrokerClients
from strom.cluster.controller import LocalController
from strom.cluster.image import INTERNAL_TOPICS, BrokerInfo, MetadataImage
from strom.cluster.metadata_log import MetadataDamagedError, MetadataLog
from strom.cluster.records import Change
from strom.cluster.replication.manager import ReplicaManager
from strom.common.immediate import run_or_start
from strom.config.broker import BrokerConfig
from strom.config.defs import ConfigError
from strom.config.listeners import advertised_listeners, default_listener
from strom.config.registry import registry_endpoint
from strom.config.topic import validate_topic_configs
from strom.coordinator.group.coordinator import GroupConfig, GroupCoordinator
from strom.coordinator.group.streams_topology import NewTopic
from strom.coordinator.runtime.commits import Commits
from strom.coordinator.runtime.store import StateStore
from strom.coordinator.share.config import ShareCoordinatorConfig
from strom.coordinator.share.coordinator import ShareCoordinator
from strom.coordinator.share.store import SHARE_STATE_TOPIC
from strom.coordinator.transaction.coordinator import TransactionCoordinator, TxnConfig
from strom.coordinator.transaction.store import TRANSACTION_STATE_TOPIC
from strom.protocol.errors import ErrorCode, KafkaError
from strom.registry.state import SCHEMAS_TOPIC

if TYPE_CHECKING:
    from strom.registry.coordinator import RegistryCoordinator
from strom.security.acl import Authorizer, parse_super_users
from strom.security.client import PLAINTEXT as PLAINTEXT_CLIENT
from strom.storage.manager import LogManager

log = logging.getLogger("strom.broker")

DEFAULT_SEGMENT_BYTES = 104857600


class StartupError(Exception):
    """The broker cannot start; the message tells the operator why."""


# --------------------------------------------------------------------------------------------
# The log dirs' identity (meta.properties)
# --------------------------------------------------------------------------------------------


def read_meta_properties(meta: Path) -> dict[str, str]:
    """meta.properties as a dict; an unreadable one stops the start-up with one clear line (it
    holds the cluster id, which nothing else can supply)."""
    try:
        text = meta.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise StartupError(f"cannot read {meta}: {e}") from e
    return dict(line.split("=", 1) for line in text.splitlines()
                if "=" in line and not line.startswith("#"))  # fmt: skip


def cluster_id_for(log_dirs: list[Path], broker_id: int, expected: str | None = None) -> str:
    """Read or create meta.properties in every log dir; all must agree (as Kafka requires).
    A new log dir takes ``expected`` (a cluster's id from ZooKeeper) when given."""
    found: dict[str, str] = {}
    for d in log_dirs:
        d.mkdir(parents=True, exist_ok=True)
        meta = d / "meta.properties"
        if meta.exists():
            props = read_meta_properties(meta)
            node = props.get("node.id", props.get("broker.id"))
            if node is not None and not node.strip().lstrip("-").isdigit():
                raise StartupError(f"{meta} has node.id={node}, which is not a number")
            if node is not None and int(node) != broker_id:
                raise StartupError(
                    f"{meta} belongs to broker {node}, but this broker is broker.id={broker_id}")
            if "cluster.id" in props:
                found[str(d)] = props["cluster.id"]
    ids = set(found.values())
    if len(ids) > 1:
        raise StartupError(f"log dirs belong to different clusters: {found}")
    cluster_id = ids.pop() if ids else (
        expected or base64.urlsafe_b64encode(uuid.uuid4().bytes).decode()[:22])
    for d in log_dirs:
        meta = d / "meta.properties"
        if not meta.exists():
            meta.write_text(f"#Written by Strom {strom.__version__}\nversion=1\n"
                            f"cluster.id={cluster_id}\nnode.id={broker_id}\n")
    return cluster_id


AUTHORIZERS = ("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
               "kafka.security.authorizer.AclAuthorizer")


def build_authorizer(config: BrokerConfig, image: MetadataImage) -> Authorizer | None:
    """Kafka's authorizer, reading the ACLs of this broker's metadata image (None when
    authorizer.class.name is empty: every request is allowed, as in Kafka)."""
    name = (config.get("authorizer.class.name") or "").strip()
    if not name:
        return None
    if name not in AUTHORIZERS:
        raise StartupError(f"authorizer.class.name={name} is not supported: Strom implements "
                           f"Kafka's ACLs as {AUTHORIZERS[0]}")
    try:
        super_users = parse_super_users(config.get("super.users"))
    except ValueError as e:
        raise StartupError(f"super.users: {e}") from None
    return Authorizer(lambda: image.acls, lambda: image.version, super_users=super_users,
                      allow_if_no_acl=config.get("allow.everyone.if.no.acl.found"))


def advertised_info(config: BrokerConfig) -> BrokerInfo:
    """This broker as others reach it: every advertised listener (a host left empty is this
    machine's name); host/port are the inter-broker listener's (a single node: the first)."""
    hostname = socket.gethostname()
    endpoints = {lst.name: (lst.host or hostname, lst.port) for lst in advertised_listeners(config)}
    default = default_listener(config)
    host, port = endpoints[default.name]
    return BrokerInfo(config.broker_id, host, port, config.get("broker.rack"), endpoints)


# --------------------------------------------------------------------------------------------
# The single node: metadata in the embedded metadata log, a LocalController
# --------------------------------------------------------------------------------------------


def build_local_node(config: BrokerConfig) -> Node:
    broker_id = config.broker_id
    cluster_id = cluster_id_for(config.log_dirs, broker_id)
    logs = LogManager(config.log_dirs, max_open_files=config.get("max.open.files"),
                      producer_id_expiration_ms=config.get("producer.id.expiration.ms"))
    started = time.monotonic()
    logs.load()
    metadata_log = MetadataLog(logs)
    try:
        image = metadata_log.load(cluster_id)
    except MetadataDamagedError as e:  # nothing complete to start from: one line, no data touched
        raise StartupError(str(e)) from e
    info = advertised_info(config)
    controller = LocalController(metadata_log, image, info)
    partitions = PartitionManager(broker_id, config, image, logs)
    partitions.refresh_dynamic_broker_configs()
    partitions.sync_all(unverified=metadata_log.unverified)
    controller.subscribe(partitions.on_changes)
    log.info("loaded %d partition logs and %d topics in %.2fs", sum(1 for _ in logs.logs()),
             len(image.topics), time.monotonic() - started)
    return Node(config, broker_id, cluster_id, info, image, controller, partitions, logs,
                PLAINTEXT_CLIENT,  # a single node has no other broker to reach
                build_authorizer(config, image))


# --------------------------------------------------------------------------------------------
# The coordinators
# --------------------------------------------------------------------------------------------


def wire_broker(node: Node, loop: asyncio.AbstractEventLoop,
                replicas: ReplicaManager | None = None,
                metadata_current: Callable[[], bool] = lambda: True) -> Broker:
    """The complete broker: its coordinators built on `node` (not started: `Broker.start`).
    In a cluster, `metadata_current` says whether the image may be trusted to answer for a
    leadership now (`strom.cluster.zk.session`)."""
    producer_ids = ProducerIds(node.controller, node.broker_id)
    commits = Commits(ReplicaCommits(node, replicas, metadata_current)
                      if replicas is not None else None)
    groups = build_group_coordinator(node, loop, commits)
    transactions = build_transaction_coordinator(node, groups, producer_ids.next, loop, commits,
                                                 replicas)
    share_coordinator = build_share_coordinator(node, loop, commits)
    persister = RoutingPersister(node, share_coordinator)
    share_partitions, share_sessions = build_share_partitions(node, groups, persister, loop,
                                                              replicas)
    broker = Broker.of(node, groups=groups, transactions=transactions, replicas=replicas,
                       commits=commits, producer_ids=producer_ids,
                       share_coordinator=share_coordinator, share_persister=persister,
                       share_partitions=share_partitions, share_sessions=share_sessions)
    broker.registry = build_registry(node, loop, commits)
    return broker


class SchemasTopicAdapter(InternalTopic):
    """`_schemas`, the schema registry's store: one compacted partition (Confluent's
    kafkastore.topic settings)."""

    name = SCHEMAS_TOPIC

    def settings(self) -> tuple[int, int, dict[str, str]]:
        return (1, self.node.config.get("schema.registry.topic.replication.factor"),
                {"cleanup.policy": "compact"})


def build_registry(node: Node, loop: asyncio.AbstractEventLoop,
                   commits: Commits) -> RegistryCoordinator | None:
    """The schema registry's coordinator, when `schema.registry.listeners` is set: subscribed
    to leadership of `_schemas`, its writes waiting for their commit like every coordinator's."""
    if registry_endpoint(node.config.get("schema.registry.listeners")) is None:
        return None
    # its formats (fastavro, jsonschema, protobuf) load only on a broker that serves it
    from strom.registry.coordinator import RegistryCoordinator

    commits.register(SCHEMAS_TOPIC, node.config.get("schema.registry.timeout.ms"))
    store = StateStore(SCHEMAS_TOPIC, SchemasTopicAdapter(node), node.now_ms, commits)
    coordinator = RegistryCoordinator(
        store, loop, max_schema_bytes=node.config.get("schema.registry.max.schema.bytes"))
    follow_leadership(node, SCHEMAS_TOPIC, coordinator)
    return coordinator


class OffsetsTopicAdapter(InternalTopic):
    """`__consumer_offsets` with Kafka's settings for it."""

    name = OFFSETS_TOPIC

    def settings(self) -> tuple[int, int, dict[str, str]]:
        config = self.node.config
        return (config.get("offsets.topic.num.partitions"),
                config.get("offsets.topic.replication.factor"),
                {"cleanup.policy": "compact",
                 "segment.bytes": str(config.get("offsets.topic.segment.bytes")),
                 "compression.type": "producer"})


class TopicsAdapter:
    """The metadata image as the group coordinator's `TopicsView`."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def version(self) -> int:
        return self.node.image.version

    def topic(self, name: str) -> tuple[uuid.UUID, int] | None:
        t = self.node.image.topics.get(name)
        return (t.topic_id, len(t.partitions)) if t is not None else None

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        t = self.node.image.topics_by_id.get(topic_id)
        return t.name if t is not None else None

    def names(self) -> list[str]:
        return [n for n in self.node.image.topics if n not in INTERNAL_TOPICS]


class StreamsTopicsCreator:
    """The group coordinator's `InternalTopicCreator`: the internal topics of streams groups
    through the controller, as CreateTopics makes topics (configs validated; replication factor
    -1 is default.replication.factor). A cluster's controller answers later: a topic is asked
    for again only after a few seconds, when heartbeats still find it missing."""

    RETRY_S = 5.0

    def __init__(self, node: Node) -> None:
        self.node = node
        self._asked: dict[str, float] = {}

    def create(self, topics: list[NewTopic]) -> None:
        controller = self.node.controller
        for t in topics:
            now = time.monotonic()
            if not controller.immediate and now - self._asked.get(t.name, -self.RETRY_S) \
                    < self.RETRY_S:
                continue
            self._asked[t.name] = now
            rf = t.replication_factor if t.replication_factor > 0 else \
                self.node.config.get("default.replication.factor")
            try:
                validate_topic_configs(t.configs)
                run_or_start(controller.immediate, partial(
                    controller.create_topic, t.name, t.partitions, rf, None, t.configs),
                    f"creating topic {t.name}")
            except ConfigError as exc:
                log.warning("cannot create internal topic %s: %s", t.name, exc)
            except KafkaError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    log.warning("cannot create internal topic %s: %s", t.name, exc)


class LeadershipFollower(Protocol):
    def on_leadership(self, partition: int, leader: bool, epoch: int) -> None: ...


def follow_leadership(node: Node, state_topic: str, coordinator: LeadershipFollower) -> None:
    """The one leadership subscription of every coordinator: its shards follow this broker's
    leadership of its state topic's partitions (loaded when it arrives, dropped when it goes)."""

    def on_leadership(topic: str, partition: int, leader: bool, epoch: int) -> None:
        if topic == state_topic:
            coordinator.on_leadership(partition, leader, epoch)

    node.partitions.add_leadership_listener(on_leadership)


def build_group_coordinator(node: Node, loop: asyncio.AbstractEventLoop,
                            commits: Commits) -> GroupCoordinator:
    """The group coordinator, subscribed to leadership of `__consumer_offsets`, with the
    groups' configs from the metadata (`coordinator.group_configs`)."""
    group_configs = MetadataGroupConfigs(node.config, lambda: node.image)
    node.controller.subscribe(group_configs.on_changes)
    coordinator = GroupCoordinator(GroupConfig.from_config(node.config.get),
                                   OffsetsTopicAdapter(node), TopicsAdapter(node), loop,
                                   node.now_ms, StreamsTopicsCreator(node), group_configs,
                                   commits)

    def on_changes(changes: list[Change]) -> None:
        deleted = {c.topic.name for c in changes if c.kind == "topic_deleted" and c.topic}
        if deleted:
            coordinator.on_topics_deleted(deleted)

    follow_leadership(node, OFFSETS_TOPIC, coordinator)
    node.controller.subscribe(on_changes)
    return coordinator


class TxnTopicAdapter(InternalTopic):
    """`__transaction_state` with Kafka's enforced settings: compacted, uncompressed, no
    unclean leader election."""

    name = TRANSACTION_STATE_TOPIC

    def settings(self) -> tuple[int, int, dict[str, str]]:
        get = self.node.config.get
        configs = {"cleanup.policy": "compact", "compression.type": "uncompressed",
                   "unclean.leader.election.enable": "false",
                   "segment.bytes": str(get("transaction.state.log.segment.bytes")),
                   "min.insync.replicas": str(get("transaction.state.log.min.isr"))}
        return (get("transaction.state.log.num.partitions"),
                get("transaction.state.log.replication.factor"), configs)


def build_transaction_coordinator(node: Node, groups: GroupCoordinator,
                                  next_producer_id: Callable[[], int],
                                  loop: asyncio.AbstractEventLoop, commits: Commits,
                                  replicas: ReplicaManager | None) -> TransactionCoordinator:
    """The transaction coordinator, subscribed to leadership of `__transaction_state`; its
    markers reach `groups` when they land in `__consumer_offsets`, and count as written once
    their partitions' in-sync replicas have them (acks=all)."""
    coordinator = TransactionCoordinator(
        TxnConfig.from_config(node.config.get), TxnTopicAdapter(node),
        ClusterMarkerWriter(node, groups, replicas), next_producer_id, loop, node.now_ms,
        commits)

    follow_leadership(node, TRANSACTION_STATE_TOPIC, coordinator)
    return coordinator


class ShareStateTopicAdapter(InternalTopic):
    """`__share_group_state` with Kafka's settings for it (cleanup.policy=delete: the share
    coordinator prunes it itself)."""

    name = SHARE_STATE_TOPIC

    def settings(self) -> tuple[int, int, dict[str, str]]:
        config = ShareCoordinatorConfig.from_config(self.node.config.get)
        return config.state_partitions, config.replication_factor, config.topic_configs()


class TopicIdsAdapter:
    """The metadata image as the share coordinator's `TopicPartitions`."""

    def __init__(self, node: Node) -> None:
        self.node = node

    def partition_count(self, topic_id: uuid.UUID) -> int | None:
        t = self.node.image.topics_by_id.get(topic_id)
        return len(t.partitions) if t is not None else None


def build_share_coordinator(node: Node, loop: asyncio.AbstractEventLoop,
                            commits: Commits) -> ShareCoordinator:
    """The share coordinator, subscribed to leadership of `__share_group_state` and to topic
    deletions (the state of a deleted topic's share partitions is deleted too, as in Kafka)."""
    coordinator = ShareCoordinator(
        ShareCoordinatorConfig.from_config(node.config.get), ShareStateTopicAdapter(node),
        TopicIdsAdapter(node), loop, node.now_ms, commits)

    def on_changes(changes: list[Change]) -> None:
        deleted = {c.topic.topic_id for c in changes if c.kind == "topic_deleted" and c.topic}
        if deleted and coordinator.shards:
            task = loop.create_task(coordinator.on_topics_deleted(deleted))
            _background.add(task)
            task.add_done_callback(_background.discard)

    follow_leadership(node, SHARE_STATE_TOPIC, coordinator)
    node.controller.subscribe(on_changes)
    return coordinator


_background: set[asyncio.Task[None]] = set()  # tasks kept alive until they finish


def build_dead_letter_writer(node: Node, persister: RoutingPersister,
                             replicas: ReplicaManager | None) -> DeadLetterWriter:
    """Dead letters written as acks=-1 producers write them: to a dead-letter partition led
    elsewhere over the inter-broker client, for as long as the share state's writes are
    retried."""
    if replicas is None:  # a single node leads every partition
        return DeadLetterWriter(node.broker_id, node.image, node.partitions, node.now_ms)

    async def replicated(topic: str, partition: int, offset: int, timeout_s: float) -> int:
        return await replicas.wait_for_replication((topic, partition), offset, timeout_s)

    clients = BrokerClients(f"strom-share-dlq-{node.broker_id}",
                            node.config.get("replica.socket.timeout.ms") / 1000,
                            node.inter_broker)
    return DeadLetterWriter(node.broker_id, node.image, node.partitions, node.now_ms,
                            clients=clients, replication=replicated,
                            deadline_s=persister.deadline_s,
                            request_timeout_ms=node.config.get("replica.socket.timeout.ms"))


def build_share_partitions(node: Node, groups: GroupCoordinator, persister: RoutingPersister,
                           loop: asyncio.AbstractEventLoop, replicas: ReplicaManager | None = None
                           ) -> tuple[SharePartitionManager, ShareSessionCache]:
    """The share partitions this broker leads and the share sessions of its members: a member
    fenced by the group coordinator (session timeout) loses its session here and its records
    become available again (a member that leaves keeps its sessions until it closes them); a
    partition whose leadership moves away is forgotten (its state is in the share
    coordinator)."""
    configs = groups.group_configs
    manager = SharePartitionManager(
        node.broker_id, node.image, node.partitions, persister,
        lambda group_id: group_settings(configs.for_group(group_id)),
        build_dead_letter_writer(node, persister, replicas), node.now_ms, loop)
    sessions = ShareSessionCache(node.config.get("group.share.max.share.sessions"))

    def member_removed(group_id: str, member_id: str) -> None:
        sessions.close_member(group_id, member_id)
        manager.release_member(group_id, member_id, group_left=not sessions.has_group(group_id))

    def on_leadership(topic: str, partition: int, leader: bool, epoch: int) -> None:
        if not leader:
            manager.drop_partition(topic, partition)

    groups.share.on_member_removed = member_removed
    configs.subscribe(manager.reconfigure)
    node.partitions.add_leadership_listener(on_leadership)
    return manager, sessions

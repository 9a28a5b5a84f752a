"""The cluster metadata image: topics, partitions, brokers and dynamic configs.

Every broker answers Metadata, Fetch and Produce from this image. It is changed only by applying
metadata records (see records.py), so a single node replaying its metadata log and, later, a
broker following a replicated metadata source end up with the same image.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from strom.cluster.quotas import QuotaEntity, quota_entity_of
from strom.security.acl import AclBinding

ZERO_UUID = uuid.UUID(int=0)


@dataclass
class PartitionState:
    partition: int
    replicas: list[int]
    isr: list[int]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    offline_replicas: list[int] = field(default_factory=list)
    # an ongoing reassignment (KIP-455): `replicas` is then the full set, target replicas
    # first; `adding` are target replicas catching up, `removing` leave once they have
    adding_replicas: list[int] = field(default_factory=list)
    removing_replicas: list[int] = field(default_factory=list)
    # KRaft, several log.dirs (AssignReplicasToDirs, KIP-858): the log dir (its directory.id,
    # base64url) each replica's broker keeps the partition in; a replica not listed is
    # unassigned (its broker has one log dir, or has not said yet)
    directories: dict[int, str] = field(default_factory=dict)

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def target_replicas(self) -> list[int]:
        """The replicas once the ongoing reassignment (if any) completes."""
        if not self.removing_replicas:
            return self.replicas
        return [r for r in self.replicas if r not in self.removing_replicas]

    @property
    def original_replicas(self) -> list[int]:
        """The replicas before the ongoing reassignment (if any) started."""
        if not self.adding_replicas:
            return self.replicas
        return [r for r in self.replicas if r not in self.adding_replicas]


@dataclass
class TopicState:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


@dataclass
class BrokerInfo:
    """A live broker. host/port are its inter-broker (or only) listener's advertised address;
    `endpoints` has every advertised listener by name, so a client is told the address of the
    listener it connected to, as Kafka does."""

    broker_id: int
    host: str
    port: int
    rack: str | None = None
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    # Strom's own: where this broker's schema registry answers (others forward to it)
    registry_url: str | None = None

    def address(self, listener: str) -> tuple[str, int]:
        """(host, port) of the named listener; a broker without it (or one registered before
        listeners were named) answers with its default address."""
        return self.endpoints.get(listener) or (self.host, self.port)


@dataclass
class Registration:
    """A KRaft broker's registration with the controller quorum (Kafka's
    BrokerRegistrationRecord and its fencing): kept in the metadata log, so every node knows
    every registered broker and which are live (registered and not fenced)."""

    info: BrokerInfo
    epoch: int  # the broker epoch: a new one for every registration of a new process
    incarnation: str  # the process's incarnation id (a restarted broker has a new one)
    fenced: bool = True  # a new registration is fenced until the broker has caught up
    in_controlled_shutdown: bool = False
    # the feature levels the broker's software supports: {name: (min, max)}; a feature it
    # does not list it does not support above level 0 (UpdateFeatures checks them)
    features: dict[str, tuple[int, int]] = field(default_factory=dict)
    # the directory ids (base64url) of the broker's log dirs, as it registered them
    log_dirs: list[str] = field(default_factory=list)
    # those of its log dirs that are offline (a failed or full disk), from its heartbeats: the
    # replicas the metadata places there are unavailable
    offline_dirs: list[str] = field(default_factory=list)


@dataclass
class ControllerRegistration:
    """A KRaft controller's registration (KIP-919, Kafka's RegisterControllerRecord): where it
    listens and which feature levels it supports. DescribeCluster on a CONTROLLER listener
    lists the registered controllers; UpdateFeatures refuses a level one of them lacks, until
    UnregisterController (KIP-1312) removes the registration of one that is gone for good."""

    controller_id: int
    incarnation: str  # the process's incarnation id: a restarted controller registers again
    endpoints: dict[str, tuple[str, int]] = field(default_factory=dict)
    features: dict[str, tuple[int, int]] = field(default_factory=dict)


def _nobody(_state: PartitionState) -> set[int]:
    return set()


INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True)
class ImageCapture:
    """A point-in-time view of a `MetadataImage` (see `MetadataImage.capture`)."""

    cluster_id: str
    next_producer_id: int
    broker_configs: dict[str, dict[str, str]]
    topics: list[tuple[str, uuid.UUID, dict[str, str], list[PartitionState]]]
    user_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    acls: list[dict[str, Any]] = field(default_factory=list)
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)

    def to_snapshot(self) -> dict[str, Any]:
        """Plain data for the metadata log's snapshot file (replica lists are shared: they are
        never changed in place)."""
        return {
            "cluster_id": self.cluster_id,
            "next_producer_id": self.next_producer_id,
            "broker_configs": self.broker_configs,
            "user_configs": self.user_configs,
            "group_configs": self.group_configs,
            "acls": self.acls,
            "client_quotas": [{"entity": [list(part) for part in entity], "quotas": quotas}
                              for entity, quotas in self.client_quotas.items()],
            "topics": [
                {
                    "name": name,
                    "topic_id": str(topic_id),
                    "configs": configs,
                    "partitions": [
                        {
                            "partition": p.partition,
                            "replicas": p.replicas,
                            "isr": p.isr,
                            "leader": p.leader,
                            "leader_epoch": p.leader_epoch,
                            "partition_epoch": p.partition_epoch,
                            "adding_replicas": p.adding_replicas,
                            "removing_replicas": p.removing_replicas,
                        }
                        for p in partitions
                    ],
                }
                for name, topic_id, configs, partitions in self.topics
            ],
        }


@dataclass
class MetadataImage:
    cluster_id: str
    controller_id: int = -1
    controller_epoch: int = -1  # in a cluster: the epoch of the controller in /controller_epoch
    brokers: dict[int, BrokerInfo] = field(default_factory=dict)  # the LIVE brokers, this one too
    topics: dict[str, TopicState] = field(default_factory=dict)
    topics_by_id: dict[uuid.UUID, TopicState] = field(default_factory=dict)
    # dynamic broker configs: key "" is the cluster-wide default, str(broker_id) a single broker
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # per-user configs, as Kafka keeps them under /config/users: SCRAM credentials (stored
    # salted and hashed, see strom.security.scram_store)
    user_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # the ACLs (an ordered set), read by strom.security.acl.Authorizer
    acls: dict[AclBinding, None] = field(default_factory=dict)
    # client quotas per entity (strom.cluster.quotas): {entity: {key: value}}
    client_quotas: dict[QuotaEntity, dict[str, float]] = field(default_factory=dict)
    # per-group configs (KIP-848/932/1071 group configs, strom.config.group): {group: {key: value}}
    group_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    next_producer_id: int = 0
    # KRaft clusters: every registered broker, live or fenced (`brokers` holds the live ones)
    registrations: dict[int, Registration] = field(default_factory=dict)
    # KRaft clusters: every registered controller (voters and observers alike)
    controllers: dict[int, ControllerRegistration] = field(default_factory=dict)
    # KRaft: the feature levels the metadata log finalized (FeatureLevelRecords; features it
    # never named keep Strom's defaults, strom.cluster.features), and the offset of the last
    # change (ApiVersions' finalized_features_epoch; -1: none)
    finalized_features: dict[str, int] = field(default_factory=dict)
    features_epoch: int = -1
    # KRaft: where a move from ZooKeeper stands (strom.controller.zk_migration): None (never
    # migrated), "migrating" (the controllers mirror a ZooKeeper cluster) or "finalized"
    zk_migration: str | None = None
    version: int = 0  # bumped on every applied record: cheap cache invalidation

    def isr_eligible(self, broker_id: int) -> bool:
        """A live broker not in a controlled shutdown (Kafka's ISR eligibility, KIP-841): the
        controller refuses any other joining an ISR (INELIGIBLE_REPLICA)."""
        if broker_id not in self.brokers:
            return False
        reg = self.registrations.get(broker_id)
        return reg is None or not reg.in_controlled_shutdown

    def controller_for_clients(self) -> int:
        """The controller id Metadata and DescribeCluster name: a live broker, as clients send
        controller-bound admin requests there. A ZooKeeper cluster's ``/controller`` may be held
        by a KRaft controller migrating it (strom.controller.zk_migration), which is no broker:
        then any live broker, each of which handles such requests itself."""
        if self.controller_id in self.brokers or not self.brokers:
            return self.controller_id
        return min(self.brokers)

    def topic(self, name: str) -> TopicState | None:
        return self.topics.get(name)

    def in_offline_dirs(self, state: PartitionState) -> set[int]:
        """The replicas of a partition kept in a log dir that is offline: the metadata places
        them in a dir their broker reports offline, or every log dir of their broker is."""
        return self.offline_dirs_check()(state)

    def offline_dirs_check(self) -> Callable[[PartitionState], set[int]]:
        """`in_offline_dirs` for many partitions: the registrations are looked at once."""
        hit = {b: reg for b, reg in self.registrations.items() if reg.offline_dirs}
        if not hit:
            return _nobody
        whole = {b for b, reg in hit.items()
                 if reg.log_dirs and set(reg.log_dirs) <= set(reg.offline_dirs)}

        def check(state: PartitionState) -> set[int]:
            out = set()
            for b in state.replicas:
                reg = hit.get(b)
                if reg is not None and (b in whole or state.directories.get(b)
                                        in reg.offline_dirs):
                    out.add(b)
            return out

        return check

    def capture(self) -> ImageCapture:
        """What a snapshot needs, independent of later changes, cheaply enough for the event
        loop: the mutable dicts are copied shallowly, and the PartitionStates are shared (a
        record replaces a PartitionState, never changes one). `to_snapshot` turns it into
        plain data, in a worker thread for a large image."""
        return ImageCapture(
            self.cluster_id, self.next_producer_id,
            {k: dict(v) for k, v in self.broker_configs.items()},
            [(t.name, t.topic_id, dict(t.configs), list(t.partitions.values()))
             for t in self.topics.values()],
            {k: dict(v) for k, v in self.user_configs.items()},
            [acl.to_record() for acl in self.acls],
            {k: dict(v) for k, v in self.client_quotas.items()},
            {k: dict(v) for k, v in self.group_configs.items()},
        )

    def to_snapshot(self) -> dict[str, Any]:
        """The image as plain data, independent of it."""
        return self.capture().to_snapshot()

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> MetadataImage:
        image = cls(cluster_id=data["cluster_id"])
        image.next_producer_id = data.get("next_producer_id", 0)
        image.broker_configs = data.get("broker_configs", {})
        image.user_configs = data.get("user_configs", {})
        image.group_configs = data.get("group_configs", {})
        image.acls = {AclBinding.from_record(r): None for r in data.get("acls", [])}
        image.client_quotas = {quota_entity_of(q["entity"]): dict(q["quotas"])
                               for q in data.get("client_quotas", [])}
        for t in data["topics"]:
            topic = TopicState(t["name"], uuid.UUID(t["topic_id"]), configs=dict(t["configs"]))
            for p in t["partitions"]:
                topic.partitions[p["partition"]] = PartitionState(**p)
            image.topics[topic.name] = topic
            image.topics_by_id[topic.topic_id] = topic
        return image

"""Kafka's ZooKeeper layout: znode paths and their JSON, read and written as Kafka does.

Pure functions only (no ZooKeeper client here), so every format is unit-tested byte for byte
and the same tree can be read by Kafka's own tools (`zookeeper-shell`, `kafka-topics --zookeeper`).
Kafka writes some numbers as JSON strings (timestamps, producer id block bounds); decoders accept
both forms.
"""

from __future__ import annotations

import base64
import json
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from strom.cluster.image import BrokerInfo

# -- paths ---------------------------------------------------------------------------------------

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKER_IDS = "/brokers/ids"
TOPICS = "/brokers/topics"
CONFIG_TOPICS = "/config/topics"
CONFIG_BROKERS = "/config/brokers"
# SCRAM credentials and user quotas, as Kafka's ZooKeeper mode kept them (one config per
# user, and user + client id quotas under /config/users/<user>/clients/<client id>)
CONFIG_USERS = "/config/users"
CONFIG_CLIENTS = "/config/clients"  # client id quotas
# Strom's own: Kafka's ZooKeeper mode never had group configs (KIP-848/932/1071 came with
# KRaft). One znode per group, /config/groups/<sanitized group id>, in the topic config format.
CONFIG_GROUPS = "/config/groups"
CONFIG_CHANGES = "/config/changes"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONTROLLED_SHUTDOWN = "/strom/controlled_shutdown"
# Strom's own layout (Kafka's /kafka-acl tree has one znode per resource): every ACL in one
# JSON list, changed by compare-and-set, so a CreateAcls/DeleteAcls is one atomic write
ACLS = "/strom/acls"
DEFAULT_ENTITY = "<default>"  # /config/brokers/<default>: the cluster-wide dynamic defaults

# Created (empty, persistent) by every broker at start, as Kafka does, so later writes never
# need to create parents.
PERSISTENT_PATHS = (
    BROKER_IDS, TOPICS, CONFIG_TOPICS, CONFIG_BROKERS, CONFIG_USERS, CONFIG_CLIENTS, CONFIG_GROUPS,
    CONFIG_CHANGES, DELETE_TOPICS, PRODUCER_ID_BLOCK, "/cluster", "/isr_change_notification", CONTROLLED_SHUTDOWN,
)


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


def topic_config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{topic}"


def encode_acls(acls: list[dict[str, Any]]) -> bytes:
    return _dump({"version": 1, "acls": acls})


def decode_acls(data: bytes) -> list[dict[str, Any]]:
    obj = _load(data)
    if obj is None:
        return []
    acls = obj.get("acls")
    if not isinstance(acls, list):
        raise ValueError(f"bad {ACLS}: {data[:200]!r}")
    return acls


def sanitize(name: str) -> str:
    """Kafka's Sanitizer.sanitize: a user or client id as a znode name, URL-encoded as Java's
    URLEncoder does (only letters, digits and ``.-*_`` kept), then ``*`` and the space's
    ``+`` percent-encoded too."""
    return urllib.parse.quote(name, safe="*").replace("~", "%7E").replace("*", "%2A")


def desanitize(name: str) -> str:
    """Kafka's Sanitizer.desanitize (Java's URLDecoder: ``+`` is a space)."""
    return urllib.parse.unquote_plus(name)


def entity_znode_name(name: str | None) -> str:
    """A quota entity's name in its znode path: ``<default>`` for the default entity."""
    return DEFAULT_ENTITY if name is None else sanitize(name)


def entity_name_of(znode_name: str) -> str | None:
    return None if znode_name == DEFAULT_ENTITY else desanitize(znode_name)


def user_config_path(user: str | None) -> str:
    return f"{CONFIG_USERS}/{entity_znode_name(user)}"


def user_clients_path(user: str | None) -> str:
    return f"{user_config_path(user)}/clients"


def group_config_path(group: str) -> str:
    """A group's config znode: its id sanitized as Kafka sanitizes user names (a group id
    may hold '/'), and '.' and '..', which ZooKeeper refuses as names, percent-encoded."""
    name = sanitize(group)
    if name in (".", ".."):
        name = name.replace(".", "%2E")
    return f"{CONFIG_GROUPS}/{name}"


def client_config_path(client_id: str | None) -> str:
    return f"{CONFIG_CLIENTS}/{entity_znode_name(client_id)}"


def quota_entity_path(entity: Mapping[str, str | None]) -> str:
    """Where Kafka's ZooKeeper mode kept the quotas of a user, client id or user + client id
    entity (``{type: name}``, a name None for the default)."""
    if "user" in entity and "client-id" in entity:
        return f"{user_clients_path(entity['user'])}/{entity_znode_name(entity['client-id'])}"
    if "user" in entity:
        return user_config_path(entity["user"])
    return client_config_path(entity["client-id"])


def broker_config_path(entity: str) -> str:
    """entity: a broker id, or '' / '<default>' for the cluster default."""
    return f"{CONFIG_BROKERS}/{entity or DEFAULT_ENTITY}"


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def broker_config_entity(znode_name: str) -> str:
    """The image's key for /config/brokers/<name>: '' for '<default>', else the id."""
    return "" if znode_name == DEFAULT_ENTITY else znode_name


# -- topic ids -----------------------------------------------------------------------------------


def uuid_to_kafka(u: uuid.UUID) -> str:
    """Kafka's Uuid.toString: URL-safe base64 of the 16 bytes, without padding (22 chars)."""
    return base64.urlsafe_b64encode(u.bytes).rstrip(b"=").decode("ascii")


def uuid_from_kafka(text: str) -> uuid.UUID:
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(data) != 16:
        raise ValueError(f"not a Kafka topic id: {text!r}")
    return uuid.UUID(bytes=data)


def new_topic_id() -> uuid.UUID:
    """A random id that, like Kafka's Uuid.randomUuid, is neither reserved (zero, one) nor
    printed with a leading '-' (which command-line tools would read as an option)."""
    while True:
        u = uuid.uuid4()
        if u.int > 1 and not uuid_to_kafka(u).startswith("-"):
            return u


# -- JSON helpers --------------------------------------------------------------------------------


def _dump(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _load(data: bytes | None) -> dict[str, Any] | None:
    """The JSON object in a znode, or None when the znode is empty (Kafka's null data)."""
    if not data:
        return None
    obj = json.loads(data)
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    return obj


# -- /cluster/id ---------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dump({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    obj = _load(data)
    cid = None if obj is None else obj.get("id")
    if not isinstance(cid, str):
        raise ValueError(f"bad /cluster/id: {data!r}")
    return cid


# -- /brokers/ids/<id> ---------------------------------------------------------------------------


def encode_broker(info: BrokerInfo, timestamp_ms: int,
                  protocols: Mapping[str, str] | None = None) -> bytes:
    """Version 5 as Kafka writes it (plus an empty features map: Strom finalizes none): every
    advertised listener, and host/port of the PLAINTEXT one (null/-1 without one)."""
    endpoints = info.endpoints or {"PLAINTEXT": (info.host, info.port)}
    protocols = protocols or {}
    plaintext = next(((h, p) for name, (h, p) in endpoints.items()
                      if protocols.get(name, "PLAINTEXT") == "PLAINTEXT"), (None, -1))
    obj: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {name: protocols.get(name, "PLAINTEXT")
                                           for name in endpoints},
        "endpoints": [f"{name}://{_bracketed(h)}:{p}" for name, (h, p) in endpoints.items()],
        "jmx_port": -1,
        "host": plaintext[0],
        "timestamp": str(timestamp_ms),
        "port": plaintext[1],
        "version": 5,
    }
    if info.rack is not None:
        obj["rack"] = info.rack
    if info.registry_url is not None:  # Strom's own field (Kafka's readers ignore it)
        obj["strom_schema_registry"] = info.registry_url
    return _dump(obj)


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def decode_broker(broker_id: int, data: bytes, inter_broker: str = "PLAINTEXT") -> BrokerInfo:
    """Kafka's registration: every endpoint by listener name; host/port are the inter-broker
    listener's (else PLAINTEXT's, else the first, else the registration's host/port)."""
    obj = _load(data)
    if obj is None:
        raise ValueError(f"empty registration of broker {broker_id}")
    endpoints: dict[str, tuple[str, int]] = {}
    for spec in obj.get("endpoints") or []:
        name, sep, hostport = spec.partition("://")
        h, _, p = hostport.rpartition(":")
        if sep and p.lstrip("-").isdigit():
            endpoints[name.upper()] = (h.strip("[]"), int(p))
    host, port = obj.get("host"), obj.get("port", -1)
    chosen = (endpoints.get(inter_broker) or endpoints.get("PLAINTEXT")
              or next(iter(endpoints.values()), None))
    if chosen is not None:
        host, port = chosen
    if not host or port is None or int(port) < 0:
        raise ValueError(f"broker {broker_id} registration has no usable endpoint: {data!r}")
    registry = obj.get("strom_schema_registry")
    return BrokerInfo(broker_id, host, int(port), obj.get("rack"), endpoints,
                      registry if isinstance(registry, str) else None)


# -- /controller, /controller_epoch --------------------------------------------------------------


def encode_controller(broker_id: int, timestamp_ms: int) -> bytes:
    return _dump({"version": 2, "brokerid": broker_id, "timestamp": str(timestamp_ms)})


def decode_controller(data: bytes) -> int:
    obj = _load(data)
    if obj is None:
        raise ValueError("empty /controller")
    return int(obj["brokerid"])


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes | None) -> int:
    return int(data.decode()) if data else 0


# -- /brokers/topics/<topic> ---------------------------------------------------------------------


@dataclass
class TopicAssignment:
    """The content of /brokers/topics/<topic>: replicas per partition and the topic id."""

    topic_id: uuid.UUID | None
    partitions: dict[int, list[int]]
    adding_replicas: dict[int, list[int]] = field(default_factory=dict)
    removing_replicas: dict[int, list[int]] = field(default_factory=dict)


def encode_topic(assignment: TopicAssignment) -> bytes:
    def by_partition(m: Mapping[int, list[int]]) -> dict[str, list[int]]:
        return {str(p): list(r) for p, r in sorted(m.items())}

    obj: dict[str, Any] = {
        "partitions": by_partition(assignment.partitions),
        "adding_replicas": by_partition(assignment.adding_replicas),
        "removing_replicas": by_partition(assignment.removing_replicas),
        "version": 3,
    }
    if assignment.topic_id is not None:
        obj["topic_id"] = uuid_to_kafka(assignment.topic_id)
    return _dump(obj)


def decode_topic(data: bytes | None) -> TopicAssignment:
    obj = _load(data) or {}

    def by_partition(key: str) -> dict[int, list[int]]:
        return {int(p): [int(b) for b in r] for p, r in (obj.get(key) or {}).items()}

    raw_id = obj.get("topic_id")
    return TopicAssignment(uuid_from_kafka(raw_id) if raw_id else None, by_partition("partitions"),
                           by_partition("adding_replicas"), by_partition("removing_replicas"))


# -- /brokers/topics/<topic>/partitions/<p>/state ------------------------------------------------


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition state znode; its znode version is the partition epoch."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def encode_state(state: LeaderAndIsr) -> bytes:
    return _dump({"controller_epoch": state.controller_epoch, "leader": state.leader,
                  "version": 1, "leader_epoch": state.leader_epoch, "isr": list(state.isr)})


def decode_state(data: bytes | None) -> LeaderAndIsr:
    obj = _load(data)
    if obj is None:
        raise ValueError("empty partition state")
    return LeaderAndIsr(int(obj["leader"]), int(obj["leader_epoch"]),
                        tuple(int(b) for b in obj["isr"]), int(obj.get("controller_epoch", 0)))


# -- /config/<type>/<name> -----------------------------------------------------------------------


def encode_config(config: Mapping[str, str]) -> bytes:
    return _dump({"version": 1, "config": dict(sorted(config.items()))})


def decode_config(data: bytes | None) -> dict[str, str]:
    obj = _load(data) or {}
    return {str(k): str(v) for k, v in (obj.get("config") or {}).items()}


def encode_quota(value: float) -> str:
    """A quota value as a config string: ``1024`` for a whole number, as Kafka wrote byte
    rates, else the shortest exact decimal (``12.5``)."""
    return str(int(value)) if value.is_integer() else repr(value)


def decode_quotas(config: Mapping[str, str], keys: frozenset[str] | tuple[str, ...]
                  ) -> dict[str, float]:
    """The quota values among a config's entries (unparseable ones are skipped)."""
    out: dict[str, float] = {}
    for k, v in config.items():
        if k in keys:
            try:
                out[k] = float(v)
            except ValueError:
                continue
    return out


# -- /latest_producer_id_block -------------------------------------------------------------------

PRODUCER_ID_BLOCK_SIZE = 1000


@dataclass(frozen=True)
class ProducerIdBlock:
    broker: int
    start: int
    end: int  # inclusive, as Kafka stores it

    @property
    def size(self) -> int:
        return self.end - self.start + 1


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dump({"version": 1, "broker": block.broker, "block_start": str(block.start),
                  "block_end": str(block.end)})


def decode_producer_id_block(data: bytes | None) -> ProducerIdBlock | None:
    """None when no block was handed out yet (the znode is empty)."""
    obj = _load(data)
    if obj is None:
        return None
    return ProducerIdBlock(int(obj["broker"]), int(obj["block_start"]), int(obj["block_end"]))


def next_producer_id_block(current: ProducerIdBlock | None, broker_id: int,
                           size: int = PRODUCER_ID_BLOCK_SIZE) -> ProducerIdBlock:
    start = 0 if current is None else current.end + 1
    return ProducerIdBlock(broker_id, start, start + size - 1)

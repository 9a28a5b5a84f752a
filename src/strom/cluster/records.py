"""Metadata records: the only way the metadata image changes.

Each record is a small JSON object with a "type". The single-node metadata log stores them as
record values in Kafka batches; a replicated metadata source would carry the same records.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from strom.cluster.image import (
    BrokerInfo,
    ControllerRegistration,
    MetadataImage,
    PartitionState,
    Registration,
    TopicState,
)
from strom.cluster.quotas import QuotaEntity, quota_entity_of
from strom.security.acl import AclBinding


@dataclass(frozen=True)
class Change:
    """What applying a record changed, for listeners that reconcile local state."""

    # topic_created | topic_deleted | partitions_created | partition_changed | topic_configs |
    # broker_configs | user_configs | group_configs | client_quotas | acls | brokers_changed
    # (a broker registered or left, or the controller changed) | controllers_changed (a
    # controller registered or was unregistered) | partitions_deleted (more partitions of a
    # deleted topic: the metadata loader reports a large deletion in slices)
    kind: str
    topic: TopicState | None = None
    partitions: tuple[int, ...] = ()
    group: str | None = None  # the group whose configs changed (group_configs)


def topic_record(name: str, topic_id: uuid.UUID) -> dict[str, Any]:
    return {"type": "topic", "name": name, "topic_id": str(topic_id)}


def partition_record(topic_id: uuid.UUID, p: PartitionState) -> dict[str, Any]:
    return {
        "type": "partition",
        "topic_id": str(topic_id),
        "partition": p.partition,
        "replicas": p.replicas,
        "isr": p.isr,
        "leader": p.leader,
        "leader_epoch": p.leader_epoch,
        "partition_epoch": p.partition_epoch,
        "adding_replicas": p.adding_replicas,
        "removing_replicas": p.removing_replicas,
        **({"directories": {str(b): d for b, d in p.directories.items() if b in p.replicas}}
           if p.directories else {}),
    }


def remove_topic_record(topic_id: uuid.UUID) -> dict[str, Any]:
    return {"type": "remove_topic", "topic_id": str(topic_id)}


def config_record(resource: str, name: str, key: str, value: str | None) -> dict[str, Any]:
    """resource is 'topic', 'broker', 'user' or 'group' (Kafka's ConfigRecord of resource type
    GROUP, 32); name the topic name, broker id ('' = cluster default), user name or group id."""
    return {"type": "config", "resource": resource, "name": name, "key": key, "value": value}


def client_quota_record(entity: QuotaEntity, key: str, value: float | None) -> dict[str, Any]:
    """Set (or, value None, remove) one quota of a client quota entity (Kafka's
    ClientQuotaRecord)."""
    return {"type": "client_quota", "entity": [list(part) for part in entity], "key": key,
            "value": value}


def acl_record(acl: AclBinding) -> dict[str, Any]:
    return {"type": "acl", **acl.to_record()}


def remove_acl_record(acl: AclBinding) -> dict[str, Any]:
    return {"type": "remove_acl", **acl.to_record()}


def producer_ids_record(next_producer_id: int) -> dict[str, Any]:
    return {"type": "producer_ids", "next": next_producer_id}


def broker_record(info: BrokerInfo) -> dict[str, Any]:
    """A broker is live (registered), at this address."""
    return {"type": "broker", "broker_id": info.broker_id, "host": info.host, "port": info.port,
            "rack": info.rack,
            "endpoints": [[name, host, port] for name, (host, port) in info.endpoints.items()],
            "registry_url": info.registry_url}


def remove_broker_record(broker_id: int) -> dict[str, Any]:
    """A broker is no longer live (its registration is gone)."""
    return {"type": "remove_broker", "broker_id": broker_id}


def register_broker_record(registration: Registration) -> dict[str, Any]:
    """A KRaft broker registered (Kafka's BrokerRegistrationRecord): a new process of a
    broker replaces the registration of its previous one."""
    return {"type": "register_broker", "broker": broker_record(registration.info),
            "epoch": registration.epoch, "incarnation": registration.incarnation,
            "fenced": registration.fenced,
            "in_controlled_shutdown": registration.in_controlled_shutdown,
            "features": _ranges_out(registration.features),
            **({"log_dirs": registration.log_dirs} if registration.log_dirs else {}),
            **({"offline_dirs": registration.offline_dirs} if registration.offline_dirs else {})}


def _ranges_out(features: dict[str, tuple[int, int]]) -> list[list[Any]]:
    return [[name, lo, hi] for name, (lo, hi) in sorted(features.items())]


def _ranges_in(items: list[list[Any]] | None) -> dict[str, tuple[int, int]]:
    return {name: (int(lo), int(hi)) for name, lo, hi in items or []}


def register_controller_record(reg: ControllerRegistration) -> dict[str, Any]:
    """A KRaft controller registered (Kafka's RegisterControllerRecord): its listeners and
    supported feature levels; a new process replaces the registration of its previous one."""
    return {"type": "register_controller", "controller_id": reg.controller_id,
            "incarnation": reg.incarnation,
            "endpoints": [[name, host, port] for name, (host, port) in reg.endpoints.items()],
            "features": _ranges_out(reg.features)}


def unregister_controller_record(controller_id: int) -> dict[str, Any]:
    """A controller's registration removed (Kafka's UnregisterControllerRecord, KIP-1312)."""
    return {"type": "unregister_controller", "controller_id": controller_id}


def broker_state_record(broker_id: int, epoch: int, *, fenced: bool,
                        in_controlled_shutdown: bool = False) -> dict[str, Any]:
    """A registered broker is fenced or unfenced (Kafka's Fence/UnfenceBrokerRecord and
    BrokerRegistrationChangeRecord), for the registration of that epoch only."""
    return {"type": "broker_state", "broker_id": broker_id, "epoch": epoch, "fenced": fenced,
            "in_controlled_shutdown": in_controlled_shutdown}


def broker_dirs_record(broker_id: int, epoch: int, offline: list[str]) -> dict[str, Any]:
    """The log dirs of a registered broker that are offline now (Kafka's
    BrokerRegistrationChangeRecord with its online dirs), for the registration of that epoch."""
    return {"type": "broker_dirs", "broker_id": broker_id, "epoch": epoch, "offline": offline}


def unregister_broker_record(broker_id: int, epoch: int) -> dict[str, Any]:
    return {"type": "unregister_broker", "broker_id": broker_id, "epoch": epoch}


def _broker_info(record: dict[str, Any]) -> BrokerInfo:
    endpoints = {name: (host, port) for name, host, port in record.get("endpoints") or []}
    return BrokerInfo(record["broker_id"], record["host"], record["port"], record.get("rack"),
                      endpoints, record.get("registry_url"))


def _apply_registration(image: MetadataImage, record: dict[str, Any]) -> Change | None:
    kind = record["type"]
    if kind == "register_broker":
        info = _broker_info(record["broker"])
        reg = Registration(info, record["epoch"], record["incarnation"], record["fenced"],
                           record.get("in_controlled_shutdown", False),
                           _ranges_in(record.get("features")), list(record.get("log_dirs") or []),
                           list(record.get("offline_dirs") or []))
        image.registrations[info.broker_id] = reg
    else:
        reg_or_none = image.registrations.get(record["broker_id"])
        if reg_or_none is None or reg_or_none.epoch != record["epoch"]:
            return None  # about an older registration
        reg = reg_or_none
        if kind == "unregister_broker":
            del image.registrations[reg.info.broker_id]
            image.brokers.pop(reg.info.broker_id, None)
            return Change("brokers_changed")
        if kind == "broker_dirs":
            reg.offline_dirs = list(record["offline"])
            return Change("brokers_changed")
        reg.fenced = record["fenced"]
        reg.in_controlled_shutdown = record.get("in_controlled_shutdown", False)
    if reg.fenced:
        image.brokers.pop(reg.info.broker_id, None)
    else:
        image.brokers[reg.info.broker_id] = reg.info
    return Change("brokers_changed")


ZK_MIGRATING, ZK_FINALIZED = "migrating", "finalized"  # the states of a move from ZooKeeper


def zk_migration_record(state: str) -> dict[str, Any]:
    """Where a move from ZooKeeper stands ("migrating", "finalized"): Kafka's
    ZkMigrationStateRecord, in Strom's form."""
    return {"type": "zk_migration", "state": state}


NOOP = "noop"


def noop_record() -> dict[str, Any]:
    """Kafka's NoOpRecord: the active controller writes one every metadata.max.idle.interval.ms
    so that the metadata log moves while nothing changes (KIP-835). It changes nothing."""
    return {"type": NOOP}


def controller_record(controller_id: int, controller_epoch: int) -> dict[str, Any]:
    return {"type": "controller", "controller_id": controller_id,
            "controller_epoch": controller_epoch}


def image_records(image: MetadataImage) -> list[dict[str, Any]]:
    """Records that rebuild `image` when applied to an empty one (its brokers and controller
    aside: those are live state, registered again after a restart): a KRaft snapshot's
    content, as Kafka's snapshots hold the records of the image."""
    out: list[dict[str, Any]] = [producer_ids_record(image.next_producer_id)]
    if image.zk_migration is not None:
        out.append(zk_migration_record(image.zk_migration))
    out += [register_broker_record(reg) for reg in image.registrations.values()]
    if image.zk_migration == ZK_MIGRATING:  # brokers still in ZooKeeper mode: known from it only
        out += [broker_record(info) for b, info in image.brokers.items()
                if b not in image.registrations]
    out += [register_controller_record(reg) for reg in image.controllers.values()]
    for resource, configs_by_name in (("broker", image.broker_configs),
                                      ("user", image.user_configs),
                                      ("group", image.group_configs)):
        for name, configs in configs_by_name.items():
            out += [config_record(resource, name, k, v) for k, v in configs.items()]
    out += [acl_record(acl) for acl in image.acls]
    for entity, quotas in image.client_quotas.items():
        out += [client_quota_record(entity, k, v) for k, v in quotas.items()]
    for topic in image.topics.values():
        out.append(topic_record(topic.name, topic.topic_id))
        out += [config_record("topic", topic.name, k, v) for k, v in topic.configs.items()]
        out += [partition_record(topic.topic_id, p) for p in topic.partitions.values()]
    return out


def apply(image: MetadataImage, record: dict[str, Any]) -> Change | None:
    """Apply one record to the image in place; unknown record types are ignored (forward compat)."""
    kind = record.get("type")
    if kind == NOOP:  # no change: the image (and what is cached from it) stays as it is
        return None
    image.version += 1
    if kind == "topic":
        created = TopicState(record["name"], uuid.UUID(record["topic_id"]))
        image.topics[created.name] = created
        image.topics_by_id[created.topic_id] = created
        return Change("topic_created", created)
    if kind == "partition":
        topic = image.topics_by_id.get(uuid.UUID(record["topic_id"]))
        if topic is None:
            return None
        fields = {k: record[k] for k in ("partition", "replicas", "isr", "leader", "leader_epoch",
                                         "partition_epoch")}
        fields["adding_replicas"] = record.get("adding_replicas") or []
        fields["removing_replicas"] = record.get("removing_replicas") or []
        fields["directories"] = {int(b): d for b, d in (record.get("directories") or {}).items()}
        is_new = record["partition"] not in topic.partitions
        topic.partitions[record["partition"]] = PartitionState(**fields)
        return Change("partitions_created" if is_new else "partition_changed", topic,
                      (record["partition"],))
    if kind == "remove_topic":
        topic = image.topics_by_id.pop(uuid.UUID(record["topic_id"]), None)
        if topic is None:
            return None
        if image.topics.get(topic.name) is topic:
            del image.topics[topic.name]
        return Change("topic_deleted", topic, tuple(topic.partitions))
    if kind == "config":
        if record["resource"] == "topic":
            topic = image.topics.get(record["name"])
            if topic is None:
                return None
            _set(topic.configs, record["key"], record["value"])
            return Change("topic_configs", topic)
        if record["resource"] == "user":
            configs = image.user_configs.setdefault(record["name"], {})
            _set(configs, record["key"], record["value"])
            if not configs:
                del image.user_configs[record["name"]]
            return Change("user_configs")
        if record["resource"] == "group":
            configs = image.group_configs.setdefault(record["name"], {})
            _set(configs, record["key"], record["value"])
            if not configs:
                del image.group_configs[record["name"]]
            return Change("group_configs", group=record["name"])
        configs = image.broker_configs.setdefault(record["name"], {})
        _set(configs, record["key"], record["value"])
        if not configs:
            del image.broker_configs[record["name"]]
        return Change("broker_configs")
    if kind == "broker":
        image.brokers[record["broker_id"]] = _broker_info(record)
        return Change("brokers_changed")
    if kind in ("register_broker", "broker_state", "unregister_broker", "broker_dirs"):
        return _apply_registration(image, record)
    if kind == "register_controller":
        cid = record["controller_id"]
        image.controllers[cid] = ControllerRegistration(
            cid, record["incarnation"],
            {name: (host, port) for name, host, port in record.get("endpoints") or []},
            _ranges_in(record.get("features")))
        return Change("controllers_changed")
    if kind == "unregister_controller":
        if image.controllers.pop(record["controller_id"], None) is None:
            return None
        return Change("controllers_changed")
    if kind == "remove_broker":
        if image.brokers.pop(record["broker_id"], None) is None:
            return None
        return Change("brokers_changed")
    if kind == "controller":
        image.controller_id = record["controller_id"]
        image.controller_epoch = record["controller_epoch"]
        return Change("brokers_changed")
    if kind == "acl":
        image.acls[AclBinding.from_record(record)] = None
        return Change("acls")
    if kind == "remove_acl":
        if image.acls.pop(AclBinding.from_record(record), 0) == 0:
            return None
        return Change("acls")
    if kind == "client_quota":
        entity = quota_entity_of(record["entity"])
        quotas = image.client_quotas.setdefault(entity, {})
        if record["value"] is None:
            quotas.pop(record["key"], None)
        else:
            quotas[record["key"]] = float(record["value"])
        if not quotas:
            del image.client_quotas[entity]
        return Change("client_quotas")
    if kind == "producer_ids":
        image.next_producer_id = max(image.next_producer_id, record["next"])
        return None
    if kind == "zk_migration":
        image.zk_migration = record["state"]
        return None
    return None


def _set(d: dict[str, str], key: str, value: str | None) -> None:
    if value is None:
        d.pop(key, None)
    else:
        d[key] = value

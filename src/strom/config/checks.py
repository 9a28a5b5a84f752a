"""Start-up checks of a loaded broker config: no config the operator set is ignored in silence.

A config Strom knows but does not act on (`ConfigDef.implemented=False`) and a name Strom does
not know get a WARN naming them: Kafka users copy whole server.properties files, and refusing
every such knob would be unfriendly. Settings whose silent ignoring would leave a broker the
operator believes secured, throttled or tiered running without it are refused instead. A
listener-prefixed TLS or SASL setting of a configured listener
(``listener.name.<listener>.[<mechanism>.]<config>``) is judged as its config is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from strom.config.broker import BROKER_CONFIGS, BrokerConfig
from strom.config.defs import ConfigError
from strom.config.lake import CATALOG_PREFIX
from strom.config.listeners import (
    advertised_listeners,
    inter_broker_listener,
    inter_broker_listener_name,
    listeners,
)
from strom.config.security import SASL_MECHANISMS
from strom.raft.config import QuorumConfig

log = logging.getLogger(__name__)

PLAINTEXT = "PLAINTEXT"

# Names refused when set to anything but empty, and what Strom would silently not do.
REFUSED_NAMES: dict[str, str] = {
    "client.quota.callback.class": "custom quota callbacks are not supported (Strom applies "
                                   "Kafka's default quota precedence)",
    "quota.producer.default": "removed in Kafka 4; set a default quota instead: kafka-configs "
                              "--alter --entity-type clients --entity-default --add-config "
                              "producer_byte_rate=N",
    "quota.consumer.default": "removed in Kafka 4; set a default quota instead: kafka-configs "
                              "--alter --entity-type clients --entity-default --add-config "
                              "consumer_byte_rate=N",
    "replica.alter.log.dirs.io.max.bytes.per.second": "replication throttling is not implemented",
}

# Names refused unless they hold this value (case-insensitive): the only one Strom implements.
REFUSED_UNLESS: dict[str, str] = {
    "remote.log.storage.system.enable": "false",
}

# Configs Strom defines but does not implement whose being ignored would authenticate clients
# otherwise than the operator asked (other principals, logins or callbacks): refused when set,
# unprefixed or for a listener, to anything but empty or Kafka's default.
REFUSED_UNIMPLEMENTED: dict[str, str] = {
    "principal.builder.class": "Strom builds principals as Kafka's DefaultKafkaPrincipalBuilder",
    "sasl.login.class": "Strom has no pluggable SASL login",
    "sasl.login.callback.handler.class": "Strom has no pluggable SASL login callback handlers",
}
_KAFKA_DEFAULTS = {
    "principal.builder.class":
        "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
}
_LISTENER_PREFIX = "listener.name."


def check_startup(config: BrokerConfig) -> None:
    """Refuse dangerous settings (one ConfigError naming all of them), then WARN by name about
    every explicitly set config that has no effect."""
    names = _listener_names(config)
    problems = [*_refused_settings(config), *_refused_unimplemented(config, names),
                *_listener_problems(config), *_kraft_problems(config),
                *_group_bound_problems(config)]
    if problems:
        raise ConfigError("refusing to start: " + "; ".join(problems))
    for name in config.static:
        if name == "sasl.jaas.config":  # Kafka's own words
            log.warning("Server config sasl.jaas.config should be prefixed with SASL mechanism "
                        "name, ignoring config (set listener.name.<listener>.<mechanism>."
                        "sasl.jaas.config)")
        elif not BROKER_CONFIGS[name].implemented:
            log.warning("config %s is accepted but not implemented by Strom; it has no effect",
                        name)
    for name in config.unknown:
        base = listener_base(name, names)
        if base is None and name.startswith(CATALOG_PREFIX):
            continue  # handed to pyiceberg's catalog as it is (strom.lake.settings)
        if base is None:
            log.warning("config %s is not used by Strom", name)
        elif not BROKER_CONFIGS[base].implemented:
            log.warning("config %s is accepted but not implemented by Strom; it has no effect",
                        name)


def _listener_names(config: BrokerConfig) -> set[str]:
    try:
        return {lst.name.lower() for lst in listeners(config)}
    except ConfigError:
        return set()


def _per_listener(name: str) -> bool:
    """A config Kafka reads per listener: its TLS and SASL ones (strom.security.listeners)."""
    return name in BROKER_CONFIGS and (
        name.startswith(("ssl.", "sasl."))
        or name in ("connections.max.reauth.ms", "principal.builder.class"))


def listener_base(name: str, listener_names: set[str]) -> str | None:
    """The config that listener.name.<listener>.<config> or
    listener.name.<listener>.<mechanism>.<config> sets for a configured listener, if Kafka
    reads that config per listener; None for any other name."""
    if not name.startswith(_LISTENER_PREFIX):
        return None
    listener, _, rest = name[len(_LISTENER_PREFIX):].partition(".")
    if listener.lower() not in listener_names:
        return None
    if _per_listener(rest):
        return rest
    mechanism, _, config_name = rest.partition(".")
    if mechanism.upper() in (*SASL_MECHANISMS, "GSSAPI") and _per_listener(config_name):
        return config_name
    return None


def _refused_settings(config: BrokerConfig) -> Iterator[str]:
    for name, value in config.unknown.items():
        if name in REFUSED_NAMES and value.strip():
            yield f"{name} is set, but {REFUSED_NAMES[name]}; remove it"
        elif name in REFUSED_UNLESS and value.strip().lower() != REFUSED_UNLESS[name].lower():
            yield f"{name}={value} is not implemented by Strom (only {REFUSED_UNLESS[name]})"


def _refused_unimplemented(config: BrokerConfig, listener_names: set[str]) -> Iterator[str]:
    """REFUSED_UNIMPLEMENTED configs set, unprefixed or for a listener (and mechanism)."""
    settings: list[tuple[str, str | None, Any]] = [
        (name, name, value) for name, value in config.static.items()]
    settings += [(name, listener_base(name, listener_names), value)
                 for name, value in config.unknown.items()]
    for name, base, value in settings:
        if base not in REFUSED_UNIMPLEMENTED:
            continue
        value = str(value or "").strip()
        if value and value != _KAFKA_DEFAULTS.get(base):
            yield f"{name}: not implemented by Strom ({REFUSED_UNIMPLEMENTED[base]}); remove it"


def _listener_problems(config: BrokerConfig) -> Iterator[str]:
    """Listeners, their names and protocols, as Kafka checks them; in a cluster, the brokers
    still talk to each other in PLAINTEXT only."""
    try:
        listeners(config)
        advertised_listeners(config)
        if config.get("zookeeper.connect") and not config.get("process.roles"):
            inter_broker_listener(config)  # Kafka's rule: it must be an advertised listener
        else:
            inter_broker_listener_name(config)
    except ConfigError as e:
        yield str(e)


def _kraft_problems(config: BrokerConfig) -> Iterator[str]:
    """Kafka's KRaft start-up refusals (KafkaConfig's validation), and, for a controller-only
    node (the KRaft role Strom runs so far), what it cannot do yet."""
    if config.get("zookeeper.metadata.migration.enable"):
        if set(config.get("process.roles") or []) != {"controller"}:
            yield ("zookeeper.metadata.migration.enable is for the controller-only nodes of the "
                   "new quorum (process.roles=controller)")
        elif not config.get("zookeeper.connect"):
            yield ("zookeeper.metadata.migration.enable needs the migrated cluster's "
                   "zookeeper.connect")
    if not config.get("process.roles"):
        return
    quorum = QuorumConfig.from_config(config.get)
    yield from quorum.problems()
    if not quorum.is_controller or quorum.is_broker:
        return  # a broker role runs without KRaft for now (strom.broker.app warns)
    names = [n.strip().upper() for n in quorum.controller_listener_names]
    try:
        own = listeners(config)
    except ConfigError:
        return  # reported by _listener_problems
    own_names = [lst.name for lst in own]
    missing = [n for n in names if n not in own_names]
    if missing:
        yield (f"controller.listener.names must only name listeners of the 'listeners' config "
               f"on a controller; {','.join(missing)} is not one (listeners: "
               f"{','.join(own_names) or 'none'})")
    others = [n for n in own_names if n not in names]
    if others:
        yield (f"the listeners of a controller-only node (process.roles=controller) must all "
               f"be controller listeners from controller.listener.names; {','.join(others)} "
               f"is not")
    if config.get("zookeeper.connect") and not config.get("zookeeper.metadata.migration.enable"):
        yield ("zookeeper.connect cannot be set on a KRaft controller (process.roles=controller) "
               "unless it migrates that cluster (zookeeper.metadata.migration.enable=true)")
    insecure = [lst.name for lst in own if lst.name in names and lst.protocol != PLAINTEXT]
    if insecure:
        yield (f"controller listener {','.join(insecure)} uses "
               f"{next(lst.protocol for lst in own if lst.name == insecure[0])}; Strom's "
               f"controllers speak PLAINTEXT only so far")


# Kafka's GroupCoordinatorConfig requirements: (smaller, larger, strictly less).
_GROUP_BOUNDS = (
    ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", False),
    ("group.consumer.min.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", False),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", False),
    ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms", False),
    ("group.consumer.min.session.timeout.ms", "group.consumer.session.timeout.ms", False),
    ("group.consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms", False),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms", True),
    ("group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms", False),
    ("group.streams.min.heartbeat.interval.ms", "group.streams.heartbeat.interval.ms", False),
    ("group.streams.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms", False),
    ("group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms", False),
    ("group.streams.min.session.timeout.ms", "group.streams.session.timeout.ms", False),
    ("group.streams.session.timeout.ms", "group.streams.max.session.timeout.ms", False),
    ("group.streams.heartbeat.interval.ms", "group.streams.session.timeout.ms", True),
    ("group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms", False),
    ("group.share.min.heartbeat.interval.ms", "group.share.heartbeat.interval.ms", False),
    ("group.share.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms", False),
    ("group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms", False),
    ("group.share.min.session.timeout.ms", "group.share.session.timeout.ms", False),
    ("group.share.session.timeout.ms", "group.share.max.session.timeout.ms", False),
    ("group.share.heartbeat.interval.ms", "group.share.session.timeout.ms", True),
    ("group.share.min.record.lock.duration.ms", "group.share.record.lock.duration.ms", False),
    ("group.share.record.lock.duration.ms", "group.share.max.record.lock.duration.ms", False),
    ("group.share.min.delivery.count.limit", "group.share.delivery.count.limit", False),
    ("group.share.delivery.count.limit", "group.share.max.delivery.count.limit", False),
    ("group.share.min.partition.max.record.locks", "group.share.partition.max.record.locks",
     False),
    ("group.share.partition.max.record.locks", "group.share.max.partition.max.record.locks",
     False),
    ("group.streams.num.standby.replicas", "group.streams.max.standby.replicas", False),
)


def _group_bound_problems(config: BrokerConfig) -> Iterator[str]:
    """The consumer-, streams- and share-protocol session timeouts and heartbeat intervals (and
    the streams standby replicas and the share record locks and deliveries) lie within their
    bounds."""
    for low, high, strict in _GROUP_BOUNDS:
        lo, hi = config.get(low), config.get(high)
        if lo > hi or (strict and lo == hi):
            relation = "less than" if strict else "less than or equal to"
            yield f"{low} ({lo}) must be {relation} {high} ({hi})"

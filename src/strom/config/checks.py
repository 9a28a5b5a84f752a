"""Start-up checks of a loaded broker config: no config the operator set is ignored in silence.

A config Strom knows but does not act on (`ConfigDef.implemented=False`) and a name Strom does
not know get a WARN naming them: Kafka users copy whole server.properties files, and refusing
every such knob would be unfriendly. Settings whose silent ignoring would leave a broker the
operator believes secured, throttled or tiered running without it are refused instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from strom.config.broker import BROKER_CONFIGS, BrokerConfig, parse_listener
from strom.config.defs import ConfigError

log = logging.getLogger(__name__)

PLAINTEXT = "PLAINTEXT"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# Prefixes of TLS and SASL settings (also behind `listener.name.<listener>.`).
REFUSED_PREFIXES = ("ssl.", "sasl.")

# Names refused when set to anything but empty, and what Strom would silently not do.
REFUSED_NAMES: dict[str, str] = {
    "authorizer.class.name": "ACLs are not implemented, every client could do everything",
    "super.users": "ACLs are not implemented",
    "client.quota.callback.class": "client quotas are not implemented",
    "quota.producer.default": "client quotas are not implemented",
    "quota.consumer.default": "client quotas are not implemented",
    "leader.replication.throttled.rate": "replication throttling is not implemented",
    "follower.replication.throttled.rate": "replication throttling is not implemented",
    "replica.alter.log.dirs.io.max.bytes.per.second": "replication throttling is not implemented",
}

# Names refused unless they hold this value (case-insensitive): the only one Strom implements.
REFUSED_UNLESS: dict[str, str] = {
    "security.inter.broker.protocol": PLAINTEXT,
    "remote.log.storage.system.enable": "false",
}


def check_startup(config: BrokerConfig) -> None:
    """Refuse dangerous settings (one ConfigError naming all of them), then WARN by name about
    every explicitly set config that has no effect."""
    problems = [*_refused_settings(config), *_listener_problems(config),
                *_group_bound_problems(config)]
    if problems:
        raise ConfigError("refusing to start: " + "; ".join(problems))
    for name in config.static:
        if not BROKER_CONFIGS[name].implemented:
            log.warning("config %s is accepted but not implemented by Strom; it has no effect",
                        name)
    for name in config.unknown:
        log.warning("config %s is not used by Strom", name)


def _is_security_setting(name: str) -> bool:
    if name.startswith(REFUSED_PREFIXES):
        return True
    if name.startswith("listener.name."):  # listener.name.<l>.ssl.x, listener.name.<l>.<mech>.sasl.x
        return any(f".{prefix}" in name for prefix in REFUSED_PREFIXES)
    return False


def _refused_settings(config: BrokerConfig) -> Iterator[str]:
    for name, value in config.unknown.items():
        if _is_security_setting(name):
            yield (f"{name} is set, but Strom implements no TLS or SASL (only PLAINTEXT); "
                   f"remove it")
        elif name in REFUSED_NAMES and value.strip():
            yield f"{name} is set, but {REFUSED_NAMES[name]}; remove it"
        elif name in REFUSED_UNLESS and value.strip().lower() != REFUSED_UNLESS[name].lower():
            yield f"{name}={value} is not implemented by Strom (only {REFUSED_UNLESS[name]})"


def protocol_map(config: BrokerConfig) -> dict[str, str]:
    """listener.security.protocol.map as {LISTENER NAME: PROTOCOL}, names upper-cased as Kafka's."""
    raw = config.get("listener.security.protocol.map") or ""
    out: dict[str, str] = {}
    for entry in raw.split(","):
        if not entry.strip():
            continue
        name, sep, protocol = entry.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not name or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"Invalid value {raw} for configuration listener.security.protocol.map: "
                              f"{entry.strip()!r} is not LISTENER_NAME:PROTOCOL with PROTOCOL one "
                              f"of {', '.join(SECURITY_PROTOCOLS)}")
        out[name] = protocol
    return out


def _listener_problems(config: BrokerConfig) -> Iterator[str]:
    """Every listener (and the inter-broker listener) must map to PLAINTEXT: a listener named
    SASL_SSL would otherwise serve plaintext to clients that believe they are authenticated."""
    protocols = protocol_map(config)
    specs = [*config.get("listeners"), *(config.get("advertised.listeners") or [])]
    names = {parse_listener(spec)[0]: spec for spec in specs}
    inter_broker = config.unknown.get("inter.broker.listener.name", "").strip().upper()
    if inter_broker:
        names.setdefault(inter_broker, f"inter.broker.listener.name={inter_broker}")
    for name, spec in names.items():
        protocol = protocols.get(name)
        if protocol is None:
            yield (f"listener {spec} has no security protocol: {name} is not in "
                   f"listener.security.protocol.map")
        elif protocol != PLAINTEXT:
            yield (f"listener {spec} uses security protocol {protocol}, which Strom does not "
                   f"implement (only PLAINTEXT)")


# Kafka's GroupCoordinatorConfig requirements: (smaller, larger, strictly less).
_GROUP_BOUNDS = (
    ("group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", False),
    ("group.consumer.min.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", False),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms", False),
    ("group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms", False),
    ("group.consumer.min.session.timeout.ms", "group.consumer.session.timeout.ms", False),
    ("group.consumer.session.timeout.ms", "group.consumer.max.session.timeout.ms", False),
    ("group.consumer.heartbeat.interval.ms", "group.consumer.session.timeout.ms", True),
)


def _group_bound_problems(config: BrokerConfig) -> Iterator[str]:
    """The consumer-protocol session timeout and heartbeat interval lie within their bounds."""
    for low, high, strict in _GROUP_BOUNDS:
        lo, hi = config.get(low), config.get(high)
        if lo > hi or (strict and lo == hi):
            relation = "less than" if strict else "less than or equal to"
            yield f"{low} ({lo}) must be {relation} {high} ({hi})"

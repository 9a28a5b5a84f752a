"""Listeners as Kafka configures them: ``listeners``, ``advertised.listeners``,
``listener.security.protocol.map`` and the inter-broker listener.

A listener has a name (``CLIENT``, ``PLAINTEXT``, ...), an address, and the security protocol
its name maps to. Clients are told the advertised address of the listener they connected to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from strom.config.broker import BrokerConfig, parse_listener
from strom.config.defs import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True)
class Listener:
    name: str  # upper-case, as Kafka's ListenerName
    host: str  # '' means every interface (listeners) or this host's name (advertised)
    port: int
    protocol: str

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol in ("SASL_PLAINTEXT", "SASL_SSL")


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
    _default_controller_protocols(config, out)
    return out


_SECURE_NAMES = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _default_controller_protocols(config: BrokerConfig, out: dict[str, str]) -> None:
    """Kafka's rule for KRaft nodes (KafkaConfig.effectiveListenerSecurityProtocolMap): with
    listener.security.protocol.map left at its default, the controller listener names map to
    PLAINTEXT, unless some listener or controller listener is named after a TLS or SASL
    protocol (then the map must name them)."""
    if not config.get("process.roles") or \
            config.source_of("listener.security.protocol.map")[1].name != "DEFAULT_CONFIG":
        return
    names = [n.strip().upper() for n in config.get("controller.listener.names") or []]
    listener_names = []
    for spec in config.get("listeners") or []:
        try:
            listener_names.append(parse_listener(spec)[0].upper())
        except ConfigError:
            return  # reported where the listeners are read
    if any(n in _SECURE_NAMES for n in (*names, *listener_names)):
        return
    for name in names:
        out.setdefault(name, "PLAINTEXT")


def _resolve(config: BrokerConfig, specs: list[str], what: str) -> list[Listener]:
    protocols = protocol_map(config)
    out: list[Listener] = []
    for spec in specs:
        name, host, port = parse_listener(spec)
        name = name.upper()
        protocol = protocols.get(name)
        if protocol is None:  # Kafka's words, then where and what to do
            raise ConfigError(f"No security protocol defined for listener {name} ({what}: "
                              f"{spec}; add {name} to listener.security.protocol.map)")
        if any(other.name == name for other in out):
            raise ConfigError(f"{what}: each listener must have a different name, {name} is "
                              f"listed twice")
        out.append(Listener(name, host, port, protocol))
    return out


def listeners(config: BrokerConfig) -> list[Listener]:
    found = _resolve(config, config.get("listeners"), "listeners")
    ports = [lst.port for lst in found if lst.port != 0]
    if len(ports) != len(set(ports)):
        raise ConfigError("listeners: each listener must have a different port")
    return found


def advertised_listeners(config: BrokerConfig) -> list[Listener]:
    """advertised.listeners (default: listeners); each must name a listener."""
    own = listeners(config)
    adv = config.get("advertised.listeners")
    if not adv:
        return own
    out = _resolve(config, adv, "advertised.listeners")
    names = [lst.name for lst in own]
    unknown = [lst.name for lst in out if lst.name not in names]
    if unknown:
        raise ConfigError(f"advertised.listeners listener names must be equal to or a subset of "
                          f"the ones defined in listeners. Found {','.join(unknown)}. The valid "
                          f"options based on the current configuration are {','.join(names)}")
    return out


def inter_broker_listener_name(config: BrokerConfig) -> str:
    """inter.broker.listener.name, else the listener named like security.inter.broker.protocol
    (Kafka's rule; the two may not both be set)."""
    name = config.get("inter.broker.listener.name")
    if name:
        if config.source_of("security.inter.broker.protocol")[1].name != "DEFAULT_CONFIG":
            raise ConfigError("Only one of inter.broker.listener.name and "
                              "security.inter.broker.protocol should be set.")
        return name.strip().upper()
    return config.get("security.inter.broker.protocol").strip().upper()


def inter_broker_listener(config: BrokerConfig) -> Listener:
    """The advertised listener brokers use to reach this one; an error names the choices."""
    name = inter_broker_listener_name(config)
    adv = advertised_listeners(config)
    for lst in adv:
        if lst.name == name:
            return lst
    raise ConfigError(f"inter.broker.listener.name must be a listener name defined in "
                      f"advertised.listeners. The valid options based on currently configured "
                      f"listeners are {','.join(lst.name for lst in adv)}")


def default_listener(config: BrokerConfig) -> Listener:
    """The advertised listener that names this broker when no listener is asked for: the
    inter-broker one if it exists, else the first (a single node needs no inter-broker one)."""
    adv = advertised_listeners(config)
    name = inter_broker_listener_name(config)
    return next((lst for lst in adv if lst.name == name), adv[0])


def controller_endpoints(config: BrokerConfig, names: Sequence[str]) -> list[tuple[str, str, int]]:
    """(name, host, port) of this node's controller listeners (`names`:
    controller.listener.names) as other controllers reach them: advertised where set, else
    as listened on (an empty host is the machine's name). What a dynamic quorum's voter set
    holds for this node (storage format --standalone, auto-join, UpdateRaftVoter)."""
    import socket

    adv = {lst.name: lst for lst in advertised_listeners(config)}
    own = {lst.name: lst for lst in listeners(config)}
    out = []
    for raw in names:
        name = raw.strip().upper()
        lst = adv.get(name) or own.get(name)
        if lst is not None:
            out.append((name, lst.host or socket.getfqdn(), lst.port))
    return out

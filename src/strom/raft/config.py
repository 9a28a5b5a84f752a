"""KRaft settings: parsing Kafka's voter and bootstrap-server strings, and the quorum's config.

``controller.quorum.voters`` (``id@host:port,...``) fixes a static voter set (kraft.version 0);
``controller.quorum.bootstrap.servers`` (``host:port,...``) only says where to find the quorum,
whose voters then live in the log (kraft.version 1, KIP-853). ``storage format
--initial-controllers`` takes ``id@host:port:directoryId`` entries. Every bad entry is refused
with one line naming the config and the entry, as Kafka's ConfigException does.

This module imports nothing from the broker's config (config/kraft.py uses its validators), so
the Raft code can build a `QuorumConfig` from any name -> value getter.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from strom.config.defs import ConfigError
from strom.storage.checkpoints import topic_id_from_str

__all__ = [
    "BOOTSTRAP_SERVERS",
    "VOTERS",
    "HostPort",
    "QuorumConfig",
    "VoterAddress",
    "parse_bootstrap_servers",
    "parse_initial_controllers",
    "parse_voters",
    "validate_bootstrap_servers",
    "validate_voters",
]

VOTERS = "controller.quorum.voters"
BOOTSTRAP_SERVERS = "controller.quorum.bootstrap.servers"
NON_ROUTABLE_HOST = "0.0.0.0"
_HOST = re.compile(r"[A-Za-z0-9._-]+|\[[0-9A-Fa-f:.%A-Za-z]+\]")
_ZERO_UUID = uuid.UUID(int=0)


@dataclass(frozen=True, slots=True)
class HostPort:
    host: str  # IPv6 without its brackets
    port: int


@dataclass(frozen=True, slots=True)
class VoterAddress:
    """A voter as configured: node id, its controller endpoint, and (from
    ``--initial-controllers`` only) its directory id."""

    node_id: int
    host: str
    port: int
    directory_id: uuid.UUID | None = None


def _entries(value: str | Iterable[str]) -> list[str]:
    items = value.split(",") if isinstance(value, str) else list(value)
    return [item.strip() for item in items if item.strip()]


def _host_port(text: str, where: str, entry: str, form: str) -> HostPort:
    host, sep, port = text.rpartition(":")
    if not sep or not _HOST.fullmatch(host):
        raise ConfigError(f"Invalid value {entry} for {where}: cannot parse a host name; each "
                          f"entry should be in the form {form}")
    if not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError(f"Invalid value {entry} for {where}: port {port!r} is not a number "
                          f"from 1 to 65535; each entry should be in the form {form}")
    return HostPort(host.strip("[]"), int(port))


def _node_id(text: str, where: str, entry: str, form: str) -> int:
    if not text.isdigit():
        raise ConfigError(f"Invalid value {entry} for {where}: node id {text!r} is not a "
                          f"non-negative number; each entry should be in the form {form}")
    return int(text)


def _no_duplicates(voters: list[VoterAddress], where: str) -> None:
    seen: set[int] = set()
    for v in voters:
        if v.node_id in seen:
            raise ConfigError(f"Invalid value for {where}: node id {v.node_id} appears more "
                              "than once")
        seen.add(v.node_id)


def parse_voters(
    value: str | Iterable[str], *, require_routable: bool = False,
) -> list[VoterAddress]:
    """``id@host:port,...`` (a list, as the config registry stores it, or a string).
    `require_routable` refuses 0.0.0.0, as Kafka does when it connects to the voters."""
    where = f"configuration {VOTERS}"
    form = "{id}@{host}:{port}"
    out = []
    for entry in _entries(value):
        node, at, address = entry.partition("@")
        if not at or "@" in address:
            raise ConfigError(f"Invalid value {entry} for {where}: each entry should be in the "
                              f"form {form}")
        hp = _host_port(address, where, entry, form)
        if require_routable and hp.host == NON_ROUTABLE_HOST:
            raise ConfigError(f"Invalid value {entry} for {where}: host {hp.host} is not "
                              "routable")
        out.append(VoterAddress(_node_id(node, where, entry, form), hp.host, hp.port))
    _no_duplicates(out, where)
    return out


def parse_initial_controllers(value: str | Iterable[str]) -> list[VoterAddress]:
    """``--initial-controllers``: ``id@host:port:directoryId,...`` (KIP-853); the directory id
    is a base64url UUID (as in meta.properties' ``directory.id``)."""
    where = "--initial-controllers"
    form = "{id}@{host}:{port}:{directoryId}"
    out = []
    for entry in _entries(value):
        node, at, rest = entry.partition("@")
        address, sep, raw_dir = rest.rpartition(":")
        if not at or not sep or "@" in rest:
            raise ConfigError(f"Invalid value {entry} for {where}: each entry should be in the "
                              f"form {form}")
        if ":" not in address.rpartition("]")[2]:
            raise ConfigError(f"Invalid value {entry} for {where}: no directory id after the "
                              f"port; each entry should be in the form {form}")
        hp = _host_port(address, where, entry, form)
        try:
            directory = topic_id_from_str(raw_dir)
        except ValueError:
            directory = _ZERO_UUID
        if directory == _ZERO_UUID or len(raw_dir) != 22:
            raise ConfigError(f"Invalid value {entry} for {where}: directory id {raw_dir!r} is "
                              "not a non-zero base64url UUID (22 characters)")
        out.append(VoterAddress(_node_id(node, where, entry, form), hp.host, hp.port, directory))
    if not out:
        raise ConfigError(f"{where} needs at least one entry of the form {form}")
    _no_duplicates(out, where)
    return out


def parse_bootstrap_servers(value: str | Iterable[str]) -> list[HostPort]:
    """``host:port,...``."""
    return [_host_port(entry, f"configuration {BOOTSTRAP_SERVERS}", entry, "{host}:{port}")
            for entry in _entries(value)]


def validate_voters(name: str, value: Any) -> None:
    """A `ConfigDef` validator (config/kraft.py)."""
    parse_voters(value)


def validate_bootstrap_servers(name: str, value: Any) -> None:
    parse_bootstrap_servers(value)


@dataclass(frozen=True, slots=True)
class QuorumConfig:
    """The settings the Raft client and the KRaft lifecycle read, Kafka's names in comments."""

    process_roles: tuple[str, ...]  # process.roles; empty: not a KRaft node
    node_id: int | None  # node.id
    controller_listener_names: tuple[str, ...]  # controller.listener.names
    voters: tuple[VoterAddress, ...]  # controller.quorum.voters
    bootstrap_servers: tuple[HostPort, ...]  # controller.quorum.bootstrap.servers
    election_timeout_ms: int  # controller.quorum.election.timeout.ms
    fetch_timeout_ms: int  # controller.quorum.fetch.timeout.ms
    election_backoff_max_ms: int  # controller.quorum.election.backoff.max.ms
    append_linger_ms: int  # controller.quorum.append.linger.ms
    request_timeout_ms: int  # controller.quorum.request.timeout.ms
    retry_backoff_ms: int  # controller.quorum.retry.backoff.ms
    auto_join: bool  # controller.quorum.auto.join.enable
    fetch_max_bytes: int  # controller.quorum.fetch.max.bytes
    fetch_snapshot_max_bytes: int  # controller.quorum.fetch.snapshot.max.bytes

    @classmethod
    def from_config(cls, get: Callable[[str], Any]) -> QuorumConfig:
        """From a getter of typed config values (e.g. ``BrokerConfig.get``)."""
        q = "controller.quorum."
        return cls(
            process_roles=tuple(get("process.roles") or ()),
            node_id=get("node.id"),
            controller_listener_names=tuple(get("controller.listener.names") or ()),
            voters=tuple(parse_voters(get(VOTERS) or ())),
            bootstrap_servers=tuple(parse_bootstrap_servers(get(BOOTSTRAP_SERVERS) or ())),
            election_timeout_ms=get(q + "election.timeout.ms"),
            fetch_timeout_ms=get(q + "fetch.timeout.ms"),
            election_backoff_max_ms=get(q + "election.backoff.max.ms"),
            append_linger_ms=get(q + "append.linger.ms"),
            request_timeout_ms=get(q + "request.timeout.ms"),
            retry_backoff_ms=get(q + "retry.backoff.ms"),
            auto_join=get("controller.quorum.auto.join.enable"),
            fetch_max_bytes=get(q + "fetch.max.bytes"),
            fetch_snapshot_max_bytes=get(q + "fetch.snapshot.max.bytes"),
        )

    @property
    def is_controller(self) -> bool:
        return "controller" in self.process_roles

    @property
    def is_broker(self) -> bool:
        return "broker" in self.process_roles

    @property
    def static_voters(self) -> bool:
        """A static quorum (kraft.version 0): the voters come from the config."""
        return bool(self.voters)

    def problems(self) -> list[str]:
        """Kafka's start-up refusals that need only these settings, one line each (the
        listener checks need the listeners too and live with them)."""
        if not self.process_roles:
            return []
        out = []
        if self.node_id is None:
            out.append("node.id is required when process.roles is set")
        if not self.controller_listener_names:
            out.append("controller.listener.names is required when process.roles is set")
        if not self.voters and not self.bootstrap_servers:
            out.append(f"{VOTERS} or {BOOTSTRAP_SERVERS} is required when process.roles is set")
        if (self.is_controller and self.voters and self.node_id is not None
                and self.node_id not in {v.node_id for v in self.voters}):
            out.append(f"node.id {self.node_id} of a controller must be one of the voters in "
                       f"{VOTERS}")
        if self.auto_join and not self.is_controller:
            out.append("controller.quorum.auto.join.enable=true is only for nodes with the "
                       "controller role")
        return out

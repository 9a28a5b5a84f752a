"""KRaft configs (issue 30): Kafka 4.4's names, types and defaults.

Strom runs controller-only KRaft nodes (``process.roles=controller``, a static quorum from
``controller.quorum.voters``) and combined nodes that are a quorum of one
(``process.roles=broker,controller``); the configs they act on are ``implemented=True``. The
others are accepted and named in a start-up WARN, as every unimplemented config is; a
broker-only node is refused at start. Values are checked as Kafka checks them
(``controller.quorum.voters`` entries, roles, ranges), so a bad one is refused with one line.
"""

from __future__ import annotations

from typing import Any

from strom.config.defs import ConfigDef, ConfigError, ConfigType, at_least
from strom.raft.config import validate_bootstrap_servers, validate_voters

T = ConfigType

PROCESS_ROLES = ("broker", "controller")


def _roles(name: str, value: Any) -> None:
    if not value:
        raise ConfigError(f"Configuration '{name}' must not be empty (broker, controller, or "
                          "broker,controller)")
    for role in value:
        if role not in PROCESS_ROLES:
            raise ConfigError(f"Invalid value {role} for configuration {name}: String must be "
                              "one of: broker, controller")
    if len(set(value)) != len(value):
        raise ConfigError(f"Invalid value {','.join(value)} for configuration {name}: a role "
                          "appears twice")


def _names(name: str, value: Any) -> None:
    if not value:
        raise ConfigError(f"Configuration '{name}' must not be empty")
    if len(set(value)) != len(value):
        raise ConfigError(f"Invalid value {','.join(value)} for configuration {name}: a "
                          "listener name appears twice")


_Q = "controller.quorum."

KRAFT_CONFIGS = (
    ConfigDef("process.roles", T.LIST, None,
              "KRaft roles of this node: broker, controller, or broker,controller",
              _roles, read_only=True, implemented=True),
    ConfigDef("node.id", T.INT, None, "KRaft node id, required with process.roles (a broker "
              "without KRaft uses broker.id; with KRaft, broker.id is node.id)", at_least(0), read_only=True, implemented=True),
    ConfigDef("controller.listener.names", T.LIST, None,
              "listeners of the controller; a broker uses the first", _names, read_only=True,
              implemented=True),
    ConfigDef(_Q + "voters", T.LIST, [], "static voter set, id@host:port,... (kraft.version 0)",
              validate_voters, read_only=True, implemented=True),
    ConfigDef(_Q + "bootstrap.servers", T.LIST, [],
              "controllers to find a dynamic quorum through, host:port,... (KIP-853; its voters "
              "are in the metadata log, kraft.version 1)",
              validate_bootstrap_servers, read_only=True, implemented=True),
    ConfigDef(_Q + "election.timeout.ms", T.INT, 1000,
              "time without a leader before an election (randomised to [T, 2T))", at_least(0),
              read_only=True, implemented=True),
    ConfigDef(_Q + "fetch.timeout.ms", T.INT, 2000,
              "time without a successful fetch from the leader before a voter starts an "
              "election; a leader without fetches from a majority for 1.5x this resigns",
              at_least(0), read_only=True, implemented=True),
    ConfigDef(_Q + "election.backoff.max.ms", T.INT, 1000,
              "longest backoff before a new election", at_least(0), read_only=True,
              implemented=True),
    ConfigDef(_Q + "append.linger.ms", T.INT, 25,
              "how long the leader gathers writes before flushing them", at_least(0),
              read_only=True, implemented=True),
    ConfigDef(_Q + "request.timeout.ms", T.INT, 2000, "timeout of quorum requests", at_least(0),
              read_only=True, implemented=True),
    ConfigDef(_Q + "retry.backoff.ms", T.INT, 20, "pause before retrying a quorum request",
              at_least(0), read_only=True, implemented=True),
    ConfigDef(_Q + "auto.join.enable", T.BOOLEAN, False,
              "a caught-up controller outside the voter set of a dynamic quorum adds itself, "
              "first removing a voter with its id and another directory (controllers only)",
              read_only=True, implemented=True),
    ConfigDef(_Q + "fetch.max.bytes", T.INT, 1048576,
              "most bytes a quorum Fetch response carries (KIP-1219)", read_only=True,
              implemented=True),
    ConfigDef(_Q + "fetch.snapshot.max.bytes", T.INT, 1048576,
              "most bytes a FetchSnapshot response carries (KIP-1219)", read_only=True,
              implemented=True),
    ConfigDef("controller.socket.timeout.ms", T.INT, 30000,
              "timeout of requests to the controller", read_only=True, implemented=False),
    ConfigDef("broker.heartbeat.interval.ms", T.INT, 2000,
              "time between a broker's heartbeats to the controller", read_only=True,
              implemented=True),
    ConfigDef("broker.session.timeout.ms", T.INT, 9000,
              "a broker without heartbeats for this long is fenced", read_only=True,
              implemented=True),
    ConfigDef("initial.broker.registration.timeout.ms", T.INT, 60000,
              "how long a starting broker of a KRaft cluster tries to catch up with the "
              "quorum and register with the controller before it exits", read_only=True,
              implemented=True),
    ConfigDef("metadata.log.dir", T.STRING, None,
              "directory of the metadata log (default: the first of log.dirs)", read_only=True,
              implemented=True),
    ConfigDef("metadata.log.max.record.bytes.between.snapshots", T.LONG, 20971520,
              "new metadata log bytes that trigger a snapshot",
              at_least(1), read_only=True, implemented=True),
    ConfigDef("metadata.log.max.snapshot.interval.ms", T.LONG, 3600000,
              "longest time between snapshots while records arrive (0: never by time)",
              at_least(0), read_only=True, implemented=True),
    ConfigDef("metadata.log.segment.bytes", T.INT, 1073741824,
              "segment size of the metadata log", at_least(8388608), read_only=True,
              implemented=True),
    ConfigDef("metadata.log.segment.ms", T.LONG, 604800000,
              "segment roll time of the metadata log", read_only=True, implemented=True),
    ConfigDef("metadata.max.retention.bytes", T.LONG, 104857600,
              "metadata log and snapshot bytes kept before the oldest snapshots (and the log "
              "below the next one) are deleted; the latest snapshot always stays; -1: no limit",
              read_only=True, implemented=True),
    ConfigDef("metadata.max.retention.ms", T.LONG, 604800000,
              "a snapshot whose last record is older than this goes, with the log below the "
              "next snapshot; the latest always stays; -1: no limit", read_only=True,
              implemented=True),
    ConfigDef("metadata.max.idle.interval.ms", T.INT, 500,
              "how often the active controller writes a no-op record to the metadata log "
              "(0: never)", at_least(0), read_only=True, implemented=True),
    ConfigDef("sasl.mechanism.controller.protocol", T.STRING, "GSSAPI",
              "SASL mechanism for requests to the controllers (a SASL_PLAINTEXT or SASL_SSL "
              "controller listener: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", read_only=True,
              implemented=True),
    ConfigDef("early.start.listeners", T.STRING, None,
              "listeners started before the node has caught up (default: the controller "
              "listeners)", read_only=True, implemented=False),
)

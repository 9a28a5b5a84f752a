"""The schema registry's configs: Strom's own (Kafka has no registry; Confluent's runs apart,
with `listeners` and `kafkastore.*` settings). Off by default; `make run` turns it on."""

from __future__ import annotations

from typing import Any

from strom.config.defs import ConfigDef, ConfigType, at_least, one_of
from strom.config.metrics import HttpListener, http_listener

T = ConfigType


def registry_endpoint(value: str | None) -> HttpListener | None:
    """``schema.registry.listeners`` as (host, port, tls); None when empty (no registry)."""
    return http_listener(value, "schema.registry.listeners", "schema registry")


def _check(name: str, value: Any) -> None:
    registry_endpoint(value)


REGISTRY_CONFIGS = (
    ConfigDef("schema.registry.listeners", T.STRING, "",
              "Strom's own: where the schema registry (Confluent's REST API) listens, "
              "http://HOST:PORT, or https://HOST:PORT with the broker's ssl.* settings "
              "(overridable as listener.name.schema_registry.ssl.*); empty: no registry",
              _check, read_only=True),
    ConfigDef("schema.registry.topic.replication.factor", T.SHORT, 3,
              "Strom's own (Confluent's kafkastore.topic.replication.factor): replication "
              "factor of the _schemas topic (1 on a single broker)", at_least(1),
              read_only=True),
    ConfigDef("schema.registry.timeout.ms", T.INT, 10000,
              "Strom's own (Confluent's kafkastore.timeout.ms): how long a registry write waits "
              "for its record to be committed", at_least(1), read_only=True),
    ConfigDef("schema.registry.authentication.method", T.STRING, "NONE",
              "Strom's own (Confluent's authentication.method): NONE, or BASIC: HTTP basic "
              "authentication with the broker's SCRAM users and SASL/PLAIN users; with an "
              "authorizer, the broker's ACLs on a subject's topic decide what a user may do",
              one_of("NONE", "BASIC")),
    ConfigDef("schema.registry.max.schema.bytes", T.INT, 1048576,
              "Strom's own: the largest schema text the registry takes (42209 above it)",
              at_least(1), read_only=True),
)

"""The HTTP API's configs (`rest.*`): Strom's own. Kafka has no REST server (KIP-80 was
declined); Confluent's REST Proxy runs apart with `listeners`, `consumer.instance.timeout.ms`
and its client settings. Off by default; `make run` turns it on."""

from __future__ import annotations

from typing import Any

from strom.config.defs import ConfigDef, ConfigType, at_least, one_of
from strom.config.metrics import HttpListener, http_listener

T = ConfigType


def rest_endpoint(value: str | None) -> HttpListener | None:
    """``rest.listeners`` as (host, port, tls); None when empty (no HTTP API)."""
    return http_listener(value, "rest.listeners", "HTTP API")


def _check(name: str, value: Any) -> None:
    rest_endpoint(value)


REST_CONFIGS = (
    ConfigDef("rest.listeners", T.STRING, "",
              "Strom's own: where the HTTP API (Confluent REST Proxy v2/v3, share groups and "
              "event streams over HTTP) listens, http://HOST:PORT, or https://HOST:PORT with the "
              "broker's ssl.* settings (overridable as listener.name.rest.ssl.*); empty: off. "
              "It runs in a process of its own, a client of this broker", _check,
              read_only=True),
    ConfigDef("rest.authentication.method", T.STRING, "NONE",
              "Strom's own (Confluent's authentication.method): NONE, or BASIC: HTTP basic "
              "credentials of a broker user, with which the HTTP API authenticates to the broker "
              "(SASL PLAIN or SCRAM): the broker's ACLs then apply to that user",
              one_of("NONE", "BASIC"), read_only=True),
    ConfigDef("rest.consumer.instance.timeout.ms", T.INT, 300000,
              "Strom's own (Confluent's consumer.instance.timeout.ms): a consumer instance of "
              "the v2 API, or a share consumer over HTTP, idle this long is closed",
              at_least(1000), read_only=True),
    ConfigDef("rest.max.request.bytes", T.INT, 10485760,
              "Strom's own: the largest request body (one record in streaming mode) the HTTP "
              "API takes; larger ones are answered 413", at_least(1024), read_only=True),
    ConfigDef("rest.max.records.per.request", T.INT, 10000,
              "Strom's own: the most records one read returns (v2 consumer records, share "
              "group records); produce streams have no such cap",
              at_least(1), read_only=True),
    ConfigDef("rest.max.connections", T.INT, 1000,
              "Strom's own: open HTTP connections beyond this are answered 503",
              at_least(1), read_only=True),
    ConfigDef("rest.connections.max.idle.ms", T.INT, 30000,
              "Strom's own: an HTTP connection idle this long between requests is closed",
              at_least(100), read_only=True),
)

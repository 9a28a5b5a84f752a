"""What the broker hands the HTTP API's process (one JSON line on its stdin): the broker's config
as written, the listening socket's descriptor, and how to reach the broker as a Kafka client."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from strom.common.helper_child import JsonLine
from strom.config.broker import BrokerConfig
from strom.config.rest import rest_endpoint
from strom.security.tls import LoopbackTls


@dataclass
class Handoff(JsonLine):
    config: dict[str, str]  # the broker's properties as written (file plus overrides)
    fd: int  # the listening socket, bound by the broker
    bootstrap: str  # host:port of the broker's listener this process connects to
    security_protocol: str  # PLAINTEXT, SASL_PLAINTEXT, or on a TLS-only broker SSL/SASL_SSL
    sasl_mechanisms: list[str] = field(default_factory=list)  # enabled on that listener
    registry_url: str | None = None  # the broker's schema registry, if it serves one
    public_url: str = ""  # as printed at start-up
    tls: dict[str, str | None] | None = None  # a LoopbackTls, for a TLS listener

    def loopback_tls(self) -> LoopbackTls | None:
        return LoopbackTls.of(self.tls)


@dataclass
class RestSettings:
    handoff: Handoff
    config: BrokerConfig
    host: str
    port: int
    tls: bool
    basic_auth: bool
    consumer_timeout_ms: int
    max_request_bytes: int
    max_records: int
    max_connections: int
    idle_ms: int

    @classmethod
    def of(cls, handoff: Handoff) -> RestSettings:
        config = BrokerConfig.load(None, handoff.config)
        endpoint = rest_endpoint(config.get("rest.listeners"))
        assert endpoint is not None, "the broker starts this process only with rest.listeners"
        return cls(handoff, config, endpoint.host, endpoint.port, endpoint.tls,
                   config.get("rest.authentication.method") == "BASIC",
                   config.get("rest.consumer.instance.timeout.ms"),
                   config.get("rest.max.request.bytes"),
                   config.get("rest.max.records.per.request"),
                   config.get("rest.max.connections"),
                   config.get("rest.connections.max.idle.ms"))

    def client_base(self) -> dict[str, Any]:
        """librdkafka settings every client of this process shares."""
        tls = self.handoff.loopback_tls()
        return {"bootstrap.servers": self.handoff.bootstrap,
                "security.protocol": self.handoff.security_protocol,
                "client.id": "strom-rest",
                "log_level": 3,
                **(tls.librdkafka() if tls is not None else {})}

"""The HTTP API (`rest.listeners`): a process of its own (`python -m strom.rest`), started,
watched and stopped by the broker.

The broker binds the HTTP port itself — a taken port is one clear start-up error, and requests
that arrive while the process (re)starts wait in the socket's backlog — and hands the socket and
its config to the process on stdin. The process reaches this broker as a Kafka client through a
PLAINTEXT listener, or with basic authentication a SASL_PLAINTEXT one (PLAIN or SCRAM); on a
broker with TLS listeners only, through SSL or SASL_SSL (`LoopbackTls`). Every HTTP request
passes the broker's own checks and ACLs. If the process dies it is started again
(an ERROR line says so); when the broker stops, closing the process's stdin stops it, and a
broker killed with -9 takes it along the same way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from strom.broker.core import Broker
from strom.broker.helper_process import HelperProcess
from strom.broker.server import BrokerServer
from strom.broker.wiring import StartupError
from strom.config.defs import ConfigError
from strom.config.listeners import Listener
from strom.config.rest import rest_endpoint
from strom.http.server import bind
from strom.rest.settings import Handoff
from strom.security.listeners import ListenerSettings
from strom.security.tls import loopback_tls, server_context

log = logging.getLogger("strom.rest")

LISTENER = "REST"  # the name its listener.name.<l>.ssl.* overrides use
STOP_S = 10.0


@dataclass
class RestListener:
    helper: HelperProcess
    sock_holder: object  # the bound socket, kept open for restarts
    url: str

    async def stop(self) -> None:
        await self.helper.stop()
        close = getattr(self.sock_holder, "close", None)
        if close is not None:
            close()


def _client_listener(servers: Sequence[BrokerServer], basic: bool
                     ) -> tuple[BrokerServer, list[str]]:
    """The broker listener the HTTP API connects through, with its SASL mechanisms: one
    without TLS if there is one (no encryption on the loopback), else a TLS one."""
    for tls in (False, True):
        for server in servers:
            listener = server.security.listener
            sasl = server.security.sasl
            if listener.tls != tls:
                continue
            if basic and listener.sasl and sasl is not None:
                mechanisms = [m for m in sasl.mechanisms if m in ("PLAIN", "SCRAM-SHA-256",
                                                                  "SCRAM-SHA-512")]
                if mechanisms:
                    return server, mechanisms
            if not basic and not listener.sasl:
                return server, []
    if basic:
        raise StartupError("rest.authentication.method=BASIC needs a SASL_PLAINTEXT or "
                           "SASL_SSL listener with PLAIN or SCRAM enabled: the HTTP API "
                           "authenticates to the broker as each HTTP user")
    raise StartupError("rest.listeners needs a PLAINTEXT or SSL listener to reach the broker "
                       "through (or rest.authentication.method=BASIC with a SASL_PLAINTEXT or "
                       "SASL_SSL one)")


def start_rest_listener(broker: Broker, servers: Sequence[BrokerServer]) -> RestListener | None:
    config = broker.config
    endpoint = rest_endpoint(config.get("rest.listeners"))
    if endpoint is None:
        return None
    host, port, tls = endpoint
    basic = config.get("rest.authentication.method") == "BASIC"
    server, mechanisms = _client_listener(servers, basic)
    if tls:  # checked here, so a bad keystore is one start-up line, not a crash loop
        try:
            server_context(ListenerSettings(config, Listener(LISTENER, host, port, "SSL")).get)
        except ConfigError as exc:
            raise StartupError(f"rest.listeners: {exc}") from None
    loopback = None
    if server.security.listener.tls:
        try:
            loopback = loopback_tls(ListenerSettings(config, server.security.listener).get)
        except ConfigError as exc:
            raise StartupError(f"rest.listeners: the HTTP API reaches the broker through its "
                               f"TLS listener {server.security.listener.name}: {exc}") from None
    elif not basic and broker.authorizer is not None:
        log.warning("rest.authentication.method is NONE while the broker has an authorizer: "
                    "every HTTP request is User:ANONYMOUS's (set BASIC)")
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise StartupError(f"cannot serve the HTTP API on {host}:{port} (rest.listeners): "
                           f"{exc.strerror or exc}") from None
    sock.set_inheritable(True)
    bound_host, bound_port = sock.getsockname()[:2]
    kafka_host = "127.0.0.1" if server.host in ("", "0.0.0.0") else \
        "::1" if server.host == "::" else server.host
    advertised = broker.info.host if bound_host in ("0.0.0.0", "::") else bound_host
    shown = f"[{advertised}]" if ":" in advertised else advertised
    url = f"{'https' if tls else 'http'}://{shown}:{bound_port}"
    kafka_shown = f"[{kafka_host}]" if ":" in kafka_host else kafka_host
    handoff = Handoff(config=dict(config.raw), fd=sock.fileno(),
                      bootstrap=f"{kafka_shown}:{server.port}",
                      security_protocol=server.security.listener.protocol,
                      sasl_mechanisms=mechanisms, registry_url=broker.info.registry_url,
                      public_url=url, tls=asdict(loopback) if loopback is not None else None)
    handoff.config["rest.listeners"] = f"{'https' if tls else 'http'}://{host}:{bound_port}"
    helper = HelperProcess("the HTTP API's process", "strom.rest", handoff.to_line(), log,
                           stop_s=STOP_S, pass_fds=[handoff.fd])
    helper.start()
    return RestListener(helper, sock, url)

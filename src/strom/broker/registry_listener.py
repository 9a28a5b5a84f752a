"""The schema registry's HTTP listener (`schema.registry.listeners`) inside the broker.

Served by the shared HTTP layer (`strom.http.server`: uvicorn, hardened) on the broker's event
loop. At start the `_schemas` topic is created when missing (on a cluster the controller answers
later). A taken port stops the start-up with one line: the operator chose it. The registry's
address is registered with the broker (`BrokerInfo.registry_url`). In a cluster, a broker that
is not the registry's writer answers reads from its own copy (`strom.broker.schemas_feed` fetches
`_schemas` for it) and forwards changes to the writer's address.

With ``schema.registry.authentication.method=BASIC`` every request carries HTTP basic
credentials of a broker user (a SCRAM user, or a SASL/PLAIN user of a listener's JAAS config);
with an authorizer, the broker's ACLs on a subject's topic decide what that user may do.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp

from strom.broker.core import Broker
from strom.broker.schemas_feed import SchemasFeed
from strom.broker.wiring import SchemasTopicAdapter, StartupError
from strom.config.defs import ConfigError
from strom.config.listeners import Listener
from strom.config.registry import registry_endpoint
from strom.http.auth import BasicAuth, PasswordCheck
from strom.http.server import bind, make_server
from strom.protocol.errors import KafkaError
from strom.registry.coordinator import RegistryCoordinator
from strom.registry.http import CONTENT_TYPE, Access, registry_app
from strom.registry.state import SCHEMAS_TOPIC
from strom.security.acl import CLUSTER_NAME
from strom.security.acl import AclOperation as Op
from strom.security.acl import ResourceType as Res
from strom.security.listeners import ListenerSecurity, ListenerSettings
from strom.security.principal import ANONYMOUS, KafkaPrincipal
from strom.security.sasl.mechanisms import (
    SCRAM_MECHANISMS,
    AuthenticationFailed,
    credential_from_salted_password,
    salted_password,
)
from strom.security.scram_store import lookup_in
from strom.security.tls import client_context, server_context

log = logging.getLogger("strom.registry")

LISTENER = "SCHEMA_REGISTRY"  # the name its listener.name.<l>.ssl.* overrides use


@dataclass
class RegistryListener:
    server: uvicorn.Server
    task: asyncio.Task[None]
    url: str
    coordinator: RegistryCoordinator

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self.task, 5.0)
        await self.coordinator.stop()


def password_check(broker: Broker, securities: Sequence[ListenerSecurity]) -> PasswordCheck:
    """The broker's users: SCRAM credentials (kafka-configs / AlterUserScramCredentials), then
    the SASL/PLAIN users of its listeners' JAAS configs."""
    lookup = lookup_in(lambda: broker.image.user_configs)
    plain = [s.sasl.mechanisms["PLAIN"] for s in securities
             if s.sasl is not None and "PLAIN" in s.sasl.mechanisms]

    def check(user: str, password: str) -> bool:
        for mechanism in SCRAM_MECHANISMS:
            stored = lookup(user, mechanism)
            if stored is None:
                continue
            salted = salted_password(mechanism, password, stored.salt, stored.iterations)
            derived = credential_from_salted_password(mechanism, stored.salt, salted,
                                                      stored.iterations)
            if hmac.compare_digest(derived.stored_key, stored.stored_key):
                return True
        token = b"\0" + user.encode() + b"\0" + password.encode()
        for new_exchange in plain:
            exchange = new_exchange()
            try:
                exchange.evaluate(token)
            except AuthenticationFailed:
                continue
            if exchange.complete:
                return True
        return False

    return check


def topic_of(subject: str) -> str:
    """The topic a subject is about: TopicNameStrategy's ``<topic>-key`` / ``<topic>-value``,
    else the subject itself (a record name)."""
    for suffix in ("-key", "-value"):
        if subject.endswith(suffix) and len(subject) > len(suffix):
            return subject[: -len(suffix)]
    return subject


def acl_access(broker: Broker) -> Access | None:
    """The broker's ACLs as the registry's access policy: reading a subject needs READ on its
    topic, writing it WRITE, the global config and mode ALTER on the cluster."""
    authorizer = broker.authorizer
    if authorizer is None:
        return None

    def access(user: str | None, host: str, action: str, subject: str | None) -> bool:
        principal = KafkaPrincipal.user(user) if user else ANONYMOUS
        if action == "admin" or subject is None:
            return authorizer.authorize(principal, host, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
        op = Op.READ if action == "read" else Op.WRITE
        return authorizer.authorize(principal, host, op, Res.TOPIC, topic_of(subject))

    return access


def start_registry_listener(broker: Broker, securities: Sequence[ListenerSecurity] = ()
                            ) -> RegistryListener | None:
    coordinator = broker.registry
    endpoint = registry_endpoint(broker.config.get("schema.registry.listeners"))
    if coordinator is None or endpoint is None:
        return None
    host, port, tls = endpoint
    ssl_context = forward_tls = None
    if tls:  # the broker's ssl.* settings, as a listener named SCHEMA_REGISTRY reads them
        try:
            settings = ListenerSettings(broker.config, Listener(LISTENER, host, port, "SSL"))
            ssl_context = server_context(settings.get)
            forward_tls = client_context(settings.get)  # to the other brokers' registries
        except ConfigError as exc:
            raise StartupError(f"schema.registry.listeners: {exc}") from None
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise StartupError(f"cannot serve the schema registry on {host}:{port} "
                           f"(schema.registry.listeners): {exc.strerror or exc}") from None
    topic = _SchemasTopic(broker)
    topic.ensure()
    bound_host, bound_port = sock.getsockname()[:2]
    if broker.replicas is not None:  # a cluster: a copy of the registry where another writes
        coordinator.follow(SchemasFeed(broker))

    async def sync(timeout_s: float) -> None:
        await coordinator.sync(timeout_s)

    app: ASGIApp = registry_app(coordinator.registry, lambda: _writer_url(broker, topic),
                                acl_access(broker), forward_tls, sync)
    if broker.config.get("schema.registry.authentication.method") == "BASIC":
        app = BasicAuth(app, password_check(broker, securities), realm="Strom schema registry",
                        media_type=CONTENT_TYPE)
    elif broker.authorizer is not None:
        log.warning("schema.registry.authentication.method is NONE while the broker has an "
                    "authorizer: every registry request is User:ANONYMOUS's (set BASIC)")
    server = make_server(app, host, bound_port, ssl_context, access_log="schema_registry")
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]),
                                                  name="schema-registry")
    advertised = broker.info.host if bound_host in ("0.0.0.0", "::") else bound_host
    shown = f"[{advertised}]" if ":" in advertised else advertised
    url = f"{'https' if tls else 'http'}://{shown}:{bound_port}"
    broker.info.registry_url = url  # registered with the broker: the others forward to it
    return RegistryListener(server, task, url, coordinator)


class _SchemasTopic:
    """Creates `_schemas` when missing, asking again at most every RETRY_S (a cluster's first
    broker may start before enough brokers are registered for its replication factor)."""

    RETRY_S = 1.0

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._asked = -self.RETRY_S

    def ensure(self) -> None:
        now = time.monotonic()
        if SCHEMAS_TOPIC in self.broker.image.topics or now - self._asked < self.RETRY_S:
            return
        self._asked = now
        try:
            SchemasTopicAdapter(self.broker).create()
        except KafkaError as exc:  # a cluster's controller creates it later: asked again
            log.info("schema registry: %s", exc.message)


def _writer_url(broker: Broker, schemas: _SchemasTopic) -> str | None:
    """The registry of the broker leading `_schemas-0` (the writer), if that is another one."""
    schemas.ensure()
    topic = broker.image.topics.get(SCHEMAS_TOPIC)
    state = topic.partitions.get(0) if topic is not None else None
    if state is None or state.leader < 0 or state.leader == broker.broker_id:
        return None
    leader = broker.image.brokers.get(state.leader)
    return leader.registry_url if leader is not None else None

"""The schema registry's HTTP listener (`schema.registry.listeners`) inside the broker.

Served by the shared HTTP layer (`strom.http.server`: uvicorn, hardened) on the broker's event
loop. At start the `_schemas` topic is created when missing (on a cluster the controller answers
later; the registry answers "unknown leader" until this broker leads the topic and has loaded
it). A taken port stops the start-up with one line: the operator chose it. The registry's address
is registered with the broker (`BrokerInfo.registry_url`), so a broker that is not the
registry's writer forwards requests to the one that is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

import uvicorn

from strom.broker.core import Broker
from strom.broker.wiring import SchemasTopicAdapter, StartupError
from strom.config.registry import registry_endpoint
from strom.http.server import bind, make_server
from strom.protocol.errors import KafkaError
from strom.registry.http import registry_app
from strom.registry.state import SCHEMAS_TOPIC

log = logging.getLogger("strom.registry")


@dataclass
class RegistryListener:
    server: uvicorn.Server
    task: asyncio.Task[None]
    url: str

    async def stop(self) -> None:
        self.server.should_exit = True
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(self.task, 5.0)


def start_registry_listener(broker: Broker) -> RegistryListener | None:
    coordinator = broker.registry
    endpoint = registry_endpoint(broker.config.get("schema.registry.listeners"))
    if coordinator is None or endpoint is None:
        return None
    host, port = endpoint
    try:
        sock = bind(host, port)
    except OSError as exc:
        raise StartupError(f"cannot serve the schema registry on {host}:{port} "
                           f"(schema.registry.listeners): {exc.strerror or exc}") from None
    topic = _SchemasTopic(broker)
    topic.ensure()
    bound_host, bound_port = sock.getsockname()[:2]
    server = make_server(registry_app(coordinator.registry, lambda: _writer_url(broker, topic)),
                         host, bound_port)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]),
                                                  name="schema-registry")
    advertised = broker.info.host if bound_host in ("0.0.0.0", "::") else bound_host
    shown = f"[{advertised}]" if ":" in advertised else advertised
    url = f"http://{shown}:{bound_port}"
    broker.info.registry_url = url  # registered with the broker: the others forward to it
    return RegistryListener(server, task, url)


class _SchemasTopic:
    """Creates `_schemas` when missing, asking again at most every RETRY_S (a cluster's first
    broker may start before enough brokers are registered for its replication factor)."""

    RETRY_S = 5.0

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

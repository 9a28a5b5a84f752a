"""The schema registry's HTTP listener (`schema.registry.listeners`) inside the broker.

Served by the shared HTTP layer (`strom.http.server`: uvicorn, hardened) on the broker's event
loop. At start the `_schemas` topic is created when missing (on a cluster the controller answers
later; the registry answers "unknown leader" until this broker leads the topic and has loaded
it). A taken port stops the start-up with one line: the operator chose it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import uvicorn

from strom.broker.core import Broker
from strom.broker.wiring import SchemasTopicAdapter, StartupError
from strom.config.registry import registry_endpoint
from strom.http.server import bind, make_server
from strom.protocol.errors import KafkaError
from strom.registry.http import registry_app

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
    try:
        SchemasTopicAdapter(broker).create()
    except KafkaError as exc:  # a cluster's controller creates it later; the registry waits
        log.info("schema registry: %s", exc.message)
    bound_host, bound_port = sock.getsockname()[:2]
    server = make_server(registry_app(coordinator.registry), host, bound_port)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]),
                                                  name="schema-registry")
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    return RegistryListener(server, task, f"http://{shown}:{bound_port}")

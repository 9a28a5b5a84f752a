"""The HTTP API's process: `python -m strom.rest`, started by the broker (never by hand).

It reads the broker's `Handoff` from its first stdin line and serves on the socket the broker
bound. When stdin closes — the broker stopped, or died — it shuts down: it never outlives its
broker.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket

import uvicorn

from strom.common.helper_child import start_child, watch_parent
from strom.http.auth import BasicAuth
from strom.http.server import make_server
from strom.rest.app import build_app
from strom.rest.auth import SaslCheck
from strom.rest.clients import ClientPool, run_periodically
from strom.rest.context import RestContext
from strom.rest.settings import Handoff, RestSettings

log = logging.getLogger("strom.rest")
LISTENER = "REST"  # the name its listener.name.<l>.ssl.* overrides use


async def serve(settings: RestSettings) -> None:
    from starlette.types import ASGIApp

    loopback = settings.handoff.loopback_tls()
    tls = loopback.context() if loopback is not None else None
    sasl = SaslCheck(settings.handoff.bootstrap, settings.handoff.sasl_mechanisms, tls)
    pool = ClientPool(settings.client_base(), sasl.mechanism_of, tls)
    ctx = RestContext(settings, pool)
    app: ASGIApp = build_app(ctx)
    if settings.basic_auth:
        def check(user: str, password: str) -> bool:
            if not sasl(user, password):
                return False
            pool.remember(user, password)
            return True

        app = BasicAuth(app, check, realm="Strom HTTP API")
    ssl_context = None
    if settings.tls:
        from strom.config.listeners import Listener
        from strom.security.listeners import ListenerSettings
        from strom.security.tls import server_context

        ssl_context = server_context(ListenerSettings(
            settings.config, Listener(LISTENER, settings.host, settings.port, "SSL")).get)
    server = make_server(app, settings.host, settings.port, ssl_context,
                         max_connections=settings.max_connections,
                         keep_alive_s=settings.idle_ms / 1000, access_log="rest")
    _close_first(server)
    sock = socket.socket(fileno=settings.handoff.fd)
    sweeper = asyncio.get_running_loop().create_task(run_periodically(60, pool.close_idle))
    try:
        await server.serve(sockets=[sock])
    finally:
        sweeper.cancel()
        await asyncio.to_thread(pool.close)


def _close_first(server: uvicorn.Server) -> None:
    """On shutdown, end the event streams and close the share consumers (releasing what they
    hold) before uvicorn waits for open connections: a stream never ends by itself."""
    from strom.rest import share, sse

    shutdown = server.shutdown

    async def closing_shutdown(sockets: list[socket.socket] | None = None) -> None:
        sse.stop_all()
        await share.close_all()
        await shutdown(sockets=sockets)

    server.shutdown = closing_shutdown  # type: ignore[method-assign]  # uvicorn has no hook


def main() -> None:
    line = start_child("strom.rest", "rest.listeners set")
    settings = RestSettings.of(Handoff.from_line(line))
    watch_parent(lambda: os.kill(os.getpid(), signal.SIGTERM))  # uvicorn stops gracefully on it
    import uvloop

    uvloop.run(serve(settings))

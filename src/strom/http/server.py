"""Serving an ASGI app (the web console, the schema registry) with uvicorn (h11: no
hand-written HTTP parsing), hardened for a port that may face slow or hostile clients.

uvicorn closes idle keep-alive connections but waits forever for a request's head. Here a
connection that has not sent a complete request head `HEAD_TIMEOUT_S` after it opened (or its
keep-alive idle time after its previous response) is closed, so stalled clients cannot pile up;
past `max_connections`, uvicorn answers 503.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

import uvicorn
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from strom.http.access import AccessLog

HEAD_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 200


class HeadDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request head."""

    _head_timer: asyncio.TimerHandle | None = None
    idle_s = HEAD_TIMEOUT_S  # between requests: how long a kept-alive connection may idle

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]  # a stream transport, as in uvicorn's own
        super().connection_made(transport)
        self._arm()

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self.cycle is not cycle and self._head_timer is not None:  # a request head arrived
            self._head_timer.cancel()
            self._head_timer = None

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm(max(self.idle_s, HEAD_TIMEOUT_S))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _arm(self, seconds: float = HEAD_TIMEOUT_S) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        self._head_timer = self.loop.call_later(seconds, self._head_timeout)

    def _head_timeout(self) -> None:
        self._head_timer = None
        in_request = self.cycle is not None and not self.cycle.response_complete
        if in_request or self.transport.is_closing():
            return
        self.transport.close()


def make_server(app: ASGIApp, host: str, port: int,
                ssl_context: ssl.SSLContext | None = None, *,
                max_connections: int = MAX_CONNECTIONS, keep_alive_s: float = 5.0,
                access_log: str | None = None) -> uvicorn.Server:
    """The server; with `ssl_context` (built from the broker's ssl.* settings, as a
    listener's) it serves HTTPS; with `access_log` (the listener's name) it logs each request
    (`strom.http.access`)."""
    if access_log is not None:
        app = AccessLog(app, access_log)
    protocol = type("HeadDeadlineH11", (HeadDeadlineH11,), {"idle_s": keep_alive_s})
    config = uvicorn.Config(app, host=host, port=port, http=protocol, log_level="warning",
                            access_log=False, server_header=False, proxy_headers=False,
                            lifespan="off", limit_concurrency=max_connections,
                            timeout_keep_alive=max(1, round(keep_alive_s)))
    if ssl_context is not None:
        config.load()  # uvicorn builds its own context only from files: ours replaces it
        config.ssl = ssl_context
    return uvicorn.Server(config)


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts so that a taken or foreign address is
    one clear error (OSError) and port 0 tells which port it got."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock

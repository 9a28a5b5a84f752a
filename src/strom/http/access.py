"""One access log line per HTTP request, for every Strom HTTP listener (the console, the schema
registry, the HTTP API): method, path, status, response bytes, duration, user and client address,
to the logger ``strom.http.access.<listener>`` at INFO (raise that logger's level to silence it).

A streamed response (a produce stream, an event stream) is logged when it ends, with its total.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class AccessLog:
    def __init__(self, app: ASGIApp, listener: str) -> None:
        self.app = app
        self.log = logging.getLogger(f"strom.http.access.{listener}")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0
        sent = 0

        async def counting(message: Message) -> None:
            nonlocal status, sent
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                sent += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        finally:
            state: dict[str, Any] = scope.get("state") or {}
            client = scope.get("client")
            path = scope.get("path", "")
            if scope.get("query_string"):
                path += "?" + scope["query_string"].decode("latin-1")
            self.log.info("%s %s %d %d bytes %.1f ms user=%s client=%s",
                          scope.get("method", "?"), path[:500], status, sent,
                          (time.perf_counter() - started) * 1000, state.get("user") or "-",
                          f"{client[0]}:{client[1]}" if client else "-")

"""Path segments that hold a slash. A Kafka group id may contain '/', which a URL carries as
%2F inside one segment; the ASGI server decodes it into the path before routing, where it
would split the segment. `EncodedSegments` has the routes match the path with %2F (and %25,
so that a decoded '%' is never ambiguous) kept encoded, and a parameter declared as
``{name:segment}`` is decoded once matched."""

from __future__ import annotations

import re
from urllib.parse import quote, unquote

from starlette.convertors import Convertor, register_url_convertor
from starlette.types import ASGIApp, Receive, Scope, Send

_KEPT = re.compile(r"(%2[fF]|%25)")


class SegmentConvertor(Convertor[str]):
    regex = "[^/]+"

    def convert(self, value: str) -> str:
        return unquote(value)

    def to_string(self, value: str) -> str:
        return quote(value, safe="")


register_url_convertor("segment", SegmentConvertor())


def routing_path(raw_path: bytes) -> str:
    """The path as the routes see it: percent-decoded, except %2F and %25."""
    parts = _KEPT.split(raw_path.decode("latin-1"))
    return "".join(part.upper() if i % 2 else unquote(part) for i, part in enumerate(parts))


class EncodedSegments:
    """ASGI middleware: route on `routing_path` when the request's path encodes a slash or a
    percent sign (otherwise the server's decoded path is the same)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and (b"%2f" in raw.lower() or b"%25" in raw):
            scope = {**scope, "path": routing_path(raw.split(b"?", 1)[0])}
        await self.app(scope, receive, send)

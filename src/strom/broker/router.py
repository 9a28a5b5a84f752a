"""Routes requests to handlers by API key; ApiVersions is derived from what is registered.

A handler is a function marked with `@handles(ApiKey.X, min, max)`. Generic handlers receive the
decoded request (a Struct from the schema codec) and return a mapping that the response codec
encodes for the request's version. Raw handlers (the hot paths) get the body bytes and return
reply bytes (or Parts) themselves.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from strom.broker.context import RequestContext
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import request_codec, response_codec, supported_versions
from strom.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersion
from strom.protocol.header import (
    decode_request_header,
    request_header_version,
    response_header_version,
)

if TYPE_CHECKING:
    from strom.broker.core import Broker

log = logging.getLogger(__name__)

HandlerFn = Callable[..., Any]


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    raw: bool


def handles(api_key: ApiKey, min_version: int, max_version: int, *, raw: bool = False):
    """Mark a function as the handler of api_key for [min_version, max_version]."""

    def mark(fn: HandlerFn) -> HandlerFn:
        fn.__strom_api__ = ApiSpec(int(api_key), min_version, max_version, raw)  # type: ignore[attr-defined]
        return fn

    return mark


@dataclass
class Route:
    spec: ApiSpec
    fn: HandlerFn


class Router:
    def __init__(self, broker: Broker, modules: list[Any]) -> None:
        self.broker = broker
        self.routes: dict[int, Route] = {}
        for module in modules:
            for _, fn in inspect.getmembers(module, callable):
                spec = getattr(fn, "__strom_api__", None)
                if spec is not None:
                    self._register(spec, fn)
        self._header_cache: dict[tuple[int, int, bool], int] = {}
        self._api_versions_replies: dict[tuple[int, int], bytes] = {}

    def _register(self, spec: ApiSpec, fn: HandlerFn) -> None:
        lo, hi = spec.min_version, spec.max_version
        if not spec.raw:  # never advertise a version the codec cannot speak
            try:
                clo, chi = supported_versions(spec.api_key)
            except UnsupportedVersion:
                return
            lo, hi = max(lo, clo), min(hi, chi)
        self.routes[spec.api_key] = Route(ApiSpec(spec.api_key, lo, hi, spec.raw), fn)

    def api_versions(self) -> list[tuple[int, int, int]]:
        return sorted((k, r.spec.min_version, r.spec.max_version) for k, r in self.routes.items())

    def _header_version(self, api_key: int, version: int, response: bool) -> int:
        key = (api_key, version, response)
        cached = self._header_cache.get(key)
        if cached is None:
            fn = response_header_version if response else request_header_version
            cached = self._header_cache[key] = fn(api_key, version)
        return cached

    def response_header(self, api_key: int, version: int, correlation_id: int) -> bytes:
        if self._header_version(api_key, version, True) >= 1:
            return correlation_id.to_bytes(4, "big", signed=True) + b"\x00"
        return correlation_id.to_bytes(4, "big", signed=True)

    def dispatch(self, conn: Any, api_key: int, version: int, correlation_id: int,
                 frame: bytearray) -> Any:
        route = self.routes.get(api_key)
        if route is None:
            raise ProtocolError(f"unknown or unsupported api key {api_key}")
        spec = route.spec
        if not spec.min_version <= version <= spec.max_version:
            if api_key == ApiKey.API_VERSIONS:
                return self._unsupported_api_versions()
            raise ProtocolError(f"unsupported version {version} of api key {api_key}")
        header, pos = decode_request_header(memoryview(frame), 0,
                                            self._header_version(api_key, version, False))
        ctx = RequestContext(api_key, version, correlation_id, header.client_id, conn.peer,
                                 conn.cid)
        body = memoryview(frame)[pos:]
        if spec.raw:
            return route.fn(self.broker, ctx, body)
        request, _ = request_codec(api_key, version).decode(body)
        result = route.fn(self.broker, ctx, request)
        codec = response_codec(api_key, version)
        if isinstance(result, Awaitable):
            return self._finish(result, codec)
        return None if result is None else codec.encode(result)

    async def _finish(self, pending: Awaitable[Any], codec: Any) -> bytes | None:
        result = await pending
        return None if result is None else codec.encode(result)

    def _unsupported_api_versions(self) -> bytes:
        """Kafka answers an ApiVersions version it lacks in v0 format, listing what it has."""
        return self.api_versions_reply(0, ErrorCode.UNSUPPORTED_VERSION)

    def api_versions_reply(self, version: int, error_code: int = ErrorCode.NONE) -> bytes:
        """The encoded ApiVersions body. Every client opens each connection with ApiVersions and
        the routes never change after start-up, so each (version, error) is encoded once."""
        key = (version, error_code)
        reply = self._api_versions_replies.get(key)
        if reply is None:
            reply = self._api_versions_replies[key] = response_codec(
                ApiKey.API_VERSIONS, version
            ).encode({
                "error_code": error_code,
                "api_keys": [
                    {"api_key": k, "min_version": lo, "max_version": hi}
                    for k, lo, hi in self.api_versions()
                ],
                "throttle_time": 0,
            })
        return reply

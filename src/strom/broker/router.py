"""Routes requests to handlers by API key; ApiVersions is derived from what is registered.

A handler is a function marked with `@handles(ApiKey.X, min, max)`, called as
``handler(broker, ctx, request)``. Generic handlers receive the decoded request (a Struct from
the schema codec, with every field of the API: see `strom.broker.requests`) and return a
mapping that the response codec encodes for the request's version. Raw handlers (the hot
paths) get the body bytes and return reply bytes (or Parts) themselves. Either may return an
awaitable of its reply. A generic reply's error codes that its version predates are rewritten
here (`strom.protocol.error_versions`); raw handlers do that themselves.

Every request passes `Router.dispatch`, which is also the one place where request hooks run
(`RequestHook`): authorization, quotas and metrics plug in there, not in the handlers. The
handlers of coordinator APIs are wrapped once, at registration, so that their replies wait
until the coordinator state they rest on is replicated (`strom.broker.commit_gate`).
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol

from strom.broker.commit_gate import COMMITTED_APIS, answered_once_committed
from strom.broker.context import CloseConnection, Parts, RequestContext, Throttle
from strom.broker.requests import complete_request
from strom.cluster.features import api_versions_features
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Codec, request_codec, response_codec, supported_versions
from strom.protocol.error_versions import downgrade_errors, needs_downgrade
from strom.protocol.errors import ErrorCode, ProtocolError, UnsupportedVersion
from strom.protocol.header import (
    decode_request_header,
    request_header_version,
    response_header_version,
)
from strom.security.session import Session

if TYPE_CHECKING:
    from strom.broker.core import Broker

log = logging.getLogger(__name__)

Reply = bytes | Parts | None
# (broker, ctx, decoded request or body view) -> a reply, a mapping to encode, or an awaitable
HandlerFn = Callable[..., Any]

API_VERSIONS_MAX = 4


class Connection(Protocol):
    """What the router reads from the connection a request came on."""

    peer: str
    cid: int
    session: Session | None
    throttle: Throttle


class RequestHook(Protocol):
    """Runs around every request the router dispatches, in the order the hooks were given.

    This is where authorization, quotas and metrics plug in: one place per request instead of
    one per handler. `before` sees the request's context before its handler runs; it returns
    None to let the request through, or an error to refuse it (it may also raise
    `CloseConnection`). A refused request of a generic API whose response has a top-level
    ``error_code`` is answered with that error; any other refused request closes the
    connection. (An authorizer will later need per-API error responses, as Kafka's
    ``AbstractRequest.getErrorResponse``: per-partition or per-resource errors; the refusal
    path in `Router._refuse` is where that mapping will live.) `after` runs once the reply is
    ready (before it is written), with the seconds spent since the request was dispatched,
    also when the handler raised. Hooks run on the event loop and must not block.

    With no hooks (the default) the router does nothing extra per request.
    """

    def before(self, ctx: RequestContext) -> ErrorCode | None: ...

    def after(self, ctx: RequestContext, elapsed_s: float) -> None: ...


@dataclass(frozen=True)
class ApiSpec:
    api_key: int
    min_version: int
    max_version: int
    raw: bool


def handles(api_key: ApiKey, min_version: int, max_version: int, *,
            raw: bool = False) -> Callable[[HandlerFn], HandlerFn]:
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
    def __init__(self, broker: Broker, modules: Iterable[ModuleType],
                 hooks: Sequence[RequestHook] = ()) -> None:
        self.broker = broker
        self.hooks = tuple(hooks)
        self.routes: dict[int, Route] = {}
        self._register(ApiSpec(ApiKey.API_VERSIONS, 0, API_VERSIONS_MAX, True), self._api_versions)
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
        if spec.api_key in COMMITTED_APIS and not spec.raw:
            fn = answered_once_committed(fn)  # coordinator replies wait for replication
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

    def dispatch(self, conn: Connection, api_key: int, version: int, correlation_id: int,
                 frame: bytearray) -> Reply | Awaitable[Reply]:
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
        session = conn.session
        assert session is not None
        ctx = RequestContext(api_key, version, correlation_id, header.client_id, conn.peer,
                             conn.cid, session, conn.throttle, conn.on_close)
        body = memoryview(frame)[pos:]
        if self.hooks:
            return self._hooked(route, ctx, body)
        return self._call(route, ctx, body)

    def _call(self, route: Route, ctx: RequestContext,
              body: memoryview) -> Reply | Awaitable[Reply]:
        if route.spec.raw:
            return route.fn(self.broker, ctx, body)
        api_key, version = ctx.api_key, ctx.api_version
        request, _ = request_codec(api_key, version).decode(body)
        complete_request(api_key, version, request)
        result = route.fn(self.broker, ctx, request)
        codec = response_codec(api_key, version)
        if isinstance(result, Awaitable):
            return self._finish(result, codec, api_key, version)
        if result is None:
            return None
        if needs_downgrade(api_key, version):  # codes this version predates (error_versions)
            result = downgrade_errors(api_key, version, result)
        return codec.encode(result)

    async def _finish(self, pending: Awaitable[Any], codec: Codec, api_key: int,
                      version: int) -> bytes | None:
        result = await pending
        if result is None:
            return None
        if needs_downgrade(api_key, version):
            result = downgrade_errors(api_key, version, result)
        return codec.encode(result)

    # -- hooks ------------------------------------------------------------------------------

    def _hooked(self, route: Route, ctx: RequestContext,
                body: memoryview) -> Reply | Awaitable[Reply]:
        started = time.monotonic()
        ran: list[RequestHook] = []
        try:
            for hook in self.hooks:
                ran.append(hook)
                refused = hook.before(ctx)
                if refused is not None:
                    reply: Reply | Awaitable[Reply] = self._refuse(route, ctx, refused)
                    break
            else:
                reply = self._call(route, ctx, body)
        except BaseException:
            self._after(ran, ctx, started)
            raise
        if isinstance(reply, Awaitable):
            return self._finish_hooked(reply, ran, ctx, started)
        self._after(ran, ctx, started)
        return reply

    async def _finish_hooked(self, pending: Awaitable[Reply], ran: list[RequestHook],
                             ctx: RequestContext, started: float) -> Reply:
        try:
            return await pending
        finally:
            self._after(ran, ctx, started)

    @staticmethod
    def _after(ran: list[RequestHook], ctx: RequestContext, started: float) -> None:
        elapsed = time.monotonic() - started
        for hook in reversed(ran):
            try:
                hook.after(ctx, elapsed)
            except Exception:
                log.exception("request hook %r failed after %s", hook, ApiKey(ctx.api_key).name)

    def error_reply(self, api_key: int, version: int, error: ErrorCode) -> bytes | None:
        """A response of the request's own type carrying ``error`` in its top-level
        ``error_code``, or None when the API has none (or the version is not served)."""
        route = self.routes.get(api_key)
        if route is None or not route.spec.min_version <= version <= route.spec.max_version:
            return None
        try:
            codec = response_codec(api_key, version)
        except UnsupportedVersion:
            return None
        if any(f.name == "error_code" for f in codec.schema.fields):
            return codec.encode({"error_code": int(error)})
        return None

    def _refuse(self, route: Route, ctx: RequestContext, error: ErrorCode) -> bytes:
        """The reply to a request a hook refused: the error in the response's top-level
        ``error_code`` where the API has one; otherwise the connection is closed."""
        if not route.spec.raw:
            reply = self.error_reply(ctx.api_key, ctx.api_version, error)
            if reply is not None:
                return reply
        log.info("closing connection %d: %s v%d refused with %s", ctx.connection_id,
                 ApiKey(ctx.api_key).name, ctx.api_version, ErrorCode(error).name)
        raise CloseConnection()

    # -- ApiVersions ------------------------------------------------------------------------

    def _api_versions(self, broker: Broker, ctx: RequestContext, body: memoryview) -> bytes:
        """ApiVersions: exactly what this router has handlers for, and the feature levels
        (`strom.cluster.features`), encoded once."""
        error = _api_versions_error(ctx, body)
        if error:
            return response_codec(ApiKey.API_VERSIONS, ctx.api_version).encode(
                {"error_code": int(error), "api_keys": [], "throttle_time": 0})
        return self.api_versions_reply(ctx.api_version)

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
                **(api_versions_features(version) if error_code == ErrorCode.NONE else {}),
            })
        return reply


# Kafka's pattern for client_software_name and client_software_version (v3+, KIP-511)
_software_name = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?").fullmatch


def _api_versions_error(ctx: RequestContext, body: memoryview) -> ErrorCode:
    """NONE, or the error an ApiVersions request is answered with (without the API list), as
    Kafka's ApiVersionsRequest.isValid. A malformed body raises ProtocolError: the connection
    closes."""
    request, _ = request_codec(ApiKey.API_VERSIONS, ctx.api_version).decode(body)
    if ctx.api_version >= 3 and not (_software_name(request.client_software_name)
                                     and _software_name(request.client_software_version)):
        return ErrorCode.INVALID_REQUEST
    return ErrorCode.NONE

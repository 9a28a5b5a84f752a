"""Routes requests to handlers by API key; ApiVersions is derived from what is registered.

A handler is a function marked with `@handles(ApiKey.X, min, max)`, called as
``handler(broker, ctx, request)``. Generic handlers receive the decoded request (a Struct from
the schema codec, with every field of the API: see `strom.broker.requests`) and return a
mapping that the response codec encodes for the request's version. Raw handlers (the hot
paths) get the body bytes and return reply bytes (or Parts) themselves. Either may return an
awaitable of its reply. A generic reply's error codes that its version predates are rewritten
here (`strom.protocol.error_versions`); raw handlers do that themselves.

Every request passes `Router.dispatch`, which is also the one place where request hooks run
(`RequestHook`): what applies to every request alike plugs in there, not in the handlers —
`strom broker` installs the request quota (request_percentage, `strom.broker.quotas`) and,
with metrics on, Kafka's request metrics (`strom.broker.metrics`). Authorization stays in the
handlers (`strom.broker.authz`): its answers are per topic, group or transactional id, in the
response's own fields, which a hook in front of the handler cannot give. The
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
from strom.broker.context import CloseConnection, Parts, RequestContext, RequestTimes, Throttle
from strom.broker.requests import complete_request
from strom.cluster.features import api_versions_features
from strom.protocol.api_keys import ApiKey
from strom.protocol.codec import Codec, request_codec, response_codec, supported_versions
from strom.protocol.error_versions import downgrade_errors, needs_downgrade
from strom.protocol.errors import ErrorCode, KafkaError, ProtocolError, UnsupportedVersion
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

    cid: int
    session: Session | None
    throttle: Throttle
    on_close: list[Callable[[], None]]
    times: RequestTimes | None  # the request's phase times; kept when the router has hooks

    @property
    def peer(self) -> str: ...


class RequestHook:
    """Runs around every request the router dispatches: what applies to every request alike
    (the request quota, the request metrics), written once instead of once per handler.

    A hook overrides the methods it needs; the router calls only those. Each gets the
    request's context and its `RequestTimes` (how far it got, and when):

    - `before`, in the order the hooks were given, as the request is dispatched: None lets it
      through, an error refuses it (answered in the response's top-level ``error_code`` where
      a generic API has one, else the connection is closed); it may also raise
      `CloseConnection`. The hooks after a refusing one are not asked.
    - `local_done`, in order, once the handler returned (``times.local_done``): its own work
      is done, though an awaited reply may still be coming; also for a refused request.
    - `after`, in reverse order, once per dispatched request, when the connection is done with
      it: ``times.sent`` is set if the reply was handed to the transport (or there was none to
      send) and 0.0 if the request failed, was refused by closing, or the connection went.

    Hooks run on the event loop and must not block; an exception from `local_done` or `after`
    is logged and the request goes on. With no hooks the router does nothing extra per request.
    """

    __slots__ = ()

    def before(self, ctx: RequestContext, times: RequestTimes) -> ErrorCode | None:
        return None

    def local_done(self, ctx: RequestContext, times: RequestTimes) -> None:
        pass

    def after(self, ctx: RequestContext, times: RequestTimes) -> None:
        pass


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
        fn.__strom_api__ = ApiSpec(int(api_key), min_version, max_version, raw)  # type: ignore[attr-defined]  # read back by the router
        return fn

    return mark


@dataclass
class Route:
    spec: ApiSpec
    fn: HandlerFn


class Forwarder(Protocol):
    """Sends some requests elsewhere (a KRaft broker's admin requests go to the active
    controller, strom.broker.kraft_cluster): `forward` returns the reply body to await, or
    None when the request is to be handled here."""

    apis: frozenset[int]

    def forward(self, ctx: RequestContext, body: memoryview) -> Awaitable[bytes] | None: ...


class Router:
    def __init__(self, broker: Broker, modules: Iterable[ModuleType],
                 hooks: Sequence[RequestHook] = (), *,
                 forwarder: Forwarder | None = None) -> None:
        self.broker = broker
        self.forwarder = forwarder
        self.hooks = tuple(hooks)
        # each point's hooks: only those that override it, so a point no hook uses costs nothing
        self._before = _overriding(self.hooks, "before")
        self._local_done = _overriding(self.hooks, "local_done")
        self._after = tuple(reversed(_overriding(self.hooks, "after")))
        # Only `after` sees a request's arrival, reply and send, so only for `after` hooks do
        # connections keep times; the other points get these, stamped from dispatch on.
        self.keeps_times = bool(self._after)
        self._own_times = RequestTimes()
        self.routes: dict[int, Route] = {}
        self._register(ApiSpec(ApiKey.API_VERSIONS, 0, API_VERSIONS_MAX, True), self._api_versions)
        for module in modules:
            for _, fn in inspect.getmembers(module, callable):
                spec = getattr(fn, "__strom_api__", None)
                if spec is not None:
                    self._register(spec, fn)
        self._header_cache: dict[tuple[int, int, bool], int] = {}
        self._api_versions_replies: dict[tuple[int, int, int, int], bytes] = {}
        # an ApiVersions version we lack, as the hooks see it (`dispatch`)
        self._unsupported_route = Route(ApiSpec(ApiKey.API_VERSIONS, 0, API_VERSIONS_MAX, True),
                                        self._unsupported_api_versions_handler)

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
        session = conn.session
        assert session is not None
        if not spec.min_version <= version <= spec.max_version:
            if api_key != ApiKey.API_VERSIONS:
                raise ProtocolError(f"unsupported version {version} of api key {api_key}")
            if not self.hooks:
                return self._unsupported_api_versions()
            # answered (in v0) like any request, so the hooks see it; its header is not parsed
            ctx = RequestContext(api_key, version, correlation_id, _raw_client_id(frame),
                                 conn.peer, conn.cid, session, conn.throttle, conn.on_close)
            return self._hooked(self._unsupported_route, ctx, memoryview(frame), conn.times)
        header, pos = decode_request_header(memoryview(frame), 0,
                                            self._header_version(api_key, version, False))
        ctx = RequestContext(api_key, version, correlation_id, header.client_id, conn.peer,
                             conn.cid, session, conn.throttle, conn.on_close)
        body = memoryview(frame)[pos:]
        if self.hooks:
            return self._hooked(route, ctx, body, conn.times)
        return self._call(route, ctx, body)

    def _call(self, route: Route, ctx: RequestContext,
              body: memoryview) -> Reply | Awaitable[Reply]:
        if self.forwarder is not None and ctx.api_key in self.forwarder.apis:
            forwarded = self.forwarder.forward(ctx, body)
            if forwarded is not None:
                return self._forwarded(forwarded, ctx)
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

    async def _forwarded(self, pending: Awaitable[bytes], ctx: RequestContext) -> bytes:
        """The reply of a forwarded request; if nobody could answer it, the request's error
        reply (REQUEST_TIMED_OUT) where the API has a top-level error code, else the
        connection is closed and the client tries again."""
        try:
            return await pending
        except KafkaError as exc:
            reply = self.error_reply(ctx.api_key, ctx.api_version, exc.code)
            if reply is None:
                log.info("closing connection %d: %s could not be forwarded: %s",
                         ctx.connection_id, ApiKey(ctx.api_key).name, exc.message)
                raise CloseConnection() from None
            return reply

    async def _finish(self, pending: Awaitable[Any], codec: Codec, api_key: int,
                      version: int) -> bytes | None:
        result = await pending
        if result is None:
            return None
        if needs_downgrade(api_key, version):
            result = downgrade_errors(api_key, version, result)
        return codec.encode(result)

    # -- hooks ------------------------------------------------------------------------------

    def _hooked(self, route: Route, ctx: RequestContext, body: memoryview,
                times: RequestTimes | None) -> Reply | Awaitable[Reply]:
        """`_call` with the hooks' `before` and `local_done` around it; the connection runs
        their `after` (`done`) once it is through with the reply."""
        if times is None:  # no hook has `after`: times from dispatch to local_done are enough
            times = self._own_times
        times.ctx = ctx
        times.dispatched = time.monotonic()
        reply: Reply | Awaitable[Reply]
        for before in self._before:
            refused = before(ctx, times)
            if refused is not None:
                reply = self._refuse(route, ctx, refused)
                break
        else:
            reply = self._call(route, ctx, body)
        times.local_done = time.monotonic()
        for local_done in self._local_done:
            try:
                local_done(ctx, times)
            except Exception:
                log.exception("request hook %r failed on %s", local_done,
                              ApiKey(ctx.api_key).name)
        return reply

    def done(self, times: RequestTimes) -> None:
        """The connection is through with a request (``times.sent``: its reply was handed
        over; 0.0: it failed or the connection went): the hooks' `after`. Nothing for a
        request the router never dispatched."""
        ctx = times.ctx
        if ctx is None:
            return
        for after in self._after:
            try:
                after(ctx, times)
            except Exception:
                log.exception("request hook %r failed after %s", after, ApiKey(ctx.api_key).name)

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

    def _unsupported_api_versions_handler(self, broker: Broker, ctx: RequestContext,
                                          body: memoryview) -> bytes:
        return self._unsupported_api_versions()

    def _unsupported_api_versions(self) -> bytes:
        """Kafka answers an ApiVersions version it lacks in v0 format, listing what it has."""
        return self.api_versions_reply(0, ErrorCode.UNSUPPORTED_VERSION)

    def api_versions_reply(self, version: int, error_code: int = ErrorCode.NONE) -> bytes:
        """The encoded ApiVersions body. Every client opens each connection with ApiVersions and
        the routes never change after start-up, so each (version, error) is encoded once."""
        key = (version, error_code, *self.features_state())
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
                **(self.api_versions_features(version) if error_code == ErrorCode.NONE else {}),
            })
        return reply

    def features_state(self) -> tuple[int, int]:
        """What the finalized features depend on: where the levels last changed and the
        quorum's kraft.version (a new value: a new ApiVersions answer)."""
        image = getattr(self.broker, "image", None)
        kraft = getattr(self.broker, "kraft_version", None)
        return (image.features_epoch if image is not None else -1,
                kraft() if callable(kraft) else -1)

    def api_versions_features(self, version: int) -> dict[str, object]:
        """The feature fields of an ApiVersions answer (a broker's; a controller has its own):
        the levels a KRaft cluster finalized in its metadata log, over the defaults."""
        image = getattr(self.broker, "image", None)
        if image is None:
            return api_versions_features(version)
        kraft = getattr(self.broker, "kraft_version", None)  # a KRaft node's, as Kafka's show
        return api_versions_features(version, image.finalized_features, image.features_epoch,
                                     kraft() if callable(kraft) else None)


def _overriding(hooks: tuple[RequestHook, ...],
                name: str) -> tuple[Callable[[RequestContext, RequestTimes], Any], ...]:
    """The bound ``name`` methods of the hooks that override `RequestHook`'s (no-op) one."""
    base = getattr(RequestHook, name)
    return tuple(getattr(hook, name) for hook in hooks
                 if getattr(type(hook), name, base) is not base)


def _raw_client_id(frame: bytearray) -> str:
    """The client id of a request header read from its bytes (a nullable string after api
    key, version and correlation id, in every header version with one); "" when absent."""
    if len(frame) < 10:
        return ""
    size = int.from_bytes(frame[8:10], "big", signed=True)
    if size <= 0 or len(frame) < 10 + size:
        return ""
    return frame[10:10 + size].decode("utf-8", "replace")


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

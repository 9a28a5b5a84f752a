"""The console's web app (Starlette): server-rendered pages, a JSON API, inline SVG charts.

Every Kafka call blocks, so it runs in a worker thread, at most `KAFKA_CALLS` at a time: a flood
of requests queues here instead of flooding the cluster, and the event loop keeps serving.
The app answers only what it serves: GET and HEAD (405 otherwise), its routes and its own static
files (no directory listing), and errors as a short page without a traceback.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from strom.console.cluster import (
    ClusterInfo,
    GroupInfo,
    GroupSummary,
    NotFound,
    SourceError,
    TopicInfo,
    human_bytes,
)
from strom.console.records import RecordView, iso_time, parse_time
from strom.console.sampler import History, Point
from strom.console.schemas import RegistryReader, TopicSchemas
from strom.console.svg import Chart, line_chart

HERE = Path(__file__).parent
KAFKA_CALLS = 4  # Kafka calls running at once, across all requests
MAX_LAG_LINES = 6  # groups drawn on one lag chart
INT32_MAX, INT64_MAX = 2**31 - 1, 2**63 - 1
log = logging.getLogger("strom.console")
T = TypeVar("T")

SECURITY_HEADERS = [
    # Records are shown as text and no script is ever needed: forbid them outright.
    (b"content-security-policy", b"default-src 'none'; style-src 'self'; img-src 'self'; "
                                 b"form-action 'self'; base-uri 'none'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"cache-control", b"no-store"),
]


class Source(Protocol):
    """What the pages read (`strom.console.kafka.KafkaSource`, or a stand-in in tests)."""

    def cluster(self) -> ClusterInfo: ...
    def topics(self) -> list[TopicInfo]: ...
    def topic(self, name: str) -> TopicInfo: ...
    def topic_configs(self, name: str) -> dict[str, str]: ...
    def groups(self) -> list[GroupSummary]: ...
    def group(self, group_id: str) -> GroupInfo: ...
    def recent(self, topic: TopicInfo) -> list[RecordView]: ...
    def from_offset(self, topic: TopicInfo, partition: int, offset: int) -> list[RecordView]: ...
    def from_time(self, topic: TopicInfo, timestamp_ms: int) -> list[RecordView]: ...


class BadRequest(Exception):
    """A query parameter that cannot be read: the page answers 400 with the reason."""


class GetOnly:
    """ASGI middleware: 405 for any method but GET and HEAD, and the security headers on every
    response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse("Method Not Allowed", 405, headers={"Allow": "GET, HEAD"})
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


def _num(value: int | float | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    if isinstance(value, float):
        value = int(value)
    return f"{value:,}"


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["num"] = _num
    env.filters["bytes"] = human_bytes
    return Jinja2Templates(env=env)


def _jsonable(value: Any) -> Any:
    """Dataclasses as dicts with their computed properties (messages, size, lag, ...)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        for name, attr in vars(type(value)).items():
            if isinstance(attr, property):
                out[name] = _jsonable(getattr(value, name))
        return out
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _int_param(request: Request, name: str, maximum: int) -> int | None:
    """A whole number from 0 to `maximum` (Kafka's int32 or int64), or None when not given."""
    text = request.query_params.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be a whole number, not {text[:40]!r}") from None
    if not 0 <= value <= maximum:
        raise BadRequest(f"{name} must be from 0 to {maximum}")
    return value


def create_app(source: Source, history: History, *, title: str = "Strom console",
               registry: RegistryReader | None = None, rest_url: str | None = None) -> Starlette:
    templates = _templates()
    limiter = anyio.CapacityLimiter(KAFKA_CALLS)

    async def call(fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(functools.partial(fn, *args), limiter=limiter)

    def page(request: Request, name: str, status_code: int = 200, **context: Any) -> Response:
        context.setdefault("title", title)
        context.setdefault("now", iso_time(int(time.time() * 1000)))
        context.setdefault("interval", history.interval)
        context.setdefault("rest_url", rest_url)
        return templates.TemplateResponse(request, name, context, status_code=status_code)

    def in_out_charts() -> list[Chart]:
        now = time.time()
        return [line_chart("Records in, all topics", "records/s", {"in": history.in_total()}, now),
                line_chart("Bytes in, all topics (growth of the logs' sizes)", "bytes/s",
                           {"bytes in": history.in_bytes_total()}, now),
                line_chart("Records out, all groups (estimated from committed offsets)",
                           "records/s", {"out": history.out_total()}, now)]

    def lag_chart(groups: list[str]) -> Chart:
        series: dict[str, list[Point]] = {g: history.lag(g) for g in groups[:MAX_LAG_LINES]}
        return line_chart("Consumer group lag", "records", series, time.time())

    async def overview(request: Request) -> Response:
        cluster = await call(source.cluster)
        return page(request, "overview.html", cluster=cluster, charts=in_out_charts())

    async def topics(request: Request) -> Response:
        items = await call(source.topics)
        internal = request.query_params.get("internal") == "1"
        shown = [t for t in items if internal or not t.internal]
        return page(request, "topics.html", topics=shown, internal=internal)

    async def read_records(request: Request, info: TopicInfo) -> tuple[str, list[RecordView]]:
        offset = _int_param(request, "offset", INT64_MAX)
        when = request.query_params.get("time", "").strip()
        if offset is not None:
            partition = _int_param(request, "partition", INT32_MAX) or 0
            found = await call(source.from_offset, info, partition, offset)
            return f"from offset {offset} of partition {partition}", found
        if when:
            try:
                ms = parse_time(when)
            except ValueError as exc:
                raise BadRequest(str(exc)) from None
            found = await call(source.from_time, info, ms)
            return f"at or after {iso_time(ms)}", found
        return "newest", await call(source.recent, info)

    async def topic_schemas(name: str) -> TopicSchemas | None:
        if registry is None:
            return None
        configs = await call(source.topic_configs, name)
        return await call(registry.for_topic, name, configs)

    async def topic(request: Request) -> Response:
        info = await call(source.topic, request.path_params["name"])
        search, records = await read_records(request, info)
        chart = line_chart(f"Records in, {info.name}", "records/s",
                           {info.name: history.in_topic(info.name)}, time.time())
        cluster = await call(source.cluster) if rest_url else None  # for the v3 records URL
        return page(request, "topic.html", topic=info, records=records, search=search,
                    chart=chart, query=request.query_params,
                    schemas=await topic_schemas(info.name),
                    cluster_id=cluster.cluster_id if cluster is not None else None)

    async def groups(request: Request) -> Response:
        items = await call(source.groups)
        return page(request, "groups.html", groups=items,
                    chart=lag_chart([g.group_id for g in sorted(items, key=lambda g: -g.lag)]))

    async def group(request: Request) -> Response:
        info = await call(source.group, request.path_params["group_id"])
        now = time.time()
        charts = [line_chart(f"Lag, {info.group_id}", "records",
                             {info.group_id: history.lag(info.group_id)}, now),
                  line_chart(f"Records out, {info.group_id} (estimated from committed offsets)",
                             "records/s", {info.group_id: history.out_group(info.group_id)}, now)]
        return page(request, "group.html", group=info, charts=charts)

    async def charts(request: Request) -> Response:
        return page(request, "charts.html", charts=[*in_out_charts(), lag_chart(history.groups())],
                    samples=len(history.samples()), capacity=history.capacity)

    async def api_cluster(request: Request) -> Response:
        return JSONResponse(_jsonable(await call(source.cluster)))

    async def api_topics(request: Request) -> Response:
        return JSONResponse(_jsonable(await call(source.topics)))

    async def api_topic(request: Request) -> Response:
        info = await call(source.topic, request.path_params["name"])
        search, records = await read_records(request, info)
        return JSONResponse({"topic": _jsonable(info), "search": search,
                             "records": _jsonable(records)})

    async def api_groups(request: Request) -> Response:
        return JSONResponse(_jsonable(await call(source.groups)))

    async def api_group(request: Request) -> Response:
        return JSONResponse(_jsonable(await call(source.group, request.path_params["group_id"])))

    async def api_history(request: Request) -> Response:
        return JSONResponse({"interval": history.interval, "capacity": history.capacity,
                             "samples": _jsonable(history.samples())})

    def is_api(request: Request) -> bool:
        return request.url.path.startswith("/api/")

    def error(request: Request, status: int, message: str) -> Response:
        if is_api(request):
            return JSONResponse({"error": message}, status_code=status)
        return page(request, "error.html", status, status=status, message=message)

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(request, 404, str(exc))

    async def unavailable(request: Request, exc: Exception) -> Response:
        return error(request, 503, str(exc))

    async def bad_request(request: Request, exc: Exception) -> Response:
        return error(request, 400, str(exc))

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        text = {404: "No such page.", 405: "Method Not Allowed"}.get(exc.status_code, exc.detail)
        return error(request, exc.status_code, text)

    async def internal_error(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed", request.method, request.url.path, exc_info=exc)
        return error(request, 500, "Internal error: the console's log has the details.")

    routes = [
        Route("/", overview), Route("/topics", topics), Route("/topics/{name}", topic),
        Route("/groups", groups), Route("/groups/{group_id:path}", group),
        Route("/charts", charts),
        Route("/api/cluster", api_cluster), Route("/api/topics", api_topics),
        Route("/api/topics/{name}", api_topic), Route("/api/groups", api_groups),
        Route("/api/groups/{group_id:path}", api_group), Route("/api/history", api_history),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    handlers = {NotFound: not_found, SourceError: unavailable, BadRequest: bad_request,
                HTTPException: http_error, Exception: internal_error}
    app = Starlette(debug=False, routes=routes, middleware=[Middleware(GetOnly)],
                    exception_handlers=handlers)
    app.router.redirect_slashes = False  # a path is served as it is, or not at all
    return app

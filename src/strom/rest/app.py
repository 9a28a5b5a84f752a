"""The HTTP API's Starlette app: each endpoint module contributes `routes(ctx)` and its OpenAPI
`PATHS`/`SCHEMAS`; errors of every kind leave as Confluent's error body."""

from __future__ import annotations

import importlib
import logging
from types import ModuleType

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from strom.http.paths import EncodedSegments
from strom.rest import openapi
from strom.rest.context import RestContext
from strom.rest.errors import RestError, error_media_type, rest_error_handler

log = logging.getLogger("strom.rest")

MODULES = (
    "strom.rest.v3.clusters",  # clusters and brokers
    "strom.rest.v3.configs",  # broker configs, every topic's (before topics: its
    # /topics/-/configs would otherwise be taken for a topic named "-")
    "strom.rest.v3.cluster_configs",  # the cluster-wide broker defaults (/broker-configs)
    "strom.rest.v3.topics",  # topics, their configs and partitions
    "strom.rest.v3.replicas",  # reassignments under way, a broker's replicas
    "strom.rest.v3.groups",  # consumer groups, consumers, lag
    "strom.rest.v3.acls",  # ACLs
    "strom.rest.v3.records",  # produce
    "strom.rest.v2.consumers",  # v2 consumer instances
    "strom.rest.share",  # Strom's own: share groups over HTTP
    "strom.rest.sse",  # Strom's own: Server-Sent Events of a topic
)


def endpoint_modules() -> list[ModuleType]:
    return [importlib.import_module(name) for name in MODULES]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return JSONResponse({"error_code": exc.status_code, "message": f"HTTP {exc.status_code} "
                         f"{exc.detail}"}, status_code=exc.status_code, headers=exc.headers,
                        media_type=error_media_type(request))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed: %r", request.method, request.url.path, exc, exc_info=exc)
    return JSONResponse({"error_code": 500, "message": "Internal Server Error"}, status_code=500,
                        media_type=error_media_type(request))


def build_app(ctx: RestContext) -> Starlette:
    modules = endpoint_modules()
    doc = openapi.document(modules, ctx.settings.basic_auth)

    async def root(request: Request) -> Response:
        return JSONResponse({})

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(doc)

    routes: list[BaseRoute] = [Route("/", root), Route("/openapi.json", openapi_json)]
    for module in modules:
        routes += module.routes(ctx)
    return Starlette(routes=routes, middleware=[Middleware(EncodedSegments)], exception_handlers={
        RestError: rest_error_handler, HTTPException: _http_error, Exception: _unexpected})

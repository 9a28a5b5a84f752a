"""Confluent Schema Registry's REST API over a `Registry`, as a Starlette app.

Paths, query parameters, bodies and error bodies are Confluent's (its API reference); what
confluent-kafka's `SchemaRegistryClient` calls is all here. On a broker that is not the registry's
writer (the leader of `_schemas`), reads are answered from its copy of the registry (see
`strom.registry.follower`) and every change is forwarded to the writer's registry, so each
broker serves the same registry; once a forwarded change is done, the copy catches up before
the answer, so a client reads its own writes from the broker it asks, and a read that finds
nothing catches the copy up first (at most a second), so a schema registered a moment ago
through another broker is found, not reported missing. Every error is a JSON body with
`error_code` and `message`: a registry error with its own code, a body that is not JSON with
400, an unknown path with 404, anything unexpected with 500 and one logged line, never a
traceback to the client.

With an access policy (the broker's ACLs), each request is checked for its user (set by the
HTTP layer's authentication): reading a subject, writing it (register, delete, its config and
mode) or administering the registry (global config and mode); lists show only what the user may
read, and an id is found only through a subject the user may read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from strom.registry import errors as err
from strom.registry.formats import FORMATS
from strom.registry.service import NewSchema, Registry, parse_version

log = logging.getLogger("strom.registry.http")

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
MAX_BODY_BYTES = 4 * 1024 * 1024  # a schema (up to the registry's limit) and its JSON framing

Handler = Callable[[Registry, Request], Awaitable[Any]]
# who may do what: (user or None, client host, "read" | "write" | "admin", subject or None)
Access = Callable[[str | None, str, str, str | None], bool]


def _user(request: Request) -> str | None:
    return request.scope.get("state", {}).get("user")


def _may(request: Request, action: str, subject: str | None) -> bool:
    access: Access | None = getattr(request.app.state, "access", None)
    host = request.client.host if request.client is not None else ""
    return access is None or access(_user(request), host, action, subject)


def _require(request: Request, action: str, subject: str | None) -> None:
    """Confluent's 40301 when the user may not (checked only with an access policy)."""
    if not _may(request, action, subject):
        what = f"subject {subject}" if subject is not None else "the registry"
        raise err.RegistryError(403, 40301, f"User {_user(request) or 'ANONYMOUS'} is denied "
                                            f"operation {action} on {what}")


def _readable_id(reg: Registry, request: Request, sid: int) -> None:
    """An id is readable when one of the subjects using it is (else it is "not found")."""
    if getattr(request.app.state, "access", None) is None:
        return
    if not any(_may(request, "read", v.subject) for v in reg.state.usages(sid, deleted=True)):
        raise err.schema_not_found(f"Schema {sid} not found")


class _Json(JSONResponse):
    media_type = CONTENT_TYPE


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def _int(raw: str, what: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise err.RegistryError(404, 404, f"HTTP 404 Not Found ({what} {raw!r})") from None


async def _body(request: Request) -> Any:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise err.RegistryError(413, 413, f"the request body is over {MAX_BODY_BYTES} bytes")
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except ValueError:
        raise err.RegistryError(400, 400, "the request body is not JSON") from None


def _subject(request: Request, action: str = "read") -> str:
    """The path's subject, once the user may `action` it."""
    subject = str(request.path_params["subject"])
    _require(request, action, subject)
    return subject


# -- the routes -----------------------------------------------------------------------------


async def root(reg: Registry, request: Request) -> Any:
    return {}


async def schema_types(reg: Registry, request: Request) -> Any:
    return sorted(FORMATS)


async def contexts(reg: Registry, request: Request) -> Any:
    return ["."]


async def list_schemas(reg: Registry, request: Request) -> Any:
    q = request.query_params
    found = reg.schemas(prefix=q.get("subjectPrefix", ""), deleted=_flag(request, "deleted"),
                        latest_only=_flag(request, "latestOnly"))
    return [s for s in found if _may(request, "read", s["subject"])]


async def schema_by_id(reg: Registry, request: Request) -> Any:
    sid = _int(request.path_params["id"], "id")
    _readable_id(reg, request, sid)
    return reg.schema_by_id(sid, request.query_params.get("subject"),
                            request.query_params.get("format"))


async def schema_text_by_id(reg: Registry, request: Request) -> Any:
    sid = _int(request.path_params["id"], "id")
    _readable_id(reg, request, sid)
    return PlainTextResponse(reg.schema_by_id(sid, request.query_params.get("subject"))["schema"])


async def schema_by_guid(reg: Registry, request: Request) -> Any:
    sid = reg.state.guids.get(str(request.path_params["guid"]))
    if sid is not None:
        _readable_id(reg, request, sid)
    return reg.schema_by_guid(str(request.path_params["guid"]))


async def id_versions(reg: Registry, request: Request) -> Any:
    found = reg.id_versions(_int(request.path_params["id"], "id"),
                            deleted=_flag(request, "deleted"))
    return [v for v in found if _may(request, "read", v["subject"])]


async def id_subjects(reg: Registry, request: Request) -> Any:
    found = reg.id_subjects(_int(request.path_params["id"], "id"),
                            deleted=_flag(request, "deleted"))
    return [s for s in found if _may(request, "read", s)]


async def subjects(reg: Registry, request: Request) -> Any:
    found = reg.subjects(deleted=_flag(request, "deleted"),
                         prefix=request.query_params.get("subjectPrefix", ""))
    return [s for s in found if _may(request, "read", s)]


async def lookup(reg: Registry, request: Request) -> Any:
    found = reg.lookup(_subject(request), NewSchema.from_json(await _body(request)),
                       normalize=_flag(request, "normalize"), deleted=_flag(request, "deleted"))
    return found.to_json()


async def delete_subject(reg: Registry, request: Request) -> Any:
    return await reg.delete_subject(_subject(request, "write"),
                                    permanent=_flag(request, "permanent"))


async def versions(reg: Registry, request: Request) -> Any:
    return reg.versions(_subject(request), deleted=_flag(request, "deleted"))


async def register(reg: Registry, request: Request) -> Any:
    body = await _body(request)
    new = NewSchema.from_json(body)
    wanted_id = body.get("id") if isinstance(body.get("id"), int) and body["id"] > 0 else None
    wanted_version = body.get("version") \
        if isinstance(body.get("version"), int) and body["version"] > 0 else None
    v = await reg.register(_subject(request, "write"), new, normalize=_flag(request, "normalize"),
                           wanted_id=wanted_id, wanted_version=wanted_version)
    return v.to_json()


async def get_version(reg: Registry, request: Request) -> Any:
    version = parse_version(request.path_params["version"])
    found = reg.version(_subject(request), version, deleted=_flag(request, "deleted"))
    return reg.version_json(found, request.query_params.get("format"))


async def get_version_schema(reg: Registry, request: Request) -> Any:
    version = parse_version(request.path_params["version"])
    v = reg.version(_subject(request), version, deleted=_flag(request, "deleted"))
    return PlainTextResponse(v.schema)


async def delete_version(reg: Registry, request: Request) -> Any:
    version = parse_version(request.path_params["version"])
    return await reg.delete_version(_subject(request, "write"), version,
                                    permanent=_flag(request, "permanent"))


async def referenced_by(reg: Registry, request: Request) -> Any:
    return reg.referenced_by(_subject(request), parse_version(request.path_params["version"]))


async def subject_metadata(reg: Registry, request: Request) -> Any:
    wanted = dict(zip(request.query_params.getlist("key"),
                      request.query_params.getlist("value"), strict=False))
    return reg.metadata_version(_subject(request), wanted,
                                deleted=_flag(request, "deleted")).to_json()


async def compatibility(reg: Registry, request: Request) -> Any:
    version = parse_version(request.path_params.get("version", "latest"))
    problems = reg.test_compatibility(_subject(request), version,
                                      NewSchema.from_json(await _body(request)),
                                      normalize=_flag(request, "normalize"))
    out: dict[str, Any] = {"is_compatible": not problems}
    if _flag(request, "verbose"):
        out["messages"] = problems
    return out


async def get_config(reg: Registry, request: Request) -> Any:
    subject = request.path_params.get("subject")
    if subject is not None:
        _require(request, "read", subject)
    return reg.config(subject, default_to_global=_flag(request, "defaultToGlobal"))


def _scope(request: Request) -> str | None:
    """The path's subject (its write needed), or None for the global scope (admin needed)."""
    subject = request.path_params.get("subject")
    _require(request, "write" if subject is not None else "admin", subject)
    return subject


async def put_config(reg: Registry, request: Request) -> Any:
    return await reg.set_config(_scope(request), await _body(request))


async def delete_config(reg: Registry, request: Request) -> Any:
    return await reg.delete_config(_scope(request))


async def get_mode(reg: Registry, request: Request) -> Any:
    subject = request.path_params.get("subject")
    if subject is not None:
        _require(request, "read", subject)
    return reg.mode(subject, default_to_global=_flag(request, "defaultToGlobal"))


async def put_mode(reg: Registry, request: Request) -> Any:
    return await reg.set_mode(_scope(request), await _body(request),
                              force=_flag(request, "force"))


async def delete_mode(reg: Registry, request: Request) -> Any:
    return await reg.delete_mode(_subject(request, "write"))


ROUTES: list[tuple[str, str, Handler]] = [
    ("/", "GET", root),
    ("/schemas", "GET", list_schemas),
    ("/schemas/types", "GET", schema_types),
    ("/schemas/ids/{id}", "GET", schema_by_id),
    ("/schemas/ids/{id}/schema", "GET", schema_text_by_id),
    ("/schemas/ids/{id}/versions", "GET", id_versions),
    ("/schemas/ids/{id}/subjects", "GET", id_subjects),
    ("/schemas/guids/{guid}", "GET", schema_by_guid),
    ("/contexts", "GET", contexts),
    ("/subjects", "GET", subjects),
    ("/subjects/{subject:path}/versions/{version}/schema", "GET", get_version_schema),
    ("/subjects/{subject:path}/versions/{version}/referencedby", "GET", referenced_by),
    ("/subjects/{subject:path}/versions/{version}", "GET", get_version),
    ("/subjects/{subject:path}/versions/{version}", "DELETE", delete_version),
    ("/subjects/{subject:path}/versions", "GET", versions),
    ("/subjects/{subject:path}/versions", "POST", register),
    ("/subjects/{subject:path}/metadata", "GET", subject_metadata),
    ("/subjects/{subject:path}", "POST", lookup),
    ("/subjects/{subject:path}", "DELETE", delete_subject),
    ("/compatibility/subjects/{subject:path}/versions/{version}", "POST", compatibility),
    ("/compatibility/subjects/{subject:path}/versions", "POST", compatibility),
    ("/config", "GET", get_config),
    ("/config", "PUT", put_config),
    ("/config", "DELETE", delete_config),
    ("/config/{subject:path}", "GET", get_config),
    ("/config/{subject:path}", "PUT", put_config),
    ("/config/{subject:path}", "DELETE", delete_config),
    ("/mode", "GET", get_mode),
    ("/mode", "PUT", put_mode),
    ("/mode/{subject:path}", "GET", get_mode),
    ("/mode/{subject:path}", "PUT", put_mode),
    ("/mode/{subject:path}", "DELETE", delete_mode),
]


FORWARDED = "x-strom-forwarded"  # a forwarded request is never forwarded again
FORWARD_TIMEOUT_S = 30.0

Leader = Callable[[], str | None]
Registries = Callable[[bool], Registry]  # the registry for a read (False) or a change (True)
Sync = Callable[[float], Awaitable[None]]  # catch the local copy up, waiting at most this long
SYNC_AFTER_FORWARD_S = 5.0  # a forwarded change waits this long at most for the local copy
SYNC_BEFORE_NOT_FOUND_S = 1.0  # a read that found nothing, before it says so
NOT_FOUND = (40401, 40402, 40403)  # subject, version, schema


async def _forward(url: str, request: Request) -> Response:
    """The request as the registry at `url` (the writer) answers it (over TLS with the
    app's `forward_tls` context: the broker's trust store)."""
    context: ssl.SSLContext | None = getattr(request.app.state, "forward_tls", None)
    body = await request.body()
    target = url.rstrip("/") + request.url.path + (f"?{request.url.query}"
                                                   if request.url.query else "")

    def call() -> tuple[int, bytes, str]:
        headers = {"Content-Type": CONTENT_TYPE, FORWARDED: "1"}
        if "authorization" in request.headers:  # the writer authenticates the user again
            headers["Authorization"] = request.headers["authorization"]
        req = urllib.request.Request(target, data=body or None, method=request.method,
                                     headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=FORWARD_TIMEOUT_S, context=context) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", CONTENT_TYPE)
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers.get("Content-Type", CONTENT_TYPE)

    try:
        status, data, media = await asyncio.to_thread(call)
    except (OSError, urllib.error.URLError) as exc:
        return _Json({"error_code": 50003, "message": f"Error while forwarding the request to "
                                                       f"the leader at {url}: {exc}"},
                     status_code=500)
    sync: Sync | None = getattr(request.app.state, "sync", None)
    if sync is not None and request.method != "GET" and status < 300:
        await sync(SYNC_AFTER_FORWARD_S)  # the copy has the change before the client hears
    return Response(data, status_code=status, media_type=media)


def _endpoint(registry: Registries, leader: Leader | None,
              handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            try:
                result = await handler(registry(request.method != "GET"), request)
            except err.RegistryError as exc:
                sync: Sync | None = getattr(request.app.state, "sync", None)
                if exc.code not in NOT_FOUND or request.method != "GET" or sync is None:
                    raise
                # a copy may trail the writer: a schema registered a moment ago through
                # another broker is found once it caught up, not reported missing
                await sync(SYNC_BEFORE_NOT_FOUND_S)
                result = await handler(registry(False), request)
        except err.RegistryError as exc:
            if exc.code == 50004 and leader is not None and FORWARDED not in request.headers:
                url = leader()
                if url is not None:
                    return await _forward(url, request)
            return _Json(exc.body(), status_code=exc.status)
        except Exception:
            log.exception("schema registry: %s %s failed", request.method, request.url.path)
            return _Json({"error_code": 500, "message": "Internal Server Error"},
                         status_code=500)
        if isinstance(result, Response):
            return result
        return _Json(result)

    return endpoint


def _not_found(request: Request, exc: Exception) -> Response:
    return _Json({"error_code": 404, "message": "HTTP 404 Not Found"}, status_code=404)


def _not_allowed(request: Request, exc: Exception) -> Response:
    return _Json({"error_code": 405, "message": "HTTP 405 Method Not Allowed"}, status_code=405)


def registry_app(registry: Registries, leader: Leader | None = None,
                 access: Access | None = None,
                 forward_tls: ssl.SSLContext | None = None, sync: Sync | None = None) -> Starlette:
    """The app; `registry(change)` gives the registry for each request (or raises
    RegistryError: not loaded yet, or 50004 on a broker that cannot answer it, whose request
    then goes to the registry at `leader()`, when it names one); `sync()` catches this broker's
    copy up after a forwarded change."""
    # one Route per path, with every method the path serves
    by_path: dict[str, dict[str, Handler]] = {}
    for path, method, handler in ROUTES:
        by_path.setdefault(path, {})[method] = handler
    routes = []
    for path, methods in by_path.items():
        endpoints = {m: _endpoint(registry, leader, h) for m, h in methods.items()}

        async def dispatch(request: Request, endpoints: dict[str, Any] = endpoints) -> Response:
            return await endpoints[request.method](request)

        routes.append(Route(path, dispatch, methods=list(methods)))
    app = Starlette(routes=routes, exception_handlers={404: _not_found, 405: _not_allowed})
    app.state.access = access
    app.state.forward_tls = forward_tls
    app.state.sync = sync
    return app

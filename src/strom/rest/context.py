"""What every endpoint reaches: the settings, the Kafka clients of the request's user, the
cluster's id, URLs for Confluent's ``metadata.self`` / ``related`` links, and request bodies
read within the configured limit."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request

from strom.rest.clients import ClientPool, UserClients
from strom.rest.errors import RestError, bad_request, not_found
from strom.rest.settings import RestSettings

CLUSTER_ID_TTL_S = 60.0


@dataclass
class RestContext:
    settings: RestSettings
    pool: ClientPool
    _cluster_id: str | None = None
    _cluster_id_at: float = field(default=-CLUSTER_ID_TTL_S)

    @staticmethod
    def user(request: Request) -> str | None:
        state = request.scope.get("state") or {}
        user = state.get("user")
        return user if isinstance(user, str) else None

    def clients(self, request: Request) -> UserClients:
        return self.pool.clients(self.user(request))

    def url(self, request: Request, path: str) -> str:
        """An absolute URL on this server, as the client addressed it (its Host header)."""
        return str(request.base_url).rstrip("/") + path

    async def cluster_id(self, request: Request) -> str:
        now = time.monotonic()
        if self._cluster_id is None or now - self._cluster_id_at > CLUSTER_ID_TTL_S:
            clients = self.clients(request)
            meta = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
            self._cluster_id = meta.cluster_id
            self._cluster_id_at = now
        assert self._cluster_id is not None
        return self._cluster_id

    async def check_cluster(self, request: Request) -> str:
        """The path's ``cluster_id``, which must be this cluster's (404 otherwise)."""
        wanted = request.path_params["cluster_id"]
        if wanted != await self.cluster_id(request):
            raise not_found(f"Cluster {wanted} cannot be found.")
        return str(wanted)

    async def read_json(self, request: Request, *, required: bool = True) -> Any:
        """The request's JSON body, at most `rest.max.request.bytes` (413 above it)."""
        limit = self.settings.max_request_bytes
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise RestError(413, f"The request body is larger than {limit} bytes "
                            "(rest.max.request.bytes)")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise RestError(413, f"The request body is larger than {limit} bytes "
                                "(rest.max.request.bytes)")
        if not body.strip():
            if required:
                raise bad_request("The request body is empty")
            return None
        try:
            return json.loads(body)
        except (ValueError, UnicodeDecodeError) as exc:
            raise bad_request(f"The request body is not valid JSON: {exc}") from None


def related(url: str) -> dict[str, str]:
    return {"related": url}


def resource_metadata(self_url: str, resource_name: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"self": self_url}
    if resource_name is not None:
        meta["resource_name"] = resource_name
    return meta


def list_body(kind: str, self_url: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    """Confluent's list envelope (``next`` is null: every list is answered in one page)."""
    return {"kind": kind, "metadata": {"self": self_url, "next": None}, "data": data}

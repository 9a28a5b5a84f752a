"""The OpenAPI document (`/openapi.json`), assembled from the paths and schemas each endpoint
module declares next to its routes (`PATHS`, `SCHEMAS`), so the document and the code change
together."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import strom

ERROR_SCHEMA = {"type": "object", "required": ["error_code", "message"], "properties": {
    "error_code": {"type": "integer"}, "message": {"type": ["string", "null"]}}}


RELATED = {"type": "object", "required": ["related"], "properties": {"related": {"type": "string"}}}
META = {"type": "object", "required": ["self"], "properties": {
    "self": {"type": "string"}, "resource_name": {"type": ["string", "null"]},
    "next": {"type": ["string", "null"]}}}
CLUSTER_ID = {"name": "cluster_id", "in": "path", "required": True, "schema": {"type": "string"}}


def path_param(name: str, kind: str = "string") -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": {"type": kind}}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def list_schema(item: str) -> dict[str, Any]:
    """Confluent's list envelope of `item`s."""
    return {"type": "object", "required": ["kind", "metadata", "data"], "properties": {
        "kind": {"type": "string"}, "metadata": ref("ResourceMetadata"),
        "data": {"type": "array", "items": ref(item)}}}


def ok(schema: str, description: str = "OK") -> dict[str, Any]:
    """A JSON response whose body is the component `schema`."""
    return {"description": description, "content": {"application/json": {"schema": ref(schema)}}}


def error_responses(*statuses: int, media: tuple[str, ...] = ("application/json",)
                    ) -> dict[str, Any]:
    """Confluent's error body for each of these statuses (in each of these media types)."""
    return {str(s): {"description": "an error", "content": {m: {
        "schema": {"$ref": "#/components/schemas/Error"}} for m in media}} for s in statuses}


def path_operation(op_id: str, summary: str, params: list[dict[str, Any]],
              responses: dict[str, Any], errors: tuple[int, ...] = (401, 403, 404, 500),
              **extra: Any) -> dict[str, Any]:
    """One operation of a path: its answers, with Confluent's error body for `errors`."""
    return {"summary": summary, "operationId": op_id, "parameters": params,
            "responses": {**responses, **error_responses(*errors)}, **extra}


def json_body(schema: str) -> dict[str, Any]:
    """A required JSON request body: the component `schema`."""
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


def document(modules: list[ModuleType], basic_auth: bool) -> dict[str, Any]:
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {"Error": ERROR_SCHEMA, "ResourceMetadata": META,
                               "Related": RELATED}
    for module in modules:
        paths.update(getattr(module, "PATHS", {}))
        schemas.update(getattr(module, "SCHEMAS", {}))
    doc: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {"title": "Strom HTTP API", "version": strom.__version__,
                 "description": "Confluent REST Proxy v3 and v2 (consumer instances), and "
                                "Strom's own share groups and event streams over HTTP"},
        "paths": paths,
        "components": {"schemas": schemas},
    }
    if basic_auth:
        doc["components"]["securitySchemes"] = {"basic": {"type": "http", "scheme": "basic"}}
        doc["security"] = [{"basic": []}]
    return doc

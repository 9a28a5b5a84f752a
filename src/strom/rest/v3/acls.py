"""REST Proxy v3: ACLs (`/v3/clusters/{id}/acls`): search, create (one, or a batch with
`acls:batch`) and delete by filter, through the user's AdminClient — so the broker's own
authorizer decides, and a broker without one answers as Kafka does (SECURITY_DISABLED).

Confluent's names for the enums are Kafka's; a search or delete filter left out matches any
value (`ANY`), as in Kafka's AclBindingFilter.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from strom.rest.clients import rest_error_of
from strom.rest.context import RestContext, list_body, resource_metadata
from strom.rest.errors import bad_request
from strom.rest.openapi import CLUSTER_ID, error_responses, list_schema, ok, ref
from strom.rest.v3.clusters import cluster_path, crn
from strom.rest.v3.topics import by_method, invalid_payload

# Confluent's field -> the librdkafka enum, and the values each takes (UNKNOWN is never asked)
ENUMS: dict[str, Any] = {
    "resource_type": ResourceType,
    "pattern_type": ResourcePatternType,
    "operation": AclOperation,
    "permission": AclPermissionType,
}
FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host", "operation",
          "permission")


def _values(field: str) -> list[str]:
    return [m.name for m in ENUMS[field] if m.name != "UNKNOWN"]


def _enum(field: str, raw: Any, *, filtering: bool) -> Any:
    enum = ENUMS[field]
    if raw is None:
        if filtering:
            return enum.ANY
        raise invalid_payload(f"{field} is required.")
    if not isinstance(raw, str) or raw.upper() not in _values(field):
        raise bad_request(f"{field} must be one of {', '.join(_values(field))}")
    member = enum[raw.upper()]
    if not filtering and member in (getattr(enum, "ANY", None), getattr(enum, "MATCH", None)):
        raise bad_request(f"{field} {member.name} matches ACLs: it cannot be created")
    return member


def _text(field: str, raw: Any, *, filtering: bool) -> Any:  # (None matches any: librdkafka
    # takes it in a filter, its stubs say str)
    if raw is None:
        if filtering:
            return None
        raise invalid_payload(f"{field} is required.")
    if not isinstance(raw, str):
        raise bad_request(f"{field} must be a string")
    return raw


def _args(fields: Mapping[str, Any], filtering: bool) -> list[Any]:
    """AclBinding's (or, filtering, AclBindingFilter's) arguments, in their order."""
    return [(_enum if name in ENUMS else _text)(name, fields.get(name), filtering=filtering)
            for name in FIELDS]


def binding_of(fields: Mapping[str, Any]) -> AclBinding:
    return AclBinding(*_args(fields, False))


def filter_of(fields: Mapping[str, Any]) -> AclBindingFilter:
    return AclBindingFilter(*_args(fields, True))


def _name(value: Any) -> str:
    """An enum member's name (librdkafka's stubs allow str and int too)."""
    return str(getattr(value, "name", value))


def _fields(binding: AclBinding) -> dict[str, str]:
    return {
        "resource_type": _name(binding.restype), "resource_name": str(binding.name),
        "pattern_type": _name(binding.resource_pattern_type),
        "principal": str(binding.principal), "host": str(binding.host),
        "operation": _name(binding.operation), "permission": _name(binding.permission_type),
    }


def routes(ctx: RestContext) -> list[BaseRoute]:
    def url(request: Request, cluster_id: str) -> str:
        return ctx.url(request, f"{cluster_path(cluster_id)}/acls")

    def acl_body(request: Request, cluster_id: str, binding: AclBinding) -> dict[str, Any]:
        fields = _fields(binding)
        return {"kind": "KafkaAcl",
                "metadata": resource_metadata(f"{url(request, cluster_id)}?{urlencode(fields)}",
                                              crn(cluster_id, "acl=" + urlencode(fields))),
                "cluster_id": cluster_id, **fields}

    async def search(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        wanted = filter_of(request.query_params)
        found = await ctx.clients(request).call(lambda admin: admin.describe_acls(wanted))
        self_url = url(request, cluster_id)
        if request.url.query:
            self_url += f"?{request.url.query}"
        return JSONResponse(list_body("KafkaAclList", self_url, [
            acl_body(request, cluster_id, b) for b in sorted(found, key=_fields_key)]))

    async def create(request: Request, bindings: list[AclBinding]) -> Response:
        futures = ctx.clients(request).admin.create_acls(bindings)
        try:
            await asyncio.gather(*(asyncio.wrap_future(f) for f in futures.values()))
        except KafkaException as exc:
            raise rest_error_of(exc) from None
        return Response(status_code=201)

    async def create_one(request: Request) -> Response:
        await ctx.check_cluster(request)
        body = await ctx.read_json(request, required=False)
        if not isinstance(body, dict):
            raise invalid_payload("Request body is empty. Data is required.")
        return await create(request, [binding_of(body)])

    async def create_batch(request: Request) -> Response:
        await ctx.check_cluster(request)
        body = await ctx.read_json(request, required=False)
        if not isinstance(body, dict) or not isinstance(body.get("data"), list) \
                or not body["data"]:
            raise invalid_payload("The request body must be an object with a data list.")
        if not all(isinstance(item, dict) for item in body["data"]):
            raise bad_request("each entry of data must be an ACL object")
        return await create(request, [binding_of(item) for item in body["data"]])

    async def delete(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        wanted = filter_of(request.query_params)
        if request.query_params.get("resource_type") is None:
            raise bad_request("resource_type is required to delete ACLs")
        deleted = await ctx.clients(request).call(lambda admin: admin.delete_acls([wanted])[wanted])
        return JSONResponse({"data": [acl_body(request, cluster_id, b)
                                      for b in sorted(deleted, key=_fields_key)]})

    base = "/v3/clusters/{cluster_id}/acls"
    return [by_method(base, GET=search, POST=create_one, DELETE=delete),
            by_method(base + ":batch", POST=create_batch)]


def _fields_key(binding: AclBinding) -> tuple[str, ...]:
    return tuple(_fields(binding).values())


# -- OpenAPI -----------------------------------------------------------------------------

def _enum_schema(field: str) -> dict[str, Any]:
    return {"type": "string", "enum": _values(field)}


_ACL_PROPERTIES = {name: _enum_schema(name) if name in ENUMS else {"type": "string"}
                   for name in FIELDS}
_FILTERS = [{"name": name, "in": "query", "required": False, "schema": _ACL_PROPERTIES[name]}
            for name in FIELDS]

SCHEMAS: dict[str, Any] = {
    "Acl": {"type": "object", "required": ["kind", "metadata", "cluster_id", *FIELDS],
            "properties": {"kind": {"const": "KafkaAcl"}, "metadata": ref("ResourceMetadata"),
                           "cluster_id": {"type": "string"}, **_ACL_PROPERTIES}},
    "AclList": list_schema("Acl"),
    "DeletedAcls": {"type": "object", "required": ["data"], "properties": {
        "data": {"type": "array", "items": ref("Acl")}}},
    "CreateAclRequest": {"type": "object", "required": list(FIELDS),
                         "properties": _ACL_PROPERTIES},
    "CreateAclBatchRequest": {"type": "object", "required": ["data"], "properties": {
        "data": {"type": "array", "minItems": 1, "items": ref("CreateAclRequest")}}},
}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


_CREATED = {"201": {"description": "Created"}}
PATHS: dict[str, Any] = {
    "/v3/clusters/{cluster_id}/acls": {
        "get": {"summary": "Search ACLs (a filter left out matches any value)",
                "operationId": "getKafkaAcls", "parameters": [CLUSTER_ID, *_FILTERS],
                "responses": {"200": ok("AclList"), **error_responses(400, 401, 403, 404, 500)}},
        "post": {"summary": "Create an ACL", "operationId": "createKafkaAcls",
                 "parameters": [CLUSTER_ID], "requestBody": _body("CreateAclRequest"),
                 "responses": {**_CREATED, **error_responses(400, 401, 403, 404, 413, 422,
                                                             500)}},
        "delete": {"summary": "Delete the ACLs a filter matches (resource_type required)",
                   "operationId": "deleteKafkaAcls", "parameters": [CLUSTER_ID, *_FILTERS],
                   "responses": {"200": ok("DeletedAcls"),
                                 **error_responses(400, 401, 403, 404, 500)}},
    },
    "/v3/clusters/{cluster_id}/acls:batch": {
        "post": {"summary": "Create several ACLs", "operationId": "batchCreateKafkaAcls",
                 "parameters": [CLUSTER_ID], "requestBody": _body("CreateAclBatchRequest"),
                 "responses": {**_CREATED, **error_responses(400, 401, 403, 404, 413, 422,
                                                             500)}},
    },
}

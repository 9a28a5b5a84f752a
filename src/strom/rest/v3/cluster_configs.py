"""REST Proxy v3: the cluster-wide dynamic broker defaults (`/broker-configs`, KIP-226's
`--entity-default` of `kafka-configs`), as Confluent's `ClusterConfigsResource` serves them.

In Kafka they are the BROKER config resource with an empty name, which librdkafka refuses to
address: DescribeConfigs and IncrementalAlterConfigs go to the broker as Kafka requests of their
own, with the user's credentials (`UserClients.request`). As in Confluent's, the list holds only
the defaults set dynamically; a PUT may set any name (the broker decides what it takes), and a
DELETE of a default that is not set is 404.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.rest.clients import UserClients
from strom.rest.context import RestContext, list_body, resource_metadata
from strom.rest.errors import RestError, bad_request, kafka_error, not_found
from strom.rest.openapi import (
    CLUSTER_ID,
    json_body,
    list_schema,
    ok,
    path_operation,
    path_param,
    ref,
)
from strom.rest.v3.clusters import cluster_path, crn
from strom.rest.v3.topics import (
    BAD_REQUEST_KAFKA,
    by_method,
    invalid_payload,
    parse_alter_batch,
    q,
    source_name,
)

BROKER_RESOURCE = 4  # ConfigResource.Type.BROKER; its name "" is the cluster-wide default
DESCRIBE_CONFIGS_VERSION = 4
ALTER_CONFIGS_VERSION = 1
SET, DELETE = 0, 1  # IncrementalAlterConfigs' config_operation


async def defaults(clients: UserClients) -> dict[str, dict[str, Any]]:
    """The dynamic broker defaults by name: value, read-only, sensitive, source, synonyms."""
    answer = await clients.request(ApiKey.DESCRIBE_CONFIGS, DESCRIBE_CONFIGS_VERSION, {
        "resources": [{"resource_type": BROKER_RESOURCE, "resource_name": "",
                       "configuration_keys": None}],
        "include_synonyms": True, "include_documentation": False})
    out: dict[str, dict[str, Any]] = {}
    for result in answer.results:
        if result.error_code != ErrorCode.NONE:
            raise kafka_error(result.error_code, result.error_message or
                              ErrorCode(result.error_code).name)
        for c in result.configs:
            sensitive = bool(c.is_sensitive)
            out[str(c.name)] = {
                "name": str(c.name),
                "value": None if sensitive else c.value,
                "is_default": False,  # a default set dynamically is never Kafka's default
                "is_read_only": bool(c.read_only),
                "is_sensitive": sensitive,
                "source": source_name(int(c.config_source)),
                "synonyms": [{"name": str(s.name), "value": None if sensitive else s.value,
                              "source": source_name(int(s.source))} for s in c.synonyms or []],
            }
    return out


async def alter(clients: UserClients, changes: list[tuple[str, str | None, str]],
                validate_only: bool) -> None:
    for name, value, operation in changes:
        if operation == "SET" and value is None:
            raise RestError(BAD_REQUEST_KAFKA,
                            f"Null value not supported for cluster configs: {name}", 400)
    if not changes:
        return
    answer = await clients.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, ALTER_CONFIGS_VERSION, {
        "resources": [{"resource_type": BROKER_RESOURCE, "resource_name": "", "configs": [
            {"name": name, "config_operation": SET if operation == "SET" else DELETE,
             "value": value} for name, value, operation in changes]}],
        "validate_only": validate_only})
    for r in answer.responses:
        if r.error_code != ErrorCode.NONE:
            raise kafka_error(r.error_code, r.error_message or ErrorCode(r.error_code).name)


def routes(ctx: RestContext) -> list[BaseRoute]:
    def body(request: Request, cluster_id: str, entry: dict[str, Any]) -> dict[str, Any]:
        url = ctx.url(request, f"{cluster_path(cluster_id)}/broker-configs/{q(entry['name'])}")
        return {"kind": "KafkaClusterConfig", "metadata": resource_metadata(
            url, crn(cluster_id, f"broker-config={entry['name']}")),
            "cluster_id": cluster_id, "config_type": "BROKER", **entry}

    async def list_defaults(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        found = await defaults(ctx.clients(request))
        return JSONResponse(list_body(
            "KafkaClusterConfigList", ctx.url(request, f"{cluster_path(cluster_id)}/"
                                                       "broker-configs"),
            [body(request, cluster_id, found[n]) for n in sorted(found)]))

    async def get_default(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        name = request.path_params["name"]
        entry = (await defaults(ctx.clients(request))).get(name)
        if entry is None:
            raise not_found(f"Config {name} cannot be found for BROKER in cluster "
                            f"{cluster_id}.")
        return JSONResponse(body(request, cluster_id, entry))

    async def set_default(request: Request) -> Response:
        await ctx.check_cluster(request)
        payload = await ctx.read_json(request, required=False)
        if not isinstance(payload, dict) or not isinstance(payload.get("value"), str):
            raise bad_request("The request body must be an object with a string value")
        await alter(ctx.clients(request), [(request.path_params["name"], payload["value"],
                                            "SET")], False)
        return Response(status_code=204)

    async def reset_default(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        name = request.path_params["name"]
        clients = ctx.clients(request)
        if name not in await defaults(clients):  # Confluent's safe reset: 404 when not set
            raise not_found(f"Config {name} cannot be found for BROKER in cluster "
                            f"{cluster_id}.")
        await alter(clients, [(name, None, "DELETE")], False)
        return Response(status_code=204)

    async def alter_defaults(request: Request) -> Response:
        await ctx.check_cluster(request)
        payload = await ctx.read_json(request, required=False)
        if payload is None:
            raise invalid_payload("Null input provided. Data is required.")
        changes, validate_only = parse_alter_batch(payload)
        await alter(ctx.clients(request), changes, validate_only)
        return Response(status_code=204)

    configs = "/v3/clusters/{cluster_id}/broker-configs"
    return [
        by_method(configs, GET=list_defaults),
        by_method(configs + ":alter", POST=alter_defaults),
        by_method(configs + "/{name}", GET=get_default, PUT=set_default, DELETE=reset_default),
    ]


# -- OpenAPI -----------------------------------------------------------------------------

SCHEMAS: dict[str, Any] = {
    "ClusterConfig": {"type": "object", "required": [
        "kind", "metadata", "cluster_id", "config_type", "name", "is_default", "is_read_only",
        "is_sensitive", "source", "synonyms"], "properties": {
        "kind": {"const": "KafkaClusterConfig"}, "metadata": ref("ResourceMetadata"),
        "cluster_id": {"type": "string"}, "config_type": {"const": "BROKER"},
        "name": {"type": "string"}, "value": {"type": ["string", "null"]},
        "is_default": {"type": "boolean"}, "is_read_only": {"type": "boolean"},
        "is_sensitive": {"type": "boolean"}, "source": {"type": "string"},
        "synonyms": {"type": "array", "items": ref("ConfigSynonym")}}},
    "ClusterConfigList": list_schema("ClusterConfig"),
}

_NAME = path_param("name")
_NO_CONTENT = {"204": {"description": "No Content"}}
_CHANGES = (400, 401, 403, 404, 413, 422, 500)




PATHS: dict[str, Any] = {
    "/v3/clusters/{cluster_id}/broker-configs": {
        "get": path_operation(
            "listKafkaClusterConfigs", "The cluster-wide broker defaults set dynamically",
            [CLUSTER_ID], {"200": ok("ClusterConfigList")}),
    },
    "/v3/clusters/{cluster_id}/broker-configs:alter": {
        "post": path_operation(
            "updateKafkaClusterConfigs", "Set or reset several cluster-wide broker defaults "
            "(incremental)", [CLUSTER_ID], _NO_CONTENT, _CHANGES,
            requestBody=json_body("AlterConfigBatchRequest")),
    },
    "/v3/clusters/{cluster_id}/broker-configs/{name}": {
        "get": path_operation(
            "getKafkaClusterConfig", "One cluster-wide broker default", [CLUSTER_ID, _NAME],
            {"200": ok("ClusterConfig")}),
        "put": path_operation(
            "updateKafkaClusterConfig", "Set one cluster-wide broker default",
            [CLUSTER_ID, _NAME], _NO_CONTENT, _CHANGES,
            requestBody=json_body("UpdateConfigRequest")),
        "delete": path_operation(
            "deleteKafkaClusterConfig", "Reset one cluster-wide broker default",
            [CLUSTER_ID, _NAME], _NO_CONTENT, (400, 401, 403, 404, 500)),
    },
}


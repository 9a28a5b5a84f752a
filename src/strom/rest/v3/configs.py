"""REST Proxy v3: broker configs (`/brokers/{id}/configs`, every broker's at `/brokers/-/configs`)
and every topic's configs at once (`/topics/-/configs`), through the user's AdminClient (the
cluster-wide defaults, `/broker-configs`, are `strom.rest.v3.cluster_configs`).

A change goes to Kafka as an incremental alter (SET or DELETE), so the broker decides what may be
changed dynamically and answers as Kafka does for the rest.
"""

from __future__ import annotations

import asyncio
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from strom.rest.clients import UserClients, rest_error_of
from strom.rest.context import RestContext, list_body, resource_metadata
from strom.rest.errors import RestError, bad_request, not_found
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
    describe_topics,
    entry_fields,
    invalid_payload,
    parse_alter_batch,
    q,
)


async def describe(clients: UserClients, resource: ConfigResource) -> dict[str, ConfigEntry]:
    found: dict[str, ConfigEntry] = await clients.call(
        lambda admin: admin.describe_configs([resource])[resource])
    return found


async def brokers(clients: UserClients) -> list[int]:
    meta = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
    return sorted(meta.brokers)


def routes(ctx: RestContext) -> list[BaseRoute]:
    def base(request: Request, cluster_id: str) -> str:
        return ctx.url(request, cluster_path(cluster_id))

    def broker_config(request: Request, cluster_id: str, broker: int, entry: ConfigEntry
                      ) -> dict[str, Any]:
        url = f"{base(request, cluster_id)}/brokers/{broker}/configs/{q(entry.name)}"
        return {"kind": "KafkaBrokerConfig", "metadata": resource_metadata(
            url, crn(cluster_id, f"broker={broker}", f"config={entry.name}")),
            "cluster_id": cluster_id, "broker_id": broker, **entry_fields(entry)}

    def topic_config(request: Request, cluster_id: str, topic: str, entry: ConfigEntry
                     ) -> dict[str, Any]:
        url = f"{base(request, cluster_id)}/topics/{q(topic)}/configs/{q(entry.name)}"
        return {"kind": "KafkaTopicConfig", "metadata": resource_metadata(
            url, crn(cluster_id, f"topic={topic}", f"config={entry.name}")),
            "cluster_id": cluster_id, "topic_name": topic, **entry_fields(entry)}

    async def known_broker(request: Request) -> tuple[str, int, UserClients]:
        cluster_id = await ctx.check_cluster(request)
        broker = request.path_params["broker_id"]
        clients = ctx.clients(request)
        if broker not in await brokers(clients):
            raise not_found(f"Broker {broker} cannot be found.")
        return cluster_id, broker, clients

    async def alter(clients: UserClients, resource_name: str,
                    changes: list[tuple[str, str | None, str]], validate_only: bool) -> None:
        for name, value, operation in changes:
            if operation == "SET" and value is None:
                raise RestError(BAD_REQUEST_KAFKA,
                                f"Null value not supported for broker configs: {name}", 400)
        if not changes:
            return
        resource = ConfigResource("broker", resource_name, incremental_configs=[
            ConfigEntry(name, value, incremental_operation=(
                AlterConfigOpType.SET if operation == "SET" else AlterConfigOpType.DELETE))
            for name, value, operation in changes])
        await clients.call(lambda admin: admin.incremental_alter_configs(
            [resource], validate_only=validate_only)[resource])

    async def one_value(request: Request) -> str:
        body = await ctx.read_json(request, required=False)
        if not isinstance(body, dict) or not isinstance(body.get("value"), str):
            raise bad_request("The request body must be an object with a string value")
        value: str = body["value"]
        return value

    # -- one broker's configs ------------------------------------------------------------

    async def list_broker(request: Request) -> Response:
        cluster_id, broker, clients = await known_broker(request)
        entries = await describe(clients, ConfigResource("broker", str(broker)))
        return JSONResponse(list_body(
            "KafkaBrokerConfigList", f"{base(request, cluster_id)}/brokers/{broker}/configs",
            [broker_config(request, cluster_id, broker, entries[n]) for n in sorted(entries)]))

    async def get_broker(request: Request) -> Response:
        cluster_id, broker, clients = await known_broker(request)
        name = request.path_params["name"]
        entry = (await describe(clients, ConfigResource("broker", str(broker)))).get(name)
        if entry is None:
            raise not_found(f"Config {name} cannot be found for broker {broker}.")
        return JSONResponse(broker_config(request, cluster_id, broker, entry))

    async def set_broker(request: Request) -> Response:
        _, broker, clients = await known_broker(request)
        value = await one_value(request)
        await alter(clients, str(broker), [(request.path_params["name"], value, "SET")], False)
        return Response(status_code=204)

    async def reset_broker(request: Request) -> Response:
        _, broker, clients = await known_broker(request)
        await alter(clients, str(broker), [(request.path_params["name"], None, "DELETE")], False)
        return Response(status_code=204)

    async def alter_broker(request: Request) -> Response:
        _, broker, clients = await known_broker(request)
        body = await ctx.read_json(request, required=False)
        if body is None:
            raise invalid_payload("Null input provided. Data is required.")
        changes, validate_only = parse_alter_batch(body)
        await alter(clients, str(broker), changes, validate_only)
        return Response(status_code=204)

    async def list_all_brokers(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        clients = ctx.clients(request)
        ids = await brokers(clients)
        found = await asyncio.gather(*(describe(clients, ConfigResource("broker", str(b)))
                                       for b in ids))
        data = [broker_config(request, cluster_id, b, entries[n])
                for b, entries in zip(ids, found, strict=True) for n in sorted(entries)]
        return JSONResponse(list_body(
            "KafkaBrokerConfigList", f"{base(request, cluster_id)}/brokers/-/configs", data))

    # -- every topic's -------------------------------------------------------------------

    async def list_all_topics(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        clients = ctx.clients(request)
        meta = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
        names = [d.name for d in await describe_topics(clients, sorted(meta.topics))
                 if not d.is_internal]
        resources = [ConfigResource("topic", n) for n in names]
        data = []
        if resources:
            futures = clients.admin.describe_configs(resources)
            results = await asyncio.gather(*(asyncio.wrap_future(futures[r]) for r in resources),
                                           return_exceptions=True)
            for name, result in zip(names, results, strict=True):
                if isinstance(result, KafkaException):
                    err = rest_error_of(result)
                    if err.status in (403, 404):  # deleted meanwhile, or not the user's
                        continue
                    raise err from None
                if isinstance(result, BaseException):
                    raise result
                data += [topic_config(request, cluster_id, name, result[n])
                         for n in sorted(result)]
        return JSONResponse(list_body(
            "KafkaTopicConfigList", f"{base(request, cluster_id)}/topics/-/configs", data))

    clusters = "/v3/clusters/{cluster_id}"
    broker = clusters + "/brokers/{broker_id:int}/configs"
    return [
        by_method(clusters + "/brokers/-/configs", GET=list_all_brokers),
        by_method(broker, GET=list_broker),
        by_method(broker + ":alter", POST=alter_broker),
        by_method(broker + "/{name}", GET=get_broker, PUT=set_broker, DELETE=reset_broker),
        by_method(clusters + "/topics/-/configs", GET=list_all_topics),
    ]


# -- OpenAPI -----------------------------------------------------------------------------

_ENTRY = {
    "name": {"type": "string"}, "value": {"type": ["string", "null"]},
    "is_default": {"type": "boolean"}, "is_read_only": {"type": "boolean"},
    "is_sensitive": {"type": "boolean"}, "source": {"type": "string"},
    "synonyms": {"type": "array", "items": ref("ConfigSynonym")},
}
_ENTRY_REQUIRED = ["kind", "metadata", "cluster_id", "name", "is_default", "is_read_only",
                   "is_sensitive", "source", "synonyms"]

SCHEMAS: dict[str, Any] = {
    "BrokerConfig": {"type": "object", "required": [*_ENTRY_REQUIRED, "broker_id"],
                     "properties": {"kind": {"const": "KafkaBrokerConfig"},
                                    "metadata": ref("ResourceMetadata"),
                                    "cluster_id": {"type": "string"},
                                    "broker_id": {"type": "integer"}, **_ENTRY}},
    "BrokerConfigList": list_schema("BrokerConfig"),
}

_BROKER = path_param("broker_id", "integer")
_NAME = path_param("name")
_NO_CONTENT = {"204": {"description": "No Content"}}




_CHANGES = (400, 401, 403, 404, 413, 422, 500)
PATHS: dict[str, Any] = {
    "/v3/clusters/{cluster_id}/brokers/-/configs": {
        "get": path_operation(
            "listKafkaAllBrokerConfigs", "Every broker's configs", [CLUSTER_ID],
            {"200": ok("BrokerConfigList")}),
    },
    "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs": {
        "get": path_operation(
            "listKafkaBrokerConfigs", "One broker's configs", [CLUSTER_ID, _BROKER],
            {"200": ok("BrokerConfigList")}),
    },
    "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs:alter": {
        "post": path_operation(
            "updateKafkaBrokerConfigBatch", "Set or reset several of a broker's configs "
            "(incremental)", [CLUSTER_ID, _BROKER], _NO_CONTENT, _CHANGES,
            requestBody=json_body("AlterConfigBatchRequest")),
    },
    "/v3/clusters/{cluster_id}/brokers/{broker_id}/configs/{name}": {
        "get": path_operation(
            "getKafkaBrokerConfig", "One config of a broker", [CLUSTER_ID, _BROKER, _NAME],
            {"200": ok("BrokerConfig")}),
        "put": path_operation(
            "updateKafkaBrokerConfig", "Set one config of a broker (dynamically)",
            [CLUSTER_ID, _BROKER, _NAME], _NO_CONTENT, _CHANGES,
            requestBody=json_body("UpdateConfigRequest")),
        "delete": path_operation(
            "deleteKafkaBrokerConfig", "Reset one config of a broker",
            [CLUSTER_ID, _BROKER, _NAME], _NO_CONTENT, (400, 401, 403, 404, 500)),
    },
    "/v3/clusters/{cluster_id}/topics/-/configs": {
        "get": path_operation(
            "listKafkaAllTopicConfigs", "Every topic's configs (internal topics left out)",
            [CLUSTER_ID], {"200": ok("TopicConfigList")}),
    },
}


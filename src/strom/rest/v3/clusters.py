"""REST Proxy v3: the cluster and its brokers (`/v3/clusters`, `/v3/clusters/{id}/brokers`)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from strom.rest.context import RestContext, list_body, related, resource_metadata
from strom.rest.errors import not_found
from strom.rest.openapi import CLUSTER_ID, error_responses, list_schema, ok


def cluster_path(cluster_id: str) -> str:
    return f"/v3/clusters/{cluster_id}"


def crn(cluster_id: str, *parts: str) -> str:
    """Confluent's resource name: ``crn:///kafka=<id>/topic=<name>...``."""
    return "/".join([f"crn:///kafka={cluster_id}", *parts])


def routes(ctx: RestContext) -> list[BaseRoute]:
    async def describe(request: Request) -> tuple[str, Any]:
        clients = ctx.clients(request)
        found = await clients.call(lambda admin: admin.describe_cluster(request_timeout=10))
        return found.cluster_id, found

    def cluster_body(request: Request, cluster_id: str, found: Any) -> dict[str, Any]:
        base = ctx.url(request, cluster_path(cluster_id))
        controller = found.controller
        return {
            "kind": "KafkaCluster",
            "metadata": resource_metadata(base, crn(cluster_id)),
            "cluster_id": cluster_id,
            "controller": related(f"{base}/brokers/{controller.id}") if controller else None,
            "acls": related(f"{base}/acls"),
            "brokers": related(f"{base}/brokers"),
            "broker_configs": related(f"{base}/broker-configs"),
            "consumer_groups": related(f"{base}/consumer-groups"),
            "topics": related(f"{base}/topics"),
            "partition_reassignments": related(f"{base}/topics/-/partitions/-/reassignment"),
        }

    def broker_body(request: Request, cluster_id: str, node: Any) -> dict[str, Any]:
        url = ctx.url(request, f"{cluster_path(cluster_id)}/brokers/{node.id}")
        return {
            "kind": "KafkaBroker",
            "metadata": resource_metadata(url, crn(cluster_id, f"broker={node.id}")),
            "cluster_id": cluster_id,
            "broker_id": node.id,
            "host": node.host,
            "port": node.port,
            "rack": node.rack,
            "configs": related(f"{url}/configs"),
            "partition_replicas": related(f"{url}/partition-replicas"),
        }

    async def list_clusters(request: Request) -> Response:
        cluster_id, found = await describe(request)
        return JSONResponse(list_body("KafkaClusterList", ctx.url(request, "/v3/clusters"),
                                      [cluster_body(request, cluster_id, found)]))

    async def get_cluster(request: Request) -> Response:
        await ctx.check_cluster(request)
        cluster_id, found = await describe(request)
        return JSONResponse(cluster_body(request, cluster_id, found))

    async def list_brokers(request: Request) -> Response:
        await ctx.check_cluster(request)
        cluster_id, found = await describe(request)
        nodes = sorted(found.nodes, key=lambda n: n.id)
        return JSONResponse(list_body(
            "KafkaBrokerList", ctx.url(request, f"{cluster_path(cluster_id)}/brokers"),
            [broker_body(request, cluster_id, n) for n in nodes]))

    async def get_broker(request: Request) -> Response:
        await ctx.check_cluster(request)
        cluster_id, found = await describe(request)
        wanted = request.path_params["broker_id"]
        node = next((n for n in found.nodes if n.id == wanted), None)
        if node is None:
            raise not_found(f"Broker {wanted} cannot be found.")
        return JSONResponse(broker_body(request, cluster_id, node))

    return [
        Route("/v3/clusters", list_clusters),
        Route("/v3/clusters/{cluster_id}", get_cluster),
        Route("/v3/clusters/{cluster_id}/brokers", list_brokers),
        Route("/v3/clusters/{cluster_id}/brokers/{broker_id:int}", get_broker),
    ]


SCHEMAS: dict[str, Any] = {
    "Cluster": {"type": "object", "required": ["kind", "metadata", "cluster_id"], "properties": {
        "kind": {"const": "KafkaCluster"}, "metadata": {"$ref": "#/components/schemas/ResourceMetadata"},
        "cluster_id": {"type": "string"},
        "controller": {"oneOf": [{"$ref": "#/components/schemas/Related"}, {"type": "null"}]},
        **{k: {"$ref": "#/components/schemas/Related"} for k in (
            "acls", "brokers", "broker_configs", "consumer_groups", "topics",
            "partition_reassignments")}}},
    "ClusterList": list_schema("Cluster"),
    "Broker": {"type": "object", "required": ["kind", "metadata", "cluster_id", "broker_id"],
               "properties": {
                   "kind": {"const": "KafkaBroker"},
                   "metadata": {"$ref": "#/components/schemas/ResourceMetadata"},
                   "cluster_id": {"type": "string"}, "broker_id": {"type": "integer"},
                   "host": {"type": ["string", "null"]}, "port": {"type": ["integer", "null"]},
                   "rack": {"type": ["string", "null"]},
                   "configs": {"$ref": "#/components/schemas/Related"},
                   "partition_replicas": {"$ref": "#/components/schemas/Related"}}},
    "BrokerList": list_schema("Broker"),
}

PATHS: dict[str, Any] = {
    "/v3/clusters": {"get": {"summary": "The cluster (a list of one)", "operationId": "listClusters",
                             "responses": {"200": ok("ClusterList"), **error_responses(401, 403)}}},
    "/v3/clusters/{cluster_id}": {"get": {
        "summary": "The cluster", "operationId": "getCluster", "parameters": [CLUSTER_ID],
        "responses": {"200": ok("Cluster"), **error_responses(401, 403, 404)}}},
    "/v3/clusters/{cluster_id}/brokers": {"get": {
        "summary": "Its brokers", "operationId": "listBrokers", "parameters": [CLUSTER_ID],
        "responses": {"200": ok("BrokerList"), **error_responses(401, 403, 404)}}},
    "/v3/clusters/{cluster_id}/brokers/{broker_id}": {"get": {
        "summary": "One broker", "operationId": "getBroker",
        "parameters": [CLUSTER_ID, {"name": "broker_id", "in": "path", "required": True,
                                     "schema": {"type": "integer"}}],
        "responses": {"200": ok("Broker"), **error_responses(401, 403, 404)}}},
}

"""REST Proxy v3: partition reassignments under way (`.../partitions/-/reassignment`, and one
partition's `.../reassignment`) and the replicas one broker keeps
(`/brokers/{id}/partition-replicas`).

librdkafka has no ListPartitionReassignments: it goes to the broker as a Kafka request of its
own, with the user's credentials. Confluent lists every reassignment and filters, so a topic
without one (or unknown) lists none; one partition without one is 404.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.rest.context import RestContext, list_body, related, resource_metadata
from strom.rest.errors import kafka_error, not_found
from strom.rest.openapi import CLUSTER_ID, error_responses, list_schema, ok, path_param, ref
from strom.rest.v3.clusters import cluster_path, crn
from strom.rest.v3.topics import by_method, q, replica_body

LIST_REASSIGNMENTS_VERSION = 0
REQUEST_TIMEOUT_MS = 30_000


def reassignment_body(root: str, cluster_id: str, topic: str, partition: int,
                      adding: list[int], removing: list[int]) -> dict[str, Any]:
    url = f"{root}/topics/{q(topic)}/partitions/{partition}"
    return {
        "kind": "KafkaReassignment",
        "metadata": resource_metadata(f"{url}/reassignment", crn(
            cluster_id, f"topic={topic}", f"partition={partition}", "reassignment")),
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "adding_replicas": adding,
        "removing_replicas": removing,
        "replicas": related(f"{url}/replicas"),
    }


def routes(ctx: RestContext) -> list[BaseRoute]:
    async def reassignments(request: Request) -> tuple[str, list[dict[str, Any]]]:
        """Every reassignment under way, sorted by topic and partition."""
        cluster_id = await ctx.check_cluster(request)
        answer = await ctx.clients(request).request(
            ApiKey.LIST_PARTITION_REASSIGNMENTS, LIST_REASSIGNMENTS_VERSION,
            {"timeout_ms": REQUEST_TIMEOUT_MS, "topics": None})
        if answer.error_code != ErrorCode.NONE:
            raise kafka_error(answer.error_code, answer.error_message or
                              ErrorCode(answer.error_code).name)
        root = ctx.url(request, cluster_path(cluster_id))
        found = sorted((str(t.name), int(p.partition_index), list(p.adding_replicas),
                        list(p.removing_replicas))
                       for t in answer.topics for p in t.partitions)
        return cluster_id, [reassignment_body(root, cluster_id, *item) for item in found]

    async def list_all(request: Request) -> Response:
        cluster_id, data = await reassignments(request)
        url = ctx.url(request, f"{cluster_path(cluster_id)}/topics/-/partitions/-/reassignment")
        return JSONResponse(list_body("KafkaReassignmentList", url, data))

    async def list_by_topic(request: Request) -> Response:
        cluster_id, data = await reassignments(request)
        topic = request.path_params["topic_name"]
        url = ctx.url(request, f"{cluster_path(cluster_id)}/topics/{q(topic)}/partitions/-/"
                               "reassignment")
        return JSONResponse(list_body("KafkaReassignmentList", url,
                                      [r for r in data if r["topic_name"] == topic]))

    async def get_one(request: Request) -> Response:
        _, data = await reassignments(request)
        topic, partition = request.path_params["topic_name"], request.path_params["partition_id"]
        found = next((r for r in data if (r["topic_name"], r["partition_id"]) == (
            topic, partition)), None)
        if found is None:
            raise not_found("HTTP 404 Not Found")
        return JSONResponse(found)

    async def broker_replicas(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        broker = request.path_params["broker_id"]
        clients = ctx.clients(request)
        metadata = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
        if broker not in metadata.brokers:
            raise not_found(f"Broker {broker} cannot be found.")
        root = ctx.url(request, cluster_path(cluster_id))
        data = [replica_body(root, cluster_id, name, p.id, broker, is_leader=p.leader == broker,
                             in_sync=broker in p.isrs)
                for name, topic in sorted(metadata.topics.items())
                for p in sorted(topic.partitions.values(), key=lambda p: p.id)
                if broker in p.replicas]
        return JSONResponse(list_body("KafkaReplicaList",
                                      f"{root}/brokers/{broker}/partition-replicas", data))

    topics = "/v3/clusters/{cluster_id}/topics"
    return [
        by_method(topics + "/-/partitions/-/reassignment", GET=list_all),
        by_method(topics + "/{topic_name}/partitions/-/reassignment", GET=list_by_topic),
        by_method(topics + "/{topic_name}/partitions/{partition_id:int}/reassignment",
                  GET=get_one),
        by_method("/v3/clusters/{cluster_id}/brokers/{broker_id:int}/partition-replicas",
                  GET=broker_replicas),
    ]


# -- OpenAPI -----------------------------------------------------------------------------

_INTS = {"type": "array", "items": {"type": "integer"}}

SCHEMAS: dict[str, Any] = {
    "Reassignment": {"type": "object", "required": [
        "kind", "metadata", "cluster_id", "topic_name", "partition_id", "adding_replicas",
        "removing_replicas", "replicas"], "properties": {
        "kind": {"const": "KafkaReassignment"}, "metadata": ref("ResourceMetadata"),
        "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
        "partition_id": {"type": "integer"}, "adding_replicas": _INTS,
        "removing_replicas": _INTS, "replicas": ref("Related")}},
    "ReassignmentList": list_schema("Reassignment"),
}

_ERRORS = error_responses(400, 401, 403, 404, 500)
_TOPIC = path_param("topic_name")


def _get(op_id: str, summary: str, params: list[dict[str, Any]], schema: str
         ) -> dict[str, Any]:
    return {"get": {"summary": summary, "operationId": op_id, "parameters": params,
                    "responses": {"200": ok(schema), **_ERRORS}}}


PATHS: dict[str, Any] = {
    "/v3/clusters/{cluster_id}/topics/-/partitions/-/reassignment": _get(
        "listKafkaReassignments", "Every partition reassignment under way", [CLUSTER_ID],
        "ReassignmentList"),
    "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/-/reassignment": _get(
        "searchKafkaReassignmentsByTopic", "The topic's partition reassignments under way",
        [CLUSTER_ID, _TOPIC], "ReassignmentList"),
    "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/reassignment": _get(
        "getKafkaReassignment", "The partition's reassignment under way (404: none)",
        [CLUSTER_ID, _TOPIC, path_param("partition_id", "integer")], "Reassignment"),
    "/v3/clusters/{cluster_id}/brokers/{broker_id}/partition-replicas": _get(
        "searchKafkaReplicasByBroker", "The replicas the broker keeps",
        [CLUSTER_ID, path_param("broker_id", "integer")], "ReplicaList"),
}

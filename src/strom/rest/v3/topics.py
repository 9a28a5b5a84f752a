"""REST Proxy v3: topics, their configs, partitions and replicas
(`/v3/clusters/{id}/topics/...`), through the user's AdminClient.

Confluent's answers are kept where a client can see them: an unknown topic is 404 with error
code 40403 and Kafka's own message; a config name the topic does not have is 404 before any
change is attempted; a create without counts takes the broker's defaults and reports them.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote

from confluent_kafka import KafkaException, TopicCollection
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from strom.rest.clients import UserClients, rest_error_of
from strom.rest.context import RestContext, list_body, related, resource_metadata
from strom.rest.errors import RestError, bad_request, not_found
from strom.rest.openapi import CLUSTER_ID, error_responses, list_schema, ok, path_param, ref
from strom.rest.v3.clusters import cluster_path, crn

KAFKA_UNKNOWN_TOPIC_PARTITION = 40403  # Confluent's code for Kafka's UNKNOWN_TOPIC_OR_PARTITION
INVALID_PAYLOAD = 42206  # Confluent's "Payload error." (422)
BAD_REQUEST_KAFKA = 40002  # Confluent's code for a request Kafka refused
UNKNOWN_TOPIC_MESSAGE = "This server does not host this topic-partition."
ADMIN_OPERATION_S = 10.0
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# the config sources Confluent names; librdkafka's others (UNKNOWN_CONFIG, GROUP_CONFIG) are UNKNOWN
CONFIG_SOURCES = ("DYNAMIC_CLUSTER_LINK_CONFIG", "DYNAMIC_TOPIC_CONFIG",
                  "DYNAMIC_BROKER_LOGGER_CONFIG", "DYNAMIC_BROKER_CONFIG",
                  "DYNAMIC_DEFAULT_BROKER_CONFIG", "STATIC_BROKER_CONFIG", "DEFAULT_CONFIG")


def q(segment: str) -> str:
    """A path segment as it goes into a URL (group ids and config names may hold anything)."""
    return quote(segment, safe="")


def unknown_topic(message: str = UNKNOWN_TOPIC_MESSAGE) -> RestError:
    return RestError(KAFKA_UNKNOWN_TOPIC_PARTITION, message, 404)


def invalid_payload(cause: str) -> RestError:
    return RestError(INVALID_PAYLOAD, f"Payload error. {cause}", 422)


def config_missing(name: str, topic: str, cluster_id: str) -> RestError:
    return not_found(f"Config {name} cannot be found for TOPIC {topic} in cluster {cluster_id}.")


def source_name(source: Any) -> str:
    """A config source by Confluent's name (librdkafka hands out its enum's number)."""
    if isinstance(source, int) and not isinstance(source, ConfigSource):
        try:
            source = ConfigSource(source)
        except ValueError:
            return "UNKNOWN"
    name = getattr(source, "name", None) or str(source)
    return name if name in CONFIG_SOURCES else "UNKNOWN"


def valid_topic_name(name: Any) -> bool:
    return isinstance(name, str) and name not in (".", "..") and bool(TOPIC_NAME.fullmatch(name))


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


async def admin_call(clients: UserClients, start: Callable[[AdminClient], Any],
                     unknown: str = UNKNOWN_TOPIC_MESSAGE) -> Any:
    """One admin future; Kafka's unknown topic leaves with Confluent's code and message
    (librdkafka words it its own way)."""
    try:
        return await clients.call(start)
    except RestError as exc:
        if exc.error_code == KAFKA_UNKNOWN_TOPIC_PARTITION:
            raise unknown_topic(unknown) from None
        raise


async def describe_topics(clients: UserClients, names: list[str]) -> list[Any]:
    """TopicDescriptions of these topics, skipping those gone or hidden since they were listed."""
    if not names:
        return []
    futures = clients.admin.describe_topics(TopicCollection(names))
    results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures.values()),
                                   return_exceptions=True)
    found = []
    for result in results:
        if isinstance(result, KafkaException):
            err = rest_error_of(result)
            if err.status in (403, 404):
                continue
            raise err from None
        if isinstance(result, BaseException):
            raise result
        found.append(result)
    return found


async def describe_topic(clients: UserClients, name: str, *, authorized: bool = False,
                         unknown: str = UNKNOWN_TOPIC_MESSAGE) -> Any:
    return await admin_call(clients, lambda admin: admin.describe_topics(
        TopicCollection([name]), include_authorized_operations=authorized)[name], unknown)


async def topic_configs(clients: UserClients, name: str) -> dict[str, ConfigEntry]:
    resource = ConfigResource("topic", name)
    found: dict[str, ConfigEntry] = await admin_call(
        clients, lambda admin: admin.describe_configs([resource])[resource])
    return found


def synonyms(entry: ConfigEntry) -> list[dict[str, Any]]:
    """The entry's synonyms, most specific first. librdkafka keys them by name, so a topic
    override of a config whose broker-wide name is the same (compression.type) loses its own
    row: it is put back from the entry itself."""
    rows = [{"name": s.name, "value": None if s.is_sensitive else s.value,
             "source": source_name(s.source)} for s in entry.synonyms.values()]
    own = {"name": entry.name, "value": None if entry.is_sensitive else entry.value,
           "source": source_name(entry.source)}
    if own["source"] != "DEFAULT_CONFIG" and not any(
            r["name"] == own["name"] and r["source"] == own["source"] for r in rows):
        rows.insert(0, own)
    return rows


def entry_fields(entry: ConfigEntry) -> dict[str, Any]:
    """What every config body of Confluent's has, whatever it belongs to (topic, broker)."""
    return {
        "name": entry.name,
        "value": None if entry.is_sensitive else entry.value,
        "is_default": bool(entry.is_default),
        "is_read_only": bool(entry.is_read_only),
        "is_sensitive": bool(entry.is_sensitive),
        "source": source_name(entry.source),
        "synonyms": synonyms(entry),
    }


def replica_body(root: str, cluster_id: str, topic: str, partition: int, broker: int, *,
                 is_leader: bool, in_sync: bool) -> dict[str, Any]:
    """Confluent's KafkaReplica (``root``: the cluster's URL)."""
    url = f"{root}/topics/{q(topic)}/partitions/{partition}/replicas/{broker}"
    return {
        "kind": "KafkaReplica",
        "metadata": resource_metadata(url, crn(
            cluster_id, f"topic={topic}", f"partition={partition}", f"replica={broker}")),
        "cluster_id": cluster_id,
        "topic_name": topic,
        "partition_id": partition,
        "broker_id": broker,
        "is_leader": is_leader,
        "is_in_sync": in_sync,
        "broker": related(f"{root}/brokers/{broker}"),
    }


def routes(ctx: RestContext) -> list[BaseRoute]:
    def base(request: Request, cluster_id: str) -> str:
        return ctx.url(request, cluster_path(cluster_id))

    def topic_body(request: Request, cluster_id: str, name: str, *, internal: bool,
                   replication_factor: int, partitions_count: int,
                   operations: list[str] | None = None) -> dict[str, Any]:
        url = f"{base(request, cluster_id)}/topics/{q(name)}"
        return {
            "kind": "KafkaTopic",
            "metadata": resource_metadata(url, crn(cluster_id, f"topic={name}")),
            "cluster_id": cluster_id,
            "topic_name": name,
            "is_internal": internal,
            "replication_factor": replication_factor,
            "partitions_count": partitions_count,
            "partitions": related(f"{url}/partitions"),
            "configs": related(f"{url}/configs"),
            "partition_reassignments": related(f"{url}/partitions/-/reassignment"),
            "authorized_operations": operations or [],
        }

    def described_body(request: Request, cluster_id: str, desc: Any) -> dict[str, Any]:
        parts = desc.partitions
        ops = getattr(desc, "authorized_operations", None) or []
        return topic_body(request, cluster_id, desc.name, internal=bool(desc.is_internal),
                          replication_factor=len(parts[0].replicas) if parts else 0,
                          partitions_count=len(parts),
                          operations=sorted(getattr(op, "name", str(op)) for op in ops))

    def partition_body(request: Request, cluster_id: str, topic: str, part: Any
                       ) -> dict[str, Any]:
        url = f"{base(request, cluster_id)}/topics/{q(topic)}/partitions/{part.id}"
        leader = part.leader
        return {
            "kind": "KafkaPartition",
            "metadata": resource_metadata(
                url, crn(cluster_id, f"topic={topic}", f"partition={part.id}")),
            "cluster_id": cluster_id,
            "topic_name": topic,
            "partition_id": part.id,
            "leader": related(f"{url}/replicas/{leader.id}")
            if leader is not None and leader.id >= 0 else None,
            "replicas": related(f"{url}/replicas"),
            "reassignment": related(f"{url}/reassignment"),
        }

    def replica_of(request: Request, cluster_id: str, topic: str, part: Any, node: Any
                   ) -> dict[str, Any]:
        leader = part.leader
        return replica_body(base(request, cluster_id), cluster_id, topic, part.id, node.id,
                            is_leader=leader is not None and leader.id == node.id,
                            in_sync=any(n.id == node.id for n in part.isr))

    def config_body(request: Request, cluster_id: str, topic: str, entry: ConfigEntry
                    ) -> dict[str, Any]:
        url = f"{base(request, cluster_id)}/topics/{q(topic)}/configs/{q(entry.name)}"
        return {
            "kind": "KafkaTopicConfig",
            "metadata": resource_metadata(
                url, crn(cluster_id, f"topic={topic}", f"config={entry.name}")),
            "cluster_id": cluster_id,
            "topic_name": topic,
            **entry_fields(entry),
        }

    # -- topics --------------------------------------------------------------------------

    async def list_topics(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        clients = ctx.clients(request)
        meta = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
        descs = await describe_topics(clients, sorted(meta.topics))
        data = [described_body(request, cluster_id, d) for d in descs if not d.is_internal]
        return JSONResponse(list_body("KafkaTopicList", f"{base(request, cluster_id)}/topics",
                                      sorted(data, key=lambda t: t["topic_name"])))

    async def get_topic(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        wanted = request.query_params.get("include_authorized_operations", "false").lower()
        if wanted not in ("true", "false"):
            raise bad_request("include_authorized_operations must be true or false")
        desc = await describe_topic(ctx.clients(request), request.path_params["topic_name"],
                                    authorized=wanted == "true")
        return JSONResponse(described_body(request, cluster_id, desc))

    async def broker_defaults(clients: UserClients) -> tuple[int, int]:
        """The broker's num.partitions and default.replication.factor: what a create without
        counts gets (Confluent reports Kafka's answer, which librdkafka does not pass on)."""
        meta = await clients.blocking(lambda: clients.admin.list_topics(timeout=10))
        broker = str(min(meta.brokers)) if meta.brokers else "0"
        resource = ConfigResource("broker", broker)
        entries = await clients.call(lambda admin: admin.describe_configs([resource])[resource])

        def number(name: str) -> int:
            entry = entries.get(name)
            try:
                return int(entry.value) if entry is not None else 1
            except (TypeError, ValueError):
                return 1

        return number("num.partitions"), number("default.replication.factor")

    async def create_topic(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        body = await ctx.read_json(request, required=False)
        if body is None:
            raise invalid_payload("Request body is empty. Data is required.")
        if not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object")
        name = body.get("topic_name")
        if not valid_topic_name(name):
            raise invalid_payload("Invalid topic name.")
        assert isinstance(name, str)
        partitions, replication = body.get("partitions_count"), body.get("replication_factor")
        for field_name, value in (("partitions_count", partitions),
                                  ("replication_factor", replication)):
            if value is not None and not is_int(value):
                raise bad_request(f"{field_name} must be an integer")
        configs = parse_create_configs(body.get("configs"))
        assignment = parse_assignments(body.get("replicas_assignments"))
        validate_only = body.get("validate_only", False)
        if not isinstance(validate_only, bool):
            raise bad_request("validate_only must be a boolean")
        clients = ctx.clients(request)
        try:
            if assignment:
                # librdkafka takes -1 partitions as "the broker's default", which an explicit
                # assignment excludes: the count is the assignment's
                new = NewTopic(name, len(assignment), -1, replica_assignment=assignment,
                               config=configs)
            else:
                new = NewTopic(name, partitions if partitions is not None else -1,
                               replication if replication is not None else -1, config=configs)
            await clients.call(lambda admin: admin.create_topics(
                [new], validate_only=validate_only, operation_timeout=ADMIN_OPERATION_S)[name])
        except (ValueError, TypeError, OverflowError) as exc:  # librdkafka's own checks
            raise RestError(BAD_REQUEST_KAFKA, str(exc), 400) from None
        if assignment:
            partitions, replication = len(assignment), len(assignment[0])
        elif partitions is None or replication is None:
            default_partitions, default_replication = await broker_defaults(clients)
            partitions = default_partitions if partitions is None else partitions
            replication = default_replication if replication is None else replication
        out = topic_body(request, cluster_id, name, internal=False,
                         replication_factor=int(replication), partitions_count=int(partitions))
        return JSONResponse(out, status_code=200 if validate_only else 201,
                            headers={"Location": out["metadata"]["self"]})

    async def update_topic(request: Request) -> Response:
        """PATCH {"partitions_count": n}: more partitions (Kafka never takes any away)."""
        cluster_id = await ctx.check_cluster(request)
        name = request.path_params["topic_name"]
        body = await ctx.read_json(request, required=False)
        if not isinstance(body, dict) or not is_int(body.get("partitions_count")):
            raise invalid_payload("partitions_count is required and must be an integer.")
        count = body["partitions_count"]
        clients = ctx.clients(request)
        desc = await describe_topic(clients, name)
        if count != len(desc.partitions):
            try:
                new = NewPartitions(name, count)
            except (ValueError, TypeError, OverflowError) as exc:
                raise RestError(BAD_REQUEST_KAFKA, str(exc), 400) from None
            await admin_call(clients, lambda admin: admin.create_partitions(
                [new], operation_timeout=ADMIN_OPERATION_S)[name])
            desc = await describe_topic(clients, name)
        return JSONResponse(described_body(request, cluster_id, desc))

    async def delete_topic(request: Request) -> Response:
        await ctx.check_cluster(request)
        name = request.path_params["topic_name"]
        await admin_call(ctx.clients(request), lambda admin: admin.delete_topics(
            [name], operation_timeout=ADMIN_OPERATION_S)[name])
        return Response(status_code=204)

    # -- configs -------------------------------------------------------------------------

    async def list_configs(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        topic = request.path_params["topic_name"]
        entries = await topic_configs(ctx.clients(request), topic)
        return JSONResponse(list_body(
            "KafkaTopicConfigList", f"{base(request, cluster_id)}/topics/{q(topic)}/configs",
            [config_body(request, cluster_id, topic, entries[n]) for n in sorted(entries)]))

    async def get_config(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        topic, name = request.path_params["topic_name"], request.path_params["name"]
        entry = (await topic_configs(ctx.clients(request), topic)).get(name)
        if entry is None:
            raise not_found("HTTP 404 Not Found")
        return JSONResponse(config_body(request, cluster_id, topic, entry))

    async def alter(request: Request, cluster_id: str, topic: str,
                    changes: list[tuple[str, str | None, str]], validate_only: bool) -> None:
        """Incremental changes (name, value, SET|DELETE) to configs the topic has (404 for a
        name it does not, before anything changes)."""
        clients = ctx.clients(request)
        known = await topic_configs(clients, topic)
        for name, value, operation in changes:
            if name not in known:
                raise config_missing(name, topic, cluster_id)
            if operation == "SET" and value is None:
                raise RestError(BAD_REQUEST_KAFKA,
                                f"Null value not supported for topic configs: {name}", 400)
        if not changes:
            return
        entries = [ConfigEntry(name, value, incremental_operation=(
            AlterConfigOpType.SET if operation == "SET" else AlterConfigOpType.DELETE))
            for name, value, operation in changes]
        resource = ConfigResource("topic", topic, incremental_configs=entries)
        await admin_call(clients, lambda admin: admin.incremental_alter_configs(
            [resource], validate_only=validate_only)[resource])

    async def update_config(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        topic, name = request.path_params["topic_name"], request.path_params["name"]
        body = await ctx.read_json(request, required=False)
        if body is not None and not isinstance(body, dict):
            raise bad_request("The request body must be a JSON object")
        value = (body or {}).get("value")
        if value is not None and not isinstance(value, str):
            raise bad_request("value must be a string")
        await alter(request, cluster_id, topic, [(name, value, "SET")], False)
        return Response(status_code=204)

    async def reset_config(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        topic, name = request.path_params["topic_name"], request.path_params["name"]
        await alter(request, cluster_id, topic, [(name, None, "DELETE")], False)
        return Response(status_code=204)

    async def alter_configs(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        topic = request.path_params["topic_name"]
        body = await ctx.read_json(request, required=False)
        if body is None:
            raise invalid_payload("Null input provided. Data is required.")
        changes, validate_only = parse_alter_batch(body)
        await alter(request, cluster_id, topic, changes, validate_only)
        return Response(status_code=204)

    # -- partitions and replicas -----------------------------------------------------------

    async def partition_of(request: Request) -> tuple[str, str, Any]:
        cluster_id = await ctx.check_cluster(request)
        topic, pid = request.path_params["topic_name"], request.path_params["partition_id"]
        desc = await describe_topic(
            ctx.clients(request), topic,
            unknown=f"This server does not host topic-partition {pid} for topic {topic}")
        part = next((p for p in desc.partitions if p.id == pid), None)
        return cluster_id, topic, part

    async def list_partitions(request: Request) -> Response:
        cluster_id = await ctx.check_cluster(request)
        topic = request.path_params["topic_name"]
        desc = await describe_topic(ctx.clients(request), topic)
        parts = sorted(desc.partitions, key=lambda p: p.id)
        return JSONResponse(list_body(
            "KafkaPartitionList", f"{base(request, cluster_id)}/topics/{q(topic)}/partitions",
            [partition_body(request, cluster_id, topic, p) for p in parts]))

    async def get_partition(request: Request) -> Response:
        cluster_id, topic, part = await partition_of(request)
        if part is None:
            raise not_found("HTTP 404 Not Found")
        return JSONResponse(partition_body(request, cluster_id, topic, part))

    async def replicas_of(request: Request) -> tuple[str, str, Any]:
        cluster_id, topic, part = await partition_of(request)
        if part is None:
            pid = request.path_params["partition_id"]
            raise not_found(f"Partition {pid} of topic {topic} could not be found on cluster "
                            f"{cluster_id}.")
        return cluster_id, topic, part

    async def list_replicas(request: Request) -> Response:
        cluster_id, topic, part = await replicas_of(request)
        url = f"{base(request, cluster_id)}/topics/{q(topic)}/partitions/{part.id}/replicas"
        return JSONResponse(list_body("KafkaReplicaList", url, [
            replica_of(request, cluster_id, topic, part, n) for n in part.replicas]))

    async def get_replica(request: Request) -> Response:
        cluster_id, topic, part = await replicas_of(request)
        broker = request.path_params["broker_id"]
        node = next((n for n in part.replicas if n.id == broker), None)
        if node is None:
            raise not_found("HTTP 404 Not Found")
        return JSONResponse(replica_of(request, cluster_id, topic, part, node))

    topics = "/v3/clusters/{cluster_id}/topics"
    one = topics + "/{topic_name}"
    partition = one + "/partitions/{partition_id:int}"
    return [
        by_method(topics, GET=list_topics, POST=create_topic),
        by_method(one, GET=get_topic, PATCH=update_topic, DELETE=delete_topic),
        by_method(one + "/configs", GET=list_configs),
        by_method(one + "/configs:alter", POST=alter_configs),
        by_method(one + "/configs/{name}", GET=get_config, PUT=update_config,
                  DELETE=reset_config),
        by_method(one + "/partitions", GET=list_partitions),
        by_method(partition, GET=get_partition),
        by_method(partition + "/replicas", GET=list_replicas),
        by_method(partition + "/replicas/{broker_id:int}", GET=get_replica),
    ]


Handler = Callable[[Request], Awaitable[Response]]


def by_method(path: str, **handlers: Handler) -> Route:
    """One route per path whatever its methods, so that a 405 lists them all in `Allow`."""

    async def dispatch(request: Request) -> Response:
        method = "GET" if request.method == "HEAD" else request.method
        return await handlers[method](request)

    return Route(path, dispatch, methods=list(handlers))


# -- request bodies ----------------------------------------------------------------------


def parse_create_configs(raw: Any) -> dict[str, str]:
    """`configs: [{name, value}]` of a create; a null value leaves the config at its default."""
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise bad_request("configs must be a list of {name, value}")
    configs: dict[str, str] = {}
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise bad_request("each config must be an object with a string name")
        value = item.get("value")
        if value is not None and not isinstance(value, str):
            raise bad_request(f"the value of config {item['name']} must be a string")
        if value is not None:
            configs[item["name"]] = value
    return configs


def parse_assignments(raw: Any) -> list[list[int]]:
    """`replicas_assignments: {"0": [1, 2], ...}` as librdkafka's list by partition."""
    if raw is None or raw == {}:
        return []
    if not isinstance(raw, dict):
        raise bad_request("replicas_assignments must be an object of partition -> broker ids")
    try:
        by_partition = {int(k): v for k, v in raw.items()}
    except ValueError:
        raise bad_request("replicas_assignments keys must be partition ids") from None
    if sorted(by_partition) != list(range(len(by_partition))):
        raise bad_request("replicas_assignments must name partitions 0..n-1")
    out = []
    for p in range(len(by_partition)):
        replicas = by_partition[p]
        if not isinstance(replicas, list) or not replicas or not all(map(is_int, replicas)):
            raise bad_request("each replicas assignment must be a non-empty list of broker ids")
        out.append(replicas)
    return out


def parse_alter_batch(body: Any) -> tuple[list[tuple[str, str | None, str]], bool]:
    """`{"data": [{name, value?, operation?}], "validate_only"?}`; operation SET (default) or
    DELETE."""
    if not isinstance(body, dict) or not isinstance(body.get("data"), list):
        raise bad_request("The request body must be an object with a data list")
    changes: list[tuple[str, str | None, str]] = []
    for item in body["data"]:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise bad_request("each entry of data must be an object with a string name")
        value, operation = item.get("value"), item.get("operation") or "SET"
        if value is not None and not isinstance(value, str):
            raise bad_request(f"the value of config {item['name']} must be a string")
        if operation not in ("SET", "DELETE"):
            raise bad_request(f"operation must be SET or DELETE, not {operation!r}")
        changes.append((item["name"], value, operation))
    validate_only = body.get("validate_only", False)
    if not isinstance(validate_only, bool):
        raise bad_request("validate_only must be a boolean")
    return changes, validate_only


# -- OpenAPI -----------------------------------------------------------------------------

_META = ref("ResourceMetadata")
_REL = ref("Related")
_SOURCE = {"type": "string", "enum": ["UNKNOWN", *CONFIG_SOURCES]}


def _obj(kind: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["kind", "metadata", *required], "properties": {
        "kind": {"const": kind}, "metadata": _META, **properties}}


SCHEMAS: dict[str, Any] = {
    "Topic": _obj("KafkaTopic", [
        "cluster_id", "topic_name", "is_internal", "replication_factor", "partitions_count",
        "partitions", "configs", "partition_reassignments"], {
        "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
        "is_internal": {"type": "boolean"}, "replication_factor": {"type": "integer"},
        "partitions_count": {"type": "integer"}, "partitions": _REL, "configs": _REL,
        "partition_reassignments": _REL,
        "authorized_operations": {"type": "array", "items": {"type": "string"}}}),
    "TopicList": list_schema("Topic"),
    "CreateTopicRequest": {"type": "object", "required": ["topic_name"], "properties": {
        "topic_name": {"type": "string", "pattern": "^[a-zA-Z0-9._-]{1,249}$",
                       "not": {"enum": [".", ".."]}},
        # -1 (or absent): the broker's default
        "partitions_count": {"type": "integer", "anyOf": [
            {"const": -1}, {"minimum": 1, "maximum": 2**31 - 1}]},
        "replication_factor": {"type": "integer", "anyOf": [
            {"const": -1}, {"minimum": 1, "maximum": 2**15 - 1}]},
        # partition id -> broker ids, for partitions 0..n-1
        "replicas_assignments": {"type": "object", "propertyNames": {"pattern": "^[0-9]+$"},
                                 "additionalProperties": {
                                     "type": "array", "minItems": 1,
                                     "items": {"type": "integer"}}},
        "configs": {"type": "array", "items": {
            "type": "object", "required": ["name"], "properties": {
                "name": {"type": "string"}, "value": {"type": ["string", "null"]}}}},
        "validate_only": {"type": "boolean"}}},
    "UpdatePartitionCountRequest": {"type": "object", "required": ["partitions_count"],
                                    "properties": {"partitions_count": {
                                        "type": "integer", "minimum": 1,
                                        "maximum": 2**31 - 1}}},
    "ConfigSynonym": {"type": "object", "required": ["name", "source"], "properties": {
        "name": {"type": "string"}, "value": {"type": ["string", "null"]}, "source": _SOURCE}},
    "TopicConfig": _obj("KafkaTopicConfig", [
        "cluster_id", "topic_name", "name", "is_default", "is_read_only", "is_sensitive",
        "source", "synonyms"], {
        "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
        "name": {"type": "string"}, "value": {"type": ["string", "null"]},
        "is_default": {"type": "boolean"}, "is_read_only": {"type": "boolean"},
        "is_sensitive": {"type": "boolean"}, "source": _SOURCE,
        "synonyms": {"type": "array", "items": ref("ConfigSynonym")}}),
    "TopicConfigList": list_schema("TopicConfig"),
    # Confluent's schema allows a null value, which Kafka refuses (400): declared as required
    "UpdateConfigRequest": {"type": "object", "required": ["value"], "properties": {
        "value": {"type": "string"}}},
    "AlterConfigBatchRequest": {"type": "object", "required": ["data"], "properties": {
        "data": {"type": "array", "items": {"oneOf": [
            {"type": "object", "required": ["name", "value"], "properties": {
                "name": {"type": "string"}, "value": {"type": "string"},
                "operation": {"type": ["string", "null"], "enum": ["SET", None]}}},
            {"type": "object", "required": ["name", "operation"], "properties": {
                "name": {"type": "string"}, "value": {"type": ["string", "null"]},
                "operation": {"const": "DELETE"}}}]}},
        "validate_only": {"type": "boolean"}}},
    "Partition": _obj("KafkaPartition", [
        "cluster_id", "topic_name", "partition_id", "replicas", "reassignment"], {
        "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
        "partition_id": {"type": "integer"},
        "leader": {"oneOf": [_REL, {"type": "null"}]}, "replicas": _REL, "reassignment": _REL}),
    "PartitionList": list_schema("Partition"),
    "Replica": _obj("KafkaReplica", [
        "cluster_id", "topic_name", "partition_id", "broker_id", "is_leader", "is_in_sync",
        "broker"], {
        "cluster_id": {"type": "string"}, "topic_name": {"type": "string"},
        "partition_id": {"type": "integer"}, "broker_id": {"type": "integer"},
        "is_leader": {"type": "boolean"}, "is_in_sync": {"type": "boolean"}, "broker": _REL}),
    "ReplicaList": list_schema("Replica"),
}

_TOPIC = path_param("topic_name")
_PARTITION = path_param("partition_id", "integer")
_CONFIG = path_param("name")
_NO_CONTENT = {"204": {"description": "No Content"}}


def _body(schema: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(schema)}}}


def _op(op_id: str, summary: str, params: list[dict[str, Any]], responses: dict[str, Any],
        *, errors: tuple[int, ...] = (401, 403, 404, 500), **extra: Any) -> dict[str, Any]:
    return {"summary": summary, "operationId": op_id, "parameters": params,
            "responses": {**responses, **error_responses(*errors)}, **extra}


PATHS: dict[str, Any] = {
    "/v3/clusters/{cluster_id}/topics": {
        "get": _op("listKafkaTopics", "The cluster's topics (internal ones left out)",
                   [CLUSTER_ID], {"200": ok("TopicList")}),
        "post": _op("createKafkaTopic", "Create a topic (or only validate its creation)",
                    [CLUSTER_ID], {"201": ok("Topic", "Created"),
                                   "200": ok("Topic", "Validated, not created")},
                    errors=(400, 401, 403, 404, 413, 422, 429, 500),
                    requestBody=_body("CreateTopicRequest")),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}": {
        "get": _op("getKafkaTopic", "One topic", [
            CLUSTER_ID, _TOPIC, {"name": "include_authorized_operations", "in": "query",
                                 "required": False, "schema": {"type": "boolean"}}],
            {"200": ok("Topic")}, errors=(400, 401, 403, 404, 500)),
        "patch": _op("updateKafkaTopicPartitionCount", "Raise the topic's partition count",
                     [CLUSTER_ID, _TOPIC], {"200": ok("Topic")},
                     errors=(400, 401, 403, 404, 413, 422, 500),
                     requestBody=_body("UpdatePartitionCountRequest")),
        "delete": _op("deleteKafkaTopic", "Delete a topic", [CLUSTER_ID, _TOPIC], _NO_CONTENT,
                      errors=(400, 401, 403, 404, 429, 500)),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/configs": {
        "get": _op("listKafkaTopicConfigs", "The topic's configs", [CLUSTER_ID, _TOPIC],
                   {"200": ok("TopicConfigList")}),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/configs:alter": {
        "post": _op("updateKafkaTopicConfigBatch", "Set or reset several configs at once "
                    "(incremental; validate_only to only check)", [CLUSTER_ID, _TOPIC],
                    _NO_CONTENT, errors=(400, 401, 403, 404, 413, 422, 500),
                    requestBody=_body("AlterConfigBatchRequest")),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/configs/{name}": {
        "get": _op("getKafkaTopicConfig", "One config of the topic", [CLUSTER_ID, _TOPIC, _CONFIG],
                   {"200": ok("TopicConfig")}),
        "put": _op("updateKafkaTopicConfig", "Set one config", [CLUSTER_ID, _TOPIC, _CONFIG],
                   _NO_CONTENT, errors=(400, 401, 403, 404, 413, 500),
                   requestBody=_body("UpdateConfigRequest")),
        "delete": _op("deleteKafkaTopicConfig", "Reset one config to its default",
                      [CLUSTER_ID, _TOPIC, _CONFIG], _NO_CONTENT,
                      errors=(400, 401, 403, 404, 500)),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions": {
        "get": _op("listKafkaPartitions", "The topic's partitions", [CLUSTER_ID, _TOPIC],
                   {"200": ok("PartitionList")}),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}": {
        "get": _op("getKafkaPartition", "One partition", [CLUSTER_ID, _TOPIC, _PARTITION],
                   {"200": ok("Partition")}),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas": {
        "get": _op("listKafkaReplicas", "The partition's replicas",
                   [CLUSTER_ID, _TOPIC, _PARTITION], {"200": ok("ReplicaList")}),
    },
    "/v3/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas/"
    "{broker_id}": {
        "get": _op("getKafkaReplica", "The partition's replica on one broker",
                   [CLUSTER_ID, _TOPIC, _PARTITION, path_param("broker_id", "integer")],
                   {"200": ok("Replica")}),
    },
}

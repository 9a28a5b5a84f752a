"""REST Proxy v3: consumer groups, their consumers and assignments, and their lag
(`/v3/clusters/{id}/consumer-groups/...`), through the user's AdminClient.

Lag is what Confluent reports: for each partition with a committed offset, the read-committed
log end minus that offset (never below 0), with the member the partition is assigned to ("" when
none). A group Kafka only describes as a placeholder (simple and Dead) does not exist.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute

from strom.protocol.errors import ErrorCode
from strom.rest.clients import UserClients, rest_error_of
from strom.rest.context import RestContext, list_body, related, resource_metadata
from strom.rest.errors import RestError, not_found
from strom.rest.openapi import CLUSTER_ID, error_responses, list_schema, ok, path_param, ref
from strom.rest.v3.clusters import cluster_path, crn
from strom.rest.v3.topics import by_method, q

# librdkafka's state names -> Confluent's
_STATES = {"PREPARING_REBALANCING": "PREPARING_REBALANCE",
           "COMPLETING_REBALANCING": "COMPLETING_REBALANCE"}
STATES = ("UNKNOWN", "PREPARING_REBALANCE", "COMPLETING_REBALANCE", "ASSIGNING", "RECONCILING",
          "STABLE", "DEAD", "EMPTY")
TYPES = ("UNKNOWN", "CLASSIC", "CONSUMER", "SHARE")
_MISSING_GROUP = {ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID,
                  ErrorCode.GROUP_AUTHORIZATION_FAILED}
HTTP_404 = "HTTP 404 Not Found"


def state_name(state: Any) -> str:
    name = getattr(state, "name", None) or str(state)
    name = _STATES.get(name, name)
    return name if name in STATES else "UNKNOWN"


def type_name(group_type: Any) -> str:
    name = getattr(group_type, "name", None) or str(group_type)
    return name if name in TYPES else "UNKNOWN"


def exists(desc: Any) -> bool:
    """Kafka answers a describe of an unknown group with a simple, Dead placeholder."""
    return not (desc.is_simple_consumer_group and state_name(desc.state) == "DEAD")


@dataclass(frozen=True)
class Lag:
    topic: str
    partition: int
    current: int
    end: int
    member: Any  # the MemberDescription the partition is assigned to, or None

    @property
    def lag(self) -> int:
        return max(0, self.end - self.current)

    @property
    def consumer_id(self) -> str:
        return self.member.member_id if self.member is not None else ""

    @property
    def instance_id(self) -> str | None:
        return self.member.group_instance_id if self.member is not None else None

    @property
    def client_id(self) -> str:
        return self.member.client_id if self.member is not None else ""


async def describe_groups(clients: UserClients, group_ids: list[str]) -> list[Any]:
    """ConsumerGroupDescriptions of the groups that exist (and the user may see)."""
    if not group_ids:
        return []
    futures = clients.admin.describe_consumer_groups(group_ids)
    results = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures.values()),
                                   return_exceptions=True)
    found = []
    for result in results:
        if isinstance(result, KafkaException):
            err = result.args[0] if result.args else None
            if err is not None and getattr(err, "code", lambda: None)() in _MISSING_GROUP:
                continue
            raise rest_error_of(result) from None
        if isinstance(result, BaseException):
            raise result
        if exists(result):
            found.append(result)
    return found


async def group_lags(clients: UserClients, desc: Any) -> list[Lag]:
    """Each partition the group has an offset for, with its log end (read-committed)."""
    group_id = desc.group_id
    listed = await clients.call(lambda admin: admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group_id)])[group_id])
    committed = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or ()
                 if tp.error is None and tp.offset >= 0}
    if not committed:
        raise not_found("Consumer group offsets could not be found.")
    futures = clients.admin.list_offsets(
        {TopicPartition(t, p): OffsetSpec.latest() for t, p in committed},
        isolation_level=IsolationLevel.READ_COMMITTED)
    keys = list(futures)
    results = await asyncio.gather(*(asyncio.wrap_future(futures[k]) for k in keys),
                                   return_exceptions=True)
    ends = {(k.topic, k.partition): r.offset for k, r in zip(keys, results, strict=True)
            if not isinstance(r, BaseException)}  # a partition without a leader now: left out
    owners = {(tp.topic, tp.partition): m for m in desc.members
              for tp in m.assignment.topic_partitions}
    return [Lag(t, p, committed[(t, p)], ends[(t, p)], owners.get((t, p)))
            for t, p in sorted(committed) if (t, p) in ends]


def routes(ctx: RestContext) -> list[BaseRoute]:
    def group_url(request: Request, cluster_id: str, group_id: str) -> str:
        return ctx.url(request, f"{cluster_path(cluster_id)}/consumer-groups/{q(group_id)}")

    def group_body(request: Request, cluster_id: str, desc: Any) -> dict[str, Any]:
        gid = desc.group_id
        url = group_url(request, cluster_id, gid)
        node = desc.coordinator
        return {
            "kind": "KafkaConsumerGroup",
            "metadata": resource_metadata(url, crn(cluster_id, f"consumer-group={gid}")),
            "cluster_id": cluster_id,
            "consumer_group_id": gid,
            "is_simple": bool(desc.is_simple_consumer_group),
            "partition_assignor": desc.partition_assignor or "",
            "state": state_name(desc.state),
            "type": type_name(getattr(desc, "type", "UNKNOWN")),
            # librdkafka does not say whether a member of a consumer group still speaks the
            # classic protocol: no group is reported mixed
            "is_mixed_consumer_group": False,
            "coordinator": related(ctx.url(request, f"{cluster_path(cluster_id)}/brokers/"
                                                    f"{node.id}")) if node is not None else None,
            "consumers": related(f"{url}/consumers"),
            "lag_summary": related(f"{url}/lag-summary"),
        }

    def consumer_body(request: Request, cluster_id: str, gid: str, member: Any
                      ) -> dict[str, Any]:
        url = f"{group_url(request, cluster_id, gid)}/consumers/{q(member.member_id)}"
        return {
            "kind": "KafkaConsumer",
            "metadata": resource_metadata(url, crn(
                cluster_id, f"consumer-group={gid}", f"consumer={member.member_id}")),
            "cluster_id": cluster_id,
            "consumer_group_id": gid,
            "consumer_id": member.member_id,
            "instance_id": member.group_instance_id,
            "client_id": member.client_id,
            "assignments": related(f"{url}/assignments"),
        }

    def assignment_body(request: Request, cluster_id: str, gid: str, member_id: str,
                        topic: str, partition: int) -> dict[str, Any]:
        group = group_url(request, cluster_id, gid)
        url = f"{group}/consumers/{q(member_id)}/assignments/{q(topic)}/partitions/{partition}"
        topics = ctx.url(request, f"{cluster_path(cluster_id)}/topics")
        return {
            "kind": "KafkaConsumerAssignment",
            "metadata": resource_metadata(url, crn(
                cluster_id, f"consumer-group={gid}", f"consumer={member_id}",
                f"assignment={topic}", f"partition={partition}")),
            "cluster_id": cluster_id,
            "consumer_group_id": gid,
            "consumer_id": member_id,
            "topic_name": topic,
            "partition_id": partition,
            "partition": related(f"{topics}/{q(topic)}/partitions/{partition}"),
            "lag": related(f"{group}/lags/{q(topic)}/partitions/{partition}"),
        }

    def lag_body(request: Request, cluster_id: str, gid: str, lag: Lag) -> dict[str, Any]:
        url = f"{group_url(request, cluster_id, gid)}/lags/{q(lag.topic)}/partitions/" \
              f"{lag.partition}"
        return {
            "kind": "KafkaConsumerLag",
            "metadata": resource_metadata(url, crn(
                cluster_id, f"consumer-group={gid}", f"lag={lag.topic}",
                f"partition={lag.partition}")),
            "cluster_id": cluster_id,
            "consumer_group_id": gid,
            "topic_name": lag.topic,
            "partition_id": lag.partition,
            "current_offset": lag.current,
            "log_end_offset": lag.end,
            "lag": lag.lag,
            "consumer_id": lag.consumer_id,
            "instance_id": lag.instance_id,
            "client_id": lag.client_id,
        }

    async def check_cluster(request: Request) -> str:
        """The path's cluster, worded as Confluent's consumer-group resources word it."""
        try:
            return await ctx.check_cluster(request)
        except RestError as exc:
            if exc.status != 404:
                raise
            raise not_found(
                f"Cluster {request.path_params['cluster_id']} could not be found.") from None

    async def group_of(request: Request, missing: str) -> tuple[str, UserClients, Any]:
        cluster_id = await check_cluster(request)
        clients = ctx.clients(request)
        gid = request.path_params["consumer_group_id"]
        found = await describe_groups(clients, [gid])
        if not found:
            raise not_found(missing.format(gid))
        return cluster_id, clients, found[0]

    async def member_of(request: Request, missing: str) -> tuple[str, Any, Any]:
        cluster_id, _, desc = await group_of(request, "Consumer Group {} does not exist.")
        wanted = request.path_params["consumer_id"]
        member = next((m for m in desc.members if m.member_id == wanted), None)
        if member is None:
            raise not_found(missing.format(wanted))
        return cluster_id, desc, member

    async def lags_of(request: Request) -> tuple[str, Any, list[Lag]]:
        cluster_id, clients, desc = await group_of(
            request, "Consumer Group {} could not be found.")
        return cluster_id, desc, await group_lags(clients, desc)

    # -- groups and consumers ------------------------------------------------------------

    async def list_groups(request: Request) -> Response:
        cluster_id = await check_cluster(request)
        clients = ctx.clients(request)
        # consumer groups of either protocol, as Kafka's listConsumerGroups: no share or
        # streams groups
        listed = await clients.call(lambda admin: admin.list_consumer_groups(
            types={ConsumerGroupType.CONSUMER, ConsumerGroupType.CLASSIC}))
        descs = await describe_groups(clients, sorted({g.group_id for g in listed.valid}))
        return JSONResponse(list_body(
            "KafkaConsumerGroupList",
            ctx.url(request, f"{cluster_path(cluster_id)}/consumer-groups"),
            [group_body(request, cluster_id, d) for d in descs]))

    async def get_group(request: Request) -> Response:
        cluster_id, _, desc = await group_of(request, HTTP_404)
        return JSONResponse(group_body(request, cluster_id, desc))

    async def list_consumers(request: Request) -> Response:
        cluster_id, _, desc = await group_of(request, "Consumer Group {} does not exist.")
        gid = desc.group_id
        members = sorted(desc.members, key=lambda m: m.member_id)
        return JSONResponse(list_body(
            "KafkaConsumerList", f"{group_url(request, cluster_id, gid)}/consumers",
            [consumer_body(request, cluster_id, gid, m) for m in members]))

    async def get_consumer(request: Request) -> Response:
        cluster_id, desc, member = await member_of(request, HTTP_404)
        return JSONResponse(consumer_body(request, cluster_id, desc.group_id, member))

    async def list_assignments(request: Request) -> Response:
        cluster_id, desc, member = await member_of(request, "Consumer {} does not exist.")
        gid, mid = desc.group_id, member.member_id
        tps = sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions)
        return JSONResponse(list_body(
            "KafkaConsumerAssignmentList",
            f"{group_url(request, cluster_id, gid)}/consumers/{q(mid)}/assignments",
            [assignment_body(request, cluster_id, gid, mid, t, p) for t, p in tps]))

    async def get_assignment(request: Request) -> Response:
        cluster_id, desc, member = await member_of(request, "Consumer {} does not exist.")
        topic, pid = request.path_params["topic_name"], request.path_params["partition_id"]
        if not any(tp.topic == topic and tp.partition == pid
                   for tp in member.assignment.topic_partitions):
            raise not_found(HTTP_404)
        return JSONResponse(assignment_body(
            request, cluster_id, desc.group_id, member.member_id, topic, pid))

    # -- lag -----------------------------------------------------------------------------

    async def list_lags(request: Request) -> Response:
        cluster_id, desc, lags = await lags_of(request)
        if not lags:
            raise not_found("Consumer lags not found.")
        gid = desc.group_id
        ordered = sorted(lags, key=lambda x: (-x.lag, x.topic, x.partition))
        return JSONResponse(list_body(
            "KafkaConsumerLagList", f"{group_url(request, cluster_id, gid)}/lags",
            [lag_body(request, cluster_id, gid, x) for x in ordered]))

    async def get_lag(request: Request) -> Response:
        cluster_id, desc, lags = await lags_of(request)
        topic, pid = request.path_params["topic_name"], request.path_params["partition_id"]
        found = next((x for x in lags if x.topic == topic and x.partition == pid), None)
        if found is None:
            raise not_found(HTTP_404)
        return JSONResponse(lag_body(request, cluster_id, desc.group_id, found))

    async def lag_summary(request: Request) -> Response:
        cluster_id, desc, lags = await lags_of(request)
        if not lags:
            raise not_found("Consumer lags not found.")
        gid = desc.group_id
        top = lags[0]
        for x in lags[1:]:  # the first partition (by topic, partition) with the largest lag
            if x.lag > top.lag:
                top = x
        url = f"{group_url(request, cluster_id, gid)}/lag-summary"
        topics = ctx.url(request, f"{cluster_path(cluster_id)}/topics")
        return JSONResponse({
            "kind": "KafkaConsumerGroupLagSummary",
            "metadata": resource_metadata(url, crn(
                cluster_id, f"consumer-group={gid}", "lag-summary")),
            "cluster_id": cluster_id,
            "consumer_group_id": gid,
            "max_lag_consumer_id": top.consumer_id,
            "max_lag_instance_id": top.instance_id,
            "max_lag_client_id": top.client_id,
            "max_lag_topic_name": top.topic,
            "max_lag_partition_id": top.partition,
            "max_lag": top.lag,
            "total_lag": sum(x.lag for x in lags),
            "max_lag_consumer": related(
                f"{group_url(request, cluster_id, gid)}/consumers/{q(top.consumer_id)}"),
            "max_lag_partition": related(
                f"{topics}/{q(top.topic)}/partitions/{top.partition}"),
        })

    groups = "/v3/clusters/{cluster_id}/consumer-groups"
    one = groups + "/{consumer_group_id:segment}"
    consumer = one + "/consumers/{consumer_id:segment}"
    return [
        by_method(groups, GET=list_groups),
        by_method(one, GET=get_group),
        by_method(one + "/consumers", GET=list_consumers),
        by_method(consumer, GET=get_consumer),
        by_method(consumer + "/assignments", GET=list_assignments),
        by_method(consumer + "/assignments/{topic_name}/partitions/{partition_id:int}",
                  GET=get_assignment),
        by_method(one + "/lag-summary", GET=lag_summary),
        by_method(one + "/lags", GET=list_lags),
        by_method(one + "/lags/{topic_name}/partitions/{partition_id:int}", GET=get_lag),
    ]


# -- OpenAPI -----------------------------------------------------------------------------

_META = ref("ResourceMetadata")
_REL = ref("Related")
_STR = {"type": "string"}
_INT = {"type": "integer"}
_NULLABLE_STR = {"type": ["string", "null"]}


def _obj(kind: str, required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "required": ["kind", "metadata", *required], "properties": {
        "kind": {"const": kind}, "metadata": _META, **properties}}


SCHEMAS: dict[str, Any] = {
    "ConsumerGroup": _obj("KafkaConsumerGroup", [
        "cluster_id", "consumer_group_id", "is_simple", "partition_assignor", "state", "type",
        "is_mixed_consumer_group", "coordinator", "consumers", "lag_summary"], {
        "cluster_id": _STR, "consumer_group_id": _STR, "is_simple": {"type": "boolean"},
        "partition_assignor": _STR, "state": {"type": "string", "enum": list(STATES)},
        "type": {"type": "string", "enum": list(TYPES)},
        "is_mixed_consumer_group": {"type": "boolean"},
        "coordinator": {"oneOf": [_REL, {"type": "null"}]}, "consumers": _REL,
        "lag_summary": _REL}),
    "ConsumerGroupList": list_schema("ConsumerGroup"),
    "Consumer": _obj("KafkaConsumer", [
        "cluster_id", "consumer_group_id", "consumer_id", "client_id", "assignments"], {
        "cluster_id": _STR, "consumer_group_id": _STR, "consumer_id": _STR,
        "instance_id": _NULLABLE_STR, "client_id": _STR, "assignments": _REL}),
    "ConsumerList": list_schema("Consumer"),
    "ConsumerAssignment": _obj("KafkaConsumerAssignment", [
        "cluster_id", "consumer_group_id", "consumer_id", "topic_name", "partition_id",
        "partition", "lag"], {
        "cluster_id": _STR, "consumer_group_id": _STR, "consumer_id": _STR, "topic_name": _STR,
        "partition_id": _INT, "partition": _REL, "lag": _REL}),
    "ConsumerAssignmentList": list_schema("ConsumerAssignment"),
    "ConsumerLag": _obj("KafkaConsumerLag", [
        "cluster_id", "consumer_group_id", "topic_name", "partition_id", "current_offset",
        "log_end_offset", "lag", "consumer_id", "client_id"], {
        "cluster_id": _STR, "consumer_group_id": _STR, "topic_name": _STR, "partition_id": _INT,
        "current_offset": _INT, "log_end_offset": _INT, "lag": _INT, "consumer_id": _STR,
        "instance_id": _NULLABLE_STR, "client_id": _STR}),
    "ConsumerLagList": list_schema("ConsumerLag"),
    "ConsumerGroupLagSummary": _obj("KafkaConsumerGroupLagSummary", [
        "cluster_id", "consumer_group_id", "max_lag_consumer_id", "max_lag_client_id",
        "max_lag_topic_name", "max_lag_partition_id", "max_lag", "total_lag",
        "max_lag_consumer", "max_lag_partition"], {
        "cluster_id": _STR, "consumer_group_id": _STR, "max_lag_consumer_id": _STR,
        "max_lag_instance_id": _NULLABLE_STR, "max_lag_client_id": _STR,
        "max_lag_topic_name": _STR, "max_lag_partition_id": _INT, "max_lag": _INT,
        "total_lag": _INT, "max_lag_consumer": _REL, "max_lag_partition": _REL}),
}

_GROUP = path_param("consumer_group_id")
_CONSUMER = path_param("consumer_id")
_TOPIC = path_param("topic_name")
_PARTITION = path_param("partition_id", "integer")
_ERRORS = error_responses(401, 403, 404, 500)


def _get(op_id: str, summary: str, params: list[dict[str, Any]], schema: str
         ) -> dict[str, Any]:
    return {"get": {"summary": summary, "operationId": op_id, "parameters": params,
                    "responses": {"200": ok(schema), **_ERRORS}}}


_BASE = "/v3/clusters/{cluster_id}/consumer-groups"
PATHS: dict[str, Any] = {
    _BASE: _get("listKafkaConsumerGroups", "The cluster's consumer groups", [CLUSTER_ID],
                "ConsumerGroupList"),
    _BASE + "/{consumer_group_id}": _get(
        "getKafkaConsumerGroup", "One consumer group", [CLUSTER_ID, _GROUP], "ConsumerGroup"),
    _BASE + "/{consumer_group_id}/consumers": _get(
        "listKafkaConsumers", "The group's members", [CLUSTER_ID, _GROUP], "ConsumerList"),
    _BASE + "/{consumer_group_id}/consumers/{consumer_id}": _get(
        "getKafkaConsumer", "One member of the group", [CLUSTER_ID, _GROUP, _CONSUMER],
        "Consumer"),
    _BASE + "/{consumer_group_id}/consumers/{consumer_id}/assignments": _get(
        "listKafkaConsumerAssignment", "The partitions assigned to a member",
        [CLUSTER_ID, _GROUP, _CONSUMER], "ConsumerAssignmentList"),
    _BASE + "/{consumer_group_id}/consumers/{consumer_id}/assignments/{topic_name}/"
    "partitions/{partition_id}": _get(
        "getKafkaConsumerAssignment", "One partition assigned to a member",
        [CLUSTER_ID, _GROUP, _CONSUMER, _TOPIC, _PARTITION], "ConsumerAssignment"),
    _BASE + "/{consumer_group_id}/lag-summary": _get(
        "getKafkaConsumerGroupLagSummary", "The group's largest and total lag",
        [CLUSTER_ID, _GROUP], "ConsumerGroupLagSummary"),
    _BASE + "/{consumer_group_id}/lags": _get(
        "listKafkaConsumerLags", "The group's lag on each partition it has an offset for",
        [CLUSTER_ID, _GROUP], "ConsumerLagList"),
    _BASE + "/{consumer_group_id}/lags/{topic_name}/partitions/{partition_id}": _get(
        "getKafkaConsumerLag", "The group's lag on one partition",
        [CLUSTER_ID, _GROUP, _TOPIC, _PARTITION], "ConsumerLag"),
}

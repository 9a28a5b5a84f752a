"""AlterPartitionReassignments and ListPartitionReassignments (KIP-455).

Any broker accepts them (each change is a compare-and-set on the cluster's metadata, so no
request has to reach the active controller); the active controller carries reassignments out.
An accepted request is answered once this broker's image shows it.
"""

from __future__ import annotations

from typing import Any

from strom.broker.authz import Op, Res, cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
)
from strom.broker.router import handles
from strom.cluster.controller import too_many_records
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


@handles(ApiKey.ALTER_PARTITION_REASSIGNMENTS, 0, 1)
@requires(Op.ALTER, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
async def alter_partition_reassignments(broker: Broker, ctx: RequestContext,
                                        request: AlterPartitionReassignmentsRequest) -> dict[str, Any]:
    allow = request.allow_replication_factor_change  # v0: True
    wanted: dict[tuple[str, int], list[int] | None] = {}
    duplicates: set[tuple[str, int]] = set()
    for topic in request.topics:
        for p in topic.partitions:
            key = (topic.name, p.partition_index)
            if key in wanted:
                duplicates.add(key)
            wanted[key] = None if p.replicas is None else [int(r) for r in p.replicas]
    too_large = too_many_records(sum(len(t.partitions) for t in request.topics),
                                 "Unable to perform excessively large batch operation.")
    if too_large is not None:  # as Kafka: the whole request fails, each partition says so
        return _reply(allow, {k: (too_large.code, too_large.message, None) for k in wanted},
                      too_large.code, too_large.message)
    results = await broker.controller.alter_partition_reassignments(
        {k: v for k, v in wanted.items() if k not in duplicates}, allow)
    for key in duplicates:
        results[key] = (ErrorCode.INVALID_REQUEST,
                        "the partition appears more than once in the request", None)
    planned = {k: r[2] for k, r in results.items() if r[2] is not None}

    def shown(image: Any) -> bool:  # every accepted change has reached our image
        for (topic, p), assignment in planned.items():
            t = image.topics.get(topic)
            state = t.partitions.get(p) if t is not None else None
            if state is not None and tuple(state.target_replicas) != assignment.target:
                return False
        return True

    if planned:
        await broker.controller.wait_until(shown, min(max(request.timeout, 0), 30_000) / 1000)
    return _reply(allow, results, ErrorCode.NONE, None)


def _reply(allow: bool, results: dict[tuple[str, int], tuple[int, str | None, Any]],
           error: int, message: str | None) -> dict[str, Any]:
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, p), (code, text, _) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            {"partition_index": p, "error_code": int(code), "error_message": text})
    return {"throttle_time": 0, "allow_replication_factor_change": allow,
            "error_code": int(error), "error_message": message,
            "responses": [{"name": t, "partitions": parts} for t, parts in by_topic.items()]}


@handles(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, 0)
@requires(Op.DESCRIBE, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
def list_partition_reassignments(broker: Broker, ctx: RequestContext,
                                 request: ListPartitionReassignmentsRequest) -> dict[str, Any]:
    """Partitions with a reassignment under way (all, or among those asked for); partitions
    that do not exist or are not moving are left out, as Kafka does."""
    image = broker.image
    if request.topics is None:
        wanted = [(t, sorted(t.partitions)) for t in image.topics.values()]
    else:
        wanted = []
        for asked in request.topics:
            t = image.topics.get(asked.name)
            if t is not None:
                wanted.append((t, list(asked.partition_indexes)))
    topics = []
    for t, parts in sorted(wanted, key=lambda tp: tp[0].name):
        ongoing = []
        for p in sorted(set(parts)):
            state = t.partitions.get(p)
            if state is not None and state.reassigning:
                ongoing.append({"partition_index": p, "replicas": list(state.replicas),
                                "adding_replicas": list(state.adding_replicas),
                                "removing_replicas": list(state.removing_replicas)})
        if ongoing:
            topics.append({"name": t.name, "partitions": ongoing})
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "topics": topics}

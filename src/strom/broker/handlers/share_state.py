"""Share-state APIs (KIP-932), between brokers: InitializeShareGroupState,
ReadShareGroupState, WriteShareGroupState, DeleteShareGroupState and
ReadShareGroupStateSummary, answered by this broker's share coordinator
(`strom.coordinator.share`) for the share partitions whose `__share_group_state` partition it
leads (NOT_COORDINATOR for the others).

Share-partition leaders send them (`strom.broker.share_persister.RoutingPersister`), so like
Kafka they need CLUSTER_ACTION on the cluster; refused, every partition of the request gets
CLUSTER_AUTHORIZATION_FAILED. A request without a group id or without topics is answered with
no results, as Kafka answers it. FindCoordinator(key_type SHARE) lives in `groups.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from strom.broker.authz import Op, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import (
    DeleteShareGroupStateRequest,
    InitializeShareGroupStateRequest,
    ReadShareGroupStateRequest,
    ReadShareGroupStateSummaryRequest,
    WriteShareGroupStateRequest,
)
from strom.broker.router import handles
from strom.coordinator.share.state import PartitionState, SharePartitionKey, StateBatch
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

PartitionFn = Callable[[SharePartitionKey, Any], Awaitable[dict[str, Any]]]

# What a partition result holds besides its error (Kafka's defaults when it failed).
_READ_DEFAULTS = {"state_epoch": 0, "start_offset": 0, "state_batches": []}
_SUMMARY_DEFAULTS = {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0,
                     "delivery_complete_count": -1}


async def _each_partition(broker: Broker, ctx: RequestContext, request: Any, fn: PartitionFn,
                          defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """Run `fn` for every partition of the request (concurrently: in a cluster each waits for
    its replicas) and gather the results per topic, errors as Kafka reports them."""
    if not request.group_id or not request.topics:
        return {"results": []}
    permitted = cluster_allowed(broker, ctx, Op.CLUSTER_ACTION)

    async def one(key: SharePartitionKey, p: Any) -> dict[str, Any]:
        base = {"partition": key.partition, "error_code": 0, "error_message": None}
        try:
            if not permitted:
                raise KafkaError(ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                 "Cluster authorization failed.")
            return {**base, **await fn(key, p)}
        except KafkaError as exc:
            return {**base, **(defaults or {}), "error_code": int(exc.code),
                    "error_message": exc.message or exc.code.name}

    jobs = [(t.topic_id, one(SharePartitionKey(request.group_id, t.topic_id, p.partition), p))
            for t in request.topics for p in t.partitions]
    done = await asyncio.gather(*(job for _, job in jobs))
    results: dict[Any, list[dict[str, Any]]] = {}
    for (topic_id, _), partition in zip(jobs, done, strict=True):
        results.setdefault(topic_id, []).append(partition)
    return {"results": [{"topic_id": t, "partitions": ps} for t, ps in results.items()]}


@handles(ApiKey.INITIALIZE_SHARE_GROUP_STATE, 0, 0)
async def initialize_share_group_state(broker: Broker, ctx: RequestContext,
                                       request: InitializeShareGroupStateRequest
                                       ) -> dict[str, Any]:
    async def initialize(key: SharePartitionKey, p: Any) -> dict[str, Any]:
        await broker.share_coordinator.initialize(key, p.state_epoch, p.start_offset)
        return {}

    return await _each_partition(broker, ctx, request, initialize)


@handles(ApiKey.READ_SHARE_GROUP_STATE, 0, 0)
async def read_share_group_state(broker: Broker, ctx: RequestContext,
                                 request: ReadShareGroupStateRequest) -> dict[str, Any]:
    async def read(key: SharePartitionKey, p: Any) -> dict[str, Any]:
        state: PartitionState = await broker.share_coordinator.read(key, p.leader_epoch)
        return {"state_epoch": state.state_epoch, "start_offset": state.start_offset,
                "state_batches": [{"first_offset": b.first_offset, "last_offset": b.last_offset,
                                   "delivery_state": b.delivery_state,
                                   "delivery_count": b.delivery_count,
                                   "not_before_ms": b.not_before_ms} for b in state.batches]}

    return await _each_partition(broker, ctx, request, read, _READ_DEFAULTS)


@handles(ApiKey.WRITE_SHARE_GROUP_STATE, 0, 1)
async def write_share_group_state(broker: Broker, ctx: RequestContext,
                                  request: WriteShareGroupStateRequest) -> dict[str, Any]:
    async def write(key: SharePartitionKey, p: Any) -> dict[str, Any]:
        batches = [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count,
                              b.not_before_ms) for b in p.state_batches]
        await broker.share_coordinator.write(key, p.state_epoch, p.leader_epoch,
                                             p.start_offset, batches,
                                             p.delivery_complete_count)  # v0: -1
        return {}

    return await _each_partition(broker, ctx, request, write)


@handles(ApiKey.DELETE_SHARE_GROUP_STATE, 0, 0)
async def delete_share_group_state(broker: Broker, ctx: RequestContext,
                                   request: DeleteShareGroupStateRequest) -> dict[str, Any]:
    async def delete(key: SharePartitionKey, p: Any) -> dict[str, Any]:
        await broker.share_coordinator.delete(key)
        return {}

    return await _each_partition(broker, ctx, request, delete)


@handles(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, 1)
async def read_share_group_state_summary(broker: Broker, ctx: RequestContext,
                                         request: ReadShareGroupStateSummaryRequest
                                         ) -> dict[str, Any]:
    async def summary(key: SharePartitionKey, p: Any) -> dict[str, Any]:
        state = broker.share_coordinator.read_summary(key)
        return {"state_epoch": state.state_epoch, "leader_epoch": state.leader_epoch,
                "start_offset": state.start_offset,
                "delivery_complete_count": state.delivery_complete_count}

    return await _each_partition(broker, ctx, request, summary, _SUMMARY_DEFAULTS)

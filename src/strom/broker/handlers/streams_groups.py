"""StreamsGroupHeartbeat and StreamsGroupDescribe (KIP-1071, the streams rebalance protocol).

Thin translation to the streams group manager's `heartbeat` / `describe`
(`broker.groups.streams`).
Version 0 only: kio, Strom's schema source, has no v1 (KIP-1331's topology description), and
the Java client negotiates down to v0.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from strom.broker.authz import (
    Op,
    Res,
    allowed,
    cluster_allowed,
    requires,
)
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.consumer_groups import describe_authorized
from strom.broker.handlers.groups import client_host
from strom.broker.request_types import StreamsGroupDescribeRequest, StreamsGroupHeartbeatRequest
from strom.broker.router import handles
from strom.coordinator.group.replies import StreamsGroupDescription, StreamsHeartbeatReply
from strom.coordinator.group.streams_groups import StreamsHeartbeat
from strom.coordinator.group.streams_state import StreamsTopology, Tasks
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


def _tasks(entries: Any) -> Tasks | None:
    if entries is None:
        return None
    out: dict[str, frozenset[int]] = {}
    for e in entries:
        out[e.subtopology_id] = out.get(e.subtopology_id, frozenset()) | frozenset(e.partitions)
    return out


def _offsets(entries: Any) -> tuple[tuple[str, int, int], ...] | None:
    if entries is None:
        return None
    return tuple((e.subtopology_id, e.partition, e.offset) for e in entries)


def _topology_topics(topology: StreamsTopology) -> set[str]:
    return {t for s in topology.subtopologies
            for t in (*s.source_topics, *s.repartition_sink_topics,
                      *(i.name for i in (*s.repartition_source_topics,
                                         *s.state_changelog_topics)))}


def _refused_to_create(broker: Broker, ctx: RequestContext) -> Callable[[list[str]], list[str]]:
    """Kafka's rule for the internal topics: CREATE on the cluster, else on each topic."""
    def refused(names: list[str]) -> list[str]:
        if not names or cluster_allowed(broker, ctx, Op.CREATE):
            return []
        return [n for n in names if not allowed(broker, ctx, Op.CREATE, Res.TOPIC, n)]

    return refused


@handles(ApiKey.STREAMS_GROUP_HEARTBEAT, 0, 0)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def streams_group_heartbeat(broker: Broker, ctx: RequestContext,
                            request: StreamsGroupHeartbeatRequest) -> dict[str, Any]:
    endpoint = request.user_endpoint
    tags = request.client_tags
    topology = None if request.topology is None else StreamsTopology.from_fields(
        request.topology)
    if topology is not None:  # the member must be allowed to see the topics it names
        hidden = sorted(t for t in _topology_topics(topology)
                        if not allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, t))
        if hidden:
            refused = StreamsHeartbeatReply.failed(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"Unauthorized to DESCRIBE on topics {', '.join(hidden)}.")
            return {"throttle_time": 0, **refused.fields()}
    result = broker.groups.streams.heartbeat(StreamsHeartbeat(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, client_id=ctx.client_id or "",
        client_host=client_host(ctx),
        endpoint_information_epoch=request.endpoint_information_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id,
        rebalance_timeout=request.rebalance_timeout,
        topology=topology,
        active_tasks=_tasks(request.active_tasks), standby_tasks=_tasks(request.standby_tasks),
        warmup_tasks=_tasks(request.warmup_tasks), process_id=request.process_id,
        user_endpoint=None if endpoint is None else (endpoint.host, endpoint.port),
        client_tags=None if tags is None else tuple((t.key, t.value) for t in tags),
        task_offsets=_offsets(request.task_offsets),
        task_end_offsets=_offsets(request.task_end_offsets),
        shutdown_application=request.shutdown_application,
        refused_to_create=_refused_to_create(broker, ctx)))
    return {"throttle_time": 0, **result.fields()}


@handles(ApiKey.STREAMS_GROUP_DESCRIBE, 0, 0)
def streams_group_describe(broker: Broker, ctx: RequestContext,
                           request: StreamsGroupDescribeRequest) -> dict[str, Any]:
    return describe_authorized(broker, ctx, list(request.group_ids),
                               request.include_authorized_operations,
                               broker.groups.streams.describe, StreamsGroupDescription.failed)

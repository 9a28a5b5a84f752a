"""ConsumerGroupHeartbeat and ConsumerGroupDescribe (KIP-848, the consumer rebalance protocol).

Thin translation to the consumer group manager's `consumer_group_heartbeat` /
`consumer_group_describe` (`broker.groups.consumer`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from strom.broker.authz import Op, Res, allowed, authorized_operations, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.groups import client_host
from strom.broker.request_types import ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest
from strom.broker.router import handles
from strom.coordinator.group.replies import ConsumerGroupDescription, GroupDescription
from strom.coordinator.group.state import UNKNOWN_AUTHORIZED_OPERATIONS
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError


@handles(ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, 1)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def consumer_group_heartbeat(broker: Broker, ctx: RequestContext,
                             request: ConsumerGroupHeartbeatRequest) -> dict[str, Any]:
    result = broker.groups.consumer.consumer_group_heartbeat(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, instance_id=request.instance_id,
        rack_id=request.rack_id, rebalance_timeout=request.rebalance_timeout,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex,
        server_assignor=request.server_assignor,
        topic_partitions=None if request.topic_partitions is None else [
            {"topic_id": t.topic_id, "partitions": list(t.partitions)}
            for t in request.topic_partitions],
        client_id=ctx.client_id or "", client_host=client_host(ctx), version=ctx.api_version)
    return {"throttle_time": 0, **result.fields()}


_Described = TypeVar("_Described", bound=GroupDescription)


def describe_authorized(broker: Broker, ctx: RequestContext, group_ids: list[str], include: bool,
                        describe: Callable[..., Sequence[_Described]],
                        failed: Callable[[str, int, int, str | None], _Described]
                        ) -> dict[str, Any]:
    """ConsumerGroupDescribe, ShareGroupDescribe and StreamsGroupDescribe alike: DESCRIBE on
    each group, the coordinator's answer for the visible ones, and real authorized_operations
    when asked. `failed(group id, authorized operations, error code, message)` makes the
    entry of a group the handler answers for itself."""
    refused = [g for g in group_ids if not allowed(broker, ctx, Op.DESCRIBE, Res.GROUP, g)]
    visible = [g for g in group_ids if g not in refused]
    groups: list[_Described]
    try:
        groups = list(describe(visible, include_authorized_operations=include)) \
            if visible else []
    except KafkaError as exc:
        groups = [failed(g, UNKNOWN_AUTHORIZED_OPERATIONS, exc.code, exc.message)
                  for g in visible]
    groups += [failed(g, UNKNOWN_AUTHORIZED_OPERATIONS, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                      "Group authorization failed.") for g in refused]
    if include and broker.authorizer is not None:
        groups = [g if g.error_code else g.with_operations(
            authorized_operations(broker, ctx, Res.GROUP, g.group_id)) for g in groups]
    return {"throttle_time": 0, "groups": [g.fields() for g in groups]}


@handles(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1)
def consumer_group_describe(broker: Broker, ctx: RequestContext,
                            request: ConsumerGroupDescribeRequest) -> dict[str, Any]:
    return describe_authorized(broker, ctx, list(request.group_ids),
                               request.include_authorized_operations,
                               broker.groups.consumer.consumer_group_describe,
                               ConsumerGroupDescription.failed)

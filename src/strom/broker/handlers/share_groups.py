"""ShareGroupHeartbeat and ShareGroupDescribe (KIP-932, share groups' membership).

Thin translation to the share group manager's `heartbeat` / `describe`
(`broker.groups.share`). The records themselves move through ShareFetch and ShareAcknowledge (`share_fetch`).
"""

from __future__ import annotations

from typing import Any

from strom.broker.authz import Op, Res, allowed, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.consumer_groups import describe_authorized
from strom.broker.handlers.groups import client_host
from strom.broker.request_types import ShareGroupDescribeRequest, ShareGroupHeartbeatRequest
from strom.broker.router import handles
from strom.coordinator.group.replies import HeartbeatReply, ShareGroupDescription
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode


@handles(ApiKey.SHARE_GROUP_HEARTBEAT, 1, 1)
@requires(Op.READ, Res.GROUP, lambda r: r.group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED)
def share_group_heartbeat(broker: Broker, ctx: RequestContext,
                          request: ShareGroupHeartbeatRequest) -> dict[str, Any]:
    names = request.subscribed_topic_names
    if names:  # Kafka: the member must be allowed to DESCRIBE every topic it subscribes to
        hidden = sorted(t for t in names if not allowed(broker, ctx, Op.DESCRIBE, Res.TOPIC, t))
        if hidden:
            refused = HeartbeatReply.failed(
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                f"Unauthorized to DESCRIBE on topics {', '.join(hidden)}.")
            return {"throttle_time": 0, **refused.fields()}
    result = broker.groups.share.heartbeat(
        group_id=request.group_id, member_id=request.member_id,
        member_epoch=request.member_epoch, rack_id=request.rack_id,
        subscribed_topic_names=None if names is None else list(names),
        client_id=ctx.client_id or "", client_host=client_host(ctx))
    return {"throttle_time": 0, **result.fields()}


@handles(ApiKey.SHARE_GROUP_DESCRIBE, 1, 1)
def share_group_describe(broker: Broker, ctx: RequestContext,
                         request: ShareGroupDescribeRequest) -> dict[str, Any]:
    return describe_authorized(broker, ctx, list(request.group_ids),
                               request.include_authorized_operations,
                               broker.groups.share.describe, ShareGroupDescription.failed)

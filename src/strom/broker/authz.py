"""Authorization checks for handlers: one call per resource, free when no authorizer is set.

Handlers ask `allowed(broker, ctx, operation, resource type, name)` for each resource a request
names and answer Kafka's error for the refused ones (TOPIC_AUTHORIZATION_FAILED per topic or
partition, GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED); `strom.broker.acl_hook` refuses whole requests whose fate one
resource decides. The principal is the connection's (`RequestContext.principal`), the host the
client's address.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.protocol.errors import ErrorCode
from strom.security.acl import CLUSTER_NAME, AclOperation, ResourceType

HandlerFn = Callable[..., Any]

Op = AclOperation
Res = ResourceType


def client_host(ctx: RequestContext) -> str:
    """The client's IP address ('host:port' or '[v6]:port' in ctx.peer)."""
    return ctx.peer.rpartition(":")[0].strip("[]")


def allowed(broker: Broker, ctx: RequestContext, operation: AclOperation, rtype: ResourceType,
            name: str) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(ctx.session.principal, client_host(ctx),
                                                      operation, rtype, name)


def cluster_allowed(broker: Broker, ctx: RequestContext, operation: AclOperation) -> bool:
    return allowed(broker, ctx, operation, Res.CLUSTER, CLUSTER_NAME)


def authorized_operations(broker: Broker, ctx: RequestContext, rtype: ResourceType,
                          name: str) -> int:
    """Kafka's authorized_operations bit set; without an authorizer, every operation."""
    authorizer = broker.authorizer
    if authorizer is None:
        from strom.security.acl import OPERATIONS

        return sum(1 << int(op) for op in OPERATIONS.get(rtype, ()))
    return authorizer.authorized_operations(ctx.session.principal, client_host(ctx), rtype, name)


def requires(operation: AclOperation, rtype: ResourceType, name_of: Callable[[Any], str | None],
             error: ErrorCode) -> Callable[[HandlerFn], HandlerFn]:
    """A generic handler whose whole request is decided by one resource (a group's, a
    transactional id's, the cluster's): refused, it is answered with ``error`` in the
    response's top-level error code, as Kafka answers it. Put it below ``@handles``."""

    def wrap(fn: HandlerFn) -> HandlerFn:
        @functools.wraps(fn)
        def checked(broker: Broker, ctx: RequestContext, request: Any) -> Any:
            name = name_of(request)
            if name is not None and not allowed(broker, ctx, operation, rtype, name):
                return {"error_code": error}
            return fn(broker, ctx, request)

        return checked

    return wrap


def cluster_name(_request: Any) -> str:
    return CLUSTER_NAME

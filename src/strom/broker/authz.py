"""Authorization checks for handlers: one call per resource, free when no authorizer is set.

Handlers ask `allowed(broker, ctx, operation, resource type, name)` for each resource a request
names and answer Kafka's error for the refused ones (TOPIC_AUTHORIZATION_FAILED per topic or
partition, GROUP_AUTHORIZATION_FAILED, TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
CLUSTER_AUTHORIZATION_FAILED); `requires` refuses whole requests whose fate one resource
decides. The principal is the connection's (`RequestContext.principal`), the host the
client's address.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import CLUSTER_NAME, OPERATIONS, AclOperation, ResourceType

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


# Every API the broker serves is in one of these two sets (a unit test checks it): a new API
# must be looked at for its ACL checks before it is served.
K = ApiKey
CHECKED_APIS = frozenset({
    K.PRODUCE, K.FETCH, K.LIST_OFFSETS, K.METADATA, K.OFFSET_COMMIT, K.OFFSET_FETCH,
    K.FIND_COORDINATOR, K.JOIN_GROUP, K.HEARTBEAT, K.LEAVE_GROUP, K.SYNC_GROUP,
    K.DESCRIBE_GROUPS, K.LIST_GROUPS, K.CREATE_TOPICS, K.DELETE_TOPICS, K.DELETE_RECORDS,
    K.INIT_PRODUCER_ID, K.OFFSET_FOR_LEADER_EPOCH, K.ADD_PARTITIONS_TO_TXN,
    K.ADD_OFFSETS_TO_TXN, K.END_TXN, K.WRITE_TXN_MARKERS, K.TXN_OFFSET_COMMIT,
    K.DESCRIBE_ACLS, K.CREATE_ACLS, K.DELETE_ACLS, K.DESCRIBE_CONFIGS, K.ALTER_CONFIGS,
    K.DESCRIBE_LOG_DIRS, K.ALTER_REPLICA_LOG_DIRS, K.CREATE_PARTITIONS, K.DELETE_GROUPS, K.ELECT_LEADERS,
    K.INCREMENTAL_ALTER_CONFIGS, K.ALTER_PARTITION_REASSIGNMENTS,
    K.LIST_PARTITION_REASSIGNMENTS, K.OFFSET_DELETE, K.DESCRIBE_CLIENT_QUOTAS, K.ALTER_CLIENT_QUOTAS,
    K.DESCRIBE_USER_SCRAM_CREDENTIALS, K.ALTER_USER_SCRAM_CREDENTIALS, K.DESCRIBE_PRODUCERS,
    K.DESCRIBE_TRANSACTIONS, K.LIST_TRANSACTIONS, K.CONSUMER_GROUP_HEARTBEAT,
    K.CONSUMER_GROUP_DESCRIBE, K.DESCRIBE_TOPIC_PARTITIONS, K.STREAMS_GROUP_HEARTBEAT,
    K.STREAMS_GROUP_DESCRIBE, K.INITIALIZE_SHARE_GROUP_STATE, K.READ_SHARE_GROUP_STATE,
    K.WRITE_SHARE_GROUP_STATE, K.DELETE_SHARE_GROUP_STATE, K.READ_SHARE_GROUP_STATE_SUMMARY,
    K.SHARE_GROUP_HEARTBEAT, K.SHARE_GROUP_DESCRIBE, K.SHARE_FETCH, K.SHARE_ACKNOWLEDGE,
    K.DESCRIBE_SHARE_GROUP_OFFSETS, K.ALTER_SHARE_GROUP_OFFSETS, K.DELETE_SHARE_GROUP_OFFSETS,
    K.LIST_CONFIG_RESOURCES, K.DESCRIBE_QUORUM, K.ADD_RAFT_VOTER, K.REMOVE_RAFT_VOTER,
    K.UPDATE_FEATURES, K.UNREGISTER_BROKER, K.UNREGISTER_CONTROLLER,
})
# Kafka checks nothing for these (DescribeCluster only computes authorized operations)
UNCHECKED_APIS = frozenset({K.API_VERSIONS, K.SASL_HANDSHAKE, K.SASL_AUTHENTICATE,
                            K.DESCRIBE_CLUSTER})

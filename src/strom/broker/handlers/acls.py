"""CreateAcls, DescribeAcls and DeleteAcls (Kafka's AclApis): ACLs live in the cluster
metadata and reach every broker; changing them needs ALTER on the cluster, listing them
DESCRIBE."""

from __future__ import annotations

from typing import Any

from strom.broker.authz import cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest
from strom.broker.router import handles
from strom.cluster.controller import too_many_records
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import (
    AclBinding,
    AclError,
    AclFilter,
    AclOperation,
    AclPermission,
    PatternType,
    ResourceType,
)

NO_AUTHORIZER = "No Authorizer is configured."


def _enum(kind, value: int):
    try:
        return kind(value)
    except ValueError:
        return kind.UNKNOWN


@handles(ApiKey.CREATE_ACLS, 1, 3)
async def create_acls(broker: Broker, ctx: RequestContext,
                      request: CreateAclsRequest) -> dict[str, Any]:
    creations = request.creations
    refused = _refusal(broker, ctx, AclOperation.ALTER, NO_AUTHORIZER)
    if refused is None:
        too_many = too_many_records(len(creations), "Unable to create more than 10000 ACLs in "
                                                    "one request")
        if too_many is not None:
            refused = (too_many.code, too_many.message)
    if refused is not None:
        return {"throttle_time": 0,
                "results": [{"error_code": refused[0], "error_message": refused[1]}
                            for _ in creations]}
    results, valid = [], []
    for c in creations:
        acl = AclBinding(_enum(ResourceType, c.resource_type), c.resource_name,
                         _enum(PatternType, c.resource_pattern_type), c.principal, c.host,
                         _enum(AclOperation, c.operation),
                         _enum(AclPermission, c.permission_type))
        try:
            acl.validate()
        except AclError as e:
            results.append({"error_code": ErrorCode.INVALID_REQUEST, "error_message": str(e)})
            continue
        valid.append(acl)
        results.append({"error_code": ErrorCode.NONE, "error_message": None})
    await broker.controller.alter_acls(valid, [])
    return {"throttle_time": 0, "results": results}


def _filter(f: Any, names: tuple[str, str, str, str]) -> AclFilter:
    rtype, rname, pattern, principal = names
    return AclFilter(_enum(ResourceType, getattr(f, rtype)), getattr(f, rname),
                     _enum(PatternType, getattr(f, pattern)), getattr(f, principal),
                     f.host_filter, _enum(AclOperation, f.operation),
                     _enum(AclPermission, f.permission_type))


_FILTER_FIELDS = ("resource_type_filter", "resource_name_filter", "pattern_type_filter",
                  "principal_filter")


@handles(ApiKey.DESCRIBE_ACLS, 1, 3)
def describe_acls(broker: Broker, ctx: RequestContext,
                  request: DescribeAclsRequest) -> dict[str, Any]:
    refused = _refusal(broker, ctx, AclOperation.DESCRIBE,
                       "No Authorizer is configured on the broker")
    if refused is not None:
        return {"throttle_time": 0, "error_code": refused[0], "error_message": refused[1],
                "resources": []}
    wanted = _filter(request, _FILTER_FIELDS)
    grouped: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for acl in broker.image.acls:
        if wanted.matches(acl):
            grouped.setdefault((int(acl.resource_type), acl.resource_name,
                                int(acl.pattern_type)), []).append(
                {"principal": acl.principal, "host": acl.host, "operation": int(acl.operation),
                 "permission_type": int(acl.permission)})
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "resources": [{"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                          for (t, n, p), acls in grouped.items()]}


@handles(ApiKey.DELETE_ACLS, 1, 3)
async def delete_acls(broker: Broker, ctx: RequestContext,
                      request: DeleteAclsRequest) -> dict[str, Any]:
    refused = _refusal(broker, ctx, AclOperation.ALTER, NO_AUTHORIZER)
    if refused is not None:
        return {"throttle_time": 0, "filter_results": [
            {"error_code": refused[0], "error_message": refused[1], "matching_acls": []}
            for _ in request.filters]}
    results, doomed = [], []
    for f in request.filters:
        wanted = _filter(f, _FILTER_FIELDS)
        matching = [acl for acl in broker.image.acls if wanted.matches(acl)]
        doomed += matching
        results.append({"error_code": ErrorCode.NONE, "error_message": None, "matching_acls": [
            {"error_code": ErrorCode.NONE, "error_message": None,
             "resource_type": int(a.resource_type), "resource_name": a.resource_name,
             "pattern_type": int(a.pattern_type), "principal": a.principal, "host": a.host,
             "operation": int(a.operation), "permission_type": int(a.permission)}
            for a in matching]})
    await broker.controller.alter_acls([], list(dict.fromkeys(doomed)))
    return {"throttle_time": 0, "filter_results": results}


def _refusal(broker: Broker, ctx: RequestContext, operation: AclOperation,
             no_authorizer: str) -> tuple[int, str | None] | None:
    """SECURITY_DISABLED without an authorizer, CLUSTER_AUTHORIZATION_FAILED without the
    operation on the cluster, else None."""
    if broker.authorizer is None:
        return ErrorCode.SECURITY_DISABLED, no_authorizer
    if not cluster_allowed(broker, ctx, operation):
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed."
    return None

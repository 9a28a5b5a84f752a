"""DescribeClientQuotas and AlterClientQuotas (KIP-546): the admin side of client quotas.

The checks, error codes and messages are Kafka 4.4's (see cluster/quota_admin.py); quotas are
stored through the controller (the metadata log, or ZooKeeper in Kafka's layout) and kept in
``MetadataImage.client_quotas``, which enforcement reads. Authorization is Kafka's:
DESCRIBE_CONFIGS, resp. ALTER_CONFIGS, on the cluster.
"""

from __future__ import annotations

from typing import Any

from strom.broker.authz import Op, Res, cluster_allowed, cluster_name, requires
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.request_types import AlterClientQuotasRequest, DescribeClientQuotasRequest
from strom.broker.router import handles
from strom.cluster import quota_admin
from strom.cluster.controller import too_many_records
from strom.cluster.quota_admin import Alteration, Outcome
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode, KafkaError

APPLIED_WITHIN_S = 30.0


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, 0, 1)
@requires(Op.DESCRIBE_CONFIGS, Res.CLUSTER, cluster_name, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
def describe_client_quotas(broker: Broker, ctx: RequestContext,
                           request: DescribeClientQuotasRequest) -> dict[str, Any]:
    """A bad filter fails the whole request (entries null), as Kafka answers it."""
    try:
        f = quota_admin.check_filter(
            [(c.entity_type, c.match_type, c.match) for c in request.components],
            request.strict)
    except KafkaError as exc:
        return {"throttle_time": 0, "error_code": exc.code, "error_message": exc.message,
                "entries": None}
    entries = [
        {"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
         "values": [{"key": k, "value": v} for k, v in sorted(values.items())]}
        for entity, values in quota_admin.describe(broker.image.client_quotas, f)]
    # Kafka answers an empty message, not null, when all is well
    return {"throttle_time": 0, "error_code": ErrorCode.NONE, "error_message": "",
            "entries": entries}


@handles(ApiKey.ALTER_CLIENT_QUOTAS, 0, 1)
async def alter_client_quotas(broker: Broker, ctx: RequestContext,
                              request: AlterClientQuotasRequest) -> dict[str, Any]:
    """Every entity is checked; the valid ones are altered together (and not at all when
    validate_only), each entity answered with its own error."""
    alterations = [
        Alteration(tuple((e.entity_type, e.entity_name) for e in entry.entity),
                   tuple((op.key, None if op.remove else op.value) for op in entry.ops))
        for entry in request.entries]
    if not cluster_allowed(broker, ctx, Op.ALTER_CONFIGS):
        return _refuse_all(alterations, ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                           "Cluster authorization failed.")
    # Kafka 4.4 answers this (checked) with POLICY_VIOLATION's generic text
    too_many = too_many_records(sum(len(a.ops) for a in alterations),
                                "Request parameters do not satisfy the configured policy.")
    if too_many is not None:  # as Kafka's controller: the whole request is refused
        return _refuse_all(alterations, too_many.code, too_many.message)
    outcomes, changes = quota_admin.plan_alterations(broker.image.client_quotas, alterations)
    if changes and not request.validate_only:
        try:
            await broker.controller.alter_client_quotas(changes)
        except KafkaError as exc:  # not stored (e.g. a full disk): no entity was altered
            outcomes = [o if o.error_code else Outcome(o.parts, exc.code, exc.message)
                        for o in outcomes]
            return _response(outcomes)
        # a cluster applies the change when ZooKeeper's copy is read back: answer once this
        # broker's image has it, so a describe right after the alter sees it
        await broker.controller.wait_until(
            lambda image: _applied(image.client_quotas, changes), APPLIED_WITHIN_S)
    return _response(outcomes)


def _refuse_all(alterations: list[Alteration], code: int,
                message: str | None) -> dict[str, Any]:
    refused = {a.parts: Outcome(a.parts, code, message) for a in alterations}
    return _response(refused.values())


def _applied(current: quota_admin.Quotas, changes: quota_admin.Changes) -> bool:
    return all(current.get(entity, {}).get(k) == v
               for entity, quotas in changes.items() for k, v in quotas.items())


def _response(outcomes: Any) -> dict[str, Any]:
    return {"throttle_time": 0, "entries": [
        {"error_code": o.error_code, "error_message": o.error_message,
         "entity": [{"entity_type": t, "entity_name": n} for t, n in o.parts]}
        for o in outcomes]}

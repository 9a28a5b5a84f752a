"""The CONTROLLER listener checks the ACLs as Kafka's controllers do: every API it serves
(SASL and ApiVersions aside) is refused with CLUSTER_AUTHORIZATION_FAILED when the principal
lacks the cluster operation it needs, before the request is looked at."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from strom.controller import apis, broker_apis
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode
from strom.security.acl import AclOperation as Op
from strom.security.principal import KafkaPrincipal

# Kafka's ControllerApis: CLUSTER_ACTION for what nodes ask of each other, ALTER or DESCRIBE
# for what an operator asks (DescribeCluster needs ALTER on a controller)
NEEDS = {
    ApiKey.VOTE: Op.CLUSTER_ACTION, ApiKey.BEGIN_QUORUM_EPOCH: Op.CLUSTER_ACTION,
    ApiKey.END_QUORUM_EPOCH: Op.CLUSTER_ACTION, ApiKey.FETCH: Op.CLUSTER_ACTION,
    ApiKey.FETCH_SNAPSHOT: Op.CLUSTER_ACTION, ApiKey.UPDATE_RAFT_VOTER: Op.CLUSTER_ACTION,
    ApiKey.DESCRIBE_QUORUM: Op.DESCRIBE, ApiKey.ADD_RAFT_VOTER: Op.ALTER,
    ApiKey.REMOVE_RAFT_VOTER: Op.ALTER, ApiKey.UPDATE_FEATURES: Op.ALTER,
    ApiKey.DESCRIBE_CLUSTER: Op.ALTER, ApiKey.BROKER_REGISTRATION: Op.CLUSTER_ACTION,
    ApiKey.BROKER_HEARTBEAT: Op.CLUSTER_ACTION, ApiKey.UNREGISTER_BROKER: Op.ALTER,
    ApiKey.ASSIGN_REPLICAS_TO_DIRS: Op.CLUSTER_ACTION,
    ApiKey.CONTROLLER_REGISTRATION: Op.CLUSTER_ACTION, ApiKey.UNREGISTER_CONTROLLER: Op.ALTER,
    ApiKey.ALTER_PARTITION: Op.CLUSTER_ACTION, ApiKey.ALLOCATE_PRODUCER_IDS: Op.CLUSTER_ACTION,
    ApiKey.ENVELOPE: Op.CLUSTER_ACTION,
}


class Allowing:
    """Allows one operation only, and records what was asked."""

    def __init__(self, operation: Op | None) -> None:
        self.operation = operation
        self.asked: list[Op] = []

    def authorize(self, principal: KafkaPrincipal, host: str, operation: Op, *_: Any) -> bool:
        self.asked.append(operation)
        return operation == self.operation


def test_every_controller_api_checks_its_cluster_operation() -> None:
    ctx = SimpleNamespace(session=SimpleNamespace(principal=KafkaPrincipal("User", "eve")),
                          peer="10.0.0.9:5000")
    handlers = {ApiKey(fn.__strom_api__.api_key): fn
                for module in (apis, broker_apis) for fn in vars(module).values()
                if hasattr(fn, "__strom_api__")}
    assert set(handlers) == set(NEEDS)
    for api, fn in handlers.items():
        denied = SimpleNamespace(authorizer=Allowing(None))
        assert fn(denied, ctx, None) == {
            "error_code": ErrorCode.CLUSTER_AUTHORIZATION_FAILED}, api
        assert denied.authorizer.asked == [NEEDS[api]], api

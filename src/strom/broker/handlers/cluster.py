"""DescribeCluster and InitProducerId (the latter minimal until idempotence lands)."""

from __future__ import annotations

from typing import Any

from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

UNKNOWN_AUTHORIZED_OPERATIONS = -2147483648


@handles(ApiKey.DESCRIBE_CLUSTER, 0, 2)
def describe_cluster(broker: Any, ctx: Any, request: Any) -> dict[str, Any]:
    if getattr(request, "endpoint_type", 1) not in (1,):
        return {"error_code": ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
                "error_message": "Strom has no controller endpoints", "endpoint_type": 1}
    image = broker.image
    return {
        "error_code": ErrorCode.NONE,
        "endpoint_type": 1,
        "cluster_id": broker.cluster_id,
        "controller_id": image.controller_id,
        "brokers": [
            {"broker_id": b.broker_id, "host": b.host, "port": b.port, "rack": b.rack,
             "is_fenced": False}
            for b in image.brokers.values()
        ],
        "cluster_authorized_operations": UNKNOWN_AUTHORIZED_OPERATIONS,
    }


@handles(ApiKey.INIT_PRODUCER_ID, 0, 5)
def init_producer_id(broker: Any, ctx: Any, request: Any) -> dict[str, Any]:
    if request.transactional_id is not None:
        return {"error_code": ErrorCode.COORDINATOR_NOT_AVAILABLE, "producer_id": -1,
                "producer_epoch": -1}
    return {"error_code": ErrorCode.NONE, "producer_id": broker.next_producer_id(),
            "producer_epoch": 0}

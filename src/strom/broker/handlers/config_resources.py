"""ListConfigResources (API 74, KIP-1142): the config resources that exist, which is how
``kafka-configs --describe --entity-type groups`` without ``--entity-name`` finds what to
describe. Version 0 is the older ListClientMetricsResources: client-metrics resources only.

What each type lists was read off Kafka 4.4 on the wire: groups that have configs of their own
(not every group), client-metrics resources, every live broker (for BROKER_LOGGER and BROKER)
and every topic, internal ones included, in that order of types whatever the request's order.
An unknown type fails the whole request with UNSUPPORTED_VERSION.
"""

from __future__ import annotations

from typing import Any

from strom.broker.authz import Op, cluster_allowed
from strom.broker.context import RequestContext
from strom.broker.core import Broker
from strom.broker.handlers.configs import BROKER, BROKER_LOGGER, GROUP, TOPIC
from strom.broker.request_types import ListConfigResourcesRequest
from strom.broker.router import handles
from strom.protocol.api_keys import ApiKey
from strom.protocol.errors import ErrorCode

CLIENT_METRICS = 16
# Kafka answers the types in this order; an empty request asks for all of them.
SUPPORTED = (GROUP, CLIENT_METRICS, BROKER_LOGGER, BROKER, TOPIC)


def _names(broker: Broker, resource_type: int) -> list[str]:
    image = broker.image
    if resource_type == GROUP:
        return sorted(g for g, configs in image.group_configs.items() if configs)
    if resource_type == CLIENT_METRICS:
        return []  # Strom keeps no client-metrics subscriptions (KIP-714)
    if resource_type in (BROKER_LOGGER, BROKER):
        return [str(b) for b in sorted(image.brokers)]
    return sorted(image.topics)


def _answer(error: ErrorCode, resources: list[dict[str, Any]]) -> dict[str, Any]:
    return {"throttle_time": 0, "error_code": int(error), "config_resources": resources}


@handles(ApiKey.LIST_CONFIG_RESOURCES, 0, 1)
def list_config_resources(broker: Broker, ctx: RequestContext,
                          request: ListConfigResourcesRequest) -> dict[str, Any]:
    if not cluster_allowed(broker, ctx, Op.DESCRIBE_CONFIGS):
        return _answer(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, [])
    if ctx.api_version == 0:
        wanted: tuple[int, ...] = (CLIENT_METRICS,)
    else:
        asked = set(request.resource_types)
        if asked - set(SUPPORTED):
            return _answer(ErrorCode.UNSUPPORTED_VERSION, [])
        wanted = tuple(t for t in SUPPORTED if not asked or t in asked)
    return _answer(ErrorCode.NONE, [{"resource_name": name, "resource_type": t}
                                    for t in wanted for name in _names(broker, t)])
